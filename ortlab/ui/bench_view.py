"""Tables of a benchmark for the page: the engine (``ortlab.bench_compare``) computes, this only formats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..bench_compare import BenchComparison, LatencyStats


def live_rows(stats: Sequence[LatencyStats], names: Mapping[str, str]) -> list[dict]:
    """Rows of n, p50, p90, p99 per series so far."""
    return [{"variant": names.get(s.variant, s.variant), "batch": s.batch_size, "runs": s.runs,
             "p50 ms": round(s.p50, 3), "p90 ms": round(s.p90, 3), "p99 ms": round(s.p99, 3)} for s in stats]


def result_rows(comparison: BenchComparison, names: Mapping[str, str]) -> list[dict]:
    """One row per variant × batch size with its speed-up (p50) against the baseline."""
    rows = []
    for r in comparison.rows:
        s = r.summary
        rows.append({"variant": names.get(s.variant, s.variant), "batch": s.batch_size, "runs": s.n,
                     "p50 ms": round(s.p50, 3), "p90 ms": round(s.p90, 3), "p99 ms": round(s.p99, 3),
                     "mean ms": round(s.mean, 3), "throughput /s": round(s.throughput_per_s, 1),
                     "speedup (p50)": f"{r.speedup:.2f}×" if r.speedup is not None else "–",
                     "peak memory MB": None if s.peak_rss_mb is None else round(s.peak_rss_mb, 1),
                     "providers": ", ".join(p.replace("ExecutionProvider", "") for p in s.providers)})
    return rows


def slowdown_lines(comparison: BenchComparison, names: Mapping[str, str]) -> list[str]:
    """The engine's slow-down sentences with the variants' names in bold (Markdown)."""
    return [d.sentence(f"**{names.get(d.variant, d.variant)}**", f"**{names.get(d.baseline, d.baseline)}**")
            for d in comparison.slowdowns]
