"""What happened in a run, named from its final loss, its loss curves and the `training_health/` curves it
logged (docs/diagnosis.md): stalled at a reference level, tokens collapsed, attention saturated, queries and
keys starved of gradient, diverged or destabilised, or still improving when the budget ended. Each finding
names the step where it began and the TensorBoard tag that shows it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary
from tinylm.analysis.stats import MIN_EFFECT

# nats/char. Within this of a reference level a run has learned almost nothing beyond it: 6% of the gap
# between Tiny Shakespeare's unigram and bigram levels (0.86), and 3× the noise of a 200-window validation.
STALL_MARGIN = 0.05
# Token spread is about 1 for independent tokens and 0.75-0.9 in healthy training; below 1% of that, the
# deepest block sends (nearly) one vector per sequence to the head, whatever the tokens were.
COLLAPSED_SPREAD = 0.01
# W_q/W_k gradients below this fraction of W_v/W_o's: three orders of magnitude, where healthy runs sit
# within one (0.1-1); attention that cannot learn where to look.
STARVED_RATIO = 1e-3
# Mean attention entropy (nats) below this: queries put ~98% of their weight on one key. Healthy pre-norm
# runs at their best rate stay above 0.25 (the baby model at lr 1e-2).
SATURATED_ENTROPY = 0.1
# ...with a largest attention logit above this (about 0.05 at initialisation): softmax gradients then vanish
# like e^-(logit gap).
SATURATED_LOGIT = 100.0
# nats/char a run's validation loss may climb back from its minimum before it is destabilised: 10× δ, and
# more than a cosine schedule's last steps ever add to a healthy run.
DESTABILISED_RISE = 0.1
# Still improving: the last validations fell by more than δ per this fraction of the run's steps, so more
# steps would move its result by more than the smallest difference the report calls worth a claim.
IMPROVING_TAIL = 0.1
IMPROVING_DROP = MIN_EFFECT

DIVERGED = "diverged"
DESTABILISED = "destabilised"
IGNORES_CONTEXT = "ignores context"
BIGRAM_STALL = "stalled at the bigram level"
COLLAPSED = "tokens collapsed"
STARVED = "Q/K starved"
SATURATED = "attention saturated"
STILL_IMPROVING = "still improving"
# A setting that shows only these has not failed: its budget ended first.
NOT_FAILURES = (STILL_IMPROVING,)

Series = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class Finding:
    """One thing that happened in a run: `kind` (the constants above), the evidence as a clause with its
    numbers, the step it began at and the tag that shows it."""

    kind: str
    evidence: str
    step: int | None = None
    tag: str | None = None


def diagnose(run: RunSummary, reference: Mapping[str, float] | None = None) -> list[Finding]:
    """Everything `run` shows, most severe first; `reference`: its validation split's uniform, unigram and
    bigram levels. A run without curves gets only what its record says."""
    if run.status == "diverged":
        step = run.steps
        return [Finding(DIVERGED, f"the loss became non-finite at step {step}", step, "loss/train")]
    if run.status != "completed":
        return []
    # One token of context has no spread and no key to choose: its health curves say nothing.
    context = (run.model or {}).get("block_size")
    findings = [*_stalls(run, reference), *(_health(run) if context != 1 else [])]
    val = [(step, value) for step, value, _ in run.val_curve if math.isfinite(value)]
    if len(val) >= 2:
        low_step, low = min(val, key=lambda point: point[1])
        rise = val[-1][1] - low
        if rise > DESTABILISED_RISE:
            findings.insert(0, Finding(
                DESTABILISED, f"the validation loss rose {rise:.2f} from its minimum {low:.3f}", low_step,
                "loss/val",
            ))  # fmt: skip
        elif not any(f.kind in (IGNORES_CONTEXT, BIGRAM_STALL) for f in findings):
            findings += _still_improving(run, val)
    return findings


def _stalls(run: RunSummary, reference: Mapping[str, float] | None) -> list[Finding]:
    final = run.final_val_loss
    if not reference or final is None or not math.isfinite(final):
        return []
    val = [(step, value) for step, value, _ in run.val_curve]
    unigram, bigram = reference["unigram"], reference["bigram"]
    if final >= unigram - STALL_MARGIN:
        step = since(val, lambda v: v <= unigram + STALL_MARGIN)  # reached it, and got no further
        where = "is" if final <= unigram + STALL_MARGIN else "is above"
        return [Finding(
            IGNORES_CONTEXT, f"its final loss {final:.3f} {where} the unigram level {unigram:.3f}: it learned "
            "at most the characters' frequencies, nothing of their context", step, "loss/val",
        )]  # fmt: skip
    if abs(final - bigram) <= STALL_MARGIN:
        step = since(val, lambda v: v <= bigram + STALL_MARGIN)
        if not _improving_by(run, [(s, v) for s, v in val if math.isfinite(v)]):
            return [Finding(
                BIGRAM_STALL, f"its final loss {final:.3f} is the bigram level {bigram:.3f}: it predicts from "
                "the last character alone", step, "loss/val",
            )]  # fmt: skip
    return []


def _health(run: RunSummary) -> list[Finding]:
    findings = []
    spread = deepest(run, "token_spread")
    if spread is not None:
        tag, series = spread
        step = since(series, lambda v: v < COLLAPSED_SPREAD)
        if step is not None:
            findings.append(Finding(
                COLLAPSED, f"the last block's token spread fell to {series[-1][1]:.1e} (below "
                f"{COLLAPSED_SPREAD:g}; about 1 for independent tokens)", step, tag,
            ))  # fmt: skip
    starved = _starved(run)
    if starved is not None:
        findings.append(starved)
    saturated = _saturated(run)
    if saturated is not None:
        findings.append(saturated)
    return findings


def _starved(run: RunSummary) -> Finding | None:
    grads = {name: deepest(run, f"grad_{name}") for name in ("w_q", "w_k", "w_v", "w_o")}
    if any(found is None for found in grads.values()):
        return None
    by_step = {name: dict(found[1]) for name, found in grads.items()}
    steps = sorted(set.intersection(*(set(values) for values in by_step.values())))
    ratios = [
        (step, max(by_step["w_q"][step], by_step["w_k"][step]) / max(by_step["w_v"][step], by_step["w_o"][step]))
        for step in steps
        if min(by_step["w_v"][step], by_step["w_o"][step]) > 0
    ]  # fmt: skip
    step = since(ratios, lambda r: r < STARVED_RATIO)
    if step is None:
        return None
    last = steps[-1]
    return Finding(
        STARVED, f"the last block's W_q gradient norm is {by_step['w_q'][last]:.1e} against W_v's "
        f"{by_step['w_v'][last]:.1e} (below {STARVED_RATIO:g}×): its attention cannot learn where to look",
        step, grads["w_q"][0],
    )  # fmt: skip


def _saturated(run: RunSummary) -> Finding | None:
    """The block whose attention saturated first: entropy below the floor with its largest logit above the
    ceiling, from some step to the end."""
    found = []
    for tag, entropy in _by_block(run, "attn_entropy").items():
        logits = dict(run.health.get(tag.replace("/attn_entropy/", "/attn_max_logit/"), []))
        joint = [(step, value) for step, value in entropy if step in logits]
        step = since(joint, lambda v: v < SATURATED_ENTROPY)
        if step is None or max(logits[s] for s, _ in joint if s >= step) <= SATURATED_LOGIT:
            continue
        found.append((step, tag, entropy[-1][1], max(logits.values())))
    if not found:
        return None
    step, tag, entropy, logit = min(found)
    return Finding(
        SATURATED, f"block {tag.rsplit('_', 1)[1].lstrip('0')}'s attention entropy is {entropy:.3f} nats with "
        f"logits up to {logit:.0f}: each query attends to one key and its softmax passes no gradient",
        step, tag.replace("/attn_entropy/", "/attn_max_logit/"),
    )  # fmt: skip


def _improving_by(run: RunSummary, val: Series) -> float | None:
    """How much the validation loss fell per IMPROVING_TAIL of the run's steps over its last validations,
    if that is more than IMPROVING_DROP."""
    if len(val) < 2 or not run.max_steps:
        return None
    end_step, end = val[-1]
    tail = IMPROVING_TAIL * run.max_steps
    earlier = [point for point in val[:-1] if point[0] <= end_step - tail] or [val[-2]]
    start_step, start = earlier[-1]
    drop = (start - end) * tail / (end_step - start_step)
    return drop if drop > IMPROVING_DROP else None


def _still_improving(run: RunSummary, val: Series) -> list[Finding]:
    drop = _improving_by(run, val)
    if drop is None:
        return []
    return [Finding(
        STILL_IMPROVING, f"its validation loss was still falling {drop:.3f} per {IMPROVING_TAIL:.0%} of its "
        "steps at the end: the budget, not the design, limits it", None, "loss/val",
    )]  # fmt: skip


def since(series: Series, holds: Callable[[float], bool]) -> int | None:
    """The first step from which `holds` is true of every later value of `series` (the last included);
    None if it does not hold at the end."""
    start = None
    for step, value in series:
        start = (step if start is None else start) if holds(value) else None
    return start


def _by_block(run: RunSummary, quantity: str) -> dict[str, list[tuple[int, float]]]:
    prefix = f"{HEALTH_PREFIX}{quantity}/block_"
    return {tag: series for tag, series in run.health.items() if tag.startswith(prefix) and series}


def deepest(run: RunSummary, quantity: str) -> tuple[str, list[tuple[int, float]]] | None:
    """The deepest block's `training_health/<quantity>` curve: (tag, (step, value) by step)."""
    tags = _by_block(run, quantity)
    if not tags:
        return None
    tag = max(tags, key=lambda t: int(t.rsplit("_", 1)[1]))
    return tag, tags[tag]


@dataclass(frozen=True)
class Shared:
    """A finding over a setting's runs: how many of the `of` runs with a result showed it, the steps it
    began at, and one run's finding as the example."""

    kind: str
    count: int
    of: int
    steps: tuple[int, ...]
    example: Finding
    seed: str  # the example's run

    def describe(self) -> str:
        began = ""
        if self.steps:
            low, high = min(self.steps), max(self.steps)
            began = f", from step {low}" if low == high else f", from step {low}-{high}"
        return f"{self.kind} ({self.count}/{self.of}{began})"


def shared(runs: Sequence[RunSummary], findings: Mapping[Path, Sequence[Finding]]) -> list[Shared]:
    """What a setting's runs showed (`findings`: each run's `diagnose`, by its path), in the order of
    `diagnose`, each with how many runs showed it."""
    judged = [run for run in runs if run.result is not None]
    found: dict[str, list[tuple[str, Finding]]] = {}
    for run in judged:
        for finding in findings.get(run.path, ()):
            found.setdefault(finding.kind, []).append((run.seed, finding))
    return [
        Shared(kind, len(pairs), len(judged), tuple(f.step for _, f in pairs if f.step is not None), pairs[0][1],
               pairs[0][0])
        for kind, pairs in found.items()
    ]  # fmt: skip


def why_cell(runs: Sequence[RunSummary], findings: Mapping[Path, Sequence[Finding]]) -> str:
    """The settings table's `why`: every finding of the setting's runs, with counts; `—` for none."""
    return "; ".join(s.describe() for s in shared(runs, findings)) or "—"


def failed(findings: Sequence[Shared]) -> bool:
    """Whether any finding is a failure (not only a budget that ended first)."""
    return any(f.kind not in NOT_FAILURES for f in findings)
