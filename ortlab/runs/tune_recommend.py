"""Tune's recommendation, decided on evidence: pure functions over frozen records (no search state, no I/O).

* **The baseline is the default.** Trial 1 of a search is ortlab's own default recipe. A candidate is preferred
  over it only when the paired difference of the task measure on the same samples (:func:`paired_difference`: a
  bootstrap over samples, each resample taking both models' results of the same samples) shows it is **not worse**
  (the interval's low end above −:data:`NOT_WORSE_MARGIN`) and it is **faster** by more than the timing interval
  (its speed-up's whole 95% interval above the default's), or **clearly more accurate** (the difference's interval
  above 0, and McNemar's exact test below 0.05 on what the two get differently (:func:`mcnemar_between`: the
  discordant samples of a pass/fail measure, the units of error of one that counts several a sample); or, where
  the task has a continuous error per sample, not worse and that error's paired difference wholly below 0
  (:func:`by_error`): a detector's near-threshold score-logit error separates two candidates on 200 photos where an
  F1 gain of 0.01 over 150 detections sits inside its interval, a classifier's top-1 margin error where no flip
  differs). So a model both less accurate and slower than the default is never recommended.
* **Many candidates, one pick** (:func:`family_level`): each of the k candidates compared with the default is read at
  the 1 − 0.05/k level (Bonferroni), so the chance that any of them is shown better or no worse by noise alone stays
  within 5%: picking the best of many noisy differences is how a search ends up "better" on the data it chose on
  and not on photos it never saw.
* **Chosen on one part, confirmed on another** (:func:`split`): the search ranks and decides on the choosing
  samples; the pick's measure is stated from the held-out ones, so the best of many noisy scores does not inflate
  the claim. The parts are sized by evidence (detections, confident samples), not by samples: where the data holds
  2 × :data:`~ortlab.runs.tune_split.CLAIM_UNITS` units, each part holds at least that many.
* **Every claim with its interval** (:func:`interval`): the wider of Wilson's score interval over the evidence's
  units and a percentile bootstrap over samples (the units of one sample are not independent); "ok" only when the
  interval clears the bar (:func:`bar_word`), otherwise "on the edge".
* **When the data cannot settle it, say so with the count that would** (:func:`settle_samples`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ortlab.checks.uncertainty import about
from ortlab.runs.tune_evidence import SampleEvidence
from ortlab.runs.tune_split import MIN_SPLIT_SAMPLES, split
from ortlab.runs.tune_stats import (
    ALPHA, BOOTSTRAP_ROUNDS, MAX_SETTLE, NOT_WORSE_MARGIN, Interval, discordant, error_difference, family_level,
    interval, mcnemar_between, mcnemar_p, paired_difference, settle_discordant, settle_samples, units_of, z_of,
)

__all__ = [
    "BOOTSTRAP_ROUNDS",
    "NOT_WORSE_MARGIN",
    "Candidate",
    "Comparison",
    "Interval",
    "Recommendation",
    "Timing",
    "TrialMeasure",
    "bar_word",
    "compare",
    "error_difference",
    "family_level",
    "interval",
    "mcnemar_p",
    "measure_on_choosing_part",
    "paired_difference",
    "recommend",
    "settle_bar",
    "settle_samples",
    "split",
]


@dataclass(frozen=True)
class Timing:
    """A trial's speed-up over the fp32 source with its 95% interval (at the first batch size); ``size_bytes``
    for the size objective."""

    ratio: float
    low: float
    high: float
    size_bytes: int | None = None


@dataclass(frozen=True)
class Candidate:
    """What the recommender knows of one finished trial: its ``index`` and ``label``, whether the search's policy
    accepts it (``passes``: verdict ok and the search's bar) and whether it is usable at all (not broken, not
    slower than the source), its per-sample ``evidence`` (None: none recorded) with its whole-set ``value`` as a
    fallback, and its ``timing``."""

    index: int
    label: str
    passes: bool
    usable: bool
    evidence: SampleEvidence | None
    value: float | None
    timing: Timing | None


@dataclass(frozen=True)
class Comparison:
    """A candidate against the default on the same samples: the paired difference (candidate − default) with its
    interval, McNemar's p for pass/fail measures, and the findings; ``settle``: the evaluation samples that would
    settle "not worse" when the data cannot (None: settled, or no practical count)."""

    index: int
    difference: Interval | None
    p_value: float | None
    not_worse: bool
    more_accurate: bool
    faster: bool
    slower: bool
    settle: int | None = None
    objective: str = "latency"  # "size": faster/slower read smaller/larger
    error_change: Interval | None = None  # the continuous error's paired difference (candidate − default), if read
    error_measure: str = ""
    family: int = 1  # the candidates compared with the default in one decision: intervals at family_level(family)

    @property
    def preferred(self) -> bool:
        return self.not_worse and (self.faster or self.more_accurate)

    @property
    def worse_and_slower(self) -> bool:
        return self.slower and self.difference is not None and self.difference.high < 0

    def reason(self, measure: str) -> str:
        d = f"{measure} vs the default {self.difference.text(signed=True)}" if self.difference else \
            f"{measure} not recorded per sample"
        p = f", McNemar p={self.p_value:.3f}" if self.p_value is not None else ""
        gain = "smaller" if self.objective == "size" else "faster by more than the timing interval"
        e = (f"; {self.error_measure} vs the default {self.error_change.text(signed=True)}"
             if self.error_change is not None else "")
        family = (f"; {family_level(self.family):.1%} intervals, as {self.family} candidates were compared"
                  if self.family > 1 and self.difference is not None else "")
        e += family
        if self.preferred:
            why = "clearly more accurate" if self.more_accurate else f"not worse and {gain}"
            cost = ("; it is slower than the default (its speed-up's interval lies below the default's)"
                    if self.more_accurate and self.slower and self.objective != "size" else "")
            return f"{why} ({d}{p}{e}){cost}"
        if not self.not_worse:
            more = f"; about {about(self.settle)} evaluation samples would settle it" if self.settle else ""
            return f"not shown to be no worse ({d}{p}{family}){more}"
        return f"not worse but not {gain} ({d}{p}{e})"


@dataclass(frozen=True)
class Recommendation:
    """The pick (a trial index; None: no usable default, the caller decides), why, every comparison with the
    default, and the held-out claim: the pick's measure with its interval on the samples it was not chosen on
    (``confirm``), the evidence of those samples."""

    pick: int | None
    reason: str
    comparisons: tuple[Comparison, ...] = ()
    confirm: Interval | None = None
    confirm_evidence: str = ""
    chosen_on: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    claim_samples: int = 0  # the samples the claim is stated on (the held-out part, or all when none was held out)


def bar_word(claim: Interval | None, bar: float | None) -> str:
    """"ok" when the claim's whole interval clears the bar (or there is no bar), "on the edge" when the interval
    reaches across it, "below the bar" when it lies wholly under it; "" without a claim."""
    if claim is None:
        return ""
    if bar is None or claim.low >= bar:
        return "ok"
    return "on the edge" if claim.high >= bar else "below the bar"


# -- the decision ------------------------------------------------------------------------------------------------


def compare(cand: Candidate, default: Candidate, idx: Sequence[int] | None = None, objective: str = "latency",
            margin: float = NOT_WORSE_MARGIN, family: int = 1) -> Comparison:
    """``cand`` against ``default`` on the samples ``idx`` (see the module's rules), as one of ``family`` candidates
    compared with it (its intervals and McNemar's test at :func:`family_level`). Without per-sample evidence on
    both, the whole-set values decide "not worse" (never "clearly more accurate")."""
    level = family_level(family)
    diff, p, err, binary = None, None, None, False
    if cand.evidence is not None and default.evidence is not None:
        ids = list(range(len(cand.evidence))) if idx is None else list(idx)
        diff = paired_difference(cand.evidence, default.evidence, ids, level=level)
        binary = cand.evidence.binary and default.evidence.binary
        if diff is not None:
            p = mcnemar_between(cand.evidence, default.evidence, ids)
    if diff is not None:
        not_worse = diff.low > -margin
        more = diff.low > 0 and (p is None or p < 1.0 - level)
        if not more and cand.evidence is not None and default.evidence is not None:
            diff, not_worse, more, err = by_error(cand.evidence, default.evidence, ids, diff, margin, level)
        n = len(idx) if idx is not None else len(cand.evidence or ())
        settle = None if not_worse else settle_samples(diff, n, margin)
        if settle is not None and binary and cand.evidence is not None and default.evidence is not None:
            settle = settle_discordant(*discordant(cand.evidence, default.evidence, ids),
                                        units_of(default.evidence, ids), n, margin, z_of(level)) or settle
        if settle is not None and idx is not None and cand.evidence is not None:
            settle = math.ceil(settle * len(cand.evidence) / max(1, len(idx)))  # choosing part → all samples
    else:
        a, b = cand.value, default.value
        not_worse = a is None or b is None or a >= b - margin
        more, settle = False, None
    faster = slower = False
    ct, dt = cand.timing, default.timing
    if objective == "size" and ct is not None and dt is not None and ct.size_bytes and dt.size_bytes:
        faster, slower = ct.size_bytes < dt.size_bytes, ct.size_bytes > dt.size_bytes
    elif ct is not None and dt is not None:
        faster, slower = ct.low > dt.high, ct.high < dt.low
    measure = default.evidence.error_measure if err is not None and default.evidence is not None else ""
    return Comparison(cand.index, diff, p, not_worse, more, faster, slower, settle, objective, err, measure, family)


def by_error(cand: SampleEvidence, base: SampleEvidence, ids: Sequence[int], diff: Interval,
             margin: float = NOT_WORSE_MARGIN,
             level: float = 1.0 - ALPHA) -> tuple[Interval, bool, bool, Interval | None]:
    """(difference, not worse, clearly more accurate, the error's difference) read with the continuous error too
    (``diff``: the measure's paired difference on ``ids``, not worse when its low end lies above −``margin``):
    clearly more accurate when that error's paired interval lies wholly below 0, the measure is not worse, and the
    default errs by the measure on some of these samples (where it errs on none, a lower error buys nothing the
    data can show, and a slower model would be chosen for it). For a
    pass/fail measure "not worse" then reads the bootstrap over samples alone: the Wilson floor of the discordant
    samples guards a candidate that nothing but agreement on a few samples speaks for (0 of 186 confident samples
    bounds a flip rate only below 0.02, wider than the 0.01 margin however equal two models are), while here a lower
    error on the same samples is evidence about the flips too."""
    not_worse = diff.low > -margin
    err = error_difference(cand, base, ids, level=level)
    if err is None or err.high >= 0 or (base.value(ids) or 0.0) >= 1.0:
        return diff, not_worse, False, err
    if not not_worse and cand.binary and base.binary:
        boot = paired_difference(cand, base, ids, floor=False, level=level)
        if boot is not None and boot.low > -margin and boot.value >= 0:
            return boot, True, True, err
    return diff, not_worse, not_worse, err


def _accuracy(c: Candidate, idx: Sequence[int] | None) -> float:
    got = c.evidence.value(idx) if c.evidence is not None else c.value
    return got if got is not None else 0.0


def recommend(default: Candidate | None, candidates: Sequence[Candidate], objective: str = "latency",
              n_samples: int = 0, units: Sequence[float] = ()) -> Recommendation:
    """The pick among ``candidates`` (the default included or not) against ``default``: the fastest (smallest)
    candidate the policy passes and the evidence prefers over the default (:attr:`Comparison.preferred`); when the
    default does not pass either and none that is preferred passes, the most accurate preferred one (the closest,
    better than the default); else the default itself when it is usable. ``pick`` None when the default is missing
    or unusable (the caller falls back to its own ranking). ``n_samples``: the evaluation samples, ``units`` the
    evidence each holds (the reference's, alike for every candidate); the choosing part of :func:`split` decides, the
    held-out part states the pick's measure."""
    if default is None or not default.usable:
        return Recommendation(None, "the default trial did not finish usable: no baseline to compare with")
    choose, confirm = split(n_samples, units)
    others = [c for c in candidates if c.index != default.index and c.usable]
    comps = tuple(compare(c, default, choose if confirm else None, objective, family=len(others)) for c in others)
    by_index = {c.index: c for c in others}
    better = [by_index[x.index] for x in comps if x.preferred]
    preferred = [c for c in better if c.passes]
    if preferred:  # the fastest (smallest) of those the policy passes
        pick = min(preferred, key=lambda c: (-(c.timing.ratio if c.timing else 0.0), c.index) if objective == "latency"
                   else ((c.timing.size_bytes or 0) if c.timing else 0, c.index))
    elif better and not default.passes:  # nothing passes: the most accurate of those better than the default
        pick = max(better, key=lambda c: (_accuracy(c, choose if confirm else None),
                                          c.timing.ratio if c.timing else 0.0, -c.index))
    if preferred or (better and not default.passes):
        comp = next(x for x in comps if x.index == pick.index)
        measure = pick.evidence.measure if pick.evidence else "the task measure"
        reason = f"{pick.label} is preferred over the default: {comp.reason(measure)}"
    else:
        pick = default
        gain = "smaller" if objective == "size" else "faster by more than the timing interval"
        reason = (f"no candidate is shown better than the default on the same samples (not worse and {gain}, or "
                  "clearly more accurate): the default stays the pick")
        if not others:
            reason = "only the default finished usable"
    claim, evidence, chosen_on = None, "", ""
    if pick.evidence is not None:
        part = confirm if confirm else None
        claim = interval(pick.evidence, part)
        evidence = (pick.evidence.subset(confirm) if confirm else pick.evidence).text()
        chosen_on = f"chosen on {len(choose)} samples, confirmed on {len(confirm)} held out" if confirm else \
            f"fewer than {MIN_SPLIT_SAMPLES} samples: none held out"
    return Recommendation(pick.index, reason, comps, claim, evidence, chosen_on,
                          claim_samples=len(confirm) if confirm else len(choose))


def settle_bar(claim: Interval, bar: float, n: int, total: int) -> int | None:
    """About how many evaluation samples (of which the claim's part is ``n`` of ``total``) would bring the claim's
    interval clear of ``bar`` if the figure stayed and the interval shrank as 1/√n; None when the figure sits on
    the bar or no practical count would."""
    gap = abs(claim.value - bar)
    half = (claim.value - claim.low) if claim.value >= bar else (claim.high - claim.value)
    if gap <= 0 or half <= 0 or n <= 0:
        return None
    need = math.ceil(n * (half / gap) ** 2 * total / n)
    return need if need <= MAX_SETTLE else None


@dataclass(frozen=True)
class TrialMeasure:
    """``measure`` (e.g. "detection F1") = ``value`` with its 95% interval ``low``–``high`` (all None when the
    samples hold no unit), resting on ``evidence`` ("120 reference detections in 200 samples")."""

    measure: str
    value: float | None
    low: float | None
    high: float | None
    evidence: str


def measure_on_choosing_part(ev: SampleEvidence, whole: bool = False) -> TrialMeasure:
    """The measure of ``ev`` on the samples the search chooses on (:func:`split`; all of them when too few to
    split, or with ``whole``: a run no search chose), with its interval and evidence."""
    choose, confirm = (tuple(range(len(ev))), ()) if whole else split(len(ev), ev.units)
    got = interval(ev, choose if confirm else None)
    if got is None:
        return TrialMeasure(ev.measure, None, None, None, f"no {ev.unit} in {len(choose)} samples")
    return TrialMeasure(ev.measure, got.value, got.low, got.high, (ev.subset(choose) if confirm else ev).text())
