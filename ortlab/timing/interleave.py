"""Speed-ups measured interleaved: the reference and the candidate run alternately in one loop (reference first on
even rounds, candidate first on odd ones), so machine load that comes and goes hits both alike. The speed-up is the
ratio of the two p50s, with a bootstrap interval over the rounds; never a ratio of minimum latencies, which
overstated speed-ups 1.7-2.8× on this shared machine (3.05× and 5.44× reported where interleaved p50s measured 1.81×
and 1.91×)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ortlab.core.progress import CancelToken
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencySample, latency_samples

MIN_ROUNDS = 10  # fewer rounds than this: the interval is not worth reporting (``noisy``)
BOOTSTRAP = 400
NOISY_SPREAD = 0.2  # an interval wider than ±20% of the ratio is flagged


@dataclass
class SpeedRatio:
    """Candidate vs reference, timed interleaved at one batch size. ``ratio`` = candidate p50 / reference p50
    (below 1: faster); ``low``/``high``: the 5th/95th percentiles of that ratio over bootstrap resamples of the
    rounds; ``n``: rounds (one run of each per round)."""

    batch_size: int
    reference_p50_ms: float
    candidate_p50_ms: float
    ratio: float
    low: float
    high: float
    n: int

    @property
    def speedup(self) -> float:
        return 1.0 / self.ratio if self.ratio > 0 else float("inf")

    @property
    def speedup_range(self) -> tuple[float, float]:
        """(low, high) of the speed-up: the ratio's interval inverted."""
        return (1.0 / self.high if self.high > 0 else float("inf"), 1.0 / self.low if self.low > 0 else float("inf"))

    @property
    def noisy(self) -> bool:
        """Too few rounds, or an interval wider than ±``NOISY_SPREAD`` of the ratio."""
        return self.n < MIN_ROUNDS or (self.high - self.low) / 2 > NOISY_SPREAD * self.ratio

    def text(self) -> str:
        """``1.84× (1.71–1.95×, 48 rounds)``."""
        lo, hi = self.speedup_range
        return f"{self.speedup:.2f}× ({lo:.2f}–{hi:.2f}×, {self.n} rounds)" + (" noisy" if self.noisy else "")


def ratio_from_samples(batch_size: int, reference_ms: Sequence[float], candidate_ms: Sequence[float],
                       seed: int = 0) -> SpeedRatio:
    """The :class:`SpeedRatio` of paired rounds (``reference_ms[i]`` and ``candidate_ms[i]`` ran in round i)."""
    r = np.asarray(reference_ms, dtype=np.float64)
    c = np.asarray(candidate_ms, dtype=np.float64)
    n = min(r.size, c.size)
    r, c = r[:n], c[:n]
    if n == 0:
        raise ValueError("no interleaved rounds to compare")
    rp, cp = float(np.median(r)), float(np.median(c))
    ratio = cp / rp if rp > 0 else float("inf")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(BOOTSTRAP, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        boots = np.median(c[idx], axis=1) / np.median(r[idx], axis=1)
    lo, hi = (float(x) for x in np.percentile(boots, [5, 95]))
    return SpeedRatio(int(batch_size), rp, cp, ratio, lo, hi, n)


def interleave(reference: Iterator[LatencySample], candidate: Iterator[LatencySample], *, duration_s: float,
               min_rounds: int = MIN_ROUNDS, max_rounds: int = 100_000, clock: Callable[[], float] = time.monotonic,
               cancel: CancelToken | Callable[[], bool] | None = None) -> tuple[list[float], list[float]]:
    """Alternate one run of each stream per round (reference first on even rounds, candidate first on odd ones)
    until ``duration_s`` has passed and at least ``min_rounds`` rounds ran (or ``max_rounds``, or a stream ends, or
    ``cancel``). Returns the two lists of milliseconds, round by round."""
    ref_ms: list[float] = []
    cand_ms: list[float] = []
    start = clock()
    i = 0

    def cancelled() -> bool:
        if cancel is None:
            return False
        return bool(cancel()) if callable(cancel) else bool(cancel.cancelled)

    while i < max_rounds and not cancelled():
        try:
            if i % 2 == 0:
                a = next(reference)
                b = next(candidate)
            else:
                b = next(candidate)
                a = next(reference)
        except StopIteration:
            break
        ref_ms.append(a.ms)
        cand_ms.append(b.ms)
        i += 1
        if i >= min_rounds and clock() - start >= duration_s:
            break
    return ref_ms, cand_ms


def session_stream(model_path, config: BenchConfig, batch_size: int, variant: str,
                   shapes: Mapping[str, Sequence[int]] | None = None) -> Iterator[LatencySample]:
    """An endless stream of timed runs of ``model_path`` (``bench.latency_samples`` with no run limit), for
    :func:`interleave`."""
    from dataclasses import replace

    cfg = replace(config, duration_s=0.0, runs=10**9, profile=False, openvino=False)
    return latency_samples(model_path, cfg, batch_size, variant, shapes=shapes)


def measure(reference_path, candidate_path, config: BenchConfig, batch_size: int, *, duration_s: float,
            shapes: Mapping[str, Sequence[int]] | None = None,
            cancel: CancelToken | Callable[[], bool] | None = None,
            stream: Callable[..., Iterator[LatencySample]] = session_stream,
            clock: Callable[[], float] = time.monotonic) -> SpeedRatio:
    """Time ``candidate_path`` against ``reference_path`` interleaved at ``batch_size`` for ``duration_s``
    (``stream`` opens each model's run stream; tests pass fakes)."""
    ref = stream(reference_path, config, batch_size, "reference", shapes)
    cand = stream(candidate_path, config, batch_size, "candidate", shapes)
    try:
        r, c = interleave(ref, cand, duration_s=duration_s, clock=clock, cancel=cancel)
    finally:
        for s in (ref, cand):
            close = getattr(s, "close", None)
            if close is not None:
                close()
    return ratio_from_samples(batch_size, r, c)
