"""Plotly drawing of the layered graph diff produced by ``ortlab.diff.graph_view``."""

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
STATUS_ORDER = ("removed", "added", "changed", "unchanged", "collapsed")
GL_THRESHOLD = 500
LABEL_LIMIT = 150
INITIAL_LAYERS = 60


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

    vertical = span("y") >= span("x")
    axis = "y" if vertical else "x"
    increasing = mean(ordered[-1], axis) >= mean(ordered[0], axis)
    return vertical, increasing if vertical else not increasing


def _hover(n: dict) -> str:
    domain = n.get("domain") or "ai.onnx"
    if n.get("status") == "collapsed":
        return f"{n.get('count', 1)} unchanged nodes<br>{n.get('label', '')}"
    name = n.get("name") or n.get("label") or n.get("id", "")
    return f"<b>{n.get('op_type', '')}</b> ({domain})<br>{name}<br>{n.get('status', '')}"


def _pill(n: dict) -> str:
    label = str(n.get("label") or "")
    kind = "unchanged" if not label or "unchanged" in label else "more"  # diff's truncation node says "more"
    return f"×{int(n.get('count', 1))} {kind}"


def diff_graph_figure(view: dict) -> go.Figure:
    """A Plotly figure of a graph-diff view: removed red, added green, changed amber, unchanged grey,
    collapsed unchanged runs as small grey "×N unchanged" pills; edges as thin lines.

    Uses WebGL traces above ``GL_THRESHOLD`` points; drag pans, the wheel zooms.
    """
    nodes: list[dict] = list(view.get("nodes", []))
    edges: list[dict] = list(view.get("edges", []))
    use_gl = len(nodes) > GL_THRESHOLD
    scatter = go.Scattergl if use_gl else go.Scatter
    pos = {n["id"]: (float(n.get("x", 0.0)), float(n.get("y", 0.0))) for n in nodes}
    vertical, flip = _flow(nodes) if nodes else (True, True)

    def text_pos(group: list[dict]) -> list[str] | str:
        if vertical:
            return "middle right"
        # Alternate above/below by layer so neighbouring labels do not overlap.
        return ["top center" if int(n.get("layer", 0)) % 2 == 0 else "bottom center" for n in group]

    ex: list[float | None] = []
    ey: list[float | None] = []
    for e in edges:
        a, b = pos.get(e.get("source")), pos.get(e.get("target"))
        if a is None or b is None:
            continue
        ex += [a[0], b[0], None]
        ey += [a[1], b[1], None]

    fig = go.Figure()
    fig.add_trace(scatter(x=ex, y=ey, mode="lines", name="edges", hoverinfo="skip", showlegend=False,
                          line={"width": 0.8, "color": "#b0b0b0"}))

    counts = Counter(n.get("status", "unchanged") for n in nodes)
    show_labels = len(nodes) <= LABEL_LIMIT
    for status in STATUS_ORDER:
        group = [n for n in nodes if n.get("status", "unchanged") == status]
        if not group:
            continue
        color = STATUS_COLORS[status]
        if status == "collapsed":
            hidden = sum(int(n.get("count", 1)) for n in group)
            fig.add_trace(scatter(
                x=[pos[n["id"]][0] for n in group], y=[pos[n["id"]][1] for n in group],
                mode="markers+text", name=f"collapsed ({hidden} nodes)",
                marker={"symbol": "square", "size": 12, "color": color, "line": {"width": 1, "color": "#8c8c8c"}},
                text=[_pill(n) for n in group],
                textposition=text_pos(group), textfont={"size": 11, "color": "#6b6b6b"},
                hovertext=[_hover(n) for n in group], hoverinfo="text",
            ))
            continue
        big = status != "unchanged"
        fig.add_trace(scatter(
            x=[pos[n["id"]][0] for n in group], y=[pos[n["id"]][1] for n in group],
            mode="markers+text" if show_labels else "markers",
            name=f"{status} ({counts[status]})",
            marker={"size": 14 if big else 10, "color": color, "line": {"width": 1, "color": "#333333" if big else "#777777"}},
            text=[n.get("label") or n.get("op_type", "") for n in group] if show_labels else None,
            textposition=text_pos(group), textfont={"size": 12 if big else 10},
            hovertext=[_hover(n) for n in group], hoverinfo="text",
        ))

    summary = " · ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
    flow, cross = ("yaxis", "xaxis") if vertical else ("xaxis", "yaxis")
    flow_values = [p[1] if vertical else p[0] for p in pos.values()] or [0.0]
    cross_values = [p[0] if vertical else p[1] for p in pos.values()] or [0.0]
    layers = len({n.get("layer", 0) for n in nodes}) or 1
    rows = max(cross_values) - min(cross_values) + 1
    hidden_axis = {"showticklabels": False, "showgrid": False, "zeroline": False, "showline": False,
                   "ticks": "", "title": None}
    fig.update_layout(
        title={"text": summary or "empty graph", "font": {"size": 16}},
        dragmode="pan", hovermode="closest", plot_bgcolor="white", paper_bgcolor="white",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0,
                "font": {"size": 13}},
        margin={"l": 10, "r": 10, "t": 80, "b": 10},
        height=int(min(1100, max(420, 30 * layers))) if vertical else int(min(900, max(380, 300 + 60 * rows))),
        xaxis=hidden_axis, yaxis=hidden_axis, uirevision="graph-diff",
    )
    fig.layout[cross].autorange = "reversed"  # first row (or column) at the top (or left)
    lo, hi = min(flow_values), max(flow_values)
    long_graph = layers > INITIAL_LAYERS and hi > lo
    if long_graph:
        # Start zoomed on the first layers so labels stay readable; pan or the slider shows the rest.
        end = lo + (hi - lo) * INITIAL_LAYERS / layers
        fig.layout[flow].range = [end, lo - 0.5] if flip else [lo - 0.5, end]
    elif flip:
        fig.layout[flow].autorange = "reversed"
    if long_graph and not vertical and not use_gl:  # plotly's range slider does not draw WebGL traces
        fig.update_layout(xaxis={"rangeslider": {"visible": True, "thickness": 0.07, "bgcolor": "#f4f4f4"}})
    return fig
