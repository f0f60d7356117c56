"""The Plotly drawing of a graph-diff view."""

from __future__ import annotations

import time
from collections import Counter

import plotly.graph_objects as go

from ortlab.ui.graph_view import GL_THRESHOLD, STATUS_COLORS, diff_graph_figure


def synthetic_view(n_layers: int, per_layer: int = 1) -> dict:
    """Layers top to bottom; statuses cycle so every kind appears; one collapsed run of 17 per 10 layers."""
    cycle = ["unchanged", "removed", "added", "changed", "unchanged"]
    nodes, edges = [], []
    for layer in range(n_layers):
        for k in range(per_layer):
            i = layer * per_layer + k
            status = "collapsed" if layer % 10 == 9 and k == 0 else cycle[i % len(cycle)]
            label = "17 unchanged (Conv×9, Relu×8)" if status == "collapsed" else ("Conv" if i % 2 else "Relu")
            nodes.append({"id": f"n{i}", "label": label, "op_type": "Conv" if i % 2 else "Relu",
                          "domain": "com.microsoft" if status == "added" else "", "status": status,
                          "layer": layer, "x": float(k), "y": float(layer), "count": 17 if status == "collapsed" else 1,
                          "name": f"block{layer}/node{k}"})
            if layer:
                edges.append({"source": f"n{(layer - 1) * per_layer + k}", "target": f"n{i}"})
    return {"nodes": nodes, "edges": edges}


def traces_by_name(fig: go.Figure) -> dict[str, go.BaseTraceType]:
    return {t.name.split(" (")[0]: t for t in fig.data}


def test_colours_counts_edges_and_labels():
    view = synthetic_view(20)
    fig = diff_graph_figure(view)
    t = traces_by_name(fig)
    assert set(t) == {"edges", "removed", "added", "changed", "unchanged", "collapsed"}
    assert all(isinstance(tr, go.Scatter) for tr in fig.data)  # small graph: SVG traces
    expected = {s: sum(1 for n in view["nodes"] if n["status"] == s) for s in STATUS_COLORS}
    assert expected == {"removed": 4, "added": 4, "changed": 4, "unchanged": 6, "collapsed": 2}
    for status, colour in STATUS_COLORS.items():
        assert t[status].marker.color == colour
        assert len(t[status].x) == expected[status]
    assert t["removed"].name == "removed (4)"
    assert t["collapsed"].name == "collapsed (34 nodes)"
    assert list(t["collapsed"].text) == ["×17 unchanged", "×17 unchanged"]
    # 19 edges, each as (a, b, None)
    assert len(t["edges"].x) == 19 * 3 and t["edges"].x[2] is None and t["edges"].showlegend is False
    assert t["edges"].line.width < 1
    added = t["added"]
    assert "com.microsoft" in added.hovertext[0] and "/node0" in added.hovertext[0]
    assert "(ai.onnx)" in t["removed"].hovertext[0]
    assert fig.layout.dragmode == "pan"
    assert fig.layout.yaxis.autorange == "reversed"  # layer 0 at the top
    assert fig.layout.title.text == "4 removed · 4 added · 4 changed · 6 unchanged · 2 collapsed"


def test_horizontal_layout_long_graph_starts_zoomed_with_range_slider():
    view = synthetic_view(12)
    for n in view["nodes"]:
        n["x"], n["y"] = n["y"], n["x"]
    fig = diff_graph_figure(view)
    assert not fig.layout.xaxis.rangeslider.visible  # short graph: everything fits, no slider
    assert fig.layout.xaxis.autorange is None  # first layer on the left
    assert fig.layout.yaxis.autorange == "reversed"  # first row on top
    # diff.graph_view's truncation node ("N more nodes") is not called unchanged
    view["nodes"][-1].update(status="collapsed", count=250, label="250 more nodes (use focus to see them)")
    t = traces_by_name(diff_graph_figure(view))
    assert t["collapsed"].text[-1] == "×250 more"

    long = synthetic_view(120)  # 120 layers, 120 nodes: SVG, labelled, starts on the first 60 layers
    for n in long["nodes"]:
        n["x"], n["y"] = n["y"], n["x"]
    fig = diff_graph_figure(long)
    assert fig.layout.xaxis.rangeslider.visible is True
    lo, hi = fig.layout.xaxis.range
    assert lo == -0.5 and 55 < hi < 65


def test_large_view_uses_webgl_and_stays_fast():
    view = synthetic_view(400, per_layer=5)  # 2,000 nodes
    assert len(view["nodes"]) > GL_THRESHOLD
    start = time.perf_counter()
    fig = diff_graph_figure(view)
    fig.to_json()
    assert time.perf_counter() - start < 3.0
    assert all(isinstance(tr, go.Scattergl) for tr in fig.data)
    t = traces_by_name(fig)
    assert t["unchanged"].text is None  # no labels on big graphs, hover only
    assert sum(len(tr.x) for name, tr in t.items() if name != "edges") == 2000
    assert fig.layout.height <= 1100


def test_empty_view():
    fig = diff_graph_figure({"nodes": [], "edges": []})
    assert [tr.name for tr in fig.data] == ["edges"]
    assert fig.layout.title.text == "empty graph"


def test_real_diff_view(tmp_path):
    """The view diff.graph_view builds for a model and its ORT-optimized copy draws with every status."""
    from models import conv_bn_model
    from ortlab.config import OptLevel
    from ortlab.diff import graph_view
    from ortlab.optimize import optimize_model

    src = conv_bn_model(tmp_path / "m.onnx")
    optimize_model(src, tmp_path / "opt.onnx", OptLevel.EXTENDED)
    view = graph_view(src, tmp_path / "opt.onnx")
    fig = diff_graph_figure(view)
    t = traces_by_name(fig)
    drawn = {name: len(tr.x) for name, tr in t.items() if name != "edges"}
    expected = Counter(n["status"] for n in view["nodes"])
    assert drawn == dict(expected)
    assert expected["removed"] > 0 and expected["added"] > 0  # BatchNormalization fused away
    assert "FusedConv" in " ".join(t["added"].text) or "Conv" in " ".join(t["added"].text)
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.xaxis.autorange is None  # left to right
