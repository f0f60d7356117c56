"""Tables of a benchmark for the page: the engine (``ortlab.timing.compare``) computes, this only formats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ortlab import api
from ortlab.api import BenchComparison, ClusterBenchmark, LatencyStats

THROUGHPUT_COLUMN = "samples/s (batch÷p50)"


def result_columns(memory: bool = False) -> dict:
    """``st.dataframe`` column configs of :func:`result_rows`: widths that together fit the main column at 1280 px
    (about 820 px, so nothing is cut at the right) and what each number means. Runs, the IQR and (with peak
    memory) the p90 start hidden: the table's column menu shows them; the noise note names the spread."""
    import streamlit as st

    num, text = st.column_config.NumberColumn, st.column_config.TextColumn

    def hidden(config: Mapping[str, object]) -> dict[str, object]:
        return {**config, "hidden": True}

    return {
        "variant": text("variant", width=290, pinned=True, help="Full name on hover."),
        "batch": num("batch", width=45), "runs": hidden(num("runs", width=55, format="%d")),
        "p50 ms": num("p50 ms", width=60, help="Median latency of one run (ms)."),
        "p50 95% interval": text("p50 95%", width=95, help="95 % interval of the p50 (ms): where the median "
                                                            "would land again on a machine this busy."),
        "IQR ms": hidden(text("IQR ms", width=95, help="Interquartile range p25–p75 (ms): the spread of one run's "
                                                        "latency. Over 20 % of the p50 is flagged as noisy.")),
        "p90 ms": hidden(num("p90 ms", width=60)) if memory else num("p90 ms", width=60),
        "p99 ms": num("p99 ms", width=60),
        THROUGHPUT_COLUMN: num("samples/s", width=70,  # 3 significant digits: 3.21, not "3"
                               help=f"Samples per second = {api.benchmarks.THROUGHPUT_METHOD} (the median, so one outlier "
                                    "cannot flip which variant is faster)."),
        "speedup (p50)": text("speedup", width=130, help="Baseline p50 ÷ this p50 at the same batch size: the "
                                                         "median over rounds in which the variants ran in turn, "
                                                         "with its 95 % interval; ≈: the interval holds 1, no "
                                                         "clear difference."),
        "peak memory MB": num("peak MB", width=60, format="%.0f",
                              help="Peak resident memory of the process that timed it (MB).")
        if memory else hidden(num("peak MB", width=60)),
        "providers": None,  # said once under the table (the same for every row on one machine)
    }


def speedup_cell(row, is_baseline: bool) -> str:
    """The table's short speed-up: "baseline", "2.14× (2.01–2.30)", "≈ 1.02× (0.95–1.10)" when the interval holds
    1 (no clear difference), a bare "1.30×" for a benchmark stored without intervals, or "–"."""
    if is_baseline:
        return "baseline"
    if row.speedup is None:
        return "–"
    if row.low is None or row.high is None:
        return f"{row.speedup:.2f}×"
    return f"{'' if row.clear else '≈ '}{row.speedup:.2f}× ({row.low:.2f}–{row.high:.2f})"


def live_rows(stats: Sequence[LatencyStats], names: Mapping[str, str]) -> list[dict]:
    """Rows of n, p50, p90, p99 per series so far."""
    return [{"variant": names.get(s.variant, s.variant), "batch": s.batch_size, "runs": s.runs,
             "p50 ms": sig(s.p50), "p90 ms": sig(s.p90), "p99 ms": sig(s.p99)} for s in stats]


def sig(x: float, digits: int = 3) -> float:
    """``x`` to ``digits`` significant digits (321.476 → 321, 1.23456 → 1.23, 0.0123456 → 0.0123): a latency's
    third decimal of a millisecond is noise on any machine, and "321.476" cut the table's cells."""
    return float(f"{x:.{digits}g}") if x else 0.0


def _short(x: float) -> str:
    return f"{sig(x):g}"


def interval_text(low: float | None, high: float | None) -> str:
    """"321–473", "1.23–1.46" (3 significant digits), or "–" for a benchmark that did not record it."""
    return "–" if low is None or high is None else f"{_short(low)}–{_short(high)}"


def result_rows(comparison: BenchComparison, names: Mapping[str, str]) -> list[dict]:
    """One row per variant × batch size with its spread and its speed-up (p50) against the baseline."""
    rows = []
    for r in comparison.rows:
        s = r.summary
        rows.append({"variant": names.get(s.variant, s.variant), "batch": s.batch_size, "runs": s.n,
                     "p50 ms": sig(s.p50), "p50 95% interval": interval_text(s.p50_low, s.p50_high),
                     "IQR ms": interval_text(s.p25, s.p75), "p90 ms": sig(s.p90), "p99 ms": sig(s.p99),
                     THROUGHPUT_COLUMN: sig(s.throughput_per_s),
                     "speedup (p50)": speedup_cell(r, is_baseline=s.variant == comparison.baseline),
                     "peak memory MB": None if s.peak_rss_mb is None else round(s.peak_rss_mb, 1),
                     "providers": ", ".join(p.replace("ExecutionProvider", "") for p in s.providers)})
    return rows


def cluster_result(job: Any) -> ClusterBenchmark | None:
    """The result of a finished benchmark across a cluster, else None."""
    result = getattr(job, "result", None) if job is not None and job.done else None
    return result if isinstance(result, ClusterBenchmark) else None


def cluster_rows(bench: ClusterBenchmark) -> list[dict]:
    """One row per variant × machine (× batch size), its speed-up taken on that machine, stamped with the machine."""
    return [{"variant": r.name, "node kind": r.kind, "batch": r.summary.batch_size, "runs": r.summary.n,
             "p50 ms": sig(r.summary.p50),
             "p50 95% interval": interval_text(r.summary.p50_low, r.summary.p50_high),
             THROUGHPUT_COLUMN: sig(r.summary.throughput_per_s),
             "speedup (p50, same node)": speedup_cell(r.comparison, is_baseline=r.is_baseline),
             "machine": r.stamp} for r in bench.rows()]


def slowdown_lines(comparison: BenchComparison, names: Mapping[str, str]) -> list[str]:
    """The engine's slow-down sentences with the variants' names in bold (Markdown)."""
    return [d.sentence(f"**{names.get(d.variant, d.variant)}**", f"**{names.get(d.baseline, d.baseline)}**")
            for d in comparison.slowdowns]


def noise_note(comparison: BenchComparison, names: Mapping[str, str]) -> str | None:
    """One short warning for the whole table (plain text), or None: how many rows had too few runs or a spread
    over :data:`MAX_SPREAD` of their p50 (the widest named), instead of a paragraph per row."""
    rows = comparison.rows
    few = [r.summary for r in rows if r.summary.n < api.benchmarks.BENCH_MIN_RUNS]
    wide = [r.summary for r in rows if r.summary.spread is not None and r.summary.spread > api.benchmarks.BENCH_MAX_SPREAD]
    if not few and not wide:
        return None
    parts = []
    if wide:
        worst = max(wide, key=lambda x: x.spread or 0.0)
        parts.append(f"{len(wide)} of {len(rows)} rows spread over {api.benchmarks.BENCH_MAX_SPREAD:.0%} of their p50 (widest: "
                     f"{names.get(worst.variant, worst.variant)} at batch {worst.batch_size}, "
                     f"{worst.spread or 0.0:.0%})")
    if few:
        parts.append(f"{len(few)} of {len(rows)} rows had fewer than {api.benchmarks.BENCH_MIN_RUNS} runs")
    return ("Noisy timing: " + "; ".join(parts) + ". The machine was busy: repeat on a quieter one (or time "
            "longer) before trusting a difference; the IQR column (table menu) has each row's spread.")


def winner_lines(comparison: BenchComparison, names: Mapping[str, str]) -> list[str]:
    """Per batch size, the variant clearly fastest against the baseline (``BenchComparison.winners``), in a
    sentence with its name in bold (Markdown); none where no variant is clearly faster."""
    out = []
    for w in comparison.winners():
        r, s, b = w.row, w.row.summary, w.baseline
        vs = f": p50 {s.p50:.3f} ms vs {b.p50:.3f} ms" if b is not None else ""
        out.append(f"**{names.get(s.variant, s.variant)}** is the fastest at batch {w.batch_size}: {r.speedup:.2f}× "
                   f"as fast as **{names.get(comparison.baseline, comparison.baseline)}** (95 % interval {r.low:.2f}–"
                   f"{r.high:.2f}×){vs}.")
    return out
