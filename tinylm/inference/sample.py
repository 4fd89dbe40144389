"""Sampling from a trained checkpoint: `python scripts/sample.py ckpt=latest prompt="ROMEO:"`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig

from tinylm import checks
from tinylm.data import CharTokenizer, VocabularyError
from tinylm.errors import ConfigError, TrainingInterrupted
from tinylm.inference.trained import load_model
from tinylm.layout import CheckpointError
from tinylm.model import GPT

# Generation streams, so any length works; a bound still catches a typo that would run for days.
MAX_CHARS = 1_000_000


def sample_text(
    model: GPT,
    tokenizer: CharTokenizer,
    chars: int,
    prompt: str | None = None,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
    on_char: Callable[[str], Any] | None = None,
) -> str:
    """`chars` characters drawn after `prompt` (default: the tokenizer's `default_prompt`), on whatever device
    the model is; `on_char` is called with each one as it is drawn. The model's train/eval mode is restored."""
    prompt = tokenizer.default_prompt if prompt is None else prompt
    if not prompt:
        raise ConfigError("the prompt must hold at least one character (e.g. a newline)")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    context = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    on_token = None if on_char is None else (lambda token: on_char(tokenizer.decode(token[0])))
    was_training = model.training
    model.eval()
    try:
        out = model.generate(context, chars, temperature, top_k, generator, on_token)
    finally:
        model.train(was_training)
    return tokenizer.decode(out[0, context.shape[1] :])


def check_sampling_settings(cfg: DictConfig) -> None:
    if not cfg.get("ckpt"):
        raise CheckpointError("say which model to sample: ckpt=<checkpoint.ckpt or run directory>")
    checks.sampling(cfg)
    if cfg.chars > MAX_CHARS:
        raise ConfigError(f"chars={cfg.chars} is more than {MAX_CHARS:,}; sample in parts, with other seeds")


def run(cfg: DictConfig) -> str:
    """Print the prompt and then each character as it is drawn; Ctrl-C stops, keeping what was printed."""
    check_sampling_settings(cfg)
    trained = load_model(cfg.ckpt)
    tokenizer = trained.tokenizer
    prompt = tokenizer.default_prompt if cfg.prompt is None else str(cfg.prompt)
    try:
        tokenizer.encode(prompt)
    except VocabularyError as err:
        raise ConfigError(
            f"the prompt has characters the model never saw: {err.unknown!r}; use only characters of its "
            f"training corpus ({tokenizer.vocab_size} characters)"
        ) from None
    out = sys.stdout
    out.write(prompt)
    drawn: list[str] = []

    def show(char: str) -> None:
        drawn.append(char)
        out.write(char)
        out.flush()

    try:
        sample_text(trained.gpt, tokenizer, int(cfg.chars), prompt, float(cfg.temperature), cfg.top_k,
                    int(cfg.seed), on_char=show)  # fmt: skip
    except KeyboardInterrupt:
        out.write("\n")
        raise TrainingInterrupted(
            f"sampling stopped by Ctrl-C after {len(drawn)} characters (printed above)", signum=2, step=0
        ) from None
    out.write("\n")
    return "".join(drawn)
