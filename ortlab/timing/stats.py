"""The one speed-up statistic: a candidate against a reference timed interleaved in rounds (both in every round,
:func:`ortlab.timing.child_runs.time_interleaved`), as the median of the paired per-round ratios (candidate ÷
reference latency, each round's figure its block's p50) with a bootstrap 95 % interval of that median, the run
counts and the ratios' interquartile range. A speed-up of older benchmarks timed apart is the ratio of the p50s
(:func:`apart`). Never a ratio of minimum latencies, which overstated speed-ups 1.7-2.8× on a shared machine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ortlab.timing.bench import LatencySummary

MIN_ROUNDS = 10  # fewer rounds than this: too few for an interval worth reporting (``noisy``)
NOISY_SPREAD = 0.2  # an interval wider than ±20 % of the ratio: ``noisy``
LEVEL = 0.95  # the interval's coverage
BOOTSTRAP = 1000  # resamples of the rounds


@dataclass
class SpeedUp:
    """Candidate against reference at one batch size. ``ratio``: the median of the per-round ratios candidate ÷
    reference (below 1: the candidate is faster); ``low``/``high``: its 95 % bootstrap interval; ``rounds``: the
    paired rounds, ``reference_runs``/``candidate_runs`` the timed runs of each side; ``iqr``: the interquartile
    range of the per-round ratios; ``reference_p50_ms``/``candidate_p50_ms``: each side's p50 over all its runs.
    ``paired`` is False for a speed-up of two series timed apart (older benchmarks: a ratio of p50s)."""

    batch_size: int
    ratio: float
    low: float
    high: float
    rounds: int
    reference_runs: int
    candidate_runs: int
    iqr: float
    reference_p50_ms: float
    candidate_p50_ms: float
    paired: bool = True

    @property
    def speedup(self) -> float:
        """Reference ÷ candidate (above 1: the candidate is faster)."""
        return _inverse(self.ratio)

    @property
    def speedup_range(self) -> tuple[float, float]:
        """(low, high) of the speed-up: the ratio's interval inverted."""
        return _inverse(self.high), _inverse(self.low)

    @property
    def noisy(self) -> bool:
        """Too few rounds (:data:`MIN_ROUNDS`), or an interval wider than ±:data:`NOISY_SPREAD` of the ratio."""
        if self.paired and self.rounds < MIN_ROUNDS:
            return True
        return (self.high - self.low) / 2 > NOISY_SPREAD * self.ratio

    @property
    def clear(self) -> bool:
        """True when the 95 % interval of a paired speed-up lies wholly above or wholly below 1."""
        lo, hi = self.speedup_range
        return self.paired and (lo > 1.0 or hi < 1.0)

    def caveat(self) -> str:
        """What a reader must know before trusting the figure: "noisy: the machine was busy", "no clear
        difference" (the interval contains 1), "timed apart: no interval" (not paired), else ""."""
        if not self.paired:
            return "timed apart: no interval"
        if self.noisy:
            return "noisy: the machine was busy"
        return "" if self.clear else "no clear difference"

    def text(self) -> str:
        """``1.84× (1.71–1.95×, 48 rounds)``, with `` noisy`` when :attr:`noisy`."""
        if self.paired and self.rounds < 2:
            return f"{self.speedup:.2f}× (1 round: no interval)"
        lo, hi = self.speedup_range
        count = f"{self.rounds} rounds" if self.paired else f"{self.reference_runs} and {self.candidate_runs} runs"
        return f"{self.speedup:.2f}× ({lo:.2f}–{hi:.2f}×, {count})" + (" noisy" if self.noisy else "")


def _inverse(x: float) -> float:
    return 1.0 / x if x > 0 else math.inf


def _median(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The median of positive ratios taken on their logarithms: for an even count the geometric mean of the middle
    two, so that the median of candidate ÷ reference is exactly 1 ÷ the median of reference ÷ candidate."""
    with np.errstate(divide="ignore"):
        return np.exp(np.median(np.log(values), axis=axis))


def paired(batch_size: int, reference_rounds: Sequence[float], candidate_rounds: Sequence[float], *,
           reference_runs: int | None = None, candidate_runs: int | None = None,
           reference_p50_ms: float | None = None, candidate_p50_ms: float | None = None, seed: int = 0) -> SpeedUp:
    """The :class:`SpeedUp` of paired rounds (``reference_rounds[i]`` and ``candidate_rounds[i]``: the two sides'
    latency in round i, ms). Runs default to one per round, the p50s to the rounds' medians."""
    r = np.asarray(reference_rounds, dtype=np.float64)
    c = np.asarray(candidate_rounds, dtype=np.float64)
    n = min(r.size, c.size)
    r, c = r[:n], c[:n]
    keep = (r > 0) & (c > 0) & np.isfinite(r) & np.isfinite(c)
    r, c = r[keep], c[keep]
    if not r.size:
        raise ValueError("no interleaved rounds to compare")
    ratios = c / r
    ratio = float(_median(ratios))
    rng = np.random.default_rng(seed)
    boots = _median(ratios[rng.integers(0, ratios.size, size=(BOOTSTRAP, ratios.size))], axis=1)
    tail = 100 * (1 - LEVEL) / 2
    low, high = (float(x) for x in np.percentile(boots, [tail, 100 - tail]))
    q25, q75 = np.percentile(ratios, [25, 75])
    return SpeedUp(int(batch_size), ratio, min(low, ratio), max(high, ratio), int(ratios.size),
                   int(reference_runs if reference_runs is not None else n),
                   int(candidate_runs if candidate_runs is not None else n), float(q75 - q25),
                   float(reference_p50_ms if reference_p50_ms is not None else np.median(r)),
                   float(candidate_p50_ms if candidate_p50_ms is not None else np.median(c)))


def apart(reference: LatencySummary, candidate: LatencySummary) -> SpeedUp | None:
    """Two series timed apart (benchmarks stored before interleaving): the ratio of the p50s, its interval from the
    p50s' own 95 % intervals (None-free only when both have one), no rounds. None without two positive p50s."""
    if not reference.p50 or not candidate.p50 or reference.p50 <= 0 or candidate.p50 <= 0:
        return None
    ratio = candidate.p50 / reference.p50
    low = high = ratio
    r_lo, r_hi, c_lo, c_hi = reference.p50_low, reference.p50_high, candidate.p50_low, candidate.p50_high
    if r_lo and r_hi and c_lo and c_hi:
        low, high = c_lo / r_hi, c_hi / r_lo
    return SpeedUp(int(candidate.batch_size), ratio, low, high, 0, reference.n, candidate.n, math.nan,
                   reference.p50, candidate.p50, paired=False)


def of_summaries(reference: LatencySummary, candidate: LatencySummary) -> SpeedUp | None:
    """``candidate`` against ``reference`` (same batch size): :func:`paired` on their rounds' p50s when they were
    timed interleaved in one loop (equal, non-empty ``round_p50s``), else :func:`apart`."""
    a, b = reference.round_p50s, candidate.round_p50s
    if a and len(a) == len(b) and reference.batch_size == candidate.batch_size:
        return paired(candidate.batch_size, a, b, reference_runs=reference.n, candidate_runs=candidate.n,
                      reference_p50_ms=reference.p50, candidate_p50_ms=candidate.p50)
    return apart(reference, candidate)


def times(x: float) -> str:
    """A speed-up as text: two decimals, or two significant digits below 0.1 (``0.012×``)."""
    return f"{x:.2f}×" if x >= 0.1 else f"{x:.2g}×"


@dataclass
class ResultSpeed:
    """A run's result timed against its source: ``speed`` (None when the timing failed: ``error`` says why) at
    ``batch_size``, the wall ``seconds`` the timing took and the ``machine`` it ran on
    (:meth:`ortlab.runtime.hardware.CpuFeatures.summary`)."""

    batch_size: int
    seconds: float
    machine: str
    speed: SpeedUp | None = None
    error: str = ""

    @property
    def slower(self) -> bool:
        """The whole 95 % interval of the speed-up lies below 1: the result is slower than its source."""
        return self.speed is not None and self.speed.paired and self.speed.speedup_range[1] < 1.0

    @property
    def faster(self) -> bool:
        """The whole 95 % interval of the speed-up lies above 1."""
        return self.speed is not None and self.speed.paired and self.speed.speedup_range[0] > 1.0

    def sentence(self) -> str:
        """``Speed: 1.90× faster than the source (95% 1.80–2.00×, 12 rounds, <machine>)``; ``Speed: slower than
        the source: 0.82× (…)``; ``Speed: no clear speed difference: 1.02× (…)``; or why it was not timed."""
        sp = self.speed
        if sp is None:
            return f"Speed: not timed ({self.error or 'no latencies'}); the verdict stands."
        lo, hi = sp.speedup_range
        how = (f"95% {times(lo)[:-1]}–{times(hi)}, {sp.rounds} rounds at batch {self.batch_size}, "
               f"{self.seconds:.1f} s, {self.machine}")
        noisy = "; noisy: the machine was busy" if sp.noisy else ""
        if self.faster:
            return f"Speed: {times(sp.speedup)} faster than the source ({how}){noisy}"
        if self.slower:
            return f"Speed: slower than the source: {times(sp.speedup)} ({how}){noisy}"
        return f"Speed: no clear speed difference: {times(sp.speedup)} ({how}){noisy}"
