"""What a comparison found (`Outcome`), the `Verdict` whose words carry one, the phrases verdicts share."""

from __future__ import annotations

import enum
from typing import NoReturn

BETTER = "better"
WORSE = "worse"
UNRESOLVED = "not resolved"
IDENTICAL_VERDICT = "identical on every seed"
ONE_SEED = "one seed: no interval"


class Outcome(enum.StrEnum):
    """What a comparison found: the part of a verdict the rest of the analysis reads."""

    BETTER = BETTER
    WORSE = WORSE
    EQUIVALENT = "equivalent"
    IDENTICAL = IDENTICAL_VERDICT
    NOT_RESOLVED = UNRESOLVED

    @property
    def resolved(self) -> bool:
        return self is not Outcome.NOT_RESOLVED


class Verdict(str):
    """A verdict's words as the report prints them, carrying the `outcome` they state: code reads the outcome,
    never the words (tests/test_verdict_type.py fails where a verdict's text is parsed)."""

    outcome: Outcome

    def __new__(cls, text: str, outcome: Outcome) -> Verdict:
        verdict = super().__new__(cls, text)
        verdict.outcome = outcome  # set as the str is made: a str subclass has no __init__ to take it
        return verdict

    def __reduce__(self) -> tuple:  # copies and pickles keep the outcome
        return (Verdict, (str(self), self.outcome))

    def noted(self, note: str) -> Verdict:
        """The same outcome with `note` after the words."""
        return Verdict(f"{self}{note}", self.outcome)

    def _read_back(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "a verdict's words are for people: code reads its outcome (str(verdict) to print them)"
        )

    # Code that read the words back would break the day they are reworded.
    startswith = endswith = split = rsplit = partition = rpartition = _read_back
    find = rfind = index = rindex = count = removeprefix = removesuffix = __contains__ = _read_back


NOT_YET_JUDGED = Verdict(UNRESOLVED, Outcome.NOT_RESOLVED)
