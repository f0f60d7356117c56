"""The two panes of the graph diff share their groups: a group and its twin on the other side (the same name
scope, the same part of the graph) open and close together, decided once for both sides in ``graph_view``."""

from __future__ import annotations

import pytest

from tests.support.models import big_chain_model, conv_bn_model
from ortlab.model.diff_view import graph_description
from ortlab.settings.config import OptLevel
from ortlab.transforms.optimize import optimize_model
from ortlab.ui.graph.graph_view import SIDES, build_view, visible_elements


def describe(before: list[tuple[str, str]], after: list[tuple[str, str, bool]], affinity: dict | None = None
             ) -> dict:
    """A graph description by hand, each side a chain: ``before`` [(scope path, op)], ``after`` [(scope path,
    op, matched)]; the k-th matched after node is the k-th before node (kind "changed", so that no run of
    unchanged nodes folds them), the before nodes left over are removed (``b<i>``), unmatched after nodes
    added (kind "quantized")."""
    nodes: dict[str, dict] = {}
    before_ids: list[str] = []
    matched = iter(range(len(before)))
    for j, (scope, op, is_matched) in enumerate(after):
        d = {"name": f"/{scope}/{op}_{j}", "op_type": op, "label": op, "scope": scope.split("/"),
             "order": float(j), "status": "changed" if is_matched else "added",
             "kind": "changed" if is_matched else "quantized"}
        if is_matched:
            i = next(matched)
            d.update(matched=f"/{before[i][0]}/{before[i][1]}_{i}", before_scope=before[i][0].split("/"),
                     before_order=float(i))
            before_ids.append(f"a{j}")
        nodes[f"a{j}"] = d
    for i in range(len(before_ids), len(before)):
        scope, op = before[i]
        nodes[f"b{i}"] = {"name": f"/{scope}/{op}_{i}", "op_type": op, "label": op, "scope": scope.split("/"),
                          "order": len(after) + i, "before_order": float(i), "status": "removed", "kind": "removed"}
        before_ids.append(f"b{i}")
    after_ids = [f"a{j}" for j in range(len(after))]
    chain = [[s, d] for ids in (before_ids, after_ids) for s, d in zip(ids, ids[1:])]
    return {"nodes": nodes, "edges": chain, "edges_before": [[s, d] for s, d in zip(before_ids, before_ids[1:])],
            "edges_after": [[s, d] for s, d in zip(after_ids, after_ids[1:])], "affinity": affinity or {},
            "counts": {}}


def twins(view: dict) -> dict[str, str]:
    """{before group: its twin after}, checked to be one to one and the same both ways."""
    out: dict[str, str] = {}
    back: dict[str, str] = {}
    for side, into in (("before", out), ("after", back)):
        for e in view["panes"][side]["elements"]:
            if "twin" in e["data"]:
                into[e["data"]["id"]] = e["data"]["twin"]
    assert back == {b: a for a, b in out.items()}
    return out


def assert_shared(view: dict) -> None:
    before, after = (set(view["panes"][s]["open"]) for s in SIDES)
    for a, b in twins(view).items():
        assert (a in before) == (b in after), (a, b)


def test_a_scope_that_fits_on_one_side_only_stays_closed_on_both():
    """Four layers of four nodes; after quantization the first layer holds ten more nodes. With room for 20
    elements a side, the before side alone would open all four layers; the after side only the first."""
    before = [(f"L{k}", op) for k in range(4) for op in ("Conv", "Relu", "Add", "Mul")]
    after = ([("L0", "QuantizeLinear", False)] * 10 + [("L0", op, True) for op in ("Conv", "Relu", "Add", "Mul")]
             + [(f"L{k}", op, True) for k in range(1, 4) for op in ("Conv", "Relu", "Add", "Mul")])
    view = build_view(describe(before, after), budget=20)
    for side in SIDES:
        assert set(view["panes"][side]["open"]) == {"s:L0"}, side
        assert view["panes"][side]["visible"] <= 20
    assert twins(view) == {f"s:L{k}": f"s:L{k}" for k in range(4)}
    assert_shared(view)


def test_a_scope_in_two_stretches_pairs_with_the_stretch_that_holds_its_nodes():
    """QDQ puts a layer's weight DequantizeLinear nodes first in the graph: after has ``layer2`` twice (the
    weights, then the layer itself, ``s:layer2#2``). The before ``layer2`` is the second stretch's twin, and
    closing it closes that stretch, not the weights."""
    before = [("stem", "Conv"), ("stem", "Relu")] + [("layer2", op) for op in ("Conv", "Relu", "Conv", "Add")]
    after = ([("layer2", "DequantizeLinear", False)] * 2 + [("stem", "Conv", True), ("stem", "Relu", True)]
             + [("layer2", op, True) for op in ("Conv", "Relu", "Conv", "Add")])
    view = build_view(describe(before, after))
    assert twins(view) == {"s:stem": "s:stem", "s:layer2": "s:layer2#2"}
    assert_shared(view)


def test_a_removed_node_counts_as_the_node_that_replaced_it_when_pairing():
    """Conv+BatchNormalization+Relu fused into one node per layer: the layers pair by their fused nodes."""
    before = [(f"block{k}", op) for k in range(3) for op in ("Conv", "BatchNormalization", "Relu")]
    after = [(f"block{k}", op, False) for k in range(3) for op in ("FusedConv", "Identity")]
    desc = describe(before, after, affinity={f"b{3 * k + i}": f"a{2 * k}" for k in range(3) for i in range(3)})
    view = build_view(desc)
    assert twins(view) == {f"s:block{k}": f"s:block{k}" for k in range(3)}
    assert_shared(view)


@pytest.fixture(scope="module")
def real_pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared")
    big = big_chain_model(root / "big.onnx", n_nodes=2000)
    conv = conv_bn_model(root / "conv.onnx")
    return [(src, optimize_model(src, root / f"{src.stem}_ext.onnx", OptLevel.EXTENDED).path) for src in (big, conv)]


def test_real_models_open_the_same_groups_on_both_sides_within_the_budget(real_pairs):
    for src, dst in real_pairs:
        for budget in (40, 120):
            view = build_view(graph_description(src, dst), budget=budget)
            assert twins(view)
            assert_shared(view)
            for side in SIDES:
                pane = view["panes"][side]
                assert pane["visible"] == len([d for d in visible_elements(pane) if "source" not in d]) <= budget
