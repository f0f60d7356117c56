"""Between the search and the recommender: a trial's evidence and interval on the samples the search chooses on,
the trials as the recommender's :class:`ortlab.runs.tune_recommend.Candidate` records, and the pick's claim on the
samples it was not chosen on (:mod:`ortlab.runs.tune_recommend` decides; this module only translates)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ortlab.checks.uncertainty import about
from ortlab.runs.tune_evidence import SampleEvidence
from ortlab.runs.tune_policy import Trial
from ortlab.runs.tune_recommend import (
    Candidate, Recommendation, Timing, bar_word, by_error, interval, measure_on_choosing_part, paired_difference,
    recommend, settle_bar,
)
from ortlab.runs.tune_split import MIN_SPLIT_SAMPLES, split
from ortlab.runs.tune_stats import ALPHA, mcnemar_between

__all__ = ["Claim", "candidate_of", "choosing_measure", "choosing_part", "claim_of", "decide", "step_gain"]


def choosing_measure(t: Trial, ev: SampleEvidence | None) -> Trial:
    """``t`` with its task measure on the samples the search chooses on (:func:`split`), with its 95% interval and
    the evidence it rests on; the whole-set measure stays when there is no per-sample record."""
    if ev is None or not len(ev):
        return t
    got = measure_on_choosing_part(ev)
    if got.value is None:
        return replace(t, evidence=got.evidence)
    return replace(t, task_measure=got.measure, task_value=got.value, task_low=got.low, task_high=got.high,
                   evidence=got.evidence)


def choosing_part(ev: SampleEvidence | None) -> tuple[int, tuple[int, ...]] | None:
    """How many samples ``ev`` (the default's record) holds and which of them the search chooses on (:func:`split`);
    None without a record, or when too few to hold any out."""
    if ev is None or not len(ev):
        return None
    choose, confirm = split(len(ev), ev.units)
    return (len(ev), choose) if confirm else None


def candidate_of(t: Trial, ev: SampleEvidence | None, usable: bool) -> Candidate:
    timing = None
    if t.speed:
        sp = t.speed[0]
        lo, hi = sp.speedup_range
        timing = Timing(sp.speedup, lo, hi, t.size_bytes)
    elif t.size_bytes:
        timing = Timing(1.0, 1.0, 1.0, t.size_bytes)
    value = ev.value() if ev is not None else t.task_value
    return Candidate(t.index, t.label, t.accepted, usable, ev, value, timing)


@dataclass(frozen=True)
class Claim:
    """The pick's measure on the held-out samples: value, interval, what it rests on, its word against ``bar``."""

    value: float
    low: float
    high: float
    evidence: str
    word: str
    bar: float | None
    settle: int | None = None  # on the edge: about how many evaluation samples would settle it
    chosen_on: str = ""  # "chosen on 200 samples, confirmed on 100 held out"

    def text(self) -> str:
        more = f"; about {about(self.settle)} evaluation samples would settle it" if self.settle else ""
        return f"{self.word}{more}"


def claim_of(pick: Trial, bar: float | None, ev: SampleEvidence | None) -> Claim | None:
    """The pick's measure on the samples it was not chosen on (the held-out part of :func:`split`; all samples when
    too few to hold any out), with its interval, worded against ``bar`` (:func:`bar_word`); a verdict "on the edge"
    (its own interval over all samples reaches across one of its bars) is never worded "ok". None without a
    per-sample record."""
    if ev is None or not len(ev):
        return None
    choose, confirm = split(len(ev), ev.units)
    got = interval(ev, confirm or None)
    if got is None:
        return None
    part = ev.subset(confirm) if confirm else ev
    word = bar_word(got, bar)
    if word == "ok" and pick.edge:
        word = "on the edge"
    settle = None
    if word == "on the edge" and bar is not None and got.low < bar <= got.high:
        settle = settle_bar(got, bar, len(part), len(ev))
    chosen_on = (f"chosen on {len(choose)} samples, confirmed on {len(confirm)} held out" if confirm else
                 f"fewer than {MIN_SPLIT_SAMPLES} samples: none held out")
    return Claim(got.value, got.low, got.high, part.text(), word, bar, settle, chosen_on)


def decide(done: Sequence[Trial], evidence: Mapping[int, SampleEvidence | None], usable: Callable[[Trial], bool],
           objective: str) -> tuple[Recommendation, list[Trial]] | None:
    """The recommender's pick over the finished trials ``done`` against trial 1 (the default), with ``done`` each
    given its comparison with the default (``vs_default``); None when trial 1 did not finish with a per-sample
    record (the search then ranks as before)."""
    default = next((t for t in done if t.index == 1), None)
    first = evidence.get(1)
    if default is None or first is None:
        return None
    cands = [candidate_of(t, evidence.get(t.index), usable(t)) for t in done]
    base = next(c for c in cands if c.index == 1)
    rec = recommend(base, cands, objective, len(first), first.units)
    measure = first.measure
    said = {comp.index: comp.reason(measure) for comp in rec.comparisons}
    said[1] = "the default: the baseline every candidate is compared with"
    why = ("not compared: broken, or slower than the fp32 source" if base.usable else
           "not compared: the default (trial 1) is broken or ran slower than the fp32 source")
    return rec, [replace(t, vs_default=said.get(t.index) or t.vs_default or why) for t in done]


def step_gain(step: SampleEvidence | None, current: SampleEvidence | None) -> tuple[bool, str] | None:
    """Whether a greedy step (one more node in float, 16-bit weights…) is kept, on the same samples as the trial it
    would replace: only when it is clearly more accurate (the paired difference's 95% interval above 0 on the samples
    the search chooses on, and McNemar's exact test on what the two get differently below 0.05), or not worse there
    with a continuous error clearly lower (the recommender's rule, :func:`ortlab.runs.tune_recommend.by_error`), so
    the search does not follow noise; and why. None without per-sample records."""
    if step is None or current is None or len(step) != len(current) or not len(step):
        return None
    choose, confirm = split(len(step), current.units)
    ids = list(choose) if confirm else list(range(len(step)))
    diff = paired_difference(step, current, ids)
    if diff is None:
        return None
    p = mcnemar_between(step, current, ids)
    text = f"{step.measure} {diff.text(signed=True)} on the same samples, McNemar p={p:.3f}"
    if diff.low > 0 and p < ALPHA:
        return True, f"kept ({text})"
    _, _, lower, err = by_error(step, current, ids, diff)
    if lower and err is not None:
        return True, f"kept (not worse, {step.error_measure} {err.text(signed=True)}; {text})"
    said = f"; {step.error_measure} {err.text(signed=True)}" if err is not None else ""
    return False, f"dropped, not shown better ({text}{said})"
