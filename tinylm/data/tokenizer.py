"""Characters to token ids and back: the vocabulary is every character of the training corpus."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinylm.errors import UserError


class VocabularyError(UserError, ValueError):
    """Text holds characters the tokenizer's vocabulary lacks; `unknown` lists them."""

    def __init__(self, message: str, unknown: str) -> None:
        super().__init__(message)
        self.unknown = unknown


class CharTokenizer:
    """A character vocabulary, saved as JSON (never pickled) so loading it runs no code."""

    def __init__(self, chars: Sequence[str]) -> None:
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("a CharTokenizer vocabulary is a list of distinct single characters")
        self.chars = list(chars)
        # Encoding goes through a code-point lookup table: fast enough for millions of characters.
        self._table = np.full(max(map(ord, self.chars), default=0) + 1, -1, dtype=np.int64)
        self._table[[ord(c) for c in self.chars]] = np.arange(len(self.chars))

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def default_prompt(self) -> str:
        """What a sample starts from when no prompt is given: a line break (a new speech, in verse), or the
        vocabulary's first character for a corpus without line breaks."""
        return "\n" if "\n" in self.chars else self.chars[0]

    def encode_array(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = np.where(codes < len(self._table), self._table[np.minimum(codes, len(self._table) - 1)], -1)
        if (ids < 0).any():
            unknown = sorted({text[i] for i in np.flatnonzero(ids < 0)[:1000]})
            raise VocabularyError(
                f"characters not in the vocabulary: {''.join(unknown)!r} "
                f"(the vocabulary has {self.vocab_size} characters from the training corpus)",
                "".join(unknown),
            )
        return ids

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> CharTokenizer:
        is_char_tokenizer = (
            isinstance(state, dict)
            and state.get("type") == "char"
            and isinstance(state.get("chars"), list)
            and all(isinstance(c, str) for c in state["chars"])
        )
        if not is_char_tokenizer:
            raise ValueError("not a tinylm character tokenizer (expected {'type': 'char', 'chars': [...]})")
        return cls(state["chars"])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
