"""Tables of a benchmark for the page: the engine (``ortlab.timing.compare``) computes, this only formats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ortlab.api import THROUGHPUT_METHOD
from ortlab.api import noise_warnings
from ortlab.api import BenchComparison, LatencyStats

THROUGHPUT_COLUMN = "samples/s (batch÷p50)"


def result_columns() -> dict:
    """``st.dataframe`` column configs of :func:`result_rows`: widths that fit the values at 1280 px and what
    each number means."""
    import streamlit as st

    num, text = st.column_config.NumberColumn, st.column_config.TextColumn
    # pixel widths: together about 760 px, the main column's width at 1280 px, with room for a variant's name
    return {
        "variant": text("variant", width=250, help="Full name on hover."),
        "batch": num("batch", width=50), "runs": num("runs", width=55, format="%d"),
        "p50 ms": num("p50 ms", width=65, help="Median latency of one run (ms)."),
        "p50 95% interval": text("p50 95%", width=95, help="95 % interval of the p50 (ms): where the median "
                                                            "would land again on a machine this busy."),
        "IQR ms": text("IQR ms", width=95, help="Interquartile range p25–p75 (ms): the spread of one run's latency. "
                                               "Over 20 % of the p50 is flagged as noisy."),
        "p90 ms": num("p90 ms", width=65), "p99 ms": num("p99 ms", width=65),
        THROUGHPUT_COLUMN: num("samples/s", width=75, format="%.0f",
                               help=f"Samples per second = {THROUGHPUT_METHOD} (the median, so one outlier "
                                    "cannot flip which variant is faster)."),
        "speedup (p50)": text("speedup", width=170, help="Baseline p50 ÷ this p50 at the same batch size: the "
                                                         "median over rounds in which the variants ran in turn, "
                                                         "with its 95 % interval; an interval that holds 1 is "
                                                         "no clear difference."),
        "peak memory MB": num("peak MB", width=65, format="%.0f",
                              help="Peak resident memory of the process that timed it (MB)."),
        "providers": None,  # said once under the table (the same for every row on one machine)
    }


def live_rows(stats: Sequence[LatencyStats], names: Mapping[str, str]) -> list[dict]:
    """Rows of n, p50, p90, p99 per series so far."""
    return [{"variant": names.get(s.variant, s.variant), "batch": s.batch_size, "runs": s.runs,
             "p50 ms": round(s.p50, 3), "p90 ms": round(s.p90, 3), "p99 ms": round(s.p99, 3)} for s in stats]


def interval_text(low: float | None, high: float | None) -> str:
    """"1.234–1.456", or "–" for a benchmark that did not record it."""
    return "–" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def result_rows(comparison: BenchComparison, names: Mapping[str, str]) -> list[dict]:
    """One row per variant × batch size with its spread and its speed-up (p50) against the baseline."""
    rows = []
    for r in comparison.rows:
        s = r.summary
        rows.append({"variant": names.get(s.variant, s.variant), "batch": s.batch_size, "runs": s.n,
                     "p50 ms": round(s.p50, 3), "p50 95% interval": interval_text(s.p50_low, s.p50_high),
                     "IQR ms": interval_text(s.p25, s.p75), "p90 ms": round(s.p90, 3), "p99 ms": round(s.p99, 3),
                     THROUGHPUT_COLUMN: round(s.throughput_per_s, 1),
                     "speedup (p50)": r.speedup_text(is_baseline=s.variant == comparison.baseline),
                     "peak memory MB": None if s.peak_rss_mb is None else round(s.peak_rss_mb, 1),
                     "providers": ", ".join(p.replace("ExecutionProvider", "") for p in s.providers)})
    return rows


def slowdown_lines(comparison: BenchComparison, names: Mapping[str, str]) -> list[str]:
    """The engine's slow-down sentences with the variants' names in bold (Markdown)."""
    return [d.sentence(f"**{names.get(d.variant, d.variant)}**", f"**{names.get(d.baseline, d.baseline)}**")
            for d in comparison.slowdowns]


def noise_lines(comparison: BenchComparison, names: Mapping[str, str]) -> list[str]:
    """The engine's noise warnings (too few runs, a wide spread) with the variants' names (plain text)."""
    out = []
    for r in comparison.rows:
        name = names.get(r.summary.variant, r.summary.variant)
        out += noise_warnings(r.summary, name)
    return out
