"""Issue 49, point 1: what each trend word across levels is worth, by simulation through the report's own paired
tests, `judge` (all levels one Holm family, as `judge_family` judges a ladder) and `trends`. The design is the
audit's: three ordered levels, 3 seeds a level (the presets' count), paired sd 0.03. Under growth, shrinkage, a
flip and a constant difference, each word that misdescribes the truth is a false call; docs/sweeps.md has the
table at 2,000 replicates (the slow test), before and after the sign change needed a test of the signs."""

from __future__ import annotations

import pytest
from conftest import rate_not_above, simulated_words

from tinylm.analysis.ladder import TrendWord

AXIS = "trainer.max_steps"  # an ordered axis: the words that compare ends are all in play
SD, SEEDS, ALPHA = 0.03, 3, 0.05
F, G, S, H, C = TrendWord.FLIPS, TrendWord.GROWS, TrendWord.SHRINKS, TrendWord.HOLDS, TrendWord.CHANGES

# (name, true differences at the three levels, the words that are true there); every other word is a false
# call, so a word that claimed a sign change without showing it would count against its scenario. `grows` is
# true of a difference moving away from 0, `shrinks` of one moving towards it, `flips` only of a sign reversal,
# `changes` of any difference that is not constant, `holds` (the same resolved verdict at every level) of any
# scenario whose sign never changes.
U = TrendWord.UNRESOLVED
SCENARIOS: list[tuple[str, tuple[float, float, float], frozenset[TrendWord]]] = [
    ("audit 1: grows, sign never changes", (-0.02, -0.05, -0.08), frozenset({G, H, C, U})),
    ("audit 2: grows, sign never changes", (-0.01, -0.04, -0.07), frozenset({G, H, C, U})),
    ("audit 3: grows from 0, sign never changes", (0.0, -0.05, -0.10), frozenset({G, H, C, U})),
    ("grows", (-0.05, -0.10, -0.15), frozenset({G, H, C, U})),
    ("shrinks to 0", (-0.10, -0.05, 0.0), frozenset({S, H, C, U})),
    ("shrinks", (-0.15, -0.10, -0.05), frozenset({S, H, C, U})),
    ("flip, small", (0.05, 0.0, -0.05), frozenset({F, C, U})),
    ("flip", (0.10, 0.0, -0.10), frozenset({F, C, U})),
    ("constant 0", (0.0, 0.0, 0.0), frozenset({H, U})),
    ("constant -0.05", (-0.05, -0.05, -0.05), frozenset({H, U})),
]


def simulate(means: tuple[float, ...], replicates: int, seed: int = 49) -> dict[TrendWord, int]:
    """How often the ladder says each word of one design whose true differences from the baselines of its
    levels are `means` (paired sd SD, SEEDS seeds a level). Seeded."""
    return simulated_words(means, SD, SEEDS, replicates, AXIS, seed)


def table(replicates: int) -> list[str]:
    """docs/sweeps.md's table: each scenario's count of every word, the false ones in bold."""
    words = [F, G, S, H, C, TrendWord.UNRESOLVED]
    lines = [
        "| true differences | " + " | ".join(f"`{w.value}`" for w in words) + " | false calls |",
        "|---" * (len(words) + 2) + "|",
    ]
    for name, means, true in SCENARIOS:
        counts = simulate(means, replicates)
        cells = [str(counts[w]) if w in true else f"**{counts[w]}**" for w in words]
        wrong = sum(n for w, n in counts.items() if w not in true)
        shown = ", ".join(f"{m:+.2f}" for m in means)
        lines.append(f"| {shown} ({name}) | " + " | ".join(cells) + f" | **{wrong / replicates:.1%}** |")
    return lines


@pytest.mark.parametrize(("name", "means", "true"), [*SCENARIOS[:3], SCENARIOS[6], SCENARIOS[8]])
def test_no_word_claims_a_sign_change_the_signs_do_not_show(name, means, true):
    """The audit's three cases where the sign never changes (before: `changes sign, not resolved` 8%, 16% and
    43% of the time), a flip and a constant: each false word at most α, at 150 replicates (an exact one-sided
    binomial test of a rate above α does not reject at 1%)."""
    counts = simulate(means, 150)
    for word, count in counts.items():
        assert word in true or rate_not_above(count, 150, ALPHA), (name, word, counts)


def test_a_flip_is_still_said_to_change():
    """The counterpart: a difference that reverses (+0.10, 0, −0.10) is called a flip or a change nearly always
    (a test that only ever said `not resolved` would pass the test above)."""
    counts = simulate((0.10, 0.0, -0.10), 300)
    assert counts[F] + counts[C] > 0.9 * 300, counts
    assert counts[F] > 0.2 * 300, counts


@pytest.mark.slow
@pytest.mark.parametrize(("name", "means", "true"), SCENARIOS)
def test_every_trend_word_is_false_at_most_alpha_of_the_time(name, means, true):
    """docs/sweeps.md's table, at 2,000 replicates: every false word's rate at most α."""
    counts = simulate(means, 2000)
    for word, count in counts.items():
        assert word in true or count <= ALPHA * 2000, (name, word, counts)


@pytest.mark.slow
@pytest.mark.parametrize("constant", [0.0, -0.03, -0.05, -0.10])
def test_with_six_seeds_a_level_a_constant_is_called_a_trend_at_the_change_tests_level(constant):
    """Issue 59: the table's 3.4% is its scenario's (3 seeds a level). With 6 seeds a level the change test
    rejects nearer its level, and under a constant every false word needs it: docs/sweeps.md's second table
    (92 of 2,000 in every row, 4.6%). Not above α beyond the Monte Carlo error, and above the 3.4% the first
    table's scenario gives (an exact binomial test of a rate at most 3.4% rejects at 1%)."""
    counts = simulated_words((constant,) * 3, SD, 6, 2000, AXIS, 49)
    false = sum(n for word, n in counts.items() if word not in (H, U))
    assert rate_not_above(false, 2000, ALPHA), counts
    assert not rate_not_above(false, 2000, 0.034), counts


if __name__ == "__main__":  # prints the docs table: python tests/test_trend_words.py
    print("\n".join(table(2000)))
