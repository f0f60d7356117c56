"""How sure a verdict's deciding figure is: a 95% interval from its sample count, and whether it straddles a bar.

* Shares counted over samples or detections (confident flips, changed strings, nearest-neighbour agreement, the
  detections' F1 = 2·matched / (reference + candidate detections)) get Wilson's score interval. For F1 the count
  of trials is the mean of the two models' detections (matched pairs are counted once).
* SQNR gets a percentile bootstrap over the samples: the samples' signal and noise energies are resampled and
  the SQNR of their sums recomputed (the whole-set SQNR is such a ratio of sums).
* A dense map's threshold crossings (a share of elements, which are not independent within a sample) get the same
  bootstrap over samples of each sample's crossing and element counts.

A figure is **on the edge** when its interval reaches across a bar of the policy (a point at the bar counts):
another draw of as many samples could land on the bar's other side, so the level is not settled. The sentence
says about how many samples would settle it (the interval of the same figure on more samples shrinks until it
clears the bar; none does for a figure exactly on the bar).

Pure Python, with numpy for the bootstrap when it is there: stored evaluations are judged again without it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Z95", "Uncertainty", "about", "share_interval", "share_uncertainty", "sqnr_interval", "sqnr_uncertainty",
           "wilson", "wilson_uncertainty"]

Z95 = 1.959963984540054  # two-sided 95% normal quantile
BOOTSTRAP_ROUNDS = 1000
MAX_SETTLE = 1_000_000  # samples: beyond this no practical sample count settles the figure


def about(n: int) -> str:
    """A sample count extrapolated from an interval's width, to the two figures it is good for: "99,000", not
    "98,719" (below 1,000 as it is)."""
    if n < 1000:
        return f"{n:,}"
    step = 10 ** (len(str(n)) - 2)
    return f"{round(n / step) * step:,}"


@dataclass
class Uncertainty:
    """A 95% interval ``low``–``high`` of the deciding figure, how it was computed (``method``), the bar it
    straddles (None: it clears every bar) and the samples that would settle it (None: no practical count)."""

    low: float
    high: float
    method: str
    unit: str = "share"  # "share" (shown as %), "f1" (shown as 0.00) or "db"
    bar: float | None = None
    settle_samples: int | None = None
    available: int = 0  # the samples the evaluation data has (0: not known): a count beyond it cannot be asked for

    @property
    def on_edge(self) -> bool:
        return self.bar is not None

    def fmt(self, x: float) -> str:
        if self.unit == "share":
            return f"{100 * x:.1f}%"
        if self.unit == "db":
            return f"{x:.1f} dB"
        return f"{x:.2f}"

    @property
    def text(self) -> str:
        """E.g. "95% interval 0.0–5.7% (Wilson, 64 samples)"."""
        return f"95% interval {self.fmt(self.low)}–{self.fmt(self.high)} ({self.method})"

    @property
    def edge_text(self) -> str:
        """"on the edge: …" with how many samples would settle it; empty when the interval clears every bar."""
        if self.bar is None:
            return ""
        bar = f"{100 * self.bar:g}%" if self.unit == "share" else (f"{self.bar:g} dB" if self.unit == "db"
                                                                    else f"{self.bar:g}")
        head = f"on the edge: the {self.text} reaches across the {bar} bar, so the level is not settled"
        if self.settle_samples is None:
            return head + ("; the figure sits on the bar (or within a hair of it), so more samples only tell which "
                           "side it falls on")
        head += f"; judge on more samples: about {about(self.settle_samples)} would settle it"
        if self.available and self.settle_samples > self.available:
            return head + (f", more than the {self.available:,} samples the evaluation data has, so this data "
                           "cannot settle it: give more evaluation data")
        if self.available:
            return head + f" (--verify-samples {self.settle_samples}; the evaluation data has {self.available:,})"
        return head + f" (--verify-samples {self.settle_samples}, from evaluation data with at least as many)"


def wilson(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of the share ``k / n`` (``(0, 1)`` when ``n`` is 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, k / n))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _straddled(low: float, high: float, value: float, bars: Sequence[float]) -> float | None:
    """The bar inside [low, high] nearest ``value`` (None when the interval clears them all)."""
    inside = [b for b in bars if low <= b <= high]
    return min(inside, key=lambda b: abs(b - value)) if inside else None


def _settle(n: float, clears: Callable[[float], bool]) -> float | None:
    """The smallest count ≥ ``n`` at which ``clears(count)`` holds (None past :data:`MAX_SETTLE`)."""
    lo, hi = n, max(2 * n, n + 1)
    while not clears(hi):
        if hi > MAX_SETTLE:
            return None
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if clears(mid) else (mid, hi)
    return hi


def wilson_uncertainty(value: float, trials: float, n_samples: int, bars: Sequence[float], unit: str = "share",
                       what: str = "samples") -> Uncertainty:
    """The Wilson interval of a share ``value`` observed over ``trials`` (``n_samples`` samples gave them), and
    whether it straddles one of ``bars``; the samples that would settle it keep the observed share and the trials per sample. ``what``: the
    trials' name ("samples"), or the whole evidence when it holds " in " ("23 reference and 21 candidate
    detections in 64 samples")."""
    low, high = wilson(value * trials, trials)
    method = (f"Wilson, {n_samples} samples" if what == "samples" else f"Wilson, {what}" if " in " in what
              else f"Wilson, {trials:g} {what} in {n_samples} samples")
    u = Uncertainty(low, high, method, unit)
    bar = _straddled(low, high, value, bars)
    if bar is None:
        return u
    u.bar = bar
    if value == bar or trials <= 0:
        return u
    per_sample = trials / max(1, n_samples)

    def clears(t: float) -> bool:
        lo, hi = wilson(value * t, t)
        return not lo <= bar <= hi

    t = _settle(trials, clears)
    u.settle_samples = None if t is None else max(n_samples + 1, math.ceil(t / per_sample))
    return u


def _sqnr(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _resampled_sums(a: Sequence[float], b: Sequence[float], rounds: int, seed: int) -> list[tuple[float, float]]:
    """(Σa, Σb) over the same samples drawn with replacement, ``rounds`` times (numpy when it is there: a
    1,000-sample evaluation is then judged in milliseconds, not seconds)."""
    n = len(a)
    try:
        import numpy as np
    except ImportError:  # stored evaluations are judged without numpy too
        rng = random.Random(seed)
        out = []
        for _ in range(rounds):
            idx = rng.choices(range(n), k=n)
            out.append((sum(map(a.__getitem__, idx)), sum(map(b.__getitem__, idx))))
        return out
    draws = np.random.default_rng(seed).integers(0, n, size=(rounds, n))
    sa, sb = np.asarray(a, dtype=np.float64)[draws].sum(axis=1), np.asarray(b, dtype=np.float64)[draws].sum(axis=1)
    return list(zip(sa.tolist(), sb.tolist()))


def _percentiles(values: list[float]) -> tuple[float, float]:
    values.sort()
    k = len(values) - 1
    return values[int(0.025 * k)], values[int(math.ceil(0.975 * k))]


def sqnr_interval(signal: Sequence[float], noise: Sequence[float], rounds: int = BOOTSTRAP_ROUNDS,
                  seed: int = 0) -> tuple[float, float] | None:
    """The percentile-bootstrap 95% interval of ``10·log10(Σsignal / Σnoise)``, resampling samples (None with
    fewer than 2 samples)."""
    if len(signal) < 2 or len(noise) != len(signal):
        return None
    return _percentiles([_sqnr(s, d) for s, d in _resampled_sums(signal, noise, rounds, seed)])


def share_interval(part: Sequence[float], whole: Sequence[float], rounds: int = BOOTSTRAP_ROUNDS,
                   seed: int = 0) -> tuple[float, float] | None:
    """The percentile-bootstrap 95% interval of ``Σpart / Σwhole``, resampling samples (None with fewer than 2)."""
    if len(part) < 2 or len(whole) != len(part):
        return None
    return _percentiles([p / w if w else 0.0 for p, w in _resampled_sums(part, whole, rounds, seed)])


def share_uncertainty(value: float, part: Sequence[float], whole: Sequence[float],
                      bars: Sequence[float]) -> Uncertainty | None:
    """The bootstrap interval of a share counted over elements that are not independent within a sample (a dense
    map's threshold crossings): the samples are resampled, not the elements. None without per-sample counts."""
    return _bootstrapped(value, share_interval(part, whole), len(part), bars, "share")


def sqnr_uncertainty(value: float, signal: Sequence[float], noise: Sequence[float],
                     bars: Sequence[float]) -> Uncertainty | None:
    """The bootstrap interval of an SQNR (dB) and whether it straddles one of ``bars``; the samples that would
    settle it assume the interval narrows as 1/√n. None when no per-sample energies were kept."""
    return _bootstrapped(value, sqnr_interval(signal, noise), len(signal), bars, "db")


def _bootstrapped(value: float, iv: tuple[float, float] | None, n: int, bars: Sequence[float],
                  unit: str) -> Uncertainty | None:
    if iv is None or not all(math.isfinite(x) for x in iv) or not math.isfinite(value):
        return None
    u = Uncertainty(iv[0], iv[1], f"bootstrap over {n} samples", unit)
    bar = _straddled(iv[0], iv[1], value, bars)
    if bar is None:
        return u
    u.bar = bar
    half = max(value - iv[0], iv[1] - value)
    if value != bar and half > 0:
        need = math.ceil(n * (half / abs(value - bar)) ** 2)
        u.settle_samples = max(n + 1, need) if need <= MAX_SETTLE else None
    return u
