"""What happened in a run, named from its final loss, its loss curves and the `training_health/` curves it
logged (docs/diagnosis.md): validation that is training, stalled at a reference level, tokens collapsed,
attention saturated, queries and keys starved of gradient, FFN units dead, diverged, destabilised or
overfitting, a loss spike, or still improving when the budget ended (from the training curve when validation
has fewer than two points). Each finding is an episode: the step where it began, the step it last held when it
ended before the run did (a collapse that recovered), and the TensorBoard tag that shows it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from scipy.stats import linregress

from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary
from tinylm.layout import TRAIN_LOSS, VAL_IN_TRAINING_SHARE, VAL_LOSS

# Each threshold's reason and the runs it was set against: docs/diagnosis.md's table.
# nats/char within which of a reference level a run learned almost nothing beyond it: 3× a validation's noise.
STALL_MARGIN = 0.05
# Token spread is about 1 for independent tokens: below 1% of that, one vector per sequence reaches the head.
COLLAPSED_SPREAD = 0.01
# W_q/W_k gradients below this fraction of W_v/W_o's: attention that cannot learn where to look.
STARVED_RATIO = 1e-3
# Mean attention entropy (nats) below this: queries put ~98% of their weight on one key...
SATURATED_ENTROPY = 0.1
# ...with a largest attention logit above this (about 0.05 at initialisation): the softmax passes no gradient.
SATURATED_LOGIT = 100.0
# nats/char a validation loss may climb back from its minimum before the run is destabilised (or overfitting): 10× δ.
DESTABILISED_RISE = 0.1
# ...overfitting when its training loss meanwhile fell by at least as much: the train–val gap widened.
OVERFITTING_TRAIN_DROP = DESTABILISED_RISE
# The training loss at a step: its median over this fraction of the steps around it (one batch's is too noisy).
TRAIN_WINDOW = 0.1
# Still improving: the last validations fell by more than IMPROVING_DROP per IMPROVING_TAIL of the steps; a stall
# is named only below it, so a run is either still improving or stalled, never both.
IMPROVING_TAIL = 0.1
IMPROVING_DROP = MIN_EFFECT / 2
# Fewer than two validations: the training curve's last IMPROVING_TRAIN_SPAN of the steps (at least
# IMPROVING_TRAIN_POINTS values) is read, a fall a least-squares slope below 0 at one-sided p <= the ALPHA.
IMPROVING_TRAIN_SPAN = 1 / 3
IMPROVING_TRAIN_POINTS = 4
IMPROVING_TRAIN_ALPHA = 0.05
# nats/char a validation loss must rise above its lowest before to be a loss spike (5× DESTABILISED_RISE)...
SPIKE_RISE = 0.5
# ...that came back down: below that lowest + SPIKE_RISE (recovered), or by this share of its rise by the end.
SPIKE_RETURN = 0.5
# Fraction of a block's FFN units (a gated FFN: its gate's) that never fired on the fixed batch: a tenth of its width.
DEAD_FRACTION = 0.1
# Readings an episode that ended must span to be named (one is a single batch's); one to the end needs one.
RECOVERED_EPISODE = 2
# Readings in a row the rule must fail in to end an episode: a shorter break belongs to the episode.
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


@dataclass(frozen=True)
class HealthCurve:
    """One `training_health/<quantity>/block_<block>` curve: its tag, its block and its (step, value) readings."""

    tag: str
    block: int
    series: Series


def diagnose(run: RunSummary, reference: Mapping[str, float] | None = None) -> list[Finding]:
    """Everything `run` shows, most severe first; `reference`: its validation split's uniform, unigram and
    bigram levels. A run without curves gets only what its record says."""
    if run.status == "diverged":
        return [_diverged(run)]
    if run.status != "completed":
        return []
    val = [(step, value) for step, value, _ in run.val_curve if math.isfinite(value)]
    spike = _spike(val)
    # The fall back from a spike is its recovery, not the budget ending: the slope is read without it.
    calm = [point for point in val if spike is None or not spike[1] <= point[0] <= spike[2]]
    improving = _improving_by(run, calm) if len(val) >= 2 else _improving_from_training(run, len(val))
    low_step, low = min(val, key=lambda point: point[1]) if val else (None, math.nan)
    rose = len(val) >= 2 and val[-1][1] - low > DESTABILISED_RISE
    # A stall only once the validation curve has flattened (one point cannot show that), and not for a loss
    # that rose back above a level: the rise is the cause then.
    stall = _stall(run, reference) if improving is None and not rose and len(val) >= 2 else None
    # One token of context has no spread and no key to choose: its health curves say nothing.
    health = (
        (_collapse, _starved, _saturated, _dead_units) if (run.model or {}).get("block_size") != 1 else ()
    )
    # What the curve shows, no more: whether budget or design limits the result is the comparison's to say.
    found = [
        _validation_in_training(run), _rose(run, low_step, low, val[-1]) if rose else None,
        spike and spike[0], stall, *(check(run) for check in health), None if rose else improving,
    ]  # fmt: skip
    return [finding for finding in found if finding is not None]


def _diverged(run: RunSummary) -> Finding:
    """Where the loss became non-finite: the step its record names (a run before it recorded one: the first
    non-finite training loss logged, else the last step it logged)."""
    logged = next((step for step, value in run.train_curve if not math.isfinite(value)), None)
    if run.diverged_at is not None:
        step, what = run.diverged_at, "the loss became non-finite at step"
    elif logged is not None:
        step, what = logged, "the training loss was first logged non-finite at step"
    else:
        step, what = run.steps, "the loss became non-finite by step"
    return Finding(DIVERGED, f"{what} {step}", step, TRAIN_LOSS)


def _validation_in_training(run: RunSummary) -> Finding | None:
    share = run.val_in_training
    if share is None or not share > VAL_IN_TRAINING_SHARE:
        return None
    return Finding(
        VALIDATION_IN_TRAINING, f"{share:.0%} of its validation characters lie in lines or passages found "
        f"verbatim in its training split (above {VAL_IN_TRAINING_SHARE:.0%}): its validation loss measures "
        "what it memorised, not what it generalises to; the corpus repeats itself", None, VAL_LOSS,
    )  # fmt: skip


def _spike(val: Series) -> tuple[Finding, int, int] | None:
    """The highest loss spike of the validation curve, with its first step and the last step before the curve
    was back within DESTABILISED_RISE of its lowest before (what a slope must not read): a rise of more than
    SPIKE_RISE above the lowest loss before it that came back down (below that lowest + SPIKE_RISE: recovered,
    `until` its last step above; or by SPIKE_RETURN of its rise by the end)."""
    found, low, index = [], math.inf, 0
    while index < len(val):
        if val[index][1] <= low + SPIKE_RISE:
            low, index = min(low, val[index][1]), index + 1
            continue
        end = _first_below(val, index, low + SPIKE_RISE)
        settled = _first_below(val, end, low + DESTABILISED_RISE)  # still falling back until within it
        inside = val[index:end]
        peak_step, peak = max(inside, key=lambda point: point[1])
        recovered = end < len(val)
        after_step, after = val[end] if recovered else val[-1]
        if recovered or peak - after >= SPIKE_RETURN * (peak - low):
            found.append((peak, low, inside[0][0], inside[-1][0], peak_step, after_step, after, recovered,
                          val[settled - 1][0]))  # fmt: skip
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
        first, VAL_LOSS, last if recovered else None,
    )  # fmt: skip
    return finding, first, settled


def _first_below(val: Series, start: int, level: float) -> int:
    """The index of the first value of `val` from `start` at or below `level` (len(val): none is)."""
    return next((index for index in range(start, len(val)) if val[index][1] <= level), len(val))


def _rose(run: RunSummary, low_step: int, low: float, end: tuple[int, float]) -> Finding:
    """Overfitting when the training loss kept falling while the validation loss rose from its minimum (the
    gap widened from that step); destabilised when it did not (both rose), or when there is no training curve
    to tell."""
    rise = end[1] - low
    then, now = train_loss_near(run, low_step), train_loss_near(run, end[0])
    if then is not None and now is not None and then - now >= OVERFITTING_TRAIN_DROP:
        gap_then, gap_now = low - then, end[1] - now
        return Finding(
            OVERFITTING, f"the training loss fell {then:.3f} → {now:.3f} while the validation loss rose {rise:.2f} "
            f"from its minimum {low:.3f}: the train–val gap widened {gap_then:.2f} → {gap_now:.2f}, too little "
            "data or regularisation for the steps", low_step, VAL_LOSS,
        )  # fmt: skip
    trained = f" (training loss {then:.3f} → {now:.3f})" if then is not None and now is not None else ""
    return Finding(DESTABILISED, f"the validation loss rose {rise:.2f} from its minimum {low:.3f}{trained}",
                   low_step, VAL_LOSS)  # fmt: skip


def train_loss_near(run: RunSummary, step: int) -> float | None:
    """The median training loss over TRAIN_WINDOW of the run's steps around `step` (the nearest logged value
    when none falls inside); None without a finite training curve."""
    curve = [(s, v) for s, v in run.train_curve if math.isfinite(v)]
    if not curve:
        return None
    half = TRAIN_WINDOW * (run.max_steps or curve[-1][0]) / 2
    near = [v for s, v in curve if abs(s - step) <= half]
    return statistics.median(near) if near else min(curve, key=lambda point: abs(point[0] - step))[1]


def _stall(run: RunSummary, reference: Mapping[str, float] | None) -> Finding | None:
    """Ignores context (at or above the unigram level) or stalled at the bigram level, from the final loss."""
    final = run.final_val_loss
    if not reference or final is None or not math.isfinite(final):
        return None
    unigram, bigram = reference["unigram"], reference["bigram"]
    if final >= unigram - STALL_MARGIN:
        where = "is" if final <= unigram + STALL_MARGIN else "is above"
        kind, level = IGNORES_CONTEXT, unigram
        what = f"{where} the unigram level {unigram:.3f}: it learned at most the characters' frequencies, nothing of their context"
    elif abs(final - bigram) <= STALL_MARGIN:
        kind, level = BIGRAM_STALL, bigram
        what = f"is the bigram level {bigram:.3f}: it predicts from the last character alone"
    else:
        return None
    # From the validation that reached it, and got no further.
    step = since([(step, value) for step, value, _ in run.val_curve], lambda v: v <= level + STALL_MARGIN)
    return Finding(kind, f"its final loss {final:.3f} {what}", step, VAL_LOSS)


def _collapse(run: RunSummary) -> Finding | None:
    """The deepest block's token spread below COLLAPSED_SPREAD, in its episode."""
    curve = _deepest(run, "token_spread")
    found = None if curve is None else episode(curve.series, _collapsed)
    if found is None:
        return None
    series, (start, until) = curve.series, found
    inside = _within(series, start, until)
    after = "" if until is None else f", then recovered to {_after(series, until):.2g}"
    breaks = [(step, value) for step, value in inside if not _collapsed(value)]
    if breaks:  # named, so that a reader of the curve sees why they are not a recovery
        readings = ", ".join(f"{value:.2g} at step {step}" for step, value in breaks)
        after += (
            f"; back above {COLLAPSED_SPREAD:g} at {len(breaks)} reading{'s' if len(breaks) > 1 else ''} "
            f"({readings}), never {RECOVERY_READINGS} in a row: not a recovery"
        )
    earlier = episode([(s, v) for s, v in series if s < start], _collapsed) if until is None else None
    if earlier is not None and earlier[1] is not None:  # a collapse to the end that had recovered before
        after += (
            f"; it had collapsed before, from step {earlier[0]} to {earlier[1]}, and recovered to "
            f"{_after(series, earlier[1]):.2g} in between"
        )
    return Finding(
        COLLAPSED, f"the last block's token spread fell to {min(v for _, v in inside):.1e}{_span(start, until)} "
        f"(below {COLLAPSED_SPREAD:g}; about 1 for independent tokens){after}", start, curve.tag, until,
    )  # fmt: skip


def _collapsed(spread: float) -> bool:
    return spread < COLLAPSED_SPREAD


def _dead_units(run: RunSummary) -> Finding | None:
    """The block with the most FFN units dead in its episode above DEAD_FRACTION (one lasting to the end
    before one that recovered)."""
    found = [
        (until is None, max(v for _, v in inside), -start, curve.tag, curve, start, until)
        for curve, (start, until), inside in _episodes(_by_block(run, "dead_units").values(), lambda v: v > DEAD_FRACTION)
    ]  # fmt: skip
    if not found:
        return None
    _, worst, *_, curve, start, until = max(found)
    after = "" if until is None else f", then {_after(curve.series, until):.0%}"
    return Finding(
        DEAD_UNITS, f"up to {worst:.0%} of block {curve.block}'s FFN units never fired on the fixed batch"
        f"{_span(start, until)} (above {DEAD_FRACTION:.0%}; healthy runs under 1%){after}: width the run pays "
        "for and does not use", start, curve.tag, until,
    )  # fmt: skip


def _starved(run: RunSummary) -> Finding | None:
    """The deepest block's W_q and W_k gradient norms below STARVED_RATIO of W_v's and W_o's, in its episode."""
    grads = [_deepest(run, f"grad_{name}") for name in ("w_q", "w_k", "w_v", "w_o")]
    if any(curve is None for curve in grads):
        return None
    q, k, v, o = (dict(curve.series) for curve in grads)
    steps = sorted(set(q) & set(k) & set(v) & set(o))
    ratios = [(s, max(q[s], k[s]) / max(v[s], o[s])) for s in steps if min(v[s], o[s]) > 0]
    found = episode(ratios, lambda r: r < STARVED_RATIO)
    if found is None:
        return None
    step, until = found
    last = until if until is not None else steps[-1]
    return Finding(
        STARVED, f"the last block's W_q gradient norm is {q[last]:.1e} against W_v's {v[last]:.1e}"
        f"{_span(step, until)} (below {STARVED_RATIO:g}×): its attention cannot learn where to look",
        step, grads[0].tag, until,
    )  # fmt: skip


def _saturated(run: RunSummary) -> Finding | None:
    """The block whose attention saturated first: entropy below the floor with its largest logit above the
    ceiling, in an episode (one lasting to the end before one that recovered)."""
    logit_curves = _by_block(run, "attn_max_logit")
    logits = {block: dict(curve.series) for block, curve in logit_curves.items()}
    joint = [  # each block's entropy where its largest logit was read too, under the logit's tag
        HealthCurve(logit_curves[block].tag, block, [(s, v) for s, v in c.series if s in logits[block]])
        for block, c in _by_block(run, "attn_entropy").items() if block in logits
    ]  # fmt: skip
    found = []
    for curve, (step, until), inside in _episodes(joint, lambda v: v < SATURATED_ENTROPY):
        logit = max(logits[curve.block][s] for s, _ in inside)
        if logit > SATURATED_LOGIT:
            held = [v for _, v in inside if v < SATURATED_ENTROPY]  # not a brief break's reading
            found.append((until is not None, step, curve.block, held[-1], logit, until, curve.tag))
    if not found:
        return None
    _, step, block, entropy, logit, until, tag = min(found)
    return Finding(
        SATURATED, f"block {block}'s attention entropy is {entropy:.3f} nats with logits up to "
        f"{logit:.0f}{_span(step, until)}: each query attends to one key and its softmax passes no gradient",
        step, tag, until,
    )  # fmt: skip


def _improving_by(run: RunSummary, val: Series) -> Finding | None:
    """Still improving: the validation loss still falling more than IMPROVING_DROP per IMPROVING_TAIL of the
    run's steps over its last validations."""
    if len(val) < 2 or not run.max_steps:
        return None
    end_step, end = val[-1]
    tail = IMPROVING_TAIL * run.max_steps
    earlier = [point for point in val[:-1] if point[0] <= end_step - tail] or [val[-2]]
    start_step, start = earlier[-1]
    drop = (start - end) * tail / (end_step - start_step)
    return None if drop <= IMPROVING_DROP else _still_falling("validation", drop, "at the end", VAL_LOSS)


def _improving_from_training(run: RunSummary, validations: int) -> Finding | None:
    """With fewer than two validations, still improving: the training loss's least-squares slope over the last
    IMPROVING_TRAIN_SPAN of the steps (at least IMPROVING_TRAIN_POINTS logged values) below 0 at one-sided
    p <= IMPROVING_TRAIN_ALPHA and steeper than IMPROVING_DROP per IMPROVING_TAIL of the steps."""
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
    return _still_falling("training", drop, (
        f"over its last {len(last)} logged values ({last[0][1]:.2f} at step {last[0][0]} → {last[-1][1]:.2f} at "
        f"step {last[-1][0]}; slope p = {p_value:.2g}), read from the training curve: it has {points}"
    ), TRAIN_LOSS)  # fmt: skip


def _still_falling(loss: str, drop: float, how: str, tag: str) -> Finding:
    what = f"its {loss} loss was still falling {drop:.3f} per {IMPROVING_TAIL:.0%} of its steps {how}"
    return Finding(STILL_IMPROVING, f"{what}: {STILL_LEARNING}", None, tag)


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


def _episodes(
    curves: Sequence[HealthCurve], holds: Callable[[float], bool]
) -> Iterator[tuple[HealthCurve, tuple[int, int | None], Series]]:
    """Each curve's `episode` where `holds`, with the readings inside it."""
    for curve in curves:
        found = episode(curve.series, holds)
        if found is not None:
            yield curve, found, _within(curve.series, *found)


def _within(series: Series, start: int, until: int | None) -> Series:
    """The readings of `series` from step `start` to `until` (None: the end)."""
    return [
        (step, value) for step, value in series if start <= step <= (math.inf if until is None else until)
    ]


def _after(series: Series, until: int) -> float:
    """The value of `series` at the first step after `until`: what an episode recovered to."""
    return next(value for step, value in series if step > until)


def _span(start: int, until: int | None) -> str:
    return "" if until is None else f" at steps {start}–{until}"


def since(series: Series, holds: Callable[[float], bool]) -> int | None:
    """The first step from which `holds` is true of every later value of `series` (the last included);
    None if it does not hold at the end."""
    start = None
    for step, value in series:
        start = (step if start is None else start) if holds(value) else None
    return start


def _by_block(run: RunSummary, quantity: str) -> dict[int, HealthCurve]:
    """The run's `training_health/<quantity>/block_<k>` curves that have readings, by block."""
    prefix = f"{HEALTH_PREFIX}{quantity}/block_"
    curves = (HealthCurve(tag, int(tag.removeprefix(prefix)), series) for tag, series in run.health.items()
              if tag.startswith(prefix) and series)  # fmt: skip
    return {curve.block: curve for curve in curves}


def _deepest(run: RunSummary, quantity: str) -> HealthCurve | None:
    curves = _by_block(run, quantity)
    return curves[max(curves)] if curves else None
