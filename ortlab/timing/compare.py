"""Benchmark maths: percentiles of latencies as they stream in, speed-ups against a baseline, and why a
variant came out slower than its baseline. Pages only draw what these return."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ortlab.timing import stats
from ortlab.timing.bench import LatencySummary
from ortlab.timing.stats import SpeedUp

NOISE_RATIO = 0.95  # a variant within 5 % of the baseline is within run-to-run noise
TINY_MODEL_MS = 1.0  # below this baseline p50 the int8 conversions cost more than the int8 arithmetic saves
MIN_RUNS = 10  # fewer timed runs than this: a warning
MAX_SPREAD = 0.20  # an interquartile range over this share of the p50: a warning
NO_CLEAR_DIFFERENCE = "no clear difference"


def series_id(variant: str, batch_size: int) -> str:
    """The key of one variant × batch size series of latencies (``variant@batch``)."""
    return f"{variant}@{int(batch_size)}"


def split_series_id(sid: str) -> tuple[str, int]:
    """``variant@batch`` → (variant, batch)."""
    variant, _, batch = sid.rpartition("@")
    return (variant, int(batch)) if variant else (sid, 1)


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles (ms) of one series so far, while the benchmark runs."""

    variant: str
    batch_size: int
    runs: int
    p50: float
    p90: float
    p99: float


def running_stats(series: Mapping[str, Sequence[float]]) -> list[LatencyStats]:
    """p50/p90/p99 of every non-empty series (``variant@batch`` → latencies in ms), in the series' order."""
    out = []
    for sid, ms in series.items():
        if not len(ms):
            continue
        p50, p90, p99 = (float(v) for v in np.percentile(np.asarray(ms, dtype=np.float64), [50, 90, 99]))
        variant, batch = split_series_id(sid)
        out.append(LatencyStats(variant, batch, len(ms), p50, p90, p99))
    return out


@dataclass(frozen=True)
class Slowdown:
    """A variant slower (p50) than the baseline at the same batch size, and the likely reason."""

    variant: str
    baseline: str
    batch_size: int
    p50_ms: float
    baseline_p50_ms: float
    precision: str
    explanation: str

    @property
    def ratio(self) -> float:
        """Speed-up against the baseline (below 1: slower)."""
        return self.baseline_p50_ms / self.p50_ms

    def sentence(self, name: str | None = None, baseline_name: str | None = None) -> str:
        """The numbers and the explanation in words; ``name``/``baseline_name`` default to the variant ids."""
        return (f"{name or self.variant} is slower than {baseline_name or self.baseline} at batch {self.batch_size}: "
                f"p50 {self.p50_ms:.3f} ms vs {self.baseline_p50_ms:.3f} ms ({self.ratio:.2f}×, "
                f"+{self.p50_ms - self.baseline_p50_ms:.3f} ms per run). {self.explanation}")


def slowdown_explanation(precision: str, ratio: float, baseline_p50_ms: float) -> str:
    """Why a variant of ``precision`` ("int8", "fp16", "fp32" or "" for the original) ran at ``ratio`` × the
    baseline's speed (ratio < 1)."""
    if ratio > NOISE_RATIO:
        return "A gap under 5 % is within run-to-run noise."
    if precision == "int8" and baseline_p50_ms < TINY_MODEL_MS:
        return (f"At {baseline_p50_ms:.2f} ms per run the model is tiny: the QuantizeLinear/DequantizeLinear steps "
                "around the int8 operators cost more than the int8 arithmetic saves. Int8 pays off on larger "
                "models and batch sizes, where the matrix work dominates.")
    if precision == "int8":
        return ("For this model the QuantizeLinear/DequantizeLinear conversions around the int8 operators cost "
                "more than the int8 arithmetic saves (few quantized operators, or a CPU without fast int8 "
                "instructions such as VNNI).")
    if precision == "fp16":
        return ("On CPU most kernels compute in fp32, so ONNX Runtime adds Cast nodes around them: fp16 saves "
                "file size, not time.")
    return "The graph changes did not pay off for this model on this machine."


def runtime_of(summary: LatencySummary) -> str:
    """The runtime that timed ``summary``, from the providers it records: "OpenVINO" or "ONNX Runtime"."""
    return "OpenVINO" if any(str(p).startswith("OpenVINO") for p in summary.providers) else "ONNX Runtime"


def runtime_explanation(runtime: str, baseline_runtime: str) -> str:
    """Why a variant timed under another runtime than its baseline came out slower: not a graph change."""
    return (f"It ran under {runtime} and the baseline under {baseline_runtime}: this gap is a runtime difference "
            f"on this model and machine, not a graph change's; compare it with its own {baseline_runtime} row.")


def noise_warnings(summary: LatencySummary, name: str | None = None) -> list[str]:
    """Why ``summary``'s numbers should not be trusted: fewer than :data:`MIN_RUNS` runs, or an interquartile
    range over :data:`MAX_SPREAD` of its p50 (a busy machine). [] when neither."""
    who = f"{name or summary.variant} at batch {summary.batch_size}"
    out = []
    if summary.n < MIN_RUNS:
        out.append(f"{who}: only {summary.n} timed run{'s' if summary.n != 1 else ''} (fewer than {MIN_RUNS}); "
                   "its percentiles are not reliable — time it longer (--duration / --runs).")
    spread = summary.spread
    if spread is not None and spread > MAX_SPREAD:
        out.append(f"{who}: the runs' spread (interquartile range {summary.p25:.3f}–{summary.p75:.3f} ms) is "
                   f"{spread:.0%} of its p50 (over {MAX_SPREAD:.0%}): the machine was busy or the timing is noisy; "
                   "repeat on a quieter machine before trusting a difference.")
    return out


@dataclass
class ComparisonRow:
    """One variant at one batch size with its speed-up against the baseline at the same batch size; None when
    the baseline was not timed at that batch size.

    ``speed`` is the one statistic (:class:`ortlab.timing.stats.SpeedUp`): timed interleaved (``paired``), the
    median of the rounds' latency ratios with its 95 % bootstrap interval; timed apart (older benchmarks), the
    ratio of the p50s and the ratio of their 95 % intervals. ``speedup``/``low``/``high`` are its speed-up and
    interval (baseline ÷ this). ``clear`` is False when the interval holds 1: "no clear difference"."""

    summary: LatencySummary
    speedup: float | None
    low: float | None = None
    high: float | None = None
    paired: bool = False
    warnings: list[str] = field(default_factory=list)
    speed: SpeedUp | None = None

    @property
    def clear(self) -> bool:
        """True when the speed-up's interval lies wholly above or below 1 (False without an interval)."""
        if self.low is None or self.high is None:
            return False
        return self.low > 1.0 or self.high < 1.0

    def speedup_text(self, is_baseline: bool = False) -> str:
        """"1.82× (1.75–1.90)", "no clear difference (0.97–1.04×)", "baseline" or "–"."""
        if is_baseline:
            return "baseline"
        if self.speedup is None:
            return "–"
        if self.low is None or self.high is None:
            return f"{self.speedup:.2f}×"
        interval = f"{self.low:.2f}–{self.high:.2f}"
        if not self.clear:
            return f"{NO_CLEAR_DIFFERENCE} ({self.speedup:.2f}×, {interval})"
        return f"{self.speedup:.2f}× ({interval})"


def speedup_of(baseline: LatencySummary, other: LatencySummary) -> ComparisonRow:
    """The :class:`ComparisonRow` of ``other`` against ``baseline`` (same batch size), from
    :func:`ortlab.timing.stats.of_summaries`."""
    speed = stats.of_summaries(baseline, other)
    if speed is None:
        return ComparisonRow(other, None)
    if not speed.paired and (baseline.p50_low is None or other.p50_low is None):
        return ComparisonRow(other, speed.speedup, speed=speed)  # stored without intervals: a bare ratio
    low, high = speed.speedup_range
    return ComparisonRow(other, speed.speedup, low, high, paired=speed.paired, speed=speed)


@dataclass
class BenchComparison:
    """Every summary against the baseline variant, and the explained slow-downs."""

    baseline: str
    rows: list[ComparisonRow] = field(default_factory=list)
    slowdowns: list[Slowdown] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """Every row's noise warnings, in row order."""
        return [w for r in self.rows for w in r.warnings]

    def winners(self) -> list[Winner]:
        """Per batch size (ascending), the variant clearly fastest against the baseline (its interval above 1,
        the highest speed-up); none at a batch size where no variant is clearly faster."""
        best: dict[int, ComparisonRow] = {}
        for r in self.rows:
            s = r.summary
            if s.variant == self.baseline or r.speedup is None or not r.clear or r.speedup <= 1.0:
                continue
            if s.batch_size not in best or r.speedup > (best[s.batch_size].speedup or 0.0):
                best[s.batch_size] = r
        base = {r.summary.batch_size: r.summary for r in self.rows if r.summary.variant == self.baseline}
        return [Winner(batch, r, base.get(batch)) for batch, r in sorted(best.items())]


@dataclass(frozen=True)
class Winner:
    """The variant clearly fastest at one batch size: its ``row`` against the baseline, and the baseline's
    summary at that batch size (None when the baseline was not timed there)."""

    batch_size: int
    row: ComparisonRow
    baseline: LatencySummary | None


def compare_benchmarks(summaries: Sequence[LatencySummary], baseline: str | None = None,
                       precisions: Mapping[str, str] | None = None) -> BenchComparison:
    """Speed-up of each summary against ``baseline`` (a variant id; default: the first summary's variant) at
    the same batch size, and a :class:`Slowdown` for every other variant whose p50 is higher. ``precisions``
    maps variant ids to "int8", "fp16" or "fp32" for the explanations (missing: the original)."""
    precisions = precisions or {}
    if baseline is None:
        baseline = summaries[0].variant if summaries else ""
    base: dict[int, LatencySummary] = {}
    for s in summaries:
        if s.variant == baseline:
            base.setdefault(s.batch_size, s)
    out = BenchComparison(baseline)
    for s in summaries:
        b = base.get(s.batch_size)
        row = speedup_of(b, s) if b is not None else ComparisonRow(s, None)
        if s is b:
            row = ComparisonRow(s, 1.0)
        row.warnings = noise_warnings(s)
        out.rows.append(row)
        if b is None or s is b or row.speedup is None or row.speedup >= 1.0 or (row.low is not None and not row.clear):
            continue  # a "slower" variant whose interval holds 1 is not slower: no clear difference
        precision = precisions.get(s.variant, "")
        why = slowdown_explanation(precision, b.p50 / s.p50, b.p50)
        if runtime_of(s) != runtime_of(b) and b.p50 / s.p50 <= NOISE_RATIO:
            why = runtime_explanation(runtime_of(s), runtime_of(b))
        out.slowdowns.append(Slowdown(s.variant, b.variant, s.batch_size, s.p50, b.p50, precision, why))
    return out
