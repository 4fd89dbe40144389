"""Sampling from a trained checkpoint: `python scripts/sample.py ckpt=latest prompt="ROMEO:"`."""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from tinylm import checks
from tinylm.data import VocabularyError
from tinylm.errors import ConfigError, Interrupted
from tinylm.inference.trained import load_model
from tinylm.layout import CheckpointError
from tinylm.model.sampling import sample_text

# Generation streams, so any length works; a bound still catches a typo that would run for days.
MAX_CHARS = 1_000_000


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
        raise Interrupted(
            f"sampling stopped by Ctrl-C after {len(drawn)} characters (printed above)", signum=2, step=0
        ) from None
    out.write("\n")
    return "".join(drawn)
