"""Plotly figures with one colour per variant, large fonts (projector) and the ``plotly_white`` template."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go

from ortlab.core.text import BYTE_UNITS, format_bytes

# Okabe-Ito (colour-blind safe). The original model is always the first colour.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C6D31", "#000000"]
DOMAIN_COLORS = {"ai.onnx": "#0072B2", "com.microsoft": "#D55E00", "com.microsoft.nchwc": "#CC79A7"}
FONT_SIZE = 18
TEMPLATE = "plotly_white"


OPENVINO_SUFFIX = " · OpenVINO"  # the service's id of a variant timed again under OpenVINO
OPENVINO_BF16_SUFFIX = " · OpenVINO bf16"  # … and of the baseline compiled in bf16, where the CPU has bf16


def plain(value: object) -> str:
    """``value`` for a Plotly label, legend entry, tick or hover text, shown as exactly its characters: Plotly reads
    a few HTML tags (``<b>``, ``<a href>``, ``<br>``) and entities in all of them, and ``%{…}`` in hover templates,
    so ``& < > % {`` are written as entities Plotly turns back into the characters (it knows no ``&quot;``)."""
    return html.escape(str(value), quote=False).replace("%", "&#37;").replace("{", "&#123;")


def base_variant(vid: str) -> str:
    """The variant a timed series belongs to (its OpenVINO twins, f32 and bf16, share its colour)."""
    for suffix in (OPENVINO_SUFFIX, OPENVINO_BF16_SUFFIX):
        if vid.endswith(suffix):
            return vid[: -len(suffix)]
    return vid


def is_openvino(vid: str) -> bool:
    return vid.endswith((OPENVINO_SUFFIX, OPENVINO_BF16_SUFFIX))


def _is_bf16(vid: str) -> bool:
    return vid.endswith(OPENVINO_BF16_SUFFIX)


def bar_pattern(vid: str) -> str:
    """A bar's fill pattern: none under ONNX Runtime, "/" under OpenVINO f32, "x" under OpenVINO bf16."""
    return "x" if _is_bf16(vid) else "/" if is_openvino(vid) else ""


def variant_colors(variant_ids: Sequence[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """Stable colour per variant: the order of ``variant_ids`` (original first, then artifacts oldest first);
    a variant timed under OpenVINO gets its model's colour (the runtime is drawn by pattern, dash and marker);
    ``known`` colours (the page's) are kept, so every chart of a page colours a variant alike."""
    out = dict(known or {})
    free = [c for c in PALETTE if c not in set(out.values())] or PALETTE
    new = 0
    for vid in variant_ids:
        b = base_variant(vid)
        if b not in out:
            out[b] = free[new % len(free)]
            new += 1
        out[vid] = out[b]
    return out


def domain_color(domain: str) -> str:
    """The colour of an operator domain (ai.onnx, com.microsoft, …)."""
    return DOMAIN_COLORS.get(domain or "ai.onnx", "#009E73")


def style(fig: go.Figure, title: str = "", height: int = 420) -> go.Figure:
    """Apply the shared look: template, fonts, margins; the legend goes below the plot (under the x axis and its
    labels), where more rows of series push the chart's bottom margin instead of covering the title."""
    entries = sum(1 for t in fig.data if t.showlegend is not False and t.name)
    rows = max(1, (entries + 1) // 2)
    legend_px = 26 * rows + 10
    fig.update_layout(
        # the title sits at the left, below the toolbar's row; the legend at the bottom of the figure, in a
        # margin of its own, so it never covers the x axis or its title
        template=TEMPLATE, title=dict(text=title, font=dict(size=FONT_SIZE + 2), x=0.01, xanchor="left",
                                      y=1.0, yref="container", yanchor="top", pad=dict(t=34)),
        height=height + legend_px, font=dict(size=FONT_SIZE),
        margin=dict(l=10, r=10, t=88 if title else 36, b=legend_px + 10),
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.0, xanchor="left", x=0,
                    font=dict(size=FONT_SIZE - 4)),
    )
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
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
        names = [plain(op if domain == "ai.onnx" else f"{op} ({domain})") for op, _ in part]
        fig.add_bar(y=names, x=[n for _, n in part], orientation="h", name=plain(domain),
                    marker_color=domain_color(domain), text=[n for _, n in part], textposition="auto",
                    textangle=0)
    return style(fig, title, height=max(320, 34 * len(rows) + 120))


def op_counts_grouped(deltas: list[dict], names: tuple[str, str], colors: tuple[str, str],
                      title: str = "Op counts before and after") -> go.Figure:
    """Grouped horizontal bars: count per op key for the reference and the candidate, one row per op (names
    read horizontally however many ops a model has; the chart grows with them)."""
    rows = sorted(deltas, key=lambda d: (d.get("domain", ""), d.get("op_type", "")), reverse=True)
    labels = [plain(d["op_type"] if not d.get("domain") else f"{d['op_type']} ({d['domain']})") for d in rows]
    fig = go.Figure()
    # plotly draws the first trace of a horizontal group at the bottom: the candidate goes first so the
    # reference's bar sits above it, in the legend's order
    fig.add_bar(y=labels, x=[d["after"] for d in rows], name=plain(names[1]), marker_color=colors[1], orientation="h")
    fig.add_bar(y=labels, x=[d["before"] for d in rows], name=plain(names[0]), marker_color=colors[0], orientation="h")
    fig.update_layout(barmode="group", legend_traceorder="reversed")
    style(fig, title, height=max(360, 30 * len(rows) + 150))
    fig.update_yaxes(automargin=True)
    # the legend goes between the title and the plot: hung from a fixed place under the title, so a legend that
    # wraps on a narrow screen grows down into the top margin (which it pushes) instead of up over the title
    fig.update_layout(margin=dict(t=100), legend=dict(yanchor="top", y=1 - 68 / fig.layout.height,
                                                      yref="container"))
    return fig


def byte_unit(largest: float) -> tuple[str, float]:
    """The unit (name, bytes) :func:`ortlab.core.text.format_bytes` writes ``largest`` in, so that a chart's axis
    speaks the same unit as the cards beside it."""
    for unit, size in ((u, float(z)) for u, z in BYTE_UNITS):
        if abs(largest) >= size:
            return unit, size
    return "B", 1.0


def size_bars(rows: list[dict], colors: dict[str, str], title: str = "File size") -> go.Figure:
    """One bar per variant: rows are {"id", "name", "bytes"} (or "mb"); the axis in the unit the size cards use
    (kB for a small model, MB for a large one), each bar labelled as the cards write it."""
    sizes = [float(r["bytes"]) if "bytes" in r else float(r["mb"]) * 1e6 for r in rows]
    unit, scale = byte_unit(max(sizes, default=0.0))
    fig = go.Figure(go.Bar(x=[plain(r["name"]) for r in rows], y=[b / scale for b in sizes],
                           marker_color=[colors.get(r["id"], PALETTE[0]) for r in rows],
                           text=[format_bytes(b) for b in sizes], textposition="auto"))
    return style(fig, f"{title} ({unit})", height=360)


def initializer_bytes_bars(by_variant: dict[str, dict[str, int]], names: dict[str, str], colors: dict[str, str],
                           title: str = "Weights by dtype") -> go.Figure:
    """Grouped bars: initializer bytes per dtype for each variant, in the unit of the largest (as the cards)."""
    dtypes = sorted({d for v in by_variant.values() for d in v})
    unit, scale = byte_unit(max((b for v in by_variant.values() for b in v.values()), default=0))
    fig = go.Figure()
    for vid, per in by_variant.items():
        fig.add_bar(x=[plain(d) for d in dtypes], y=[per.get(d, 0) / scale for d in dtypes],
                    name=plain(names.get(vid, vid)), marker_color=colors.get(vid, PALETTE[0]))
    fig.update_layout(barmode="group")
    return style(fig, f"{title} ({unit})", height=360)


def per_class_bars(per_class: list[dict], names: tuple[str, str], colors: tuple[str, str],
                   title: str = "Accuracy per class") -> go.Figure:
    """Grouped bars of reference vs candidate accuracy for every class."""
    cls = [plain(r["class"]) for r in per_class]
    fig = go.Figure()
    fig.add_bar(x=cls, y=[r.get("ref_acc") for r in per_class], name=plain(names[0]), marker_color=colors[0])
    fig.add_bar(x=cls, y=[r.get("cand_acc") for r in per_class], name=plain(names[1]), marker_color=colors[1])
    fig.update_layout(barmode="group", yaxis=dict(range=[0, 1.05], tickformat=".0%"))
    return style(fig, title, height=380)


LIVE_POINT_CAP = 1500   # raw-run markers per series per redraw (the median line has as many points)
MEDIAN_WINDOW = 25
BATCH_DASHES = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]


def downsample_indices(n: int, cap: int = LIVE_POINT_CAP) -> np.ndarray:
    """Indices of at most ``cap`` of ``n`` points: every k-th one plus the last. ``k`` is a power of two, so the
    kept points stay the same from one redraw to the next until the series doubles."""
    if n <= cap:
        return np.arange(n)
    k = 1 << int(np.ceil(np.log2((n - 1) / (cap - 1))))
    idx = np.arange(0, n - 1, k)
    return np.append(idx, n - 1)


def rolling_median(values: Sequence[float] | np.ndarray, window: int = MEDIAN_WINDOW,
                   at: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
    """Median of each value and the ``window - 1`` before it (fewer at the start), for the indices ``at``
    (all by default): every median uses every raw value of its window, however sparsely it is drawn."""
    v = np.asarray(values, dtype=np.float64)
    at = np.arange(v.size) if at is None else np.asarray(at, dtype=np.int64)
    out = np.empty(at.size)
    full = at >= window - 1
    if full.any():
        windows = np.lib.stride_tricks.sliding_window_view(v, window)  # row r holds v[r : r + window]
        out[full] = np.median(windows[at[full] - (window - 1)], axis=1)
    for k in np.flatnonzero(~full):
        out[k] = np.median(v[: at[k] + 1])
    return out


def latency_lines(series: dict[str, list[float]], names: dict[str, str], colors: dict[str, str],
                  title: str | None = None, *, cap: int = LIVE_POINT_CAP,
                  window: int = MEDIAN_WINDOW, batches_shown: Iterable[int] | None = None) -> go.Figure:
    """Per series (``variant@batch``): faint markers of the raw runs (at most ``cap``, the newest always
    included) and a bold rolling median of ``window`` runs, in the variant's colour with one dash per batch
    size (a series under OpenVINO: diamonds on its line and for its runs), on a log y axis so that rare spikes
    do not flatten everything else. x is the run number. With ``batches_shown``, the series of other batch sizes
    are only in the legend (a click there draws them): a few lines to read instead of a tangle of all of them."""
    fig = go.Figure()
    batches = sorted({int(sid.partition("@")[2] or 1) for sid in series})
    shown = None if batches_shown is None else {int(b) for b in batches_shown}
    for sid, values in series.items():
        if not len(values):
            continue
        vid, _, bs = sid.partition("@")
        visible = True if shown is None or int(bs or 1) in shown else "legendonly"
        color = colors.get(vid, PALETTE[0])
        dash = BATCH_DASHES[batches.index(int(bs or 1)) % len(BATCH_DASHES)]
        name = plain(names.get(sid, sid))
        v = np.asarray(values, dtype=np.float64)
        idx = downsample_indices(v.size, cap)
        x = (idx + 1).tolist()
        ov = is_openvino(vid)
        shape = "square" if _is_bf16(vid) else "diamond"  # OpenVINO bf16 / f32
        # a run under OpenVINO is a small diamond (a square in bf16), under ORT a dot: one colour per variant, the
        # runtime by shape
        fig.add_scatter(x=x, y=v[idx].tolist(), mode="markers", name=f"{name} · runs", legendgroup=sid,
                        showlegend=False, marker=dict(color=color, size=5 if ov else 4, opacity=0.25,
                                                      symbol=shape if ov else "circle"),
                        hovertemplate="run %{x}: %{y:.3f} ms<extra>%{fullData.name}</extra>",
                        meta={"runs": int(v.size)}, visible=visible)
        fig.add_scatter(x=x, y=rolling_median(v, window, idx).tolist(), mode="lines+markers" if ov else "lines",
                        name=name, legendgroup=sid, line=dict(color=color, width=3 if ov else 4, dash=dash),
                        marker=dict(symbol=f"{shape}-open", size=9, maxdisplayed=14, color=color) if ov else None,
                        hovertemplate=f"run %{{x}}: median of {window} %{{y:.3f}} ms<extra>{name}</extra>",
                        meta={"runs": int(v.size)}, visible=visible)
    fig.update_layout(xaxis_title="run", yaxis=dict(type="log", title="ms (log)", tickformat="~g"),
                      uirevision="latency")
    if title is None:
        title = f"Latency per run (ms, log scale) · dots: runs · lines: median of {window}"
    return style(fig, title, height=460)


def bar(labels: Iterable[str], values: Iterable[float], colors: Iterable[str], title: str, fmt: str = "{:.2f}") -> go.Figure:
    """A bar per label, coloured per bar, values written on the bars with ``fmt``."""
    values = list(values)
    fig = go.Figure(go.Bar(x=[plain(x) for x in labels], y=values, marker_color=list(colors),
                           text=[fmt.format(v) for v in values], textposition="auto"))
    return style(fig, title, height=360)


def _ms(x: float) -> str:
    """A latency or rate to 3 significant digits, never in e-notation: 0.0123, 3.21, 357, 1,310."""
    return f"{x:,.0f}" if x >= 100 else f"{float(f'{x:.3g}'):g}"


def latency_panels(summaries, names: dict[str, str], colors: dict[str, str],
                   title: str = "Latency per batch size · bar: p50 · whisker: p99 · ◆: p90 (ms)",
                   height: int = 420) -> go.Figure:
    """One panel per batch size (each with its own y axis, so a batch-1 bar is never dwarfed by batch 32):
    a bar per variant at its p50, a whisker up to its p99 and a diamond at its p90. ``summaries`` are
    ``LatencySummary``-like (variant, batch_size, p50, p90, p99)."""
    from plotly.subplots import make_subplots

    batches = sorted({int(s.batch_size) for s in summaries})
    fig = make_subplots(rows=1, cols=max(1, len(batches)), subplot_titles=[f"batch {b}" for b in batches],
                        horizontal_spacing=0.08 if len(batches) > 1 else 0.0)
    shown: set[str] = set()
    for col, b in enumerate(batches, start=1):
        panel = [x for x in summaries if int(x.batch_size) == b]
        # the axis holds every whisker (p99), so nothing is drawn past it and no note has to say what lies above;
        # each bar's p50 is written under it (a tick label: full size however short the bar, never under a whisker)
        top = 1.08 * max([max(x.p99, x.p90, x.p50) for x in panel] + [1e-9])
        fig.update_yaxes(range=[0, top], row=1, col=col)
        fig.update_xaxes(tickmode="array", tickvals=[plain(names.get(x.variant, x.variant)) for x in panel],
                         ticktext=[f"{_ms(x.p50)} ms" for x in panel], title_text="p50 (ms)",
                         title_font=dict(size=FONT_SIZE - 4), tickfont=dict(size=FONT_SIZE - 4), row=1, col=col)
        for s in panel:
            name = plain(names.get(s.variant, s.variant))
            color = colors.get(s.variant, PALETTE[0])
            fig.add_bar(x=[name], y=[s.p50], name=name, legendgroup=s.variant, showlegend=s.variant not in shown,
                        marker_color=color, marker_pattern_shape=bar_pattern(s.variant),
                        error_y=dict(type="data", symmetric=False, array=[max(0.0, s.p99 - s.p50)],
                                     arrayminus=[0.0], thickness=2, width=8, color="#333"),
                        customdata=[[s.p90, s.p99]],
                        hovertemplate=(f"{name} · batch {b}<br>p50 %{{y:.3f}} ms<br>p90 %{{customdata[0]:.3f}} ms"
                                       "<br>p99 %{customdata[1]:.3f} ms<extra></extra>"),
                        row=1, col=col)
            fig.add_scatter(x=[name], y=[s.p90], mode="markers", legendgroup=s.variant, showlegend=False,
                            marker=dict(symbol="diamond", size=11, color="#333"), hoverinfo="skip", row=1, col=col)
            shown.add(s.variant)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_layout(bargap=0.25)
    return style(fig, title, height=height)


def throughput_panels(summaries, names: dict[str, str], colors: dict[str, str],
                      title: str = "Throughput per batch size (samples/s = batch ÷ p50)", height: int = 380) -> go.Figure:
    """One panel per batch size: a bar per variant at its throughput (batch size ÷ p50)."""
    from plotly.subplots import make_subplots

    batches = sorted({int(s.batch_size) for s in summaries})
    fig = make_subplots(rows=1, cols=max(1, len(batches)), subplot_titles=[f"batch {b}" for b in batches],
                        horizontal_spacing=0.08 if len(batches) > 1 else 0.0)
    shown: set[str] = set()
    for col, b in enumerate(batches, start=1):
        for s in (x for x in summaries if int(x.batch_size) == b):
            name = plain(names.get(s.variant, s.variant))
            fig.add_bar(x=[name], y=[s.throughput_per_s], name=name, legendgroup=s.variant,
                        showlegend=s.variant not in shown, marker_color=colors.get(s.variant, PALETTE[0]),
                        marker_pattern_shape=bar_pattern(s.variant),
                        text=[_ms(s.throughput_per_s)], textposition="auto",
                        hovertemplate=f"{name} · batch {b}<br>%{{y:,.1f}} samples/s<extra></extra>", row=1, col=col)
            shown.add(s.variant)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(rangemode="tozero", title_text="samples/s", row=1, col=1)
    fig.update_layout(uniformtext=dict(minsize=FONT_SIZE - 4, mode="show"))
    return style(fig, title, height=height)
