"""What happened in a run, named from its final loss, its loss curves and the `training_health/` curves it
logged (docs/diagnosis.md): validation that is training, stalled at a reference level, tokens collapsed,
attention saturated, queries and keys starved of gradient, FFN units dead, diverged, destabilised or
overfitting, a loss spike, or still improving when the budget ended (from the training curve when validation
has fewer than two points). Each finding is an episode: the step where it began, the step it last held when it ended before
the run did (a collapse that recovered), and the TensorBoard tag that shows it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scipy.stats import linregress

from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary
from tinylm.layout import TRAIN_LOSS as TRAIN_TAG
from tinylm.layout import VAL_IN_TRAINING_SHARE
from tinylm.layout import VAL_LOSS as VAL_TAG

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
# nats/char a run's validation loss may climb back from its minimum before it is destabilised (or
# overfitting): 10× δ, and more than a cosine schedule's last steps ever add to a healthy run.
DESTABILISED_RISE = 0.1
# ...overfitting when its training loss meanwhile fell by at least as much: the train–val gap widened by
# twice the rise that calls a run unstable, far beyond the batch-to-batch noise of the training loss.
OVERFITTING_TRAIN_DROP = DESTABILISED_RISE
# The training loss at a step: its median over this fraction of the run's steps around it (one batch's loss
# is too noisy to compare two steps by).
TRAIN_WINDOW = 0.1
# Still improving: the last validations fell by more than this per IMPROVING_TAIL of the run's steps. Below
# it the curve has flattened (a tenth more steps moves the result by under half of δ, the smallest difference
# worth a claim): only then is a stall named, so a run is either still improving or stalled, never both.
IMPROVING_TAIL = 0.1
IMPROVING_DROP = MIN_EFFECT / 2
# With fewer than two validations there is no validation slope: the training curve is read instead, over its
# last IMPROVING_TRAIN_SPAN of the steps (at least IMPROVING_TRAIN_POINTS logged values). A logged training loss
# is one batch's, so a fall must also be a least-squares slope below 0 at one-sided p <= IMPROVING_TRAIN_ALPHA
# (with independent batch noise, a flat curve is called improving at most that often; docs/diagnosis.md), and
# as steep as IMPROVING_DROP per IMPROVING_TAIL of the steps.
IMPROVING_TRAIN_SPAN = 1 / 3
IMPROVING_TRAIN_POINTS = 4
IMPROVING_TRAIN_ALPHA = 0.05
# nats/char a validation loss must rise above its lowest value before to be a loss spike: 5× the rise that
# calls a run destabilised, over half of Tiny Shakespeare's unigram-to-bigram gap (0.86), about 30× the noise
# of a 200-window validation. A smaller transient is not named; one that lasts to the end is `destabilised`.
SPIKE_RISE = 0.5
# ...and it came back down when a later validation is below the earlier lowest + SPIKE_RISE (recovered), or at
# least fell this share of its rise from the peak by the end (came down, not recovered); a rise that stays
# up is not a spike but `destabilised`.
SPIKE_RETURN = 0.5
# Fraction of a block's FFN units (for a gated FFN, its gate's) that never fired on the health callback's
# fixed batch: a tenth of the block's width lost. Healthy runs sit under 1% (ReLU at lr 1e-3: 0-0.8%); ReLU
# at lr 3e-2 lost 13-38% per block.
DEAD_FRACTION = 0.1
# Logged measurements an episode that ended must span to be named: one is a single batch's reading (a run's
# first steps often cross a threshold once); one lasting to the end is named from its first.
RECOVERED_EPISODE = 2
# Consecutive logged readings the rule must fail in to end an episode (a recovery): one reading back across
# the threshold is a single batch's, as an episode of one reading is; a shorter break, at the end of the run
# too, belongs to the episode, which then began at its first reading (docs/diagnosis.md).
RECOVERY_READINGS = 2

DIVERGED = "diverged"
DESTABILISED = "destabilised"
OVERFITTING = "overfitting"
IGNORES_CONTEXT = "ignores context"
BIGRAM_STALL = "stalled at the bigram level"
COLLAPSED = "tokens collapsed"
STARVED = "Q/K starved"
SATURATED = "attention saturated"
DEAD_UNITS = "dead units"
STILL_IMPROVING = "still improving"
LOSS_SPIKE = "loss spike"
VALIDATION_IN_TRAINING = "validation is training"

Series = Sequence[tuple[int, float]]
# What `still improving` concludes from its curve, and no more.
STILL_LEARNING = "its budget ended before it stopped learning"


@dataclass(frozen=True)
class Finding:
    """One thing that happened in a run: `kind` (the constants above), the evidence as a clause with its
    numbers, the step it began at, the tag that shows it, and `until`: the last step it held when it ended
    before the run did (None: it lasted to the end)."""

    kind: str
    evidence: str
    step: int | None = None
    tag: str | None = None
    until: int | None = None

    @property
    def recovered(self) -> bool:
        return self.until is not None


def diagnose(run: RunSummary, reference: Mapping[str, float] | None = None) -> list[Finding]:
    """Everything `run` shows, most severe first; `reference`: its validation split's uniform, unigram and
    bigram levels. A run without curves gets only what its record says."""
    if run.status == "diverged":
        return [_diverged(run)]
    if run.status != "completed":
        return []
    # One token of context has no spread and no key to choose: its health curves say nothing.
    context = (run.model or {}).get("block_size")
    val = [(step, value) for step, value, _ in run.val_curve if math.isfinite(value)]
    spike = _spike(val)
    # The fall back from a spike is its recovery, not the budget ending: the slope is read without it.
    calm = [point for point in val if spike is None or not spike[1] <= point[0] <= spike[2]]
    improving = _improving_by(run, calm) if len(val) >= 2 else _improving_from_training(run, len(val))
    low_step, low = min(val, key=lambda point: point[1]) if val else (None, math.nan)
    rose = len(val) >= 2 and val[-1][1] - low > DESTABILISED_RISE
    # A stall only once the validation curve has flattened: one point cannot show that (can't tell is not
    # flat); and not for a loss that rose back above a level: the rise is the cause then.
    stalls = _stalls(run, reference) if improving is None and not rose and len(val) >= 2 else []
    findings = [*stalls, *(_health(run) if context != 1 else [])]
    if spike is not None:
        findings.insert(0, spike[0])
    if rose:
        findings.insert(0, _rose(run, low_step, low, val[-1], val[-1][1] - low))
    elif improving is not None:
        what, tag = improving
        # What the curve shows, no more: whether the budget or the design limits the result is for the
        # comparison to say (a setting still learning can still be `worse` at this budget).
        findings.append(Finding(STILL_IMPROVING, f"{what}: {STILL_LEARNING}", None, tag))
    share = run.val_in_training
    if share is not None and share > VAL_IN_TRAINING_SHARE:
        findings.insert(0, Finding(
            VALIDATION_IN_TRAINING, f"{share:.0%} of its validation characters lie in lines or passages found "
            f"verbatim in its training split (above {VAL_IN_TRAINING_SHARE:.0%}): its validation loss measures "
            "what it memorised, not what it generalises to; the corpus repeats itself", None, "loss/val",
        ))  # fmt: skip
    return findings


def _diverged(run: RunSummary) -> Finding:
    """Where the loss became non-finite: the step its record names (a run before it recorded one: the first
    non-finite training loss logged, else the last step it logged; the stop comes up to a logging interval
    after the step that broke)."""
    if run.diverged_at is not None:
        return Finding(
            DIVERGED, f"the loss became non-finite at step {run.diverged_at}", run.diverged_at, TRAIN_TAG
        )
    logged = next((step for step, value in run.train_curve if not math.isfinite(value)), None)
    if logged is not None:
        return Finding(
            DIVERGED, f"the training loss was first logged non-finite at step {logged}", logged, TRAIN_TAG
        )
    return Finding(DIVERGED, f"the loss became non-finite by step {run.steps}", run.steps, TRAIN_TAG)


def _spike(val: Series) -> tuple[Finding, int, int] | None:
    """The highest loss spike of the validation curve, with its first step and the last step before the curve
    was back within DESTABILISED_RISE of its lowest before (what a slope must not read): a rise
    of more than SPIKE_RISE above the lowest loss before it that came back down (below that lowest +
    SPIKE_RISE: recovered, `until` its last step above; or by SPIKE_RETURN of its rise by the end)."""
    found = []
    low, index = math.inf, 0
    while index < len(val):
        if val[index][1] <= low + SPIKE_RISE:
            low = min(low, val[index][1])
            index += 1
            continue
        end = index
        while end < len(val) and val[end][1] > low + SPIKE_RISE:
            end += 1
        inside = val[index:end]
        peak_step, peak = max(inside, key=lambda point: point[1])
        recovered = end < len(val)
        after_step, after = val[end] if recovered else val[-1]
        settled = end  # still falling back until within DESTABILISED_RISE of the lowest before
        while settled < len(val) and val[settled][1] > low + DESTABILISED_RISE:
            settled += 1
        if recovered or peak - after >= SPIKE_RETURN * (peak - low):
            found.append(
                (peak, low, inside[0][0], inside[-1][0], peak_step, after_step, after, recovered,
                 val[settled - 1][0])
            )  # fmt: skip
        index = end
    if not found:
        return None
    peak, low, first, last, peak_step, after_step, after, recovered, settled = max(found)
    ended = (
        f"and was back to {after:.2f} at step {after_step}: recovered"
        if recovered
        else f"and came down to {after:.2f} by the end, still {after - low:.2f} above its lowest before: not recovered"
    )
    others = f"; {len(found) - 1} smaller spike(s) too" if len(found) > 1 else ""
    finding = Finding(
        LOSS_SPIKE, f"the validation loss rose from {low:.2f} (its lowest before) to a peak of {peak:.2f} at "
        f"step {peak_step}, more than {SPIKE_RISE:g} above it from step {first} to {last}, {ended}{others}",
        first, "loss/val", last if recovered else None,
    )  # fmt: skip
    return finding, first, settled


def _rose(run: RunSummary, low_step: int, low: float, end: tuple[int, float], rise: float) -> Finding:
    """Overfitting when the training loss kept falling while the validation loss rose from its minimum (the
    gap widened from that step); destabilised when it did not (both rose), or when there is no training curve
    to tell."""
    then, now = train_loss_near(run, low_step), train_loss_near(run, end[0])
    if then is not None and now is not None and then - now >= OVERFITTING_TRAIN_DROP:
        gap_then, gap_now = low - then, end[1] - now
        return Finding(
            OVERFITTING, f"the training loss fell {then:.3f} → {now:.3f} while the validation loss rose {rise:.2f} "
            f"from its minimum {low:.3f}: the train–val gap widened {gap_then:.2f} → {gap_now:.2f}, too little "
            "data or regularisation for the steps", low_step, "loss/val",
        )  # fmt: skip
    trained = f" (training loss {then:.3f} → {now:.3f})" if then is not None and now is not None else ""
    return Finding(
        DESTABILISED,
        f"the validation loss rose {rise:.2f} from its minimum {low:.3f}{trained}",
        low_step,
        "loss/val",
    )


def train_loss_near(run: RunSummary, step: int) -> float | None:
    """The median training loss over TRAIN_WINDOW of the run's steps around `step` (the nearest logged value
    when none falls inside); None without a finite training curve."""
    curve = [(s, v) for s, v in run.train_curve if math.isfinite(v)]
    if not curve:
        return None
    half = TRAIN_WINDOW * (run.max_steps or curve[-1][0]) / 2
    near = [v for s, v in curve if abs(s - step) <= half]
    return statistics.median(near) if near else min(curve, key=lambda point: abs(point[0] - step))[1]


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
        found = episode(series, _collapsed)
        if found is not None:
            start, until = found
            low = min(v for s, v in series if start <= s <= (until if until is not None else math.inf))
            after = "" if until is None else f", then recovered to {_after(series, until):.2g}"
            breaks = brief_breaks(series, start, until, _collapsed)
            if breaks:  # named, so that a reader of the curve sees why they are not a recovery
                readings = ", ".join(f"{value:.2g} at step {step}" for step, value in breaks)
                after += (
                    f"; back above {COLLAPSED_SPREAD:g} at {len(breaks)} reading{'s' if len(breaks) > 1 else ''} "
                    f"({readings}), never {RECOVERY_READINGS} in a row: not a recovery"
                )
            if until is None:  # a collapse to the end may have begun earlier, with a recovery between
                earlier = episode([(step, v) for step, v in series if step < start], _collapsed)
                if earlier is not None and earlier[1] is not None:
                    after += (
                        f"; it had collapsed before, from step {earlier[0]} to {earlier[1]}, and recovered to "
                        f"{_after(series, earlier[1]):.2g} in between"
                    )
            findings.append(Finding(
                COLLAPSED, f"the last block's token spread fell to {low:.1e}{_span(start, until)} (below "
                f"{COLLAPSED_SPREAD:g}; about 1 for independent tokens){after}", start, tag, until,
            ))  # fmt: skip
    for check in (_starved, _saturated, _dead_units):
        found = check(run)
        if found is not None:
            findings.append(found)
    return findings


def _collapsed(spread: float) -> bool:
    return spread < COLLAPSED_SPREAD


def _dead_units(run: RunSummary) -> Finding | None:
    """The block with the most FFN units dead in its episode above DEAD_FRACTION (one lasting to the end
    before one that recovered)."""
    found = []
    for tag, series in _by_block(run, "dead_units").items():
        span = episode(series, lambda v: v > DEAD_FRACTION)
        if span is not None:
            start, until = span
            worst = max(v for s, v in series if start <= s <= (until if until is not None else math.inf))
            found.append((until is None, worst, -start, tag, span))
    if not found:
        return None
    *_, tag, (start, until) = max(found)
    worst = max(v for s, v in run.health[tag] if start <= s <= (until if until is not None else math.inf))
    after = "" if until is None else f", then {_after(run.health[tag], until):.0%}"
    return Finding(
        DEAD_UNITS, f"up to {worst:.0%} of block {_block(tag)}'s FFN units never fired on the fixed batch"
        f"{_span(start, until)} (above {DEAD_FRACTION:.0%}; healthy runs under 1%){after}: width the run pays "
        "for and does not use", start, tag, until,
    )  # fmt: skip


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
    found = episode(ratios, lambda r: r < STARVED_RATIO)
    if found is None:
        return None
    step, until = found
    last = until if until is not None else steps[-1]
    return Finding(
        STARVED, f"the last block's W_q gradient norm is {by_step['w_q'][last]:.1e} against W_v's "
        f"{by_step['w_v'][last]:.1e}{_span(step, until)} (below {STARVED_RATIO:g}×): its attention cannot learn "
        "where to look", step, grads["w_q"][0], until,
    )  # fmt: skip


def _saturated(run: RunSummary) -> Finding | None:
    """The block whose attention saturated first: entropy below the floor with its largest logit above the
    ceiling, in an episode (one lasting to the end before one that recovered)."""
    found = []
    for tag, entropy in _by_block(run, "attn_entropy").items():
        logits = dict(run.health.get(tag.replace("/attn_entropy/", "/attn_max_logit/"), []))
        joint = [(step, value) for step, value in entropy if step in logits]
        span = episode(joint, lambda v: v < SATURATED_ENTROPY)
        if span is None:
            continue
        step, until = span
        inside = [(s, v) for s, v in joint if step <= s <= (until if until is not None else math.inf)]
        logit = max(logits[s] for s, _ in inside)
        if logit > SATURATED_LOGIT:
            held = [v for _, v in inside if v < SATURATED_ENTROPY]  # not a brief break's reading
            found.append((until is not None, step, tag, held[-1], logit, until))
    if not found:
        return None
    _, step, tag, entropy, logit, until = min(found)
    return Finding(
        SATURATED, f"block {_block(tag)}'s attention entropy is {entropy:.3f} nats with logits up to "
        f"{logit:.0f}{_span(step, until)}: each query attends to one key and its softmax passes no gradient",
        step, tag.replace("/attn_entropy/", "/attn_max_logit/"), until,
    )  # fmt: skip


def _improving_by(run: RunSummary, val: Series) -> tuple[str, str] | None:
    """What shows the validation loss still falling more than IMPROVING_DROP per IMPROVING_TAIL of the run's
    steps over its last validations, and its tag; None if it is not."""
    if len(val) < 2 or not run.max_steps:
        return None
    end_step, end = val[-1]
    tail = IMPROVING_TAIL * run.max_steps
    earlier = [point for point in val[:-1] if point[0] <= end_step - tail] or [val[-2]]
    start_step, start = earlier[-1]
    drop = (start - end) * tail / (end_step - start_step)
    if drop <= IMPROVING_DROP:
        return None
    return (
        f"its validation loss was still falling {drop:.3f} per {IMPROVING_TAIL:.0%} of its steps at the end",
        VAL_TAG,
    )


def _improving_from_training(run: RunSummary, validations: int) -> tuple[str, str] | None:
    """With fewer than two validations, what shows the training loss still falling: its least-squares slope
    over the last IMPROVING_TRAIN_SPAN of the steps (at least IMPROVING_TRAIN_POINTS logged values) below 0 at
    one-sided p <= IMPROVING_TRAIN_ALPHA and steeper than IMPROVING_DROP per IMPROVING_TAIL of the steps."""
    curve = [(step, value) for step, value in run.train_curve if math.isfinite(value)]
    if len(curve) < IMPROVING_TRAIN_POINTS or not run.max_steps:
        return None
    since_step = curve[-1][0] - IMPROVING_TRAIN_SPAN * run.max_steps
    last = [point for point in curve if point[0] >= since_step]
    last = last if len(last) >= IMPROVING_TRAIN_POINTS else curve[-IMPROVING_TRAIN_POINTS:]
    fit = linregress([step for step, _ in last], [value for _, value in last])
    drop = -fit.slope * IMPROVING_TAIL * run.max_steps
    p_value = fit.pvalue / 2 if fit.slope < 0 else 1.0  # one-sided: a fall
    if drop <= IMPROVING_DROP or not p_value <= IMPROVING_TRAIN_ALPHA:
        return None
    points = "no validation point" if validations == 0 else "one validation point"
    return (
        f"its training loss was still falling {drop:.3f} per {IMPROVING_TAIL:.0%} of its steps over its last "
        f"{len(last)} logged values ({last[0][1]:.2f} at step {last[0][0]} → {last[-1][1]:.2f} at step "
        f"{last[-1][0]}; slope p = {p_value:.2g}), read from the training curve: it has {points}",
        TRAIN_TAG,
    )


def episode(series: Series, holds: Callable[[float], bool]) -> tuple[int, int | None] | None:
    """The episode of `series` where `holds` is true to report: (first step, None) for the one lasting to the
    end, else the longest that ended and spans at least RECOVERED_EPISODE measurements (its first and last
    step; the earliest of equals); None if there is none. An episode ends only where `holds` fails for
    RECOVERY_READINGS readings in a row: a shorter break is inside it."""
    spans: list[tuple[int, int]] = []
    start = last = None
    for index, (_, value) in enumerate(series):
        if holds(value):
            start, last = (index if start is None else start), index
        elif start is not None and index - last >= RECOVERY_READINGS:
            spans.append((start, last))
            start = None
    if start is not None:
        return series[start][0], None
    named = [(first, end) for first, end in spans if end - first + 1 >= RECOVERED_EPISODE]
    if not named:
        return None
    first, end = max(named, key=lambda span: (span[1] - span[0], -span[0]))
    return series[first][0], series[end][0]


def brief_breaks(series: Series, start: int, until: int | None, holds: Callable[[float], bool]) -> Series:
    """The readings inside the episode from `start` to `until` (None: the end) where `holds` failed: breaks
    shorter than RECOVERY_READINGS, not recoveries."""
    last = until if until is not None else math.inf
    return [(step, value) for step, value in series if start <= step <= last and not holds(value)]


def _after(series: Series, until: int) -> float:
    """The value of `series` at the first step after `until`: what an episode recovered to."""
    return next(value for step, value in series if step > until)


def _span(start: int, until: int | None) -> str:
    return "" if until is None else f" at steps {start}–{until}"


def _block(tag: str) -> str:
    return tag.rsplit("_", 1)[1].lstrip("0")


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
