"""Plotly drawing of the layered graph diff laid out by ``ortlab.ui.graph_layout.graph_view``."""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go

STATUS_COLORS = {
    "removed": "#d62728",
    "added": "#2ca02c",
    "changed": "#f0a000",
    "unchanged": "#9e9e9e",
    "collapsed": "#d9d9d9",
}
EDGE_COLORS = {"removed": "#e8a0a0", "added": "#7fc97f", "unchanged": "#b8b8b8"}
STATUS_ORDER = ("removed", "added", "changed", "unchanged", "collapsed")
GL_THRESHOLD = 500
LABEL_LIMIT = 150
CROWDED_LAYER = 8  # layers with more nodes than this are labelled on hover only
INITIAL_LAYERS = 40
ROW_PX = 64
ABBREVIATIONS = {
    "QuantizeLinear": "Q",
    "DequantizeLinear": "DQ",
    "DynamicQuantizeLinear": "DynQ",
    "BatchNormalization": "BN",
    "GlobalAveragePool": "GAP",
    "QLinearGlobalAveragePool": "QLinearGAP",
    "LayerNormalization": "LayerNorm",
    "SkipLayerNormalization": "SkipLayerNorm",
    "SimplifiedLayerNormalization": "RMSNorm",
    "InstanceNormalization": "InstanceNorm",
}


def short_label(n: dict) -> str:
    """The op type as drawn: well-known long names shortened (QuantizeLinear → Q), domain prefix kept."""
    label = str(n.get("label") or n.get("op_type") or "")
    op = str(n.get("op_type") or "")
    if op in ABBREVIATIONS and label.endswith(op):
        return label[: len(label) - len(op)] + ABBREVIATIONS[op]
    return label


def _flow(nodes: list[dict]) -> tuple[bool, bool]:
    """(vertical, reversed): whether layers advance along y rather than x, and whether that axis must be
    reversed so the first layer is at the top (or left)."""
    by_layer: dict = {}
    for n in nodes:
        by_layer.setdefault(n.get("layer", 0), []).append(n)
    ordered = [by_layer[k] for k in sorted(by_layer)]

    def mean(group: list[dict], axis: str) -> float:
        return sum(float(n.get(axis, 0.0)) for n in group) / len(group)

    def span(axis: str) -> float:
        means = [mean(g, axis) for g in ordered]
        return max(means) - min(means)

    vertical = span("y") > span("x")
    axis = "y" if vertical else "x"
    increasing = mean(ordered[-1], axis) >= mean(ordered[0], axis)
    return vertical, increasing if vertical else not increasing


def _hover(n: dict) -> str:
    domain = n.get("domain") or "ai.onnx"
    if n.get("status") == "collapsed":
        return f"{n.get('count', 1)} unchanged nodes<br>{n.get('label', '')}"
    name = n.get("name") or n.get("label") or n.get("id", "")
    extra = "<br>weights / constants only" if n.get("weight_only") else ""
    return f"<b>{n.get('op_type', '')}</b> ({domain})<br>{name}<br>{n.get('status', '')}{extra}"


def _pill(n: dict) -> str:
    label = str(n.get("label") or "")
    kind = "unchanged" if not label or "unchanged" in label else "more"  # diff's truncation node says "more"
    return f"×{int(n.get('count', 1))} {kind}"


def diff_graph_figure(view: dict) -> go.Figure:
    """A Plotly figure of a graph-diff view, data flowing left to right: removed red, added green, changed
    amber, unchanged grey, weight/constant nodes as small diamonds, collapsed unchanged runs as grey
    "×N unchanged" pills. Edges leave a node on its right and enter the next on its left with an arrowhead;
    edges of the old graph are dotted red. Short op labels; names on hover.

    Uses WebGL traces above ``GL_THRESHOLD`` points; drag pans, the wheel zooms.
    """
    nodes: list[dict] = list(view.get("nodes", []))
    edges: list[dict] = list(view.get("edges", []))
    use_gl = len(nodes) > GL_THRESHOLD
    scatter = go.Scattergl if use_gl else go.Scatter
    pos = {n["id"]: (float(n.get("x", 0.0)), float(n.get("y", 0.0))) for n in nodes}
    vertical, flip = _flow(nodes) if nodes else (False, False)
    increasing = flip if vertical else not flip
    step = 1.0 if increasing else -1.0  # one layer further along the flow, in axis units

    def along(p: tuple[float, float], d: float) -> tuple[float, float]:
        return (p[0], p[1] + d * step) if vertical else (p[0] + d * step, p[1])

    fig = go.Figure()
    arrows: dict[str, tuple[list, list]] = {}
    for kind in ("unchanged", "removed", "added"):
        ex: list[float | None] = []
        ey: list[float | None] = []
        ax, ay = arrows.setdefault(kind, ([], []))
        for e in edges:
            if e.get("status", "unchanged") != kind:
                continue
            a, b = pos.get(e.get("source")), pos.get(e.get("target"))
            if a is None or b is None:
                continue
            bends = [tuple(p) for p in e.get("points") or []]
            path = [a, along(a, 0.3), *bends, along(b, -0.3), b]
            ex += [p[0] for p in path] + [None]
            ey += [p[1] for p in path] + [None]
            tip = along(b, -0.3)
            ax.append(tip[0])
            ay.append(tip[1])
        if not ex:
            continue
        line = {"width": 1.6 if kind == "added" else 1.3, "color": EDGE_COLORS[kind]}
        if kind == "removed":
            line["dash"] = "dot"
        if not use_gl:
            line.update(shape="spline", smoothing=0.6)
        fig.add_trace(scatter(x=ex, y=ey, mode="lines", name=f"{kind} edges", hoverinfo="skip", showlegend=False,
                              line=line))
    symbol = "triangle-down" if vertical else "triangle-right"  # the axes are oriented so layers run down or right
    ax = [v for k in arrows for v in arrows[k][0]]
    ay = [v for k in arrows for v in arrows[k][1]]
    if ax:
        colours = [EDGE_COLORS[k] for k in arrows for _ in arrows[k][0]]
        fig.add_trace(scatter(x=ax, y=ay, mode="markers", name="arrows", hoverinfo="skip", showlegend=False,
                              marker={"symbol": symbol, "size": 9, "color": colours}))

    layer_size = Counter(n.get("layer", 0) for n in nodes)
    counts = Counter(n.get("status", "unchanged") for n in nodes)
    show_labels = len(nodes) <= LABEL_LIMIT

    def text_pos(group: list[dict]) -> list[str] | str:
        if vertical:
            return "middle right"
        # alternate above/below by layer so labels of neighbouring columns do not overlap
        return ["top center" if int(n.get("layer", 0)) % 2 == 0 else "bottom center" for n in group]

    def labels(group: list[dict]) -> list[str]:
        return [short_label(n) if layer_size[n.get("layer", 0)] <= CROWDED_LAYER else "" for n in group]

    weights = [n for n in nodes if n.get("weight_only") and n.get("status") != "collapsed"]
    for status in STATUS_ORDER:
        group = [n for n in nodes if n.get("status", "unchanged") == status and not
                 (n.get("weight_only") and status != "collapsed")]
        if not group:
            continue
        color = STATUS_COLORS[status]
        xs, ys = [pos[n["id"]][0] for n in group], [pos[n["id"]][1] for n in group]
        if status == "collapsed":
            hidden = sum(int(n.get("count", 1)) for n in group)
            fig.add_trace(scatter(
                x=xs, y=ys, mode="markers+text", name=f"collapsed ({hidden} nodes)",
                marker={"symbol": "square", "size": 14, "color": color, "line": {"width": 1, "color": "#8c8c8c"}},
                text=[_pill(n) for n in group], textposition=text_pos(group),
                textfont={"size": 13, "color": "#555555"},
                hovertext=[_hover(n) for n in group], hoverinfo="text",
            ))
            continue
        big = status != "unchanged"
        fig.add_trace(scatter(
            x=xs, y=ys, mode="markers+text" if show_labels else "markers",
            name=f"{status} ({counts[status]})",
            marker={"size": 18 if big else 14, "color": color,
                    "line": {"width": 1.5, "color": "#333333" if big else "#666666"}},
            text=labels(group) if show_labels else None, textposition=text_pos(group),
            textfont={"size": 15 if big else 14, "color": "#222222"},
            hovertext=[_hover(n) for n in group], hoverinfo="text",
        ))
    if weights:
        fig.add_trace(scatter(
            x=[pos[n["id"]][0] for n in weights], y=[pos[n["id"]][1] for n in weights], mode="markers",
            name=f"weights & constants ({len(weights)})",
            marker={"symbol": "diamond", "size": 10, "color": [STATUS_COLORS[n.get("status", "unchanged")] for n in weights],
                    "line": {"width": 1, "color": "#555555"}},
            hovertext=[_hover(n) for n in weights], hoverinfo="text",
        ))

    summary = " · ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
    flow, cross = ("yaxis", "xaxis") if vertical else ("xaxis", "yaxis")
    flow_values = [p[1] if vertical else p[0] for p in pos.values()] or [0.0]
    cross_values = [p[0] if vertical else p[1] for p in pos.values()] or [0.0]
    layers = len(layer_size) or 1
    rows = max(cross_values) - min(cross_values) + 1
    hidden_axis = {"showticklabels": False, "showgrid": False, "zeroline": False, "showline": False,
                   "ticks": "", "title": None}
    fig.update_layout(
        title={"text": summary or "empty graph", "font": {"size": 18}},
        dragmode="pan", hovermode="closest", plot_bgcolor="white", paper_bgcolor="white",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0,
                "font": {"size": 15}, "itemsizing": "constant"},
        hoverlabel={"font": {"size": 14}},
        margin={"l": 10, "r": 10, "t": 90, "b": 10},
        height=int(min(1100, max(420, 30 * layers))) if vertical else int(min(1100, max(380, 190 + ROW_PX * rows))),
        xaxis=hidden_axis, yaxis=hidden_axis, uirevision="graph-diff",
    )
    fig.layout[cross].autorange = "reversed"  # first row (or column) at the top (or left)
    lo, hi = min(flow_values), max(flow_values)
    long_graph = layers > INITIAL_LAYERS and hi > lo
    if long_graph:
        # Start zoomed on the first layers so labels stay readable; pan or the slider shows the rest.
        end = lo + (hi - lo) * INITIAL_LAYERS / layers
        fig.layout[flow].range = [end, lo - 0.8] if flip else [lo - 0.8, end]
    elif flip:
        fig.layout[flow].autorange = "reversed"
    else:
        fig.layout[flow].range = [lo - 0.8, hi + 1.2]
    if not vertical:
        pad = 0.9  # room for the labels above the top row and below the bottom one
        fig.layout[cross].update(range=[max(cross_values) + pad, min(cross_values) - pad], autorange=None)  # top row first
    if long_graph and not vertical and not use_gl:  # plotly's range slider does not draw WebGL traces
        fig.update_layout(xaxis={"rangeslider": {"visible": True, "thickness": 0.07, "bgcolor": "#f4f4f4"}})
    return fig
