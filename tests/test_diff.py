"""ortlab.diff: graph diffs and drawable views on real optimization results."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import onnx
import pytest

from models import big_chain_model, conv_bn_model, matmul_model
from ortlab.config import OptLevel
from ortlab.diff import graph_description, graph_diff
from ortlab.optimize import optimize_model
from ortlab.ui.graph_layout import graph_view as layout


def deltas(d) -> dict[str, int]:
    return {x["key"]: x["delta"] for x in d.op_deltas if x["delta"]}



def view(before, after, **kw) -> dict:
    """The drawable view the Compare page shows: the engine's description laid out by the UI layer."""
    return layout(graph_description(before, after), **kw)


@pytest.fixture(scope="module")
def conv_levels(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    src = conv_bn_model(root / "conv.onnx")
    return src, {lvl: optimize_model(src, root / f"{lvl.value}.onnx", lvl).path for lvl in OptLevel}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    src = big_chain_model(root / "big.onnx", n_nodes=2000)
    return src, optimize_model(src, root / "ext.onnx", OptLevel.EXTENDED).path


def test_disabled_is_identical(conv_levels):
    src, out = conv_levels
    d = graph_diff(src, out[OptLevel.DISABLED])
    assert deltas(d) == {} and d.removed == d.added == d.changed == [] and d.unchanged_count == 14
    assert d.fusions == []
    assert d.initializer_bytes_before == d.initializer_bytes_after == {"float32": 6312}


def test_basic_folds_batchnorm(conv_levels):
    src, out = conv_levels
    d = graph_diff(src, out[OptLevel.BASIC])
    assert deltas(d) == {"BatchNormalization": -3}
    assert sorted(n["name"] for n in d.removed) == [f"block{i}/BatchNormalization" for i in range(3)]
    assert d.added == []
    conv_changes = {c["name"]: c["changes"] for c in d.changed if c["op_type"] == "Conv"}
    assert conv_changes == {f"block{i}/Conv": ["inputs", "outputs"] for i in range(3)}
    assert d.fusions == ["Conv+BatchNormalization → Conv ×3"]
    assert d.initializer_bytes_after == {"float32": 6312 - 3 * 4 * 8 * 4}  # BN scale/bias/mean/var folded
    json_ok = d.to_dict()
    assert json_ok["fusions"] == d.fusions and len(json_ok["removed"]) == 3


def test_extended_fusedconv(conv_levels):
    src, out = conv_levels
    d = graph_diff(src, out[OptLevel.EXTENDED])
    assert deltas(d) == {"Conv": -3, "BatchNormalization": -3, "Relu": -3, "com.microsoft::FusedConv": 3}
    assert d.fusions == ["Conv+BatchNormalization+Relu → FusedConv ×3"]
    assert [(n["domain"], n["op_type"]) for n in d.added] == [("com.microsoft", "FusedConv")] * 3
    assert len(d.removed) == 9
    fused = next(x for x in d.op_deltas if x["key"] == "com.microsoft::FusedConv")
    assert fused == {"key": "com.microsoft::FusedConv", "domain": "com.microsoft", "op_type": "FusedConv",
                     "before": 0, "after": 3, "delta": 3}


def test_all_level_nchwc(conv_levels):
    src, out = conv_levels
    d = graph_diff(src, out[OptLevel.ALL])
    assert deltas(d) == {"Conv": -3, "BatchNormalization": -3, "Relu": -3,
                         "com.microsoft.nchwc::Conv": 3, "com.microsoft.nchwc::ReorderOutput": 3}
    assert d.fusions == ["Conv+BatchNormalization+Relu → com.microsoft.nchwc::Conv ×3",
                         "com.microsoft.nchwc::ReorderOutput inserted ×3"]


def test_matmul_extended_fusions(tmp_path):
    src = matmul_model(tmp_path / "mm.onnx")
    opt = optimize_model(src, tmp_path / "ext.onnx", OptLevel.EXTENDED).path
    d = graph_diff(src, opt)
    assert d.fusions == ["Add+Add+LayerNormalization → SkipLayerNormalization ×2",
                         "Add+Div+Erf+Add+Mul+Mul → BiasGelu ×1",
                         "Transpose+MatMul+Mul → FusedMatMul ×1"]
    assert deltas(d)["com.microsoft::SkipLayerNormalization"] == 2 and deltas(d)["LayerNormalization"] == -2


def _rewrite(src, dst, rename_nodes=True, rename_tensors=False):
    m = onnx.load(str(src))
    io = {v.name for v in [*m.graph.input, *m.graph.output]} | {t.name for t in m.graph.initializer}
    ren = lambda t: t if (not rename_tensors or not t or t in io) else f"t_{t}"
    for i, n in enumerate(m.graph.node):
        n.name = f"node_{len(m.graph.node) - i}" if rename_nodes else n.name
        n.input[:] = [ren(t) for t in n.input]
        n.output[:] = [ren(t) for t in n.output]
    onnx.save_model(m, str(dst))
    return dst


def test_renamed_nodes_match_by_structure(conv_levels, tmp_path):
    src, _ = conv_levels
    d = graph_diff(src, _rewrite(src, tmp_path / "renamed.onnx"))
    assert d.removed == d.added == [] and deltas(d) == {}
    assert len(d.changed) == 14 and all(c["changes"] == ["name"] for c in d.changed)
    assert d.fusions == []


def test_renamed_nodes_and_tensors_match_by_position(conv_levels, tmp_path):
    src, _ = conv_levels
    d = graph_diff(src, _rewrite(src, tmp_path / "renamed.onnx", rename_nodes=True, rename_tensors=True))
    assert d.removed == d.added == [] and d.unchanged_count == 0 and len(d.changed) == 14
    pairs = {c["before"]["name"]: c["op_type"] for c in d.changed}
    assert all(name.endswith("/" + op) for name, op in pairs.items())


def test_qdq_insertions_are_named(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    src = conv_bn_model(tmp_path / "conv.onnx", batch=1)

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.data = iter([{"input": rng.normal(size=(1, 3, 32, 32)).astype(np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.data, None)

    quantize_static(str(src), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ)
    d = graph_diff(src, tmp_path / "q.onnx")
    q = onnx.load(str(tmp_path / "q.onnx")).graph
    n_q = sum(n.op_type == "QuantizeLinear" for n in q.node)
    assert n_q > 0
    assert f"QuantizeLinear/DequantizeLinear pairs added ×{n_q}" in d.fusions
    assert deltas(d)["QuantizeLinear"] == n_q
    assert any(line.startswith("DequantizeLinear on quantized weights added ×") for line in d.fusions)


# -- view ---------------------------------------------------------------------------------------------

def _check_view(v, max_nodes):
    ids = {n["id"] for n in v["nodes"]}
    assert len(ids) == len(v["nodes"]) <= max_nodes
    pos = {n["id"]: (n["x"], n["y"]) for n in v["nodes"]}
    assert len(set(pos.values())) == len(pos)  # no two nodes on one spot
    for e in v["edges"]:
        assert e["source"] in ids and e["target"] in ids and e["source"] != e["target"]
    for n in v["nodes"]:
        assert n["status"] in {"removed", "added", "changed", "unchanged", "collapsed"}
        assert n["layer"] == n["x"] and n["count"] >= 1


def test_view_of_extended_conv(conv_levels):
    src, out = conv_levels
    v = view(src, out[OptLevel.EXTENDED])
    _check_view(v, 400)
    assert v["total_nodes"] == 8 + 9 and not v["truncated"]
    assert v["counts"]["added"] == 3 and v["counts"]["removed"] == 9
    assert sum(n["count"] for n in v["nodes"]) == v["total_nodes"]
    layer = {n["id"]: n["x"] for n in v["nodes"]}
    assert all(layer[e["source"]] < layer[e["target"]] for e in v["edges"])
    head = [n for n in v["nodes"] if n["status"] == "collapsed"]
    assert len(head) == 1 and head[0]["count"] == 3  # GlobalAveragePool → Flatten → Gemm
    assert head[0]["ops"] == {"GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}


def test_view_identical_collapses(conv_levels):
    src, _ = conv_levels
    v = view(src, src)
    _check_view(v, 400)
    assert sum(n["count"] for n in v["nodes"]) == 14 and v["counts"].get("collapsed", 0) >= 1
    assert set(v["counts"]) <= {"unchanged", "collapsed"}


def test_view_big_model_stays_bounded(big):
    src, opt = big
    assert len(onnx.load(str(src)).graph.node) == 2001
    d = graph_diff(src, opt)
    assert d.fusions == ["MatMul+Add+Relu → FusedGemm ×500", "Add+Identity → Add ×1"]
    for max_nodes in (400, 50):
        v = view(src, opt, max_nodes=max_nodes)
        _check_view(v, max_nodes)
        assert v["truncated"] and sum(n["count"] for n in v["nodes"]) == v["total_nodes"] == 1000 + 1501
    same = view(src, src)
    assert len(same["nodes"]) == 1 and same["nodes"][0]["count"] == 2001 and not same["truncated"]


def test_view_focus(big):
    src, opt = big
    v = view(src, opt, focus="l250/Relu", hops=2)
    _check_view(v, 400)
    assert v["focus_matches"] == 1
    assert sorted(n["name"] for n in v["nodes"]) == sorted([
        "l249/Residual", "fused l250/MatMul/MatMulAddFusion", "l250/MatMul", "l250/Add", "l250/Relu",
        "l250/Residual", "fused l251/MatMul/MatMulAddFusion", "l251/MatMul", "l251/Residual"])
    by_op = view(src, opt, focus="FusedGemm", max_nodes=100)
    _check_view(by_op, 100)
    assert by_op["focus_matches"] == 500 and by_op["truncated"]
    none = view(src, opt, focus="NoSuchOp")
    assert none["focus_matches"] == 0 and none["nodes"] == [] and none["edges"] == []


# -- view layout --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_int8(tmp_path_factory):
    """The bundled digits CNN and its int8 static QDQ copy (real calibration images, no graph optimization)."""
    from ortlab.config import Precision, Recipe
    from ortlab.data import load_image_folder
    from ortlab.pipeline import run_recipe
    from ortlab.samples import get_sample

    sample = get_sample("digits_cnn")
    art = run_recipe(sample.model_path, Recipe(precision=Precision.INT8, opt_level=OptLevel.DISABLED),
                     tmp_path_factory.mktemp("digits") / "int8", dataset=load_image_folder(sample.calibration_dir),
                     preprocess=sample.preprocess, verify_samples=4)
    return sample.model_path, art.model_path


def _layout_ok(v):
    _check_view(v, 400)
    layer = {n["id"]: n["layer"] for n in v["nodes"]}
    for e in v["edges"]:
        assert layer[e["source"]] < layer[e["target"]]  # data flows left to right
        xs = [p[0] for p in e["points"]]
        assert xs == list(range(layer[e["source"]] + 1, layer[e["target"]]))  # one bend per crossed layer
    assert sorted(set(layer.values())) == list(range(max(layer.values()) + 1))  # no empty layer
    return layer


def test_view_layout_of_quantized_digits(digits_int8):
    src, q = digits_int8
    v = view(src, q)
    layer = _layout_ok(v)
    sizes = Counter(layer.values())
    assert max(sizes.values()) <= 0.2 * len(v["nodes"])  # weights no longer pile up in one column
    weights = [n for n in v["nodes"] if n["weight_only"]]
    assert len(weights) == 20 and {n["op_type"] for n in weights} == {"DequantizeLinear"}
    consumers = defaultdict(list)
    for e in v["edges"]:
        consumers[e["source"]].append(layer[e["target"]])
    for n in weights:
        assert n["layer"] == min(consumers[n["id"]]) - 1, n["name"]
    assert sizes[0] == 1  # only the input's QuantizeLinear starts the flow
    assert {e["status"] for e in v["edges"]} == {"removed", "added"}  # every Conv now reads a DequantizeLinear


def test_view_layout_keeps_a_chain_straight(tmp_path):
    """A MatMul+Add+Relu chain before/after int8 QDQ: the new data path is one horizontal line, weights sit just
    above their consumer one layer earlier, the removed nodes run in a parallel lane."""
    from onnx import TensorProto, helper, numpy_helper

    from ortlab.config import Precision, Recipe
    from ortlab.pipeline import run_recipe

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "input"
    for i in range(5):
        inits += [numpy_helper.from_array(rng.normal(0, 0.3, (8, 8)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"l{i}/MatMul"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"l{i}/Add"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"l{i}/Relu")]
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(tmp_path / "chain.onnx"))
    art = run_recipe(tmp_path / "chain.onnx", Recipe(precision=Precision.INT8, opt_level=OptLevel.DISABLED,
                                                     allow_random_data=True), tmp_path / "q")
    v = view(tmp_path / "chain.onnx", art.model_path)
    _layout_ok(v)
    main = [n for n in v["nodes"] if n["status"] != "removed" and not n["weight_only"]]
    assert len(main) >= 15 and {n["y"] for n in main} == {main[0]["y"]}
    assert all(n["y"] < main[0]["y"] for n in v["nodes"] if n["weight_only"])
    assert {n["y"] for n in v["nodes"] if n["status"] == "removed"} == {main[0]["y"] + 1}
    same = view(tmp_path / "chain.onnx", tmp_path / "chain.onnx")
    assert len(same["nodes"]) == 1 and same["nodes"][0]["y"] == 0


def test_view_places_fused_node_amid_what_it_replaced(conv_levels):
    src, out = conv_levels
    v = view(src, out[OptLevel.EXTENDED])
    layer = _layout_ok(v)
    by_name = defaultdict(list)
    for n in v["nodes"]:
        by_name[n["name"].split("/")[0]].append(n)
    for block in ("block0", "block1", "block2"):
        fused = next(n for n in by_name[block] if n["op_type"] == "FusedConv")
        old = sorted(n["layer"] for n in by_name[block] if n["status"] == "removed")
        assert len(old) == 3 and old[0] <= fused["layer"] <= old[-1]
        assert min(abs(fused["y"] - n["y"]) for n in by_name[block] if n["status"] == "removed") <= 2
    assert len(layer) == len(v["nodes"])


def test_view_layout_is_fast_on_big_model(big):
    import time

    src, opt = big
    start = time.perf_counter()
    v = view(src, opt)
    assert time.perf_counter() - start < 1.0
    _layout_ok(v)


def test_a_rewritten_region_is_summarised_by_op_counts_not_spelled_node_by_node(tmp_path):
    from ortlab.config import Precision, Recipe
    from ortlab.pipeline import run_recipe
    from ortlab.samples import get_sample

    sample = get_sample("digits_cnn")
    art = run_recipe(sample.model_path, Recipe(precision=Precision.INT8), tmp_path / "int8",
                     dataset=sample.calibration_data(), preprocess=sample.preprocess, verify_samples=0)
    fusions = graph_diff(sample.model_path, art.model_path).fusions
    assert all(len(line) < 200 for line in fusions), fusions
    region = [line for line in fusions if line.startswith("region of")]
    assert region and "Conv ×9" in region[0] and "QLinearConv ×9" in region[0]
