"""Benchmark maths: percentiles of latencies as they stream in, speed-ups against a baseline, and why a
variant came out slower than its baseline. Pages only draw what these return."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ortlab.timing.bench import LatencySummary

NOISE_RATIO = 0.95  # a variant within 5 % of the baseline is within run-to-run noise
TINY_MODEL_MS = 1.0  # below this baseline p50 the int8 conversions cost more than the int8 arithmetic saves


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


@dataclass
class ComparisonRow:
    """One variant at one batch size with its speed-up (baseline p50 / this p50) against the baseline at the
    same batch size; None when the baseline was not timed at that batch size."""

    summary: LatencySummary
    speedup: float | None


@dataclass
class BenchComparison:
    """Every summary against the baseline variant, and the explained slow-downs."""

    baseline: str
    rows: list[ComparisonRow] = field(default_factory=list)
    slowdowns: list[Slowdown] = field(default_factory=list)


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
        speedup = b.p50 / s.p50 if b is not None and b.p50 and s.p50 else None
        out.rows.append(ComparisonRow(s, speedup))
        if b is None or s is b or not s.p50 or s.p50 <= b.p50:
            continue
        precision = precisions.get(s.variant, "")
        out.slowdowns.append(Slowdown(s.variant, b.variant, s.batch_size, s.p50, b.p50, precision,
                                      slowdown_explanation(precision, b.p50 / s.p50, b.p50)))
    return out
