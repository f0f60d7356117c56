"""ortlab.model.diff: graph diffs and drawable views on real optimization results."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.support.models import big_chain_model, conv_bn_model, matmul_model
from ortlab.settings.config import OptLevel
from ortlab.model.diff import graph_diff
from ortlab.model.diff_view import graph_description
from ortlab.transforms.optimize import optimize_model


def deltas(d) -> dict[str, int]:
    return {x["key"]: x["delta"] for x in d.op_deltas if x["delta"]}



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
    # ORT keeps the Conv's name on the FusedConv: the Conv is matched (its op changed), its BN and Relu removed
    assert d.added == [] and len(d.removed) == 6
    assert {n["op_type"] for n in d.removed} == {"BatchNormalization", "Relu"}
    fused_in_place = [c for c in d.changed if c["op_type"] == "FusedConv"]
    assert [(c["domain"], c["before"]["op_type"], c["before"]["name"] == c["name"]) for c in fused_in_place] == [
        ("com.microsoft", "Conv", True)] * 3
    assert all("op_type" in c["changes"] for c in fused_in_place)
    assert d.counts["retyped"] == 3 and d.counts["fused"] == 6 and d.counts["fused_into"] == 3
    fused = next(x for x in d.op_deltas if x["key"] == "com.microsoft::FusedConv")
    assert fused == {"key": "com.microsoft::FusedConv", "domain": "com.microsoft", "op_type": "FusedConv",
                     "before": 0, "after": 3, "delta": 3}


def test_all_level_nchwc(conv_levels):
    """Level all lays the convolutions out in NCHWc blocks. Which other ops join the blocked layout depends on the
    CPU's vector width (AVX2: a GlobalAveragePool too, and one ReorderOutput; AVX-512: three), so only the Convs and
    the kind of every other change are fixed."""
    src, out = conv_levels
    d = graph_diff(src, out[OptLevel.ALL])
    got = deltas(d)
    assert {k: got.pop(k) for k in ("Conv", "BatchNormalization", "Relu", "com.microsoft.nchwc::Conv")} == {
        "Conv": -3, "BatchNormalization": -3, "Relu": -3, "com.microsoft.nchwc::Conv": 3}
    assert got.pop("com.microsoft.nchwc::ReorderOutput") >= 1
    moved = {k.split("::")[1] for k in got if k.startswith("com.microsoft.nchwc::")}
    assert got == {**{op: -1 for op in moved}, **{f"com.microsoft.nchwc::{op}": 1 for op in moved}}, got
    assert d.fusions[0] == "Conv+BatchNormalization+Relu → com.microsoft.nchwc::Conv ×3"
    assert all("com.microsoft.nchwc::" in f for f in d.fusions[1:]), d.fusions
    assert any("com.microsoft.nchwc::ReorderOutput" in f for f in d.fusions[1:]), d.fusions


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


# -- counts and description --------------------------------------------------------------------------

def test_one_count_of_changes_in_the_diff_and_the_description(conv_levels, big):
    for src, out in ((conv_levels[0], conv_levels[1][OptLevel.EXTENDED]), big):
        d = graph_diff(src, out)
        desc = graph_description(src, out)
        assert d.counts == desc["counts"]
        assert d.counts["removed"] == len(d.removed) and d.counts["added"] == len(d.added)
        assert d.counts["changed"] == len(d.changed) and d.counts["unchanged"] == d.unchanged_count
        kinds = Counter(n["kind"] for n in desc["nodes"].values())
        assert kinds["fused"] == d.counts["fused"] + d.counts["fused_into"]
        assert kinds["removed"] + d.counts["fused"] == d.counts["removed"]
    d = graph_diff(*big)
    assert d.counts["fused"] == 1501 and d.counts["fused_into"] == 500
    assert type(d).from_dict(d.to_dict()).counts == d.counts


def test_description_gives_attributes_shapes_scopes_and_fusion_links(conv_levels):
    src, out = conv_levels
    desc = graph_description(src, out[OptLevel.EXTENDED])
    nodes = desc["nodes"]
    fused = [n for n in nodes.values() if n["op_type"] == "FusedConv"]
    assert len(fused) == 3 and all(n["kind"] == "fused" for n in fused)
    assert {tuple(n["scope"]) for n in fused} == {("block0",), ("block1",), ("block2",)}
    assert all("activation" in n["attributes"] for n in fused)
    # each FusedConv took its Conv's name: matched to it, drawn in the before pane as the Conv it was
    assert all(n["matched"] == n["name"] and n["before_op_type"] == "Conv" and n["before_label"] == "Conv"
               for n in fused)
    removed = [n for n in nodes.values() if n["status"] == "removed"]
    assert sorted(n["op_type"] for n in removed) == ["BatchNormalization"] * 3 + ["Relu"] * 3
    assert all(n["replaced_by"] in nodes and nodes[n["replaced_by"]]["op_type"] == "FusedConv" for n in removed)
    bn = next(n for n in removed if n["op_type"] == "BatchNormalization")
    assert bn["inputs"][0][1].startswith("float32[")  # shapes from value_info / shape inference
    assert fused[0]["attributes"]["kernel_shape"] == "[3, 3]"


def test_description_gives_scale_and_zero_point_of_quantized_nodes(digits_int8):
    desc = graph_description(*digits_int8)
    q = [n for n in desc["nodes"].values() if n["op_type"] == "QuantizeLinear"]
    assert q and all(n["kind"] == "quantized" for n in q)
    params = {p["param"]: p["value"] for p in q[0]["quant"]}
    assert set(params) == {"y_scale", "y_zero_point"}
    assert float(params["y_scale"]) > 0 and params["y_zero_point"].lstrip("-").isdigit()
    assert desc["counts"]["quantized"] == sum(1 for n in desc["nodes"].values() if n["kind"] == "quantized")


@pytest.fixture(scope="module")
def digits_int8(tmp_path_factory):
    """The bundled digits CNN and its int8 static QDQ copy (real calibration images, no graph optimization)."""
    from ortlab.settings.config import Precision, Recipe
    from ortlab.data.loaders import load_image_folder
    from ortlab.runs.in_process import run_recipe
    from ortlab.data.samples import get_sample

    sample = get_sample("digits_cnn")
    art = run_recipe(sample.model_path, Recipe(precision=Precision.INT8, opt_level=OptLevel.DISABLED),
                     tmp_path_factory.mktemp("digits") / "int8", dataset=load_image_folder(sample.calibration_dir),
                     preprocess=sample.preprocess, verify_samples=4)
    return sample.model_path, art.model_path


def _line_ops(lines: list[str]) -> tuple[Counter, Counter]:
    """The ops the fusion lines say left (before) and came (after), by their short name; Q/DQ lines as "Q/DQ"."""
    before: Counter = Counter()
    after: Counter = Counter()

    def listed(text: str) -> Counter:  # "Conv ×9, Relu ×7" or "Conv+BatchNormalization"
        if "×" in text:
            return Counter({op.strip(): int(n) for op, n in (x.split(" ×") for x in text.split(", "))})
        return Counter(text.split("+"))

    for line in lines:
        body, n = line.rsplit(" ×", 1)
        if "QuantizeLinear/DequantizeLinear" in body or body.startswith("DequantizeLinear on quantized weights"):
            after["Q/DQ"] += int(n) * (2 if " pairs " in body else 1)
        elif body.startswith("region of"):
            left, right = body.split(" → ")
            for op, k in listed(left[left.index("(") + 1:-1]).items():
                before[op] += k
            for op, k in listed(right[right.index("(") + 1:-1]).items():
                after[op] += k
        elif " folded into " in body:
            before[body.split(" ")[0]] += int(n)
        elif body.endswith(" inserted"):
            after[body[: -len(" inserted")]] += int(n)
        elif body.endswith(" removed"):
            before[body[: -len(" removed")]] += int(n)
        else:
            left, right = body.split(" → ")
            for op, k in listed(left).items():
                before[op] += k * int(n)
            for op, k in listed(right).items():
                after[op] += k * int(n)
    return before, after


def assert_lines_agree_with_op_table(d) -> None:
    """Every op the op table says appeared or disappeared is accounted for by the fusion lines, exactly."""
    before, after = _line_ops(d.fusions)
    qdq = {"QuantizeLinear", "DequantizeLinear"}
    for x in d.op_deltas:
        short = x["op_type"] if x["domain"] in ("", "com.microsoft") else x["key"]
        if short in qdq:
            continue
        assert after[short] - before[short] == x["delta"], (short, x, d.fusions)
    assert after["Q/DQ"] == sum(x["delta"] for x in d.op_deltas if x["op_type"] in qdq and not x["domain"])


def test_quantized_nodes_keep_their_float_twin_and_the_lines_add_up(tmp_path):
    """ORT quantizes a Conv into a QLinearConv under the Conv's name: the two are one matched node (drawn as Conv
    before and QLinearConv after), its BatchNormalization and Relu folded into it, and the fusion lines add up to
    the op table."""
    from ortlab.settings.config import Precision, Recipe
    from ortlab.runs.in_process import run_recipe
    from ortlab.data.samples import get_sample

    sample = get_sample("digits_cnn")
    art = run_recipe(sample.model_path, Recipe(precision=Precision.INT8), tmp_path / "int8",
                     dataset=sample.calibration_data(), preprocess=sample.preprocess, verify_samples=0)
    d = graph_diff(sample.model_path, art.model_path)
    assert all(len(line) < 200 for line in d.fusions), d.fusions
    assert_lines_agree_with_op_table(d)
    before = onnx.load(str(sample.model_path)).graph
    after = onnx.load(str(art.model_path)).graph
    after_names = {n.name for n in after.node}
    assert not any(n["name"] in after_names for n in d.removed)  # nothing removed that the after graph still has
    convs = [c for c in d.changed if c["before"]["op_type"] == "Conv"]
    assert len(convs) == sum(n.op_type == "Conv" for n in before.node) == 9
    assert all(c["op_type"] == "QLinearConv" and c["name"] == c["before"]["name"] for c in convs)

    # each BatchNormalization or Relu is linked to the node that took the place of the Conv/Add feeding it (walked
    # up here by op type alone)
    producer = {t: n for n in before.node for t in n.output}

    def head(n: onnx.NodeProto) -> onnx.NodeProto:
        while n.op_type in ("BatchNormalization", "Relu"):
            n = producer[n.input[0]]
        return n

    nodes = graph_description(sample.model_path, art.model_path)["nodes"]
    linked = {n["name"]: nodes[n["replaced_by"]]["name"] for n in nodes.values() if n.get("replaced_by")}
    expected = {n.name: head(n).name for n in before.node if n.op_type in ("BatchNormalization", "Relu")}
    assert linked == expected and len(linked) == 16
    kinds = Counter((n["op_type"], n["kind"]) for n in nodes.values() if n["name"] in after_names)
    assert kinds[("QLinearConv", "quantized")] == 9 and kinds[("QLinearAdd", "quantized")] == 3


def test_yolov8_head_is_matched_by_name_on_a_real_int8_export(tmp_path):
    """The YOLOv8-shaped fixture through ortlab's default static int8 (QLinearConv after ORT's fusions, the first
    Convs kept in float as FusedConv): no node of the source that the int8 graph has under the same name is
    "removed", the head's class Convs are quantized in place, and the fusion lines add up to the op table."""
    from ortlab.cli import main as cli
    from tests.support.reference import photo_parts

    fixture = Path(__file__).parents[1] / "fixtures" / "yolov8_detector.onnx"
    photos = photo_parts(tmp_path / "photos", 4)
    dst = tmp_path / "int8.onnx"
    assert cli.main(["optimize", str(fixture), str(dst), "--precision", "int8", "--calibration",
                     str(photos["calibration"]), "--verify-samples", "0"]) == 0
    d = graph_diff(fixture, dst)
    assert_lines_agree_with_op_table(d)
    after = onnx.load(str(dst)).graph
    by_name = {n.name: n.op_type for n in after.node}
    assert not [n["name"] for n in d.removed if n["name"] in by_name]
    desc = graph_description(fixture, dst)
    nodes = desc["nodes"]
    head = [n for n in nodes.values() if n["name"].startswith("/model.22/cv3.") and n["name"].endswith("/Conv")]
    assert len(head) == 3
    assert all(n["status"] == "changed" and n["matched"] == n["name"] and n["before_op_type"] == "Conv"
               and n["kind"] == ("quantized" if by_name[n["name"]] == "QLinearConv" else "fused") for n in head)
    kinds = Counter(n["kind"] for n in nodes.values())
    assert kinds["removed"] == 0 and desc["counts"] == d.counts
    assert d.counts["quantized"] == kinds["quantized"] and d.counts["fused_into"] == sum(
        1 for k, n in nodes.items() if k.startswith("a") and n["kind"] == "fused")
    assert d.counts["retyped"] == sum(1 for op in by_name.values() if op in ("QLinearConv", "FusedConv"))


# -- per-node values across QDQ and fused graphs, layers on both sides (a real quantized sample) ------------

@pytest.fixture(scope="module")
def efficientnet_int8(tmp_path_factory):
    """EfficientNet-Lite0 quantized with Conv/MatMul/Gemm only (a recipe the Tune page tries; its QDQ model keeps
    the ReLU6 Clips that ORT then folds into QLinearConv): its fp32 model, ORT's fused graph and the plain QDQ
    model, plus the per-node analysis of the QDQ model on 4 evaluation images."""
    from ortlab.checks.analyze import QDQ_FILE, analyze
    from ortlab.settings.config import Precision, QuantConfig, Recipe
    from ortlab.runs.in_process import run_recipe
    from ortlab.data.samples import get_sample

    s = get_sample("efficientnet_lite0")
    out = tmp_path_factory.mktemp("effnet") / "int8"
    recipe = Recipe(precision=Precision.INT8, opt_level=OptLevel.EXTENDED,
                    quant=QuantConfig(op_types=("Conv", "MatMul", "Gemm")))
    art = run_recipe(s.model_path, recipe, out, s.calibration_data(), s.preprocess, verify_samples=0)
    result = analyze(s.model_path, out / QDQ_FILE, s.evaluation_data(), s.preprocess, n=4)
    return s.model_path, art.model_path, out / QDQ_FILE, result


@pytest.mark.slow
def test_per_node_errors_land_on_the_qdq_and_the_fused_graph(efficientnet_int8):
    from ortlab.model.diff_view import carry_values, map_node_names
    from ortlab.ui.graph.graph_view import build_view

    fp32, fused, qdq, result = efficientnet_int8
    values = {n.name: n.sqnr_db for n in result.nodes}
    assert len(values) >= 50
    fused_model = onnx.load(str(fused), load_external_data=False)
    assert any(n.op_type == "QLinearConv" for n in fused_model.graph.node)
    for cand in (qdq, fused):
        mapping = map_node_names(qdq, cand)
        view = build_view(graph_description(fp32, cand), overlay=carry_values(values, mapping),
                          higher_is_worse=False)
        for side in ("before", "after"):
            names = {(view["details"][e["data"]["id"]]["matched"] if side == "before"
                      and view["details"][e["data"]["id"]]["matched"] else view["details"][e["data"]["id"]]["name"])
                     for e in view["panes"][side]["elements"] if "value" in e["data"] and "group" not in e["data"]}
            landed = {n for n in values if (mapping.get(n, n) if side == "after" else n) in names}
            assert len(landed) >= 0.95 * len(values), (cand.name, side, sorted(set(values) - landed)[:5])
        # the worst analysed node is red where it landed in the candidate
        worst = min(values, key=lambda k: values[k])
        red = [e["data"] for e in view["panes"]["after"]["elements"] if "group" not in e["data"]
               and view["details"][e["data"]["id"]]["name"] == mapping[worst]]
        assert red and red[0]["value_color"] == "#bd0026"
    # every compute node of the QDQ model has a place in the fused graph, also those ORT folds away (Clip → Conv)
    mapping = map_node_names(qdq, fused)
    qdq_model = onnx.load(str(qdq), load_external_data=False)
    compute = [n for n in qdq_model.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    fused_names = {n.name for n in fused_model.graph.node}
    assert all(mapping.get(n.name) in fused_names for n in compute)
    clips = [n.name for n in compute if n.op_type == "Clip" and n.name not in fused_names]
    assert clips and all(mapping[c] in {n.name for n in fused_model.graph.node if n.op_type == "QLinearConv"}
                         for c in clips)


@pytest.mark.slow
def test_both_sides_get_the_same_layers_from_pytorch_namespaces(efficientnet_int8):
    fp32, fused, _, _ = efficientnet_int8
    desc = graph_description(fp32, fused)
    qconv = {n["name"]: n for n in desc["nodes"].values() if n["op_type"] == "QLinearConv"}
    # each QLinearConv is the Conv of its name, quantized in place: one node with its before scope
    assert len(qconv) >= 40 and all(n["matched"] == k and n["before_op_type"] == "Conv" for k, n in qconv.items())
    # "name: type" segments → module names; ORT drops the metadata of what it rewrites, the names carry it over
    assert qconv["node_conv2d_12"]["before_scope"] == ["_blocks.4", "_expand_conv"]
    assert all(n["scope"] == n["before_scope"] for n in qconv.values())


def test_unnamed_nodes_are_matched_by_the_tensors_the_quantizer_renamed(tmp_path):
    """An export without node names (the open-size YOLO-shaped model of tests/ui/test_app.py): the Conv is matched
    to its QLinearConv by role and output tensor (c → c_QuantizeLinear_Output), the Reshape after it by its
    renamed tensors; nothing is removed and the lines add up to the op table."""
    from ortlab.cli import main as cli
    from tests.support.reference import photo_parts
    from tests.ui.test_app import _open_size_detector

    src = _open_size_detector(tmp_path / "open.onnx")
    assert not any(n.name for n in onnx.load(str(src)).graph.node)
    photos = photo_parts(tmp_path / "photos", 4)
    dst = tmp_path / "int8.onnx"
    assert cli.main(["optimize", str(src), str(dst), "--precision", "int8", "--preset", "yolo", "--calibration",
                     str(photos["calibration"]), "--verify-samples", "0"]) == 0
    d = graph_diff(src, dst)
    assert d.removed == [] and d.fusions[0] == "Conv → QLinearConv ×1", d.fusions
    assert_lines_agree_with_op_table(d)
    ops = {(c["before"]["op_type"], c["op_type"]) for c in d.changed}
    assert ("Conv", "QLinearConv") in ops and ("Reshape", "Reshape") in ops
