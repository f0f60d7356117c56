"""The statistics tune decides with (:mod:`ortlab.runs.tune_recommend` applies them): a measure's 95% interval over
samples, the paired difference of two models on the same samples, McNemar's exact test on what they get differently,
the family level that many comparisons are read at, and the sample counts that would settle a question. Pure
functions over :class:`~ortlab.checks.sample_evidence.SampleEvidence`; the intervals and the test are checked in the
tests against computations written independently."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from ortlab.checks.uncertainty import Z95, wilson
from ortlab.checks.sample_evidence import SampleEvidence

__all__ = [
    "ALPHA", "BOOTSTRAP_ROUNDS", "MAX_SETTLE", "NOT_WORSE_MARGIN", "SEED", "Interval", "discordant",
    "discordant_bounds", "error_difference", "error_units", "family_level", "interval", "mcnemar_between", "mcnemar_p",
    "paired_difference", "settle_discordant", "settle_samples", "units_of", "z_of",
]

NOT_WORSE_MARGIN = 0.01  # a candidate within this of the default's measure (e.g. 0.01 F1) is not worse
ALPHA = 0.05
BOOTSTRAP_ROUNDS = 2000
SEED = 20261203
MAX_SETTLE = 1_000_000


@dataclass(frozen=True)
class Interval:
    """A figure and its interval (95%, or the level of a family of comparisons)."""

    value: float
    low: float
    high: float

    def text(self, signed: bool = False) -> str:
        f = "{:+.3f}" if signed else "{:.3f}"
        return f"{f.format(self.value)} ({f.format(self.low)} to {f.format(self.high)})" if signed else \
            f"{f.format(self.value)} ({f.format(self.low)}–{f.format(self.high)})"


def resamples(n: int, rounds: int, seed: int) -> Any:
    """``rounds`` × ``n`` positions drawn with replacement (the same for every model compared: paired)."""
    return np.random.default_rng(seed).integers(0, n, size=(rounds, n)) if n else np.zeros((0, 0), dtype=int)


def ratios(hits: Sequence[float], totals: Sequence[float], ids: Sequence[int], draws: Any) -> Any:
    """Each resample's Σ hits / Σ totals over the samples ``ids`` (NaN where a resample holds no unit)."""
    h = np.asarray(hits, dtype=np.float64)[list(ids)][draws].sum(axis=1)
    t = np.asarray(totals, dtype=np.float64)[list(ids)][draws].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(t > 0, h / np.where(t > 0, t, 1.0), np.nan)


def family_level(k: int) -> float:
    """The confidence each of ``k`` comparisons with the default is read at: 1 − :data:`ALPHA` / k (Bonferroni),
    0.95 for one."""
    return 1.0 - ALPHA / max(1, k)


def z_of(level: float) -> float:
    """The two-sided normal quantile of ``level`` (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def percentiles(values: Any, level: float = 1.0 - ALPHA) -> tuple[float, float] | None:
    """The central ``level`` range of the finite ``values`` (None when there are none)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    tail = (1.0 - level) / 2
    return float(np.quantile(v, tail)), float(np.quantile(v, 1.0 - tail))


def interval(ev: SampleEvidence, idx: Sequence[int] | None = None, rounds: int = BOOTSTRAP_ROUNDS,
             seed: int = SEED) -> Interval | None:
    """The measure of ``ev`` over the samples ``idx`` (all when None) with its 95% interval: the union of Wilson's
    interval over the units (Σ totals / per_unit: detections, samples) and the percentile bootstrap over samples.
    None when the samples hold no unit."""
    ids = list(range(len(ev))) if idx is None else list(idx)
    value = ev.value(ids)
    if value is None or not ids:
        return None
    units = sum(ev.totals[i] for i in ids) / ev.per_unit
    lo, hi = wilson(value * units, units)
    boots = percentiles(ratios(ev.hits, ev.totals, ids, resamples(len(ids), rounds, seed)))
    if boots is not None:
        lo, hi = min(lo, boots[0]), max(hi, boots[1])
    return Interval(value, max(0.0, min(lo, value)), min(1.0, max(hi, value)))


def paired_difference(cand: SampleEvidence, base: SampleEvidence, idx: Sequence[int] | None = None,
                      rounds: int = BOOTSTRAP_ROUNDS, seed: int = SEED, floor: bool = True,
                      level: float = 1.0 - ALPHA) -> Interval | None:
    """measure(cand) − measure(base) on the same samples ``idx`` with its paired-bootstrap interval at ``level``
    (95%; each resample draws samples and takes both models' results of them), for pass/fail measures widened to the
    Wilson bounds of the discordant samples unless ``floor`` is off. None when the two were not measured on the same
    number of samples or the samples hold no unit."""
    if len(cand) != len(base):
        return None
    ids = list(range(len(cand))) if idx is None else list(idx)
    a, b = cand.value(ids), base.value(ids)
    if a is None or b is None:
        return None
    draws = resamples(len(ids), rounds, seed)
    got = percentiles(ratios(cand.hits, cand.totals, ids, draws) - ratios(base.hits, base.totals, ids, draws), level)
    lo, hi = got if got is not None else (-1.0, 1.0)
    if cand.binary and base.binary and floor:
        f_lo, f_hi = discordant_bounds(*discordant(cand, base, ids), units_of(base, ids), len(ids), z_of(level))
        lo, hi = min(lo, f_lo), max(hi, f_hi)
    return Interval(a - b, min(lo, a - b), max(hi, a - b))


def error_difference(cand: SampleEvidence, base: SampleEvidence, idx: Sequence[int] | None = None,
                     rounds: int = BOOTSTRAP_ROUNDS, seed: int = SEED, level: float = 1.0 - ALPHA) -> Interval | None:
    """The continuous error's mean (Σ errors / Σ counts) of ``cand`` minus ``base``'s on the same samples ``idx``,
    with its paired-bootstrap interval at ``level`` (95%); None when either has no continuous error, they differ in
    length, or the samples hold no counted value."""
    if not cand.errors or not base.errors or len(cand.errors) != len(base.errors) or len(cand) != len(base):
        return None
    ids = list(range(len(cand))) if idx is None else list(idx)
    a_n = sum(cand.error_counts[i] for i in ids)
    b_n = sum(base.error_counts[i] for i in ids)
    if a_n <= 0 or b_n <= 0:
        return None
    value = sum(cand.errors[i] for i in ids) / a_n - sum(base.errors[i] for i in ids) / b_n
    draws = resamples(len(ids), rounds, seed)
    got = percentiles(ratios(cand.errors, cand.error_counts, ids, draws)
                       - ratios(base.errors, base.error_counts, ids, draws), level)
    lo, hi = got if got is not None else (-math.inf, math.inf)
    return Interval(value, min(lo, value), max(hi, value))


def units_of(ev: SampleEvidence, ids: Sequence[int]) -> float:
    """The counted units among the samples ``ids`` (confident samples, strings …)."""
    return sum(ev.units[i] for i in ids) if ev.units else float(len(ids))


def discordant_bounds(better: int, worse: int, units: float, n: int, z: float = Z95) -> tuple[float, float]:
    """A floor under a pass/fail difference's interval: the difference is (better − worse) / n, and each count's
    share of the ``units`` (the samples that can change: confident ones, strings) has its Wilson interval, so the
    difference lies within (low(better) − high(worse), high(better) − low(worse)) × units / n. Two models that
    agree on every one of a few samples are not shown equal: the bootstrap alone says (0, 0) there, while 0 of 14
    confident samples bounds a share only below 0.21."""
    if n <= 0 or units <= 0:
        return -1.0, 1.0
    b_lo, b_hi = wilson(better, units, z)
    w_lo, w_hi = wilson(worse, units, z)
    scale = units / n
    return (b_lo - w_hi) * scale, (b_hi - w_lo) * scale


def mcnemar_p(b: int, c: int) -> float:
    """McNemar's exact two-sided test: the discordant samples ``b`` (the first passes, the second fails) and ``c``
    (the reverse) under H0 split half and half; p = 2·P(Binomial(b+c, ½) ≤ min(b, c)), at most 1."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2.0 * tail)


def discordant(cand: SampleEvidence, base: SampleEvidence, idx: Sequence[int]) -> tuple[int, int]:
    better = sum(1 for i in idx if cand.hits[i] > base.hits[i])
    worse = sum(1 for i in idx if cand.hits[i] < base.hits[i])
    return better, worse


def error_units(cand: SampleEvidence, base: SampleEvidence, idx: Sequence[int]) -> tuple[int, int]:
    """The units of error (``totals − hits``: a detector's missed and false detections) the candidate makes fewer
    and more of than the base, summed over the samples ``idx`` where the two differ: McNemar's discordant pairs for
    a measure that counts several units a sample. A few detections won with none lost make the percentile bootstrap
    all positive; the exact test on those few says how little they show. Where the evidence counts samples, not
    units within them (a dense map's elements: thousands a sample, and not independent), the samples the candidate
    errs less and more on are counted instead (a sign test)."""
    by_sample = not cand.units and not base.units
    fewer = more = 0.0
    for i in idx:
        d = (base.totals[i] - base.hits[i]) - (cand.totals[i] - cand.hits[i])
        if by_sample:
            d = float(d > 0) - float(d < 0)
        fewer, more = fewer + max(0.0, d), more + max(0.0, -d)
    return round(fewer), round(more)


def mcnemar_between(cand: SampleEvidence, base: SampleEvidence, idx: Sequence[int]) -> float:
    """McNemar's exact p on what ``cand`` and ``base`` get differently over the samples ``idx``: the discordant
    samples of a pass/fail measure (:func:`discordant`), the units of error of one that counts several a sample
    (:func:`error_units`)."""
    pairs = discordant if cand.binary and base.binary else error_units
    return mcnemar_p(*pairs(cand, base, idx))


def settle_samples(diff: Interval, n: int, margin: float = NOT_WORSE_MARGIN) -> int | None:
    """About how many samples would show "not worse" (the interval's low end above −``margin``) if the difference
    stayed ``diff.value`` and the interval shrank as 1/√n; None when the difference itself is at or below −margin
    (no count would) or past :data:`MAX_SETTLE`."""
    room = diff.value + margin
    half = diff.value - diff.low
    if room <= 0 or half <= 0 or n <= 0:
        return None
    need = math.ceil(n * (half / room) ** 2)
    return need if need <= MAX_SETTLE else None


def settle_discordant(better: int, worse: int, units: float, n: int, margin: float, z: float = Z95) -> int | None:
    """About how many samples would show a pass/fail difference "not worse" if the discordant shares stayed as
    they are: the smallest sample count whose :func:`discordant_bounds` lie above −``margin`` (None: none up to
    :data:`MAX_SETTLE`). Near zero discordant samples a Wilson bound shrinks as 1/n, not 1/√n."""
    if n <= 0 or units <= 0 or (worse - better) / n >= margin:
        return None
    per_sample = units / n
    m = float(n)
    while m <= MAX_SETTLE:
        low, _ = discordant_bounds(round(better * m / n), round(worse * m / n), per_sample * m, round(m), z)
        if low > -margin:
            return math.ceil(m)
        m *= 1.1
    return None
