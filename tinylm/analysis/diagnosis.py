"""What a run showed, each finding with its evidence, from its final loss and its loss and health curves."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import NamedTuple

from scipy.stats import linregress

from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary
from tinylm.layout import TRAIN_LOSS, VAL_IN_TRAINING_SHARE, VAL_LOSS

# The thresholds; each one's reason and the runs it was set against: docs/diagnosis.md's table.
STALL_MARGIN = 0.05  # nats/char within which of a reference level a run learned almost nothing beyond it
COLLAPSED_SPREAD = 0.01  # token spread (about 1 for independent tokens) below which tokens collapsed
STARVED_RATIO = 1e-3  # W_q/W_k gradients below this fraction of W_v/W_o's: attention that cannot learn
SATURATED_ENTROPY = 0.1  # mean attention entropy (nats) below which attention saturated...
SATURATED_LOGIT = 100.0  # ...with a largest attention logit above this (about 0.05 at initialisation)
DESTABILISED_RISE = 0.1  # nats/char a validation loss may rise from its minimum before it is destabilised...
OVERFITTING_TRAIN_DROP = DESTABILISED_RISE  # ...or overfits, when its training loss fell at least this much
TRAIN_WINDOW = 0.1  # the training loss at a step: its median over this fraction of the steps around it
SHIFT_FROM = 0.1  # a shift: from its first validation after this share of the steps (past the first fall)...
SHIFT_GAP = 0.3  # ...the validation loss sits more than this (nats/char) above the training loss...
SHIFT_FOLLOW = 0.5  # ...and falls less than this share of the training loss's fall (OVERFITTING_TRAIN_DROP+)
IMPROVING_TAIL = 0.1  # still improving: its loss falls more than IMPROVING_DROP per this share of the steps
IMPROVING_DROP = MIN_EFFECT / 2  # (a stall is named only below it), and falls by its least-squares slope...
IMPROVING_SPAN = 1 / 3  # ...over this last share of the steps of its validation curve...
IMPROVING_POINTS = 4  # ...or its last this many values (under this many validations: the training curve's)...
IMPROVING_ALPHA = 0.05  # ...below 0 at one-sided p <= this
SPIKE_RISE = 0.5  # nats/char a validation loss must rise above its lowest before to be a loss spike...
SPIKE_RETURN = 0.5  # ...that came back down: below that lowest + SPIKE_RISE, or by this share of its rise
DEAD_FRACTION = 0.1  # share of a block's FFN units (a gated FFN: its gate's) never fired on the fixed batch
RECOVERED_EPISODE = 2  # readings an episode that ended must span to be named (one is a single batch's)
RECOVERY_READINGS = 2  # readings in a row the rule must fail in to end an episode

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
DISTRIBUTION_SHIFT = "distribution shift"

NOT_FAILURES = (STILL_IMPROVING, BIGRAM_STALL)  # a setting showing only these has not failed
FAILURES = (DIVERGED, IGNORES_CONTEXT, COLLAPSED, DESTABILISED)  # lasting to its end (docs/sweeps.md)
DATA_FINDINGS = (VALIDATION_IN_TRAINING, DISTRIBUTION_SHIFT)  # about the data a run was measured on
STILL_LEARNING = "its budget ended before it stopped learning"  # what `still improving` concludes, no more

Series = Sequence[tuple[int, float]]
Episode = tuple["HealthCurve", tuple[int, int | None], Series]  # a curve, its episode's span, readings in it


@dataclass(frozen=True)
class Finding:
    """One thing a run showed: its kind, the evidence in words, the step it began and the curve's tag."""

    kind: str
    evidence: str
    step: int | None = None
    tag: str | None = None
    until: int | None = None  # the last step it held, if it ended before the run did (it recovered)


class _Spike(NamedTuple):
    """A rise above the lowest loss before it, compared by its peak first (then its low, its span)."""

    peak: float
    low: float
    index: int  # in the validation curve: its first reading above low + SPIKE_RISE...
    end: int  # ...and the first back under it (the curve's length: none was)


class HealthCurve(NamedTuple):
    """One `training_health/<quantity>/block_<block>` curve: its tag, its block and its readings."""

    tag: str
    block: int
    series: Series


def diagnose(run: RunSummary, reference: Mapping[str, float] | None = None) -> list[Finding]:
    """Everything `run` shows, most severe first; `reference`: its validation split's reference levels."""
    if run.status == "diverged":  # where: as its record says, else its training curve, else by its end
        logged = next((step for step, value in run.train_curve if not math.isfinite(value)), None)
        if run.diverged_at is not None:
            step, what = run.diverged_at, "the loss became non-finite at step"
        elif logged is not None:
            step, what = logged, "the training loss was first logged non-finite at step"
        else:
            step, what = run.steps, "the loss became non-finite by step"
        return [Finding(DIVERGED, f"{what} {step}", step, TRAIN_LOSS)]
    if run.status != "completed":
        return []
    share, data = run.val_in_training, None  # about the data, not the run: named first
    if share is not None and share > VAL_IN_TRAINING_SHARE:
        evidence = f"{share:.0%} of its validation characters lie in lines or passages found verbatim in its "
        evidence += f"training split (above {VAL_IN_TRAINING_SHARE:.0%}): its validation loss measures what "
        evidence += "it memorised, not what it generalises to; the corpus repeats itself"
        data = Finding(VALIDATION_IN_TRAINING, evidence, tag=VAL_LOSS)
    val = [(step, value) for step, value, _ in run.val_curve if math.isfinite(value)]
    spike, calm = _spike(val)
    rose = _rose(run, val)
    shift = None if rose else _shift(run, val)
    improving = _improving(run, calm, len(val))
    # A stall only on a flattened curve (fewer points than a slope is tested on cannot show that), and not
    # after a rise: that is the cause.
    tested = len(val) >= IMPROVING_POINTS
    stall = _stall(run, reference) if improving is None and rose is None and tested else None
    # One token of context has no spread and no key to choose: its health curves say nothing.
    one_token = (run.model or {}).get("block_size") == 1
    health = [] if one_token else [check(run) for check in (_collapse, _starved, _saturated, _dead_units)]
    # A shift's validation slope is another text's, not the run's learning: never `still improving` on it.
    found = [data, shift, rose, spike, stall, *health, None if rose or shift else improving]
    return [finding for finding in found if finding is not None]


def _spike(val: Series) -> tuple[Finding | None, Series]:
    """The highest loss spike of `val`, and `val` without it and its fall back (what a slope reads)."""
    spikes: list[_Spike] = []  # each rise above its lowest before + SPIKE_RISE that came back down
    low, index = math.inf, 0
    while index < len(val):
        if val[index][1] <= low + SPIKE_RISE:
            low, index = min(low, val[index][1]), index + 1
            continue
        end = next((i for i in range(index, len(val)) if val[i][1] <= low + SPIKE_RISE), len(val))
        peak, after = max(value for _, value in val[index:end]), val[min(end, len(val) - 1)][1]
        if end < len(val) or peak - after >= SPIKE_RETURN * (peak - low):
            spikes.append(_Spike(peak, low, index, end))
        index = end
    if not spikes:
        return None, val
    peak, low, index, end = max(spikes)
    (first, _), (last, _), (after_step, after) = val[index], val[end - 1], val[min(end, len(val) - 1)]
    peak_step = next(step for step, value in val[index:end] if value == peak)
    ended = f"and was back to {after:.2f} at step {after_step}: recovered"
    if end == len(val):
        ended = f"and came down to {after:.2f} by the end, still {after - low:.2f} above its lowest before: "
        ended += "not recovered"
    others = f"; {len(spikes) - 1} smaller spike(s) too" if len(spikes) > 1 else ""
    evidence = f"the validation loss rose from {low:.2f} (its lowest before) to a peak of {peak:.2f} "
    evidence += f"at step {peak_step}, more than {SPIKE_RISE:g} above it from step {first} to {last}, "
    evidence += ended + others
    back = next((i for i in range(end, len(val)) if val[i][1] <= low + DESTABILISED_RISE), len(val))
    settled = val[back - 1][0]  # the last reading before it was back within DESTABILISED_RISE
    calm = [point for point in val if not first <= point[0] <= settled]
    return Finding(LOSS_SPIKE, evidence, first, VAL_LOSS, last if end < len(val) else None), calm


def _rose(run: RunSummary, val: Series) -> Finding | None:
    """A validation loss ending more than DESTABILISED_RISE above its minimum: overfitting or destabilised."""
    if len(val) < 2:
        return None
    (low_step, low), (end_step, end) = min(val, key=itemgetter(1)), val[-1]
    if not end - low > DESTABILISED_RISE:
        return None
    rise, then, now = end - low, train_loss_near(run, low_step), train_loss_near(run, end_step)
    trained = then is not None and now is not None
    if trained and then - now >= OVERFITTING_TRAIN_DROP:
        evidence = f"the training loss fell {then:.3f} → {now:.3f} while the validation loss rose "
        evidence += f"{rise:.2f} from its minimum {low:.3f}: the train–val gap widened {low - then:.2f} → "
        evidence += f"{end - now:.2f}, too little data or regularisation for the steps"
        return Finding(OVERFITTING, evidence, low_step, VAL_LOSS)
    trend = f" (training loss {then:.3f} → {now:.3f})" if trained else ""
    evidence = f"the validation loss rose {rise:.2f} from its minimum {low:.3f}{trend}"
    return Finding(DESTABILISED, evidence, low_step, VAL_LOSS)


def _shift(run: RunSummary, val: Series) -> Finding | None:
    """A distribution shift: from its first validation after SHIFT_FROM of the steps to its last (at least
    IMPROVING_POINTS of them), the validation loss more than SHIFT_GAP above the training loss and falling
    less than SHIFT_FOLLOW of the training loss's fall (at least OVERFITTING_TRAIN_DROP): what it learns of
    its training text does not carry over."""
    # Not in the first fall, where both curves drop fastest and a training median is read off-centre; and on
    # as many validations as a slope is tested on (fewer cannot show a flat curve).
    after = [point for point in val if point[0] >= SHIFT_FROM * (run.max_steps or val[-1][0])]
    if len(after) < IMPROVING_POINTS:
        return None
    (first_step, first), (end_step, end) = after[0], after[-1]
    then, now = train_loss_near(run, first_step), train_loss_near(run, end_step)
    if then is None or now is None:
        return None
    gap, fell = first - then, then - now
    if not (gap > SHIFT_GAP and fell >= OVERFITTING_TRAIN_DROP and first - end < SHIFT_FOLLOW * fell):
        return None
    evidence = f"the validation loss was {gap:.2f} above the training loss at step {first_step} (above "
    evidence += f"{SHIFT_GAP:g}) and did not follow it down: training {then:.3f} → {now:.3f}, validation "
    evidence += f"{first:.3f} → {end:.3f}, the gap {gap:.2f} → {end - now:.2f}: what it learns of its "
    evidence += "training text does not carry over to its validation text, another distribution. Not "
    evidence += "overfitting: its "
    evidence += f"validation loss did not rise more than {DESTABILISED_RISE:g} from its minimum"
    return Finding(DISTRIBUTION_SHIFT, evidence, first_step, VAL_LOSS)


def train_loss_near(run: RunSummary, step: int) -> float | None:
    """The median training loss over TRAIN_WINDOW of the steps around `step`, else the nearest one logged."""
    curve = [(s, v) for s, v in run.train_curve if math.isfinite(v)]
    if not curve:
        return None
    half = TRAIN_WINDOW * (run.max_steps or curve[-1][0]) / 2
    near = [v for s, v in curve if abs(s - step) <= half]
    if near:
        return statistics.median(near)
    _, _, nearest = min((abs(s - step), index, v) for index, (s, v) in enumerate(curve))  # the first nearest
    return nearest


def _stall(run: RunSummary, reference: Mapping[str, float] | None) -> Finding | None:
    """Ignores context (at or above the unigram level) or stalled at the bigram level, from the final loss."""
    final = run.final_val_loss
    if not reference or final is None or not math.isfinite(final):
        return None
    unigram, bigram = reference["unigram"], reference["bigram"]
    if final >= unigram - STALL_MARGIN:
        kind, level = IGNORES_CONTEXT, unigram
        where = "is" if final <= unigram + STALL_MARGIN else "is above"
        what = f"{where} the unigram level {unigram:.3f}: it learned at most the characters' "
        what += "frequencies, nothing of their context"
    elif abs(final - bigram) <= STALL_MARGIN:
        kind, level = BIGRAM_STALL, bigram
        what = f"is the bigram level {bigram:.3f}: it predicts from the last character alone"
    else:
        return None

    def at_level(value: float) -> bool:
        return value <= level + STALL_MARGIN

    step = since([(step, value) for step, value, _ in run.val_curve], at_level)
    return Finding(kind, f"its final loss {final:.3f} {what}", step, VAL_LOSS)


def _collapse(run: RunSummary) -> Finding | None:
    def collapsed(spread: float) -> bool:
        return spread < COLLAPSED_SPREAD

    deepest = _deepest(run, "token_spread")
    found = next(_episodes([deepest] if deepest else [], collapsed), None)
    if found is None:
        return None
    curve, (start, until), inside = found
    after = "" if until is None else f", then recovered to {_recovered_to(curve.series, until):.2g}"
    breaks = [f"{value:.2g} at step {step}" for step, value in inside if not collapsed(value)]
    if breaks:  # named, so that a reader of the curve sees why they are not a recovery
        readings = f"{len(breaks)} reading{'' if len(breaks) == 1 else 's'} ({', '.join(breaks)})"
        after += f"; back above {COLLAPSED_SPREAD:g} at {readings}, never {RECOVERY_READINGS} in a row: "
        after += "not a recovery"
    earlier = episode([(s, v) for s, v in curve.series if s < start], collapsed) if until is None else None
    if earlier is not None and earlier[1] is not None:  # a collapse to the end that had recovered before
        after += f"; it had collapsed before, from step {earlier[0]} to {earlier[1]}, and recovered to "
        after += f"{_recovered_to(curve.series, earlier[1]):.2g} in between"
    evidence = f"the last block's token spread fell to {min(v for _, v in inside):.1e}{_span(start, until)} "
    evidence += f"(below {COLLAPSED_SPREAD:g}; about 1 for independent tokens){after}"
    return Finding(COLLAPSED, evidence, start, curve.tag, until)


def _dead_units(run: RunSummary) -> Finding | None:
    """The block with the most FFN units dead above DEAD_FRACTION in an episode (one to the end first)."""

    def mostly_dead(fraction: float) -> bool:
        return fraction > DEAD_FRACTION

    def named_first(found: Episode) -> tuple[bool, float, int, str]:
        """One lasting to the end first, then the most units dead, then the earliest."""
        curve, (start, until), inside = found
        return until is None, max(v for _, v in inside), -start, curve.tag

    found = list(_episodes(_by_block(run, "dead_units").values(), mostly_dead))
    if not found:
        return None
    curve, (start, until), inside = max(found, key=named_first)
    worst = max(v for _, v in inside)
    after = "" if until is None else f", then {_recovered_to(curve.series, until):.0%}"
    evidence = f"up to {worst:.0%} of block {curve.block}'s FFN units never fired on the fixed batch"
    evidence += f"{_span(start, until)} (above {DEAD_FRACTION:.0%}; healthy runs under 1%){after}: width the "
    evidence += "run pays for and does not use"
    return Finding(DEAD_UNITS, evidence, start, curve.tag, until)


def _starved(run: RunSummary) -> Finding | None:
    def q_k_starved(ratio: float) -> bool:
        return ratio < STARVED_RATIO

    grads = [_deepest(run, f"grad_{name}") for name in ("w_q", "w_k", "w_v", "w_o")]
    if None in grads:
        return None
    q, k, v, o = (dict(curve.series) for curve in grads)
    steps = sorted(set(q) & set(k) & set(v) & set(o))
    ratios = [(s, max(q[s], k[s]) / max(v[s], o[s])) for s in steps if min(v[s], o[s]) > 0]
    found = episode(ratios, q_k_starved)
    if found is None:
        return None
    step, until = found
    last = steps[-1] if until is None else until
    evidence = f"the last block's W_q gradient norm is {q[last]:.1e} against W_v's {v[last]:.1e}"
    evidence += f"{_span(step, until)} (below {STARVED_RATIO:g}×): its attention cannot learn where to look"
    return Finding(STARVED, evidence, step, grads[0].tag, until)


class _Saturation(NamedTuple):
    """A block's saturated episode: its curve, its span, its last low entropy and its largest logit."""

    curve: HealthCurve
    step: int
    until: int | None
    entropy: float
    logit: float

    def named_first(self) -> tuple[bool, int, int]:
        """One lasting to the end first, then the earliest, then the shallowest block."""
        return self.until is not None, self.step, self.curve.block


def _saturated(run: RunSummary) -> Finding | None:
    """The block whose attention saturated first (low entropy, high logits) in an episode."""

    def low_entropy(entropy: float) -> bool:
        return entropy < SATURATED_ENTROPY

    logit_curves = _by_block(run, "attn_max_logit")
    logits = {block: dict(curve.series) for block, curve in logit_curves.items()}
    joint = [  # each block's entropy where its largest logit was read too, under the logit's tag
        HealthCurve(logit_curves[c.block].tag, c.block, [(s, v) for s, v in c.series if s in logits[c.block]])
        for c in _by_block(run, "attn_entropy").values()
        if c.block in logits
    ]
    found = []
    for curve, (step, until), inside in _episodes(joint, low_entropy):
        logit = max(logits[curve.block][s] for s, _ in inside)
        if logit > SATURATED_LOGIT:
            held = [v for _, v in inside if low_entropy(v)]  # not a brief break's reading
            found.append(_Saturation(curve, step, until, held[-1], logit))
    if not found:
        return None
    first = min(found, key=_Saturation.named_first)
    # What the two curves show and no more: a real saturated run's W_q gradient did not vanish (issue 64).
    evidence = f"block {first.curve.block}'s mean attention entropy is {first.entropy:.3f} nats with logits "
    evidence += f"up to {first.logit:.0f}{_span(first.step, first.until)} (below {SATURATED_ENTROPY:g} nats, "
    evidence += f"above {SATURATED_LOGIT:g}): its queries put nearly all their weight on one key"
    return Finding(SATURATED, evidence, first.step, first.curve.tag, first.until)


def _improving(run: RunSummary, calm: Series, validations: int) -> Finding | None:
    """Still improving: a fall its noise does not explain, its least-squares slope over its last
    IMPROVING_SPAN of the steps (at least its last IMPROVING_POINTS values) below 0 at one-sided p <=
    IMPROVING_ALPHA, and steeper than IMPROVING_DROP per IMPROVING_TAIL of the steps at the end. The
    validation curve's, a spike's fall back left out (`calm`); with under IMPROVING_POINTS validations the
    training curve's (can't tell is not flat)."""
    if validations >= IMPROVING_POINTS:
        curve, loss, tag = calm, "validation", VAL_LOSS
    elif len(calm) == validations:  # none of them a spike's: the training curve shows no fall back to skip
        curve = [(step, value) for step, value in run.train_curve if math.isfinite(value)]
        loss, tag = "training", TRAIN_LOSS
    else:
        return None
    if not run.max_steps or len(curve) < IMPROVING_POINTS:
        return None
    last = [point for point in curve if point[0] >= curve[-1][0] - IMPROVING_SPAN * run.max_steps]
    last = last if len(last) >= IMPROVING_POINTS else curve[-IMPROVING_POINTS:]
    fit = linregress([step for step, _ in last], [value for _, value in last])
    p_value = fit.pvalue / 2 if fit.slope < 0 else 1.0  # one-sided: a fall
    if not p_value <= IMPROVING_ALPHA:
        return None
    tail = IMPROVING_TAIL * run.max_steps
    # A validation's drop: the end's own, from the last validation a tail before (a slope lags a flattening).
    if tag == VAL_LOSS:
        (end_step, end), earlier = curve[-1], curve[:-1]
        start_step, start = ([point for point in earlier if point[0] <= end_step - tail] or earlier)[-1]
        drop = (start - end) * tail / (end_step - start_step)
        how = f"at the end (the slope of its last {len(last)} validations: p = {p_value:.2g})"
    else:  # one batch's loss a value: only a slope measures it
        drop = -fit.slope * tail
        how = f"over its last {len(last)} logged values ({last[0][1]:.2f} at step {last[0][0]} → "
        how += f"{last[-1][1]:.2f} at step {last[-1][0]}; slope p = {p_value:.2g}), read from the training "
        counted = {0: "no validation point", 1: "one validation point"}.get(validations)
        how += f"curve: it has {counted or f'{validations} validation points, too few to test'}"
    if drop <= IMPROVING_DROP:
        return None
    what = f"its {loss} loss was still falling {drop:.3f} per {IMPROVING_TAIL:.0%} of its steps {how}"
    return Finding(STILL_IMPROVING, f"{what}: {STILL_LEARNING}", None, tag)


def episode(series: Series, holds: Callable[[float], bool]) -> tuple[int, int | None] | None:
    """Where `holds` in `series`: (first step, None) for the episode lasting to the end, else the longest that
    ended (first and last step), else None. It ends where `holds` fails RECOVERY_READINGS times in a row."""
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
    first, end = max(named, key=_longest_then_earliest)
    return series[first][0], series[end][0]


def _longest_then_earliest(span: tuple[int, int]) -> tuple[int, int]:
    first, end = span
    return end - first, -first


def _episodes(curves: Iterable[HealthCurve], holds: Callable[[float], bool]) -> Iterator[Episode]:
    for curve in curves:
        found = episode(curve.series, holds)
        if found is not None:
            end = math.inf if found[1] is None else found[1]
            yield curve, found, [(step, value) for step, value in curve.series if found[0] <= step <= end]


def _recovered_to(series: Series, until: int) -> float:
    return next(value for step, value in series if step > until)


def _span(start: int, until: int | None) -> str:
    return "" if until is None else f" at steps {start}–{until}"


def since(series: Series, holds: Callable[[float], bool]) -> int | None:
    """The first step from which `holds` is true of every later value of `series`; None if not at the end."""
    start = None
    for step, value in series:
        start = (step if start is None else start) if holds(value) else None
    return start


def _by_block(run: RunSummary, quantity: str) -> dict[int, HealthCurve]:
    prefix = f"{HEALTH_PREFIX}{quantity}/block_"
    tags = [tag for tag, series in run.health.items() if tag.startswith(prefix) and series]
    curves = [HealthCurve(tag, int(tag.removeprefix(prefix)), run.health[tag]) for tag in tags]
    return {curve.block: curve for curve in curves}


def _deepest(run: RunSummary, quantity: str) -> HealthCurve | None:
    return max(_by_block(run, quantity).values(), key=attrgetter("block"), default=None)
