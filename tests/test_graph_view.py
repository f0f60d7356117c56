"""The Plotly drawing of a graph-diff view."""

from __future__ import annotations

import time
from collections import Counter

import plotly.graph_objects as go
import pytest

from ortlab.ui.graph_view import GL_THRESHOLD, STATUS_COLORS, diff_graph_figure


@pytest.fixture(scope="module")
def digits_views(tmp_path_factory):
    """graph_view of the bundled digits CNN against its int8 static QDQ copy (calibrated on the bundled images,
    no graph optimization: every weight behind a DequantizeLinear) and its fp32 extended copy."""
    from ortlab.config import OptLevel, Precision, Recipe
    from ortlab.data import load_image_folder
    from ortlab.diff import graph_description
    from ortlab.ui.graph_layout import graph_view
    from ortlab.optimize import optimize_model
    from ortlab.pipeline import run_recipe
    from ortlab.samples import get_sample

    root = tmp_path_factory.mktemp("digits")
    sample = get_sample("digits_cnn")
    art = run_recipe(sample.model_path, Recipe(precision=Precision.INT8, opt_level=OptLevel.DISABLED), root / "int8",
                     dataset=load_image_folder(sample.calibration_dir), preprocess=sample.preprocess, verify_samples=4)
    fp32 = optimize_model(sample.model_path, root / "fp32.onnx", OptLevel.EXTENDED).path
    return {"int8": graph_view(graph_description(sample.model_path, art.model_path)),
            "fp32": graph_view(graph_description(sample.model_path, fp32))}


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


def t_arrows(fig: go.Figure):
    return traces_by_name(fig)["arrows"]


def test_colours_counts_edges_and_labels():
    view = synthetic_view(20)
    fig = diff_graph_figure(view)
    t = traces_by_name(fig)
    assert set(t) == {"unchanged edges", "arrows", "removed", "added", "changed", "unchanged", "collapsed"}
    assert all(isinstance(tr, go.Scatter) for tr in fig.data)  # small graph: SVG traces
    expected = {s: sum(1 for n in view["nodes"] if n["status"] == s) for s in STATUS_COLORS}
    assert expected == {"removed": 4, "added": 4, "changed": 4, "unchanged": 6, "collapsed": 2}
    for status, colour in STATUS_COLORS.items():
        assert t[status].marker.color == colour
        assert len(t[status].x) == expected[status]
    assert t["removed"].name == "removed (4)"
    assert t["collapsed"].name == "collapsed (34 nodes)"
    assert list(t["collapsed"].text) == ["×17 unchanged", "×17 unchanged"]
    # 19 edges, each leaving its source and entering its target along the flow: 4 points and a None
    edges = t["unchanged edges"]
    assert len(edges.x) == 19 * 5 and edges.y[4] is None and edges.showlegend is False
    src, dst = view["nodes"][0], view["nodes"][1]
    assert list(edges.x[:4]) == [src["x"]] * 4 and edges.y[0] == src["y"] < edges.y[1] < edges.y[2] < edges.y[3] == dst["y"]
    assert len(t["arrows"].x) == 19 and t["arrows"].marker.symbol == "triangle-down"  # one arrowhead per edge
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
    assert fig.layout.xaxis.autorange is None and fig.layout.xaxis.range[0] < 0  # first layer on the left
    lo, hi = fig.layout.yaxis.range
    assert lo > hi  # first row on top
    assert t_arrows(fig).marker.symbol == "triangle-right"
    # graph_layout.graph_view's truncation node ("N more nodes") is not called unchanged
    view["nodes"][-1].update(status="collapsed", count=250, label="250 more nodes (use focus to see them)")
    t = traces_by_name(diff_graph_figure(view))
    assert t["collapsed"].text[-1] == "×250 more"

    long = synthetic_view(120)  # 120 layers, 120 nodes: SVG, labelled, starts on the first 40 layers
    for n in long["nodes"]:
        n["x"], n["y"] = n["y"], n["x"]
    fig = diff_graph_figure(long)
    assert fig.layout.xaxis.rangeslider.visible is True
    lo, hi = fig.layout.xaxis.range
    assert lo == -0.8 and 35 < hi < 45


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
    assert sum(len(tr.x) for name, tr in t.items() if name in STATUS_COLORS) == 2000
    assert fig.layout.height <= 1100


def test_empty_view():
    fig = diff_graph_figure({"nodes": [], "edges": []})
    assert list(fig.data) == []
    assert fig.layout.title.text == "empty graph"


def test_real_diff_view(tmp_path):
    """The view graph_layout.graph_view lays out for a model and its ORT-optimized copy draws with every status."""
    from models import conv_bn_model
    from ortlab.config import OptLevel
    from ortlab.diff import graph_description
    from ortlab.ui.graph_layout import graph_view
    from ortlab.optimize import optimize_model

    src = conv_bn_model(tmp_path / "m.onnx")
    optimize_model(src, tmp_path / "opt.onnx", OptLevel.EXTENDED)
    view = graph_view(graph_description(src, tmp_path / "opt.onnx"))
    fig = diff_graph_figure(view)
    t = traces_by_name(fig)
    drawn = {name: len(tr.x) for name, tr in t.items() if name in STATUS_COLORS}
    expected = Counter(n["status"] for n in view["nodes"])
    assert drawn == dict(expected)
    assert expected["removed"] > 0 and expected["added"] > 0  # BatchNormalization fused away
    assert list(t["added"].text) == ["FusedConv"] * 3
    bn = list(t["removed"].text).index("BN")
    assert "<b>BatchNormalization</b>" in t["removed"].hovertext[bn]  # short label, full name on hover
    assert t["removed edges"].line.dash == "dot" and t["added edges"].line.color != t["unchanged edges"].line.color
    assert len(t["arrows"].x) == len(view["edges"]) and t["arrows"].marker.symbol == "triangle-right"
    assert fig.layout.xaxis.autorange is None and fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]


def test_quantized_digits_figure(digits_views):
    """int8 QDQ digits CNN: weight DequantizeLinear nodes are small unlabelled diamonds, Q/DQ labels are short,
    and the figure grows with the tallest layer."""
    from ortlab.ui.graph_view import short_label

    view = digits_views["int8"]
    fig = diff_graph_figure(view)
    t = traces_by_name(fig)
    weights = [n for n in view["nodes"] if n["weight_only"]]
    assert t["weights & constants"].name == f"weights & constants ({len(weights)})" and len(weights) == 20
    assert t["weights & constants"].marker.symbol == "diamond" and t["weights & constants"].text is None
    assert sum(len(tr.x) for name, tr in t.items() if name in STATUS_COLORS) + len(weights) == len(view["nodes"])
    added = [x for x in t["added"].text if x]
    assert "Q" in added and "DQ" in added and max(map(len, added)) <= len("QLinearGAP")
    assert "BN" in t["removed"].text
    assert short_label({"label": "com.microsoft::QuantizeLinear", "op_type": "QuantizeLinear"}) == "com.microsoft::Q"
    positions = set(t["added"].textposition)
    assert positions == {"top center", "bottom center"}  # alternating by column
    fp32 = diff_graph_figure(digits_views["fp32"])
    rows = lambda v: max(n["y"] for n in v["nodes"]) - min(n["y"] for n in v["nodes"])
    assert rows(view) > rows(digits_views["fp32"]) and fig.layout.height > fp32.layout.height
