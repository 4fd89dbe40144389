"""The norm placements, as data: which of a sublayer's three optional norms are real (tinylm/model/block.py
draws the table). A leaf module, so that the config can check `norm` against it without importing the block.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NormPlacement:
    before_branch: bool = False
    after_branch: bool = False
    after_add: bool = False

    @property
    def needs_final_norm(self) -> bool:
        # Only a norm on the stream itself leaves the last block's output normalised.
        return not self.after_add


# The one list of placements (ModelConfig checks `norm` against it); a new one is one entry here.
PLACEMENTS: dict[str, NormPlacement] = {
    "pre": NormPlacement(before_branch=True),
    "post": NormPlacement(after_add=True),
    "sandwich": NormPlacement(before_branch=True, after_branch=True),
    "on_branch": NormPlacement(after_branch=True),
}
