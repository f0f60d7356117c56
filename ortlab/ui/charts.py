"""Plotly figures with one colour per variant, large fonts (projector) and the ``plotly_white`` template."""

from __future__ import annotations

from typing import Iterable, Sequence

import plotly.graph_objects as go

# Okabe-Ito (colour-blind safe). The original model is always the first colour.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C6D31", "#000000"]
DOMAIN_COLORS = {"ai.onnx": "#0072B2", "com.microsoft": "#D55E00", "com.microsoft.nchwc": "#CC79A7"}
FONT_SIZE = 18
TEMPLATE = "plotly_white"


def variant_colors(variant_ids: Sequence[str]) -> dict[str, str]:
    """Stable colour per variant: the order of ``variant_ids`` (original first, then artifacts oldest first)."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variant_ids)}


def domain_color(domain: str) -> str:
    return DOMAIN_COLORS.get(domain or "ai.onnx", "#009E73")


def style(fig: go.Figure, title: str = "", height: int = 420) -> go.Figure:
    """Apply the shared look: template, fonts, margins, legend on top."""
    fig.update_layout(
        template=TEMPLATE, title=dict(text=title, font=dict(size=FONT_SIZE + 4)), height=height,
        font=dict(size=FONT_SIZE), margin=dict(l=10, r=10, t=60 if title else 20, b=10),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    )
    return fig


def _op_label(key: str | tuple[str, str]) -> tuple[str, str]:
    if isinstance(key, tuple):
        domain, op = key
    else:
        domain, _, op = key.rpartition("::")
    return domain or "ai.onnx", op


def op_histogram(op_counts: dict, title: str = "Operators") -> go.Figure:
    """Horizontal bars of node counts per (domain, op_type); non-default domains get their own colour."""
    rows = sorted(((_op_label(k), v) for k, v in op_counts.items()), key=lambda r: (r[1], r[0][1]))
    fig = go.Figure()
    for domain in sorted({d for (d, _), _ in rows}):
        part = [(op, n) for (d, op), n in rows if d == domain]
        names = [op if domain == "ai.onnx" else f"{op} ({domain})" for op, _ in part]
        fig.add_bar(y=names, x=[n for _, n in part], orientation="h", name=domain,
                    marker_color=domain_color(domain), text=[n for _, n in part], textposition="auto")
    return style(fig, title, height=max(320, 34 * len(rows) + 120))


def op_counts_grouped(deltas: list[dict], names: tuple[str, str], colors: tuple[str, str],
                      title: str = "Op counts before and after") -> go.Figure:
    """Grouped bars: count per op key for the reference and the candidate."""
    rows = sorted(deltas, key=lambda d: (d.get("domain", ""), d.get("op_type", "")))
    labels = [d["op_type"] if not d.get("domain") else f"{d['op_type']} ({d['domain']})" for d in rows]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[d["before"] for d in rows], name=names[0], marker_color=colors[0])
    fig.add_bar(x=labels, y=[d["after"] for d in rows], name=names[1], marker_color=colors[1])
    fig.update_layout(barmode="group", xaxis_tickangle=-35)
    return style(fig, title, height=460)


def size_bars(rows: list[dict], colors: dict[str, str], title: str = "File size (MB)") -> go.Figure:
    """One bar per variant: rows are {"id", "name", "mb"}."""
    fig = go.Figure(go.Bar(x=[r["name"] for r in rows], y=[r["mb"] for r in rows],
                           marker_color=[colors.get(r["id"], PALETTE[0]) for r in rows],
                           text=[f"{r['mb']:.3f}" for r in rows], textposition="auto"))
    return style(fig, title, height=360)


def initializer_bytes_bars(by_variant: dict[str, dict[str, int]], names: dict[str, str], colors: dict[str, str],
                           title: str = "Weights by dtype (KB)") -> go.Figure:
    """Grouped bars: initializer bytes per dtype for each variant."""
    dtypes = sorted({d for v in by_variant.values() for d in v})
    fig = go.Figure()
    for vid, per in by_variant.items():
        fig.add_bar(x=dtypes, y=[per.get(d, 0) / 1024 for d in dtypes], name=names.get(vid, vid),
                    marker_color=colors.get(vid, PALETTE[0]))
    fig.update_layout(barmode="group")
    return style(fig, title, height=360)


def per_class_bars(per_class: list[dict], names: tuple[str, str], colors: tuple[str, str],
                   title: str = "Accuracy per class") -> go.Figure:
    """Grouped bars of reference vs candidate accuracy for every class."""
    cls = [str(r["class"]) for r in per_class]
    fig = go.Figure()
    fig.add_bar(x=cls, y=[r.get("ref_acc") for r in per_class], name=names[0], marker_color=colors[0])
    fig.add_bar(x=cls, y=[r.get("cand_acc") for r in per_class], name=names[1], marker_color=colors[1])
    fig.update_layout(barmode="group", yaxis=dict(range=[0, 1.05], tickformat=".0%"))
    return style(fig, title, height=380)


def latency_lines(series: dict[str, list[float]], names: dict[str, str], colors: dict[str, str],
                  title: str = "Latency per run (ms)") -> go.Figure:
    """One line per series (variant, or variant × batch): latency of every timed run."""
    fig = go.Figure()
    for sid, values in series.items():
        vid = sid.split("@")[0]
        dash = "solid" if sid.endswith("@1") or "@" not in sid else "dot"
        fig.add_scatter(y=values, x=list(range(1, len(values) + 1)), mode="lines", name=names.get(sid, sid),
                        line=dict(color=colors.get(vid, PALETTE[0]), width=2, dash=dash))
    fig.update_layout(xaxis_title="run", yaxis_title="ms", uirevision="latency")
    return style(fig, title, height=440)


def bar(labels: Iterable[str], values: Iterable[float], colors: Iterable[str], title: str, fmt: str = "{:.2f}") -> go.Figure:
    values = list(values)
    fig = go.Figure(go.Bar(x=list(labels), y=values, marker_color=list(colors),
                           text=[fmt.format(v) for v in values], textposition="auto"))
    return style(fig, title, height=360)
