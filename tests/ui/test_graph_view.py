"""The graph-diff view: grouping, overlay, escaping and the Cytoscape.js component's files."""

from __future__ import annotations

import json
import re
from collections import Counter

import onnx
import pytest

from tests.support.models import big_chain_model, conv_bn_model
from ortlab.settings.config import OptLevel
from ortlab.model.diff_view import graph_description
from ortlab.transforms.optimize import optimize_model
from ortlab.ui.graph.graph_view import (COMPONENT_DIR, DEFAULT_BUDGET, SIDES, build_view, component_args, overlay_color,
                                  visible_elements)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    src = big_chain_model(root / "big.onnx", n_nodes=2000)
    return src, optimize_model(src, root / "ext.onnx", OptLevel.EXTENDED).path


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    src = conv_bn_model(root / "conv.onnx")
    return src, optimize_model(src, root / "ext.onnx", OptLevel.EXTENDED).path


def nodes_of(view: dict, side: str = "after", opened: set[str] | None = None) -> list[dict]:
    """The nodes a pane draws (with ``opened`` groups open; default: as it opens)."""
    return [d for d in visible_elements(view["panes"][side], opened) if "source" not in d]


def edges_of(view: dict, side: str = "after", opened: set[str] | None = None) -> list[dict]:
    return [d for d in visible_elements(view["panes"][side], opened) if "source" in d]


def check_elements(view: dict) -> None:
    for side in SIDES:
        pane = view["panes"][side]
        every = [e["data"]["id"] for e in pane["elements"]]
        assert len(every) == len(set(every))
        assert all(e["data"].get("parent") is None or e["data"]["parent"] in every for e in pane["elements"])
        ids = [n["id"] for n in nodes_of(view, side)]
        for n in nodes_of(view, side):
            assert n.get("parent") is None or n["parent"] in ids
        for e in edges_of(view, side):
            assert e["source"] in ids and e["target"] in ids and e["source"] != e["target"]
    json.dumps(view)  # plain data only


def test_a_2000_node_model_opens_grouped_on_both_sides_with_a_bounded_number_of_elements(big):
    desc = graph_description(*big)
    assert len(desc["nodes"]) == 2501
    for d in (desc, graph_description(big[0], big[0])):
        view = build_view(d)
        check_elements(view)
        for side in SIDES:
            assert 0 < view["panes"][side]["visible"] == len(nodes_of(view, side)) <= DEFAULT_BUDGET
            assert len(edges_of(view, side)) <= 3 * DEFAULT_BUDGET
            closed = [n for n in nodes_of(view, side) if n.get("group") and not n["open"]]
            total = view["panes"][side]["total_nodes"]
            assert closed and sum(n["count"] for n in closed) > total - DEFAULT_BUDGET  # folded, not dropped
    # before: the 2,000 nodes of the source; after: the optimized graph (500 FusedGemm replace 1,501 nodes)
    view = build_view(desc)
    n_before, n_after = (len(onnx.load(str(f), load_external_data=False).graph.node) for f in big)
    assert view["panes"]["before"]["total_nodes"] == n_before >= 2000
    assert view["panes"]["after"]["total_nodes"] == n_after == n_before - 1501 + 500
    # opening a layer (on the client; computed here the same way) shows its members on each side
    layer = next(n for n in nodes_of(view) if n.get("group") == "scope" and not n["open"])
    for side, ops in (("after", {"FusedGemm", "Add"}), ("before", {"MatMul", "Add", "Relu"})):
        opened = set(view["panes"][side]["open"]) | {layer["id"]}
        inside = [n for n in nodes_of(view, side, opened) if n.get("parent") == layer["id"]]
        assert {view["details"][n["id"]]["op_type"] for n in inside} >= ops, side
        assert len(nodes_of(view, side, opened)) <= DEFAULT_BUDGET + 10


def test_focus_keeps_the_neighbourhood(big):
    desc = graph_description(*big)
    view = build_view(desc, focus="l250/Relu")
    check_elements(view)
    assert view["focus_matches"] == 1
    names = {view["details"][n]["name"] for n in view["details"]}
    assert {"l250/MatMul", "l250/Add", "l250/Relu", "l250/Residual"} <= names
    empty = build_view(desc, focus="NoSuchOp")
    assert all(p["elements"] == [] for p in empty["panes"].values())


def test_small_model_side_by_side_with_scopes_and_matched_ids(conv):
    desc = graph_description(*conv)
    view = build_view(desc)
    check_elements(view)
    before = [n for n in nodes_of(view, "before") if not n.get("group")]
    after = [n for n in nodes_of(view, "after") if not n.get("group")]
    # a FusedConv keeps its Conv's name: one node, drawn (label) and described (details) as Conv before
    ops = {side: Counter((view["details"][n["id"]]["before_op_type"] if side == "before" else "")
                         or view["details"][n["id"]]["op_type"] for n in nodes)
           for side, nodes in (("before", before), ("after", after))}
    assert ops["before"]["Conv"] == ops["before"]["BatchNormalization"] == ops["before"]["Relu"] == 3
    assert Counter(n["label"].split("\n")[-1] for n in before)["Conv"] == 3
    assert ops["after"]["FusedConv"] == 3 and not ops["after"]["BatchNormalization"]
    assert Counter(n["kind"] for n in before)["fused"] == 9 and Counter(n["kind"] for n in after)["fused"] == 3
    for side, layers in (("before", {"s:block0", "s:block1", "s:block2"}), ("after", {"s:block1", "s:block2"})):
        scopes = {n["id"]: n for n in nodes_of(view, side) if n.get("group") == "scope"}
        assert layers <= set(scopes) and all(scopes[s]["open"] for s in scopes)
    # a node kept across the change has one id on both sides; a removed one points at its replacement
    assert {n["id"] for n in before} & {n["id"] for n in after}
    assert all(view["affinity"][n["id"]] in {m["id"] for m in after} for n in before if n["id"].startswith("b"))
    labels = [n["label"] for n in before + after]
    assert all(1 <= len(x.split("\n")) <= 2 for x in labels)
    # every op label fits its box: the box is as wide as its longest line
    assert all(n["w"] >= 7 * max(len(x) for x in n["label"].split("\n")) for n in before + after)
    assert view["header"].startswith(f"{desc['counts']['removed']} removed")


def test_markup_in_node_names_stays_text(tmp_path):
    """A node named like an HTML payload reaches the component as plain JSON text, and the component's code
    only ever puts model text into the page with textContent (canvas labels otherwise)."""
    import onnx
    from onnx import TensorProto, helper

    evil = "<img src=x onerror=alert(1)>"
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name=evil), helper.make_node("Neg", ["y"], ["z"], name=f"a/{evil}")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(tmp_path / "evil.onnx"))
    view = build_view(graph_description(tmp_path / "evil.onnx", tmp_path / "evil.onnx"))
    args = component_args(view, 600, titles=(evil, "b"))
    assert {d["name"] for d in args["details"].values()} == {evil, f"a/{evil}"}
    ops = [e["data"] for p in args["panes"].values() for e in p["elements"] if "group" not in e["data"]]
    assert all(evil not in n["label"] or n["label"].endswith(evil[:28]) or "\n" in n["label"] for n in ops)
    assert args["titles"][0] == evil
    text = json.dumps(args)
    assert json.loads(text) == args  # data, not markup: the iframe gets it through JSON
    js = (COMPONENT_DIR / "ortlab-graphdiff.js").read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", js)
    assert "textContent" in js


def test_overlay_values_reach_both_panes(conv):
    desc = graph_description(*conv)
    names = [n["name"] for n in desc["nodes"].values() if n["status"] != "removed"]
    values = {name: float(k) for k, name in enumerate(names)}
    values["block0/BatchNormalization"] = 100.0  # a removed node's name: drawn on the before side
    view = build_view(desc, overlay=values, overlay_label="per-node error")
    args = component_args(view, 600)
    assert args["overlay"]["label"] == "per-node error"

    def drawn(v: dict, side: str) -> dict[str, dict]:
        names_of = {k: (d["matched"] if side == "before" and d["matched"] else d["name"]) for k, d in v["details"].items()}
        return {names_of[e["data"]["id"]]: e["data"] for e in v["panes"][side]["elements"]
                if "group" not in e["data"] and "value" in e["data"]}

    after, before = drawn(view, "after"), drawn(view, "before")
    assert set(after) == set(names)
    assert before["block0/BatchNormalization"]["value_color"] == overlay_color(1.0) == "#bd0026"  # the worst, red
    worst = max(names, key=lambda k: values[k])
    assert after[worst]["value"] == values[worst]
    best = min(values, key=lambda k: values[k])
    assert after[best]["value_color"] == overlay_color(0.0) == "#ffffcc"
    # a group shows the worst value of its members
    box = next(e["data"] for e in view["panes"]["before"]["elements"] if e["data"]["id"] == "s:block0")
    assert box["value"] == 100.0
    # lower-is-worse values (e.g. SQNR): the lowest is red
    low = build_view(desc, overlay=values, higher_is_worse=False)
    assert drawn(low, "after")[best]["value_color"] == "#bd0026"
    assert build_view(desc)["overlay"] is None


def test_component_files_reference_no_outside_host():
    files = sorted(p.name for p in COMPONENT_DIR.iterdir())
    assert files == ["LICENSES.txt", "cytoscape-dagre.min.js", "cytoscape.min.js", "index.html",
                     "ortlab-graphdiff.css", "ortlab-graphdiff.js"]
    html = (COMPONENT_DIR / "index.html").read_text()
    assert "default-src 'self'" in html
    for ref in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert "/" not in ref and ":" not in ref, ref  # files next to index.html only
    # the only absolute URLs in the code are licence and project links inside comments
    allowed = {"http://en.wikipedia.org/wiki/MIT_License", "http://engelschall.com",
               "http://opensource.org/licenses/MIT", "https://github.com/cytoscape/cytoscape.js-dagre"}
    for name in ("cytoscape.min.js", "cytoscape-dagre.min.js", "ortlab-graphdiff.js", "ortlab-graphdiff.css"):
        text = (COMPONENT_DIR / name).read_text()
        urls = set(re.findall(r"(?:https?:)?//[a-z0-9-]+\.[a-z0-9.-]+[^\s\"')]*", text, flags=re.I))
        urls = {u for u in urls if u.startswith("http")}
        assert urls <= allowed, (name, urls - allowed)
        assert not re.search(r"fonts\.googleapis|cdn\.|unpkg|jsdelivr", text)


def test_the_view_of_the_2000_node_model_is_built_quickly_enough_to_draw(big):
    """Not a timing test (bench/bench_graph_diff.py measures); a guard against pathological growth."""
    desc = graph_description(*big)
    view = build_view(desc)
    assert len(json.dumps(component_args(view, 700))) < 2_500_000  # both sides' whole trees, with details


def test_the_component_opens_groups_itself_and_sends_nothing_back():
    """Opening a group must not rerun the page: the component never sets a value (which would rerun Streamlit)."""
    js = (COMPONENT_DIR / "ortlab-graphdiff.js").read_text()
    assert "setComponentValue" not in js
    assert "Pane.prototype.toggle" in js and "cy.zoom(zoom)" in js
    html = (COMPONENT_DIR / "index.html").read_text()
    assert 'id="cy-before"' in html and 'id="cy-after"' in html


def test_constant_nodes_are_data_and_not_drawn_unless_asked_for(tmp_path):
    """A Paddle-style export holds every weight in a Constant node; int8 quantization moves them into initializers.
    The panes leave Constant nodes out (a count says so), and a focus on "Constant" shows them."""
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    consts = [helper.make_node("Constant", [], [f"w{k}"], name=f"const{k}",
                               value=numpy_helper.from_array(np.full((4, 4), k, np.float32))) for k in range(5)]
    mats = [helper.make_node("MatMul", ["x" if k == 0 else f"h{k - 1}", f"w{k}"], [f"h{k}" if k < 4 else "y"],
                             name=f"mm{k}") for k in range(5)]
    g = helper.make_graph(consts + mats, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
    desc = graph_description(src, src)
    assert sum(n["op_type"] == "Constant" for n in desc["nodes"].values()) == 5
    view = build_view(desc)
    drawn = {side: [e["data"] for e in view["panes"][side]["elements"] if not e["data"].get("group")] for side in SIDES}
    names = {side: {d.get("label", "") for d in drawn[side]} for side in SIDES}
    assert view["constants_hidden"] == 5 and view["total_nodes"] == 5
    assert all(not any("Constant" in x for x in names[side]) for side in SIDES), names
    focused = build_view(desc, focus="Constant")
    assert focused["focus_matches"] == 5 and focused["constants_hidden"] == 0
    assert any("const" in json.dumps(focused["panes"][side]["elements"]) for side in SIDES)


def test_a_search_names_its_hits_on_each_side_for_the_component(conv):
    """The component lights and fits the view to ``found``: a side's own hits, else what stands for them across
    a fusion (a removed BatchNormalization: the FusedConv that replaced it)."""
    desc = graph_description(*conv)
    view = build_view(desc, focus="BatchNormalization")
    ops = {side: {view["details"][k]["op_type"] for k in view["found"][side]} for side in SIDES}
    assert ops == {"before": {"BatchNormalization"}, "after": {"FusedConv"}}, ops
    for side in SIDES:  # every hit is a drawn node of its pane
        ids = {e["data"]["id"] for e in view["panes"][side]["elements"] if "group" not in e["data"]}
        assert set(view["found"][side]) <= ids
    args = component_args(view, 600)
    assert args["found"] == view["found"] and args["search"] == "BatchNormalization"
    conv_hits = build_view(desc, focus="Conv")["found"]
    assert all(conv_hits[side] for side in SIDES)
    whole = component_args(build_view(desc), 600)
    assert whole["found"] == {"before": [], "after": []} and whole["search"] is None
