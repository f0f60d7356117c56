"""The graph-diff view: grouping, overlay, escaping and the Cytoscape.js component's files."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from models import big_chain_model, conv_bn_model
from ortlab.config import OptLevel
from ortlab.diff import graph_description
from ortlab.optimize import optimize_model
from ortlab.ui.graph_view import COMPONENT_DIR, DEFAULT_BUDGET, build_view, component_args, overlay_color


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


def nodes_of(view: dict) -> list[dict]:
    return [e["data"] for e in view["elements"] if "source" not in e["data"]]


def edges_of(view: dict) -> list[dict]:
    return [e["data"] for e in view["elements"] if "source" in e["data"]]


def check_elements(view: dict) -> None:
    ids = [n["id"] for n in nodes_of(view)]
    assert len(ids) == len(set(ids))
    for n in nodes_of(view):
        assert n.get("parent") is None or n["parent"] in ids
    for e in edges_of(view):
        assert e["source"] in ids and e["target"] in ids and e["source"] != e["target"]
    json.dumps(view)  # plain data only


def test_a_2000_node_model_opens_grouped_with_a_bounded_number_of_elements(big):
    desc = graph_description(*big)
    assert len(desc["nodes"]) == 2501
    for d in (desc, graph_description(big[0], big[0])):
        view = build_view(d)
        check_elements(view)
        assert view["visible"] <= DEFAULT_BUDGET and len(edges_of(view)) <= 3 * DEFAULT_BUDGET
        closed = [n for n in nodes_of(view) if n.get("group") and not n["open"]]
        assert closed and sum(n["count"] for n in closed) > 2000 - DEFAULT_BUDGET  # the rest is folded, not dropped
    # opening a group shows its members, still bounded
    view = build_view(desc)
    layer = next(n for n in nodes_of(view) if n.get("group") == "scope" and not n["open"])
    opened = build_view(desc, overrides={layer["id"]: True})
    inside = [n for n in nodes_of(opened) if n.get("parent") == layer["id"]]
    assert {n["details"]["op_type"] for n in inside} >= {"FusedGemm", "MatMul", "Add", "Relu"}
    assert opened["visible"] <= DEFAULT_BUDGET + 10
    closed_again = build_view(desc, overrides={layer["id"]: False})
    assert any(n["id"] == layer["id"] and not n["open"] for n in nodes_of(closed_again))


def test_focus_keeps_the_neighbourhood(big):
    desc = graph_description(*big)
    view = build_view(desc, focus="l250/Relu")
    check_elements(view)
    assert view["focus_matches"] == 1
    names = {n["details"]["name"] for n in nodes_of(view) if "details" in n}
    assert {"l250/MatMul", "l250/Add", "l250/Relu", "l250/Residual"} <= names
    assert build_view(desc, focus="NoSuchOp")["elements"] == []


def test_small_model_is_shown_whole_with_scopes_and_fusion_links(conv):
    desc = graph_description(*conv)
    view = build_view(desc)
    check_elements(view)
    ops = [n for n in nodes_of(view) if "details" in n]
    assert Counter(n["kind"] for n in ops)["fused"] == 9 + 3  # Conv+BN+Relu ×3 removed, FusedConv ×3
    scopes = {n["id"]: n for n in nodes_of(view) if n.get("group") == "scope"}
    assert {"s:block0", "s:block1", "s:block2"} <= set(scopes) and all(scopes[s]["open"] for s in scopes)
    assert sum(1 for e in edges_of(view) if e["kind"] == "fused") == 9
    labels = [n["label"] for n in ops]
    assert all(1 <= len(x.split("\n")) <= 2 for x in labels)
    # every op label fits its box: the box is as wide as its longest line
    assert all(n["w"] >= 7 * max(len(x) for x in n["label"].split("\n")) for n in ops)
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
    args = component_args(view, 600)
    ops = [e["data"] for e in args["elements"] if "details" in e["data"]]
    assert {n["details"]["name"] for n in ops} == {evil, f"a/{evil}"}
    assert all(evil not in n["label"] or n["label"].endswith(evil[:28]) or "\n" in n["label"] for n in ops)
    text = json.dumps(args)
    assert json.loads(text) == args  # data, not markup: the iframe gets it through JSON
    js = (COMPONENT_DIR / "ortlab-graphdiff.js").read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", js)
    assert "textContent" in js


def test_overlay_values_reach_the_component(conv):
    desc = graph_description(*conv)
    names = [n["name"] for n in desc["nodes"].values() if n["status"] != "removed"]
    values = {name: float(k) for k, name in enumerate(names)}
    view = build_view(desc, overlay=values, overlay_label="per-node error")
    args = component_args(view, 600)
    assert args["overlay"]["label"] == "per-node error" and args["overlay"]["n"] == len(names)
    drawn = {e["data"]["details"]["name"]: e["data"] for e in args["elements"] if "details" in e["data"]
             and "value" in e["data"]}
    assert set(drawn) == set(names)
    worst = max(values, key=lambda k: values[k])
    assert drawn[worst]["value"] == values[worst] and drawn[worst]["value_color"] == overlay_color(1.0) == "#bd0026"
    best = min(values, key=lambda k: values[k])
    assert drawn[best]["value_color"] == overlay_color(0.0) == "#ffffcc"
    # closed groups show the worst value of their members
    folded = build_view(desc, overlay=values, overrides={"s:block0": False})
    box = next(e["data"] for e in folded["elements"] if e["data"]["id"] == "s:block0")
    inside = [v for n, v in values.items() if n.startswith("block0/") or "block0" in n]
    assert box["value"] == max(inside)
    # lower-is-worse values (e.g. SQNR): the lowest is red
    low = build_view(desc, overlay=values, higher_is_worse=False)
    drawn = {e["data"]["details"]["name"]: e["data"] for e in low["elements"] if "value" in e["data"]
             and "details" in e["data"]}
    assert drawn[best]["value_color"] == "#bd0026"
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
    assert len(json.dumps(component_args(view, 700))) < 400_000
