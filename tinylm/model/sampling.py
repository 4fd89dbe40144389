"""Text from a `GPT`: the prompt encoded, characters drawn one at a time, decoded. Shared by the sample
script and training's samples in TensorBoard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from tinylm.errors import ConfigError

if TYPE_CHECKING:
    from tinylm.model.gpt import GPT


class Tokenizer(Protocol):
    """What sampling needs of a tokenizer (`tinylm.data.CharTokenizer` is one)."""

    @property
    def default_prompt(self) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str: ...


def sample_text(
    model: GPT,
    tokenizer: Tokenizer,
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
