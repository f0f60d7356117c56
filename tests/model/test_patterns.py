"""Known patterns found from the graph's structure (a YOLO-style head, transformer attention, a CTC head) and the
float scope they give the default static int8 recipe.

Each fixture's expected scope is written here from its structure (the yolov8 fixture: every node of the head
``/model.22/`` but its cv2/cv3 Convs; the text encoder: its four activation × activation MatMuls, two Softmaxes and
the decomposed LayerNorms), the same model with every node renamed must give the same scope (names are not what is
matched), and models without the patterns get none. The run test counts the QuantizeLinear/DequantizeLinear around
the scope's nodes in the kept QDQ model, with the setting on (none) and off (most of them); no int8 accuracy number
is asserted (they differ between CPUs with and without VNNI).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tests.support.models import RandomFeeds
from tests.support.reference import photo_parts

from ortlab.cli import main as cli
from ortlab.core.layout import QDQ_FILE
from ortlab.model.patterns import DETECTOR_BIAS_NOTE, PatternKind, detect_patterns, float_scope, is_detector, is_encoder
from ortlab.runs.tune_space import search_space
from ortlab.runtime.hardware import parse_cpuinfo
from ortlab.settings.config import QuantConfig, QuantMode, Target, replace
from ortlab.transforms.quantize import quantize_static_model

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
YOLOV8 = FIXTURES / "yolov8_detector.onnx"
TEXT = FIXTURES / "text_encoder.onnx"
SAMPLES = ROOT / "sample_models"


def _heads(model: onnx.ModelProto) -> list:
    """The YOLO-style heads found (a detector's stem is a pattern of its own)."""
    return [p for p in detect_patterns(model) if p.kind == PatternKind.YOLO_HEAD]


def _kinds(model: onnx.ModelProto) -> list[PatternKind]:
    return [p.kind for p in detect_patterns(model)]


def _renamed(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``model`` with every node named ``n<i>`` (no name says "dfl", "head" or "attention")."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = {}
    for i, n in enumerate(out.graph.node):
        names[n.name] = f"n{i}"
        n.name = f"n{i}"
    return out, names


# -- detection on the fixtures and samples -----------------------------------------------------------------------


def test_the_yolov8_head_is_its_post_processing_without_the_head_convs():
    model = onnx.load(str(YOLOV8))
    (head,) = _heads(model)
    assert head.kind == PatternKind.YOLO_HEAD
    expected = [n.name for n in model.graph.node if n.name.startswith("/model.22/") and n.op_type != "Conv"]
    assert list(head.nodes) == expected and len(expected) == 20
    assert "/model.22/Concat_5" in head.nodes and "/model.22/Sigmoid" in head.nodes
    assert head.parts == ("DFL", "box decode", "score Sigmoid", "final Concat")  # DFL: named so (a hint)
    note = head.note()
    assert note.startswith("YOLO-style detection head: 20 nodes of post-processing (DFL, box decode, score Sigmoid, "
                           "final Concat) kept in float, as Ultralytics' int8 export does")
    assert "--no-known-patterns" in note and note.endswith(", ".join(expected) + ".")
    assert not is_encoder(model)


def test_a_detector_stem_is_its_first_three_conv_units_found_by_structure():
    model = onnx.load(str(YOLOV8))
    (stem,) = [p for p in detect_patterns(model) if p.kind == PatternKind.DETECTOR_STEM]
    assert list(stem.nodes) == [f"/model.{i}/{x}" for i in range(3) for x in ("Conv", "act/Relu")]
    assert stem.note().startswith("Detector stem: 6 nodes (the first 3 Conv units) kept in float")
    renamed, names = _renamed(model)
    (again,) = [p for p in detect_patterns(renamed) if p.kind == PatternKind.DETECTOR_STEM]
    assert list(again.nodes) == [names[n] for n in stem.nodes]
    assert is_detector(detect_patterns(model)) and not is_detector(detect_patterns(onnx.load(str(TEXT))))


def test_a_silu_stem_stops_at_the_first_branch():
    model = ultralytics_head()
    (stem,) = [p for p in detect_patterns(model) if p.kind == PatternKind.DETECTOR_STEM]
    ops = {n.name: n.op_type for n in model.graph.node}
    # a Conv with its SiLU is one unit; its output feeds the head's box and class Convs: a branch, the stem ends
    assert [ops[n] for n in stem.nodes] == ["Conv", "Sigmoid", "Mul"]


def test_the_head_is_found_by_structure_not_by_names():
    model = onnx.load(str(YOLOV8))
    (head,) = _heads(model)
    renamed, names = _renamed(model)
    (again,) = _heads(renamed)
    assert again.kind == PatternKind.YOLO_HEAD and list(again.nodes) == [names[n] for n in head.nodes]
    assert "DFL" not in again.parts  # its Sigmoid+Mul is DFL only by name here; a Softmax+Conv DFL is found as such


def ultralytics_head(bins: int = 16, classes: int = 3) -> onnx.ModelProto:
    """A one-level head in the form of Ultralytics' YOLOv8 export, SiLU backbone (Mul(x, Sigmoid(x))) included:
    box Conv (4×bins channels) → Reshape [1, 4, bins, A] → Transpose → Softmax over the bins → the DFL's 1×1 Conv
    (weight 0..bins-1) → Reshape [1, 4, A] → Split → anchors − lt, anchors + rb → centre (Add, Div 2) and size (Sub)
    → Concat → × stride; class Conv → Reshape → Sigmoid; Concat of boxes and scores → output0 [1, 4 + classes, A]."""
    rng = np.random.default_rng(0)
    a = 8 * 8

    def t(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    inits = [t("stem.w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
             t("box.w", rng.standard_normal((4 * bins, 8, 1, 1)).astype(np.float32)),
             t("cls.w", rng.standard_normal((classes, 8, 1, 1)).astype(np.float32)),
             t("dfl.w", np.arange(bins, dtype=np.float32).reshape(1, bins, 1, 1)),
             t("dist_shape", np.array([1, 4, bins, a], np.int64)), t("box_shape", np.array([1, 4, a], np.int64)),
             t("cls_shape", np.array([1, classes, a], np.int64)), t("split", np.array([2, 2], np.int64)),
             t("anchors", rng.random((1, 2, a)).astype(np.float32) * 8), t("two", np.array(2.0, np.float32)),
             t("stride", np.array(8.0, np.float32))]
    node = helper.make_node
    nodes = [node("Conv", ["images", "stem.w"], ["s"], "/model.0/conv/Conv", strides=[4, 4], pads=[1, 1, 1, 1]),
             node("Sigmoid", ["s"], ["s_sig"], "/model.0/act/Sigmoid"),
             node("Mul", ["s", "s_sig"], ["f"], "/model.0/act/Mul"),
             node("Conv", ["f", "box.w"], ["box"], "/model.22/cv2.0/Conv"),
             node("Conv", ["f", "cls.w"], ["cls"], "/model.22/cv3.0/Conv"),
             node("Reshape", ["box", "dist_shape"], ["dist"], "/model.22/dfl/Reshape"),
             node("Transpose", ["dist"], ["dist_t"], "/model.22/dfl/Transpose", perm=[0, 2, 1, 3]),
             node("Softmax", ["dist_t"], ["prob"], "/model.22/dfl/Softmax", axis=1),
             node("Conv", ["prob", "dfl.w"], ["ltrb4"], "/model.22/dfl/conv/Conv"),
             node("Reshape", ["ltrb4", "box_shape"], ["ltrb"], "/model.22/dfl/Reshape_1"),
             node("Split", ["ltrb", "split"], ["lt", "rb"], "/model.22/Split", axis=1),
             node("Sub", ["anchors", "lt"], ["x1y1"], "/model.22/Sub"),
             node("Add", ["anchors", "rb"], ["x2y2"], "/model.22/Add_1"),
             node("Add", ["x1y1", "x2y2"], ["sum"], "/model.22/Add_2"),
             node("Div", ["sum", "two"], ["cxy"], "/model.22/Div"),
             node("Sub", ["x2y2", "x1y1"], ["wh"], "/model.22/Sub_1"),
             node("Concat", ["cxy", "wh"], ["cells"], "/model.22/Concat_4", axis=1),
             node("Mul", ["cells", "stride"], ["dbox"], "/model.22/Mul_2"),
             node("Reshape", ["cls", "cls_shape"], ["cls_flat"], "/model.22/Reshape_2"),
             node("Sigmoid", ["cls_flat"], ["scores"], "/model.22/Sigmoid"),
             node("Concat", ["dbox", "scores"], ["output0"], "/model.22/Concat_5", axis=1)]
    graph = helper.make_graph(nodes, "yolov8", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                              [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + classes, a])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_an_ultralytics_form_head_with_its_softmax_dfl_is_found_without_names():
    model, names = _renamed(ultralytics_head())
    (head,) = _heads(model)
    assert head.kind == PatternKind.YOLO_HEAD and head.parts[0] == "DFL"  # the Softmax → 1×1 Conv over 16 bins
    expected = [names[n.name] for n in ultralytics_head().graph.node
                if n.name.startswith("/model.22/") and not n.name.startswith(("/model.22/cv2", "/model.22/cv3"))]
    assert list(head.nodes) == expected and len(expected) == 16  # the DFL Conv in, the box/class Convs out
    assert names["/model.0/act/Sigmoid"] not in head.nodes  # the backbone's SiLU is no score Sigmoid
    assert "DFL" not in _heads(_renamed(ultralytics_head(bins=4))[0])[0].parts  # 4 bins: no DFL


def test_the_other_yolo_fixture_has_a_head_too():
    model = onnx.load(str(FIXTURES / "yolo_detector.onnx"))
    (head,) = _heads(model)
    assert head.kind == PatternKind.YOLO_HEAD
    ops = {n.name: n.op_type for n in model.graph.node}
    assert {"Sigmoid", "Concat", "Mul", "Add", "Sub"} <= {ops[n] for n in head.nodes}
    assert not {"Conv", "Relu", "Constant"} & {ops[n] for n in head.nodes}
    assert model.graph.node[-1].name in head.nodes  # the final Concat


def test_the_text_encoder_has_attention_and_is_an_encoder():
    model = onnx.load(str(TEXT))
    (att,) = detect_patterns(model)
    assert att.kind == PatternKind.ATTENTION and att.count == 2
    ops = {n.name: n.op_type for n in model.graph.node}
    scope = set(att.nodes)
    act_matmuls = {"/layers.0/MatMul", "/layers.0/MatMul_1", "/layers.1/MatMul", "/layers.1/MatMul_1"}
    assert {n for n in scope if ops[n] == "MatMul"} == act_matmuls  # Q·Kᵀ and A·V, no weight MatMul
    assert {n for n in ops if ops[n] in ("Softmax", "ReduceMean", "Sqrt", "Pow")} <= scope  # 5 LayerNorms
    assert {"/layers.0/Div", "/layers.0/Add"} <= scope  # the scale and the mask
    assert not any(ops[n] in ("Erf", "Gather", "Shape", "Constant") for n in scope)
    assert att.parts == ("2 attention blocks: Softmax between activation × activation MatMuls", "5 LayerNorms")
    assert is_encoder(model)
    renamed, names = _renamed(model)
    assert detect_patterns(renamed)[0].nodes == tuple(names[n] for n in att.nodes)


def test_digits_attention_has_attention_but_is_not_an_encoder():
    model = onnx.load(str(SAMPLES / "digits_attention" / "model.onnx"))
    (att,) = detect_patterns(model)
    ops = {n.name: n.op_type for n in model.graph.node}
    assert att.kind == PatternKind.ATTENTION
    assert sum(ops[n] == "LayerNormalization" for n in att.nodes) == 5 and sum(ops[n] == "Softmax" for n in att.nodes) == 2
    assert not is_encoder(model)  # its patch embedding is a Conv


@pytest.mark.parametrize("sample", ["digits_cnn", "efficientnet_lite0"])
def test_image_classifiers_have_no_known_pattern(sample):
    model = onnx.load(str(SAMPLES / sample / "model.onnx"))
    assert detect_patterns(model) == [] and not is_encoder(model)


@pytest.mark.parametrize("fixture", ["db_detector", "vad_rnn", "fp16_net"])
def test_other_fixtures_have_no_known_pattern(fixture):
    assert detect_patterns(onnx.load(str(FIXTURES / f"{fixture}.onnx"))) == []


# -- a LayerNorm and a tanh-GELU exported as elementwise ops, outside attention ------------------------------------


def mlp_model(norm: str = "jax", gelu: str = "jax", width: int = 32) -> onnx.ModelProto:
    """A small MLP without attention: Dense → a LayerNorm exported as elementwise ops (``norm``: JAX's or PyTorch's
    form) → a tanh-approximated GELU exported as elementwise ops (``gelu``: JAX's or PyTorch's form; "none": a plain
    Tanh) → Dense; each part's nodes are named /ln/…, /gelu/… (/act/Tanh)."""
    rng = np.random.default_rng(0)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v, dtype=np.float32), name)
    inits = [c("w0", rng.standard_normal((16, width)) * 2.0), c("b0", rng.standard_normal(width)),
             c("w1", rng.standard_normal((width, 10)) * 0.3), c("b1", rng.standard_normal(10) * 0.1),
             c("gamma", rng.uniform(0.5, 1.5, width)), c("beta", rng.standard_normal(width) * 0.1),
             c("inv_n", 1.0 / width), c("eps", 1e-6), c("zero", 0.0), c("two", 2.0),
             c("k", 0.044715), c("s", np.sqrt(2 / np.pi)), c("one", 1.0), c("half", 0.5), c("three", 3.0)]
    inits.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes"))
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w0"], ["h0"], "/dense0/MatMul"), n("Add", ["h0", "b0"], ["h"], "/dense0/Add")]
    if norm == "jax":  # E[x²] − E[x]², clamped, + ε, Sqrt, Reciprocal, × γ; (x − mean) × that + β
        nodes += [n("ReduceSum", ["h", "axes"], ["s1"], "/ln/Sum"), n("Mul", ["h", "h"], ["sq"], "/ln/Square"),
                  n("ReduceSum", ["sq", "axes"], ["s2"], "/ln/Sum_1"), n("Mul", ["s2", "inv_n"], ["ex2"], "/ln/truediv_1"),
                  n("Mul", ["s1", "inv_n"], ["mean"], "/ln/truediv"), n("Mul", ["mean", "mean"], ["m2"], "/ln/Square_1"),
                  n("Sub", ["ex2", "m2"], ["var0"], "/ln/Sub"), n("Max", ["zero", "var0"], ["var"], "/ln/Maximum"),
                  n("Add", ["var", "eps"], ["ve"], "/ln/AddV2"), n("Sqrt", ["ve"], ["std"], "/ln/Rsqrt"),
                  n("Reciprocal", ["std"], ["rstd"], "/ln/Rsqrt_r"), n("Mul", ["rstd", "gamma"], ["g"], "/ln/Mul"),
                  n("Sub", ["h", "mean"], ["cen"], "/ln/Sub_1"), n("Mul", ["cen", "g"], ["ng"], "/ln/Mul_1"),
                  n("Add", ["ng", "beta"], ["y"], "/ln/AddV2_1")]
    else:  # PyTorch: ReduceMean, Sub, Pow 2, ReduceMean, Add ε, Sqrt, Div, × γ, + β
        nodes += [n("ReduceMean", ["h"], ["mean"], "/ln/ReduceMean", axes=[-1]), n("Sub", ["h", "mean"], ["cen"], "/ln/Sub"),
                  n("Pow", ["cen", "two"], ["p"], "/ln/Pow"), n("ReduceMean", ["p"], ["var"], "/ln/ReduceMean_1", axes=[-1]),
                  n("Add", ["var", "eps"], ["ve"], "/ln/Add"), n("Sqrt", ["ve"], ["std"], "/ln/Sqrt"),
                  n("Div", ["cen", "std"], ["nrm"], "/ln/Div"), n("Mul", ["nrm", "gamma"], ["ng"], "/ln/Mul"),
                  n("Add", ["ng", "beta"], ["y"], "/ln/Add_1")]
    if gelu == "jax":  # x·c → ·x → ·x, + x, × √(2/π), tanh, + 1, × 0.5, × x
        nodes += [n("Mul", ["k", "y"], ["a1"], "/gelu/Mul"), n("Mul", ["y", "a1"], ["a2"], "/gelu/Mul_1"),
                  n("Mul", ["y", "a2"], ["a3"], "/gelu/Mul_2"), n("Add", ["y", "a3"], ["a4"], "/gelu/AddV2"),
                  n("Mul", ["s", "a4"], ["a5"], "/gelu/Mul_3"), n("Tanh", ["a5"], ["t"], "/gelu/Tanh"),
                  n("Add", ["one", "t"], ["t1"], "/gelu/AddV2_1"), n("Mul", ["half", "t1"], ["t2"], "/gelu/Mul_4"),
                  n("Mul", ["y", "t2"], ["z"], "/gelu/Mul_5")]
    elif gelu == "torch":  # Pow 3, × k, + x, × √(2/π), tanh, + 1; 0.5·x beside it; the product
        nodes += [n("Pow", ["y", "three"], ["a1"], "/gelu/Pow"), n("Mul", ["a1", "k"], ["a2"], "/gelu/Mul"),
                  n("Add", ["y", "a2"], ["a3"], "/gelu/Add"), n("Mul", ["a3", "s"], ["a4"], "/gelu/Mul_1"),
                  n("Tanh", ["a4"], ["t"], "/gelu/Tanh"), n("Add", ["t", "one"], ["t1"], "/gelu/Add_1"),
                  n("Mul", ["y", "half"], ["hx"], "/gelu/Mul_2"), n("Mul", ["hx", "t1"], ["z"], "/gelu/Mul_3")]
    else:  # a plain tanh activation
        nodes.append(n("Tanh", ["y"], ["z"], "/act/Tanh"))
    nodes += [n("MatMul", ["z", "w1"], ["o0"], "/dense1/MatMul"), n("Add", ["o0", "b1"], ["logits"], "/dense1/Add")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def _named(model: onnx.ModelProto, prefix: str) -> tuple[str, ...]:
    return tuple(n.name for n in model.graph.node if n.name.startswith(prefix))


@pytest.mark.parametrize("norm", ["jax", "torch"])
@pytest.mark.parametrize("gelu", ["jax", "torch"])
def test_an_exported_layer_norm_and_tanh_gelu_outside_attention_are_known_patterns(norm, gelu):
    model = mlp_model(norm, gelu)
    ln, act = detect_patterns(model)
    assert (ln.kind, act.kind) == (PatternKind.LAYER_NORM, PatternKind.TANH_GELU)
    assert set(ln.nodes) == set(_named(model, "/ln/")) and ln.count == 1  # every node of its statistics and affine
    assert set(act.nodes) == set(_named(model, "/gelu/")) and act.count == 1  # the polynomial, tanh and products
    assert ln.note().startswith("LayerNorm: ") and "--no-known-patterns" in ln.note()
    renamed, names = _renamed(model)
    assert float_scope(detect_patterns(renamed)) == tuple(names[n] for n in float_scope([ln, act]))  # structure


def test_a_gelu_after_a_scaling_keeps_that_scaling_out_of_its_scope():
    """x = γ·n (an RMSNorm's end, or a LayerNorm without β) is a Mul of one activation, like PyTorch's 0.5·x: it
    is not the GELU's, because the polynomial reads x itself."""
    model = mlp_model("torch", "jax")
    add = next(n for n in model.graph.node if n.name == "/ln/Add_1")
    model.graph.node.remove(add)
    for n in model.graph.node:
        n.input[:] = ["ng" if i == "y" else i for i in n.input]
    act = next(p for p in detect_patterns(model) if p.kind == PatternKind.TANH_GELU)
    assert set(act.nodes) == set(_named(model, "/gelu/"))


def test_a_plain_tanh_a_constant_shift_and_attention_are_not_these_patterns():
    assert _kinds(mlp_model("jax", "none")) == [PatternKind.LAYER_NORM]  # tanh(x) alone is no GELU
    shift = mlp_model("torch", "none")
    sub = next(n for n in shift.graph.node if n.name == "/ln/Sub")
    sub.input[1] = "beta"  # x − a constant is no mean
    assert _kinds(shift) == []
    assert PatternKind.LAYER_NORM not in _kinds(onnx.load(str(TEXT)))  # there its LayerNorms belong to attention


@pytest.mark.parametrize("known_patterns", [True, False])
def test_static_int8_keeps_an_exported_layer_norm_and_gelu_in_float(tmp_path, known_patterns):
    src, dst = tmp_path / "mlp.onnx", tmp_path / "int8.onnx"
    model = mlp_model("jax", "jax")
    onnx.save(model, str(src))
    quantize_static_model(src, dst, QuantConfig(known_patterns=known_patterns, range_split=False), RandomFeeds("x", (1, 16), 16))
    g = onnx.load(str(dst)).graph
    dq_out = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    int8 = {n.name for n in g.node if any(i in dq_out for i in n.input)}
    assert "/dense0/MatMul" in int8 and "/dense1/MatMul" in int8
    inside = set(_named(model, "/ln/") + _named(model, "/gelu/")) - {"/gelu/Mul", "/gelu/Mul_1", "/gelu/Mul_2",
                                                                        "/gelu/AddV2", "/ln/Sum", "/ln/Square",
                                                                        "/ln/Sub_1"}  # those read x itself
    assert (not int8 & inside) is known_patterns, sorted(int8 & inside)


# -- a CTC head, built here --------------------------------------------------------------------------------------


def ctc_model(op: str = "Softmax", classes: int = 37, per_step: bool = True) -> onnx.ModelProto:
    """A small text recognizer: Conv (stride 4 along the width) + Relu over a 1×32×80 line image, its height averaged
    into 20 time steps of 16 features ([1, 20, 16]), a class projection (MatMul + Add) and ``op`` over the classes of
    each step; ``per_step=False`` pools the steps away first (a classifier: [1, classes])."""
    rng = np.random.default_rng(0)
    shapes = {"conv.w": (16, 1, 3, 3), "conv.b": (16,), "proj.w": (16, classes), "proj.b": (classes,)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, name)
             for name, s in shapes.items()]
    nodes = [helper.make_node("Conv", ["image", "conv.w", "conv.b"], ["c"], "/backbone/Conv", pads=[1, 1, 1, 1],
                              strides=[1, 4]),
             helper.make_node("Relu", ["c"], ["r"], "/backbone/Relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], "/neck/ReduceMean", axes=[2], keepdims=0),
             helper.make_node("Transpose", ["m"], ["seq"], "/neck/Transpose", perm=[0, 2, 1])]
    if not per_step:
        nodes.append(helper.make_node("ReduceMean", ["seq"], ["pooled"], "/neck/Pool", axes=[1], keepdims=0))
    feat = "seq" if per_step else "pooled"
    nodes += [helper.make_node("MatMul", [feat, "proj.w"], ["logits0"], "/head/MatMul"),
              helper.make_node("Add", ["logits0", "proj.b"], ["logits"], "/head/Add"),
              helper.make_node(op, ["logits"], ["probs"], f"/head/{op}", axis=-1)]
    out_shape = [1, 20, classes] if per_step else [1, classes]
    graph = helper.make_graph(nodes, "ctc", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 32, 80])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_a_ctc_head_is_its_per_step_softmax_and_class_projection(op):
    (ctc,) = detect_patterns(ctc_model(op))
    assert ctc.kind == PatternKind.CTC_HEAD
    assert ctc.nodes == ("/head/MatMul", "/head/Add", f"/head/{op}")
    assert ctc.note().startswith(f"CTC head: 3 nodes ({op} over the classes of each time step; the class projection "
                                 "(MatMul) feeding it) kept in float")


@pytest.mark.parametrize("known_patterns", [True, False])
def test_static_int8_of_a_recognizer_keeps_its_ctc_head_in_float(tmp_path, known_patterns):
    src, dst = tmp_path / "ctc.onnx", tmp_path / "int8.onnx"
    onnx.save(ctc_model(), str(src))
    quantize_static_model(src, dst, QuantConfig(known_patterns=known_patterns, range_split=False),
                          RandomFeeds("image", (1, 1, 32, 80), 8, uniform=True))
    g = onnx.load(str(dst)).graph
    dq_out = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    int8 = {n.name for n in g.node if any(i in dq_out for i in n.input)}
    assert "/backbone/Conv" in int8
    assert ("/head/MatMul" in int8) is not known_patterns


def test_a_classifier_softmax_is_not_a_ctc_head():
    assert detect_patterns(ctc_model(per_step=False)) == []


def test_a_softmax_over_the_steps_is_not_a_ctc_head():
    model = ctc_model()
    softmax = model.graph.node[-1]
    softmax.attribute[0].i = 1  # over the time steps
    assert detect_patterns(model) == []
    del softmax.attribute[:]  # the default axis: -1 from opset 13
    assert _kinds(model) == [PatternKind.CTC_HEAD]


def test_the_scope_leaves_out_nodes_already_excluded():
    found = detect_patterns(ctc_model())
    assert float_scope(found, skip=["/head/Add"]) == ("/head/MatMul", "/head/Softmax")


# -- the starting scope of a run and of tune --------------------------------------------------------------------


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, Path]:
    return photo_parts(tmp_path_factory.mktemp("pattern_photos"), 4)


def _optimize(photos, out: Path, capsys, *flags) -> dict:
    code = cli.main(["optimize", str(YOLOV8), str(out), "--precision", "int8", *flags,
                     "--calibration", str(photos["calibration"]), "--eval", str(photos["evaluation"]),
                     "--verify-samples", "4", "--json"])
    cap = capsys.readouterr()
    assert code in (0, 4), cap.err  # 4: a verdict worse than ok (CPU-dependent), not what is tested here
    return json.loads(cap.out)


def _quantized_around(qdq: Path, nodes: tuple[str, ...]) -> list[str]:
    """The ``nodes`` of the QDQ model whose output is quantized (feeds a QuantizeLinear) or that read a
    QuantizeLinear → DequantizeLinear pair of another of ``nodes`` (the scope's edge reads the int8 Convs' outputs)."""
    g = onnx.load(str(qdq)).graph
    producer = {o: n for n in g.node for o in n.output}
    q_in = {n.input[0] for n in g.node if n.op_type == "QuantizeLinear"}

    def from_scope(t: str) -> bool:
        dq = producer.get(t)
        q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        src = producer.get(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None
        return src is not None and src.name in nodes

    return [n.name for n in g.node if n.name in nodes
            and (any(o in q_in for o in n.output) or any(from_scope(i) for i in n.input))]


def test_the_default_static_run_keeps_the_head_in_float_and_says_so(photos, tmp_path, capsys):
    head = _heads(onnx.load(str(YOLOV8)))[0].nodes
    on = _optimize(photos, tmp_path / "on", capsys)
    assert on["recipe"]["quant"]["known_patterns"] is True
    (note,) = [n for n in on["notes"] if n.startswith("YOLO-style detection head:")]
    listed = re.search(r"export does \(known patterns; .*\): (.*)\.$", note)
    assert listed is not None and sorted(listed.group(1).split(", ")) == sorted(head)
    assert _quantized_around(tmp_path / "on" / QDQ_FILE, head) == []
    assert on["coverage"]["quantized"]["Conv"] == 8  # the backbone after the stem and the head's Convs stay int8
    assert any(n.startswith("Detector stem: 6 nodes") for n in on["notes"])
    assert DETECTOR_BIAS_NOTE in on["notes"]  # a detector's default int8 runs without bias correction
    assert not any("(range-split)" in n for n in on["notes"])  # the final Concat was in the scope already

    off = _optimize(photos, tmp_path / "off", capsys, "--no-known-patterns")
    assert off["recipe"]["quant"]["known_patterns"] is False
    assert not any(n.startswith(("YOLO-style", "Detector stem")) for n in off["notes"])
    assert DETECTOR_BIAS_NOTE not in off["notes"] and any(n.startswith("Bias correction") for n in off["notes"])
    around = _quantized_around(tmp_path / "off" / QDQ_FILE, head)
    assert sorted(around) == sorted(head)  # range-split keeps the final Concat float, but it reads int8 branches


def test_optimize_prints_the_scope_and_exclude_nodes_adds_to_it(photos, tmp_path, capsys):
    code = cli.main(["optimize", str(YOLOV8), str(tmp_path / "out"), "--precision", "int8",
                     "--calibration", str(photos["calibration"]), "--eval", str(photos["evaluation"]),
                     "--verify-samples", "2", "--exclude-nodes", "/model.4/Conv"])
    out = capsys.readouterr().out
    assert code in (0, 4)
    line = next(ln for ln in out.splitlines() if "note" in ln and "YOLO-style detection head" in ln)
    assert "20 nodes" in line and line.endswith("/model.22/Concat_5.") and "/model.4/Conv" not in line
    qdq = onnx.load(str(tmp_path / "out" / QDQ_FILE)).graph
    conv = next(n for n in qdq.node if n.name == "/model.4/Conv")
    assert conv.input[1] == "/model.4.weight"  # its weight read as float, not through a DequantizeLinear


def test_a_stem_conv_given_16_bit_weights_is_quantized_and_the_stem_note_says_so(photos, tmp_path, capsys):
    """16-bit weights asked for a node of the float scope win over the scope, and the note does not call that node
    float: its weight reaches the QDQ model as int16 while the stem's other nodes keep float weights."""
    out = _optimize(photos, tmp_path / "out", capsys, "--int16-weight-nodes", "/model.1/Conv")
    (note,) = [n for n in out["notes"] if n.startswith("Detector stem:")]
    assert note.endswith("Of these, 1 is quantized instead, with 16-bit weights and int8 activations, as "
                         "--int16-weight-nodes asked: /model.1/Conv.")
    g = onnx.load(str(tmp_path / "out" / QDQ_FILE)).graph
    inits = {i.name: i.data_type for i in g.initializer}
    dq_of = {n.output[0]: n.input[0] for n in g.node if n.op_type == "DequantizeLinear"}
    convs = {n.name: n.input[1] for n in g.node if n.name in ("/model.0/Conv", "/model.1/Conv")}
    assert inits[dq_of[convs["/model.1/Conv"]]] == TensorProto.INT16
    assert convs["/model.0/Conv"] not in dq_of  # the rest of the stem reads its weight as float


def test_tune_starts_from_the_scope_and_an_encoder_from_dynamic_int8():
    vnni = parse_cpuinfo("flags : sse2 avx2 avx512_vnni")
    ops = ("Add", "MatMul", "Softmax")
    plain = search_space(Target.CPU, vnni, model_ops=ops)
    assert plain[0].quant == QuantConfig(reduce_range=False) and plain[0].quant.known_patterns
    encoder = search_space(Target.CPU, vnni, model_ops=ops, encoder=True)
    assert encoder[0].quant.mode == QuantMode.DYNAMIC and encoder[1] == plain[0]
    assert sorted(map(repr, encoder)) == sorted(map(repr, plain))  # the same trials, reordered
    detector = search_space(Target.CPU, vnni, model_ops=("Conv", "Add"), detector=True)
    assert detector[0].quant == QuantConfig(reduce_range=False, bias_correction=False)  # as its default run
    assert not any(r.is_static and r.quant.bias_correction for r in detector if r.quant.quant_format.value == "QDQ")
    assert not any("bias correction" in r.name for r in detector)  # its twin would be the same recipe
    avx2 = search_space(Target.CPU, parse_cpuinfo("flags : sse2 avx2"), model_ops=("Conv", "Add"), detector=True)
    assert [r.quant.reduce_range for r in avx2[:2]] == [True, False]  # no VNNI: its full-range twin comes second
    assert avx2[1].quant == replace(avx2[0].quant, reduce_range=False)


def test_tune_tries_dynamic_int8_first_on_the_text_encoder(tmp_path, capsys):
    code = cli.main(["tune", str(TEXT), "--data", str(FIXTURES / "text_calibration.txt"),
                     "--eval", str(FIXTURES / "text_evaluation.txt"), "--tokenizer", str(FIXTURES / "text_tokenizer.json"),
                     "--seq-len", "16", "--max-trials", "1", "--exclusion-steps", "0", "--bench-seconds", "0.2",
                     "--verify-samples", "8", "--out", str(tmp_path / "tuned"), "--json"])
    cap = capsys.readouterr()
    assert code in (0, 4), cap.err
    data = json.loads(cap.out)
    (first,) = data["trials"]
    assert first["recipe"]["quant"]["mode"] == "dynamic" and "--quant-mode dynamic" in first["cli_line"]
    assert any(n.startswith("A transformer encoder (attention found, no Conv)") for n in data["notes"]), data["notes"]


def test_tune_starts_a_detector_from_its_stem_and_head_in_float_without_bias_correction(photos, tmp_path, capsys):
    code = cli.main(["tune", str(YOLOV8), "--calibration", str(photos["calibration"]), "--eval",
                     str(photos["evaluation"]), "--max-trials", "1", "--exclusion-steps", "0", "--bench-seconds", "0.2",
                     "--verify-samples", "4", "--out", str(tmp_path / "tuned"), "--json"])
    cap = capsys.readouterr()
    assert code in (0, 4), cap.err
    data = json.loads(cap.out)
    (first,) = data["trials"]
    assert first["recipe"]["quant"]["bias_correction"] is False and "--no-bias-correction" in first["cli_line"]
    assert any(n.startswith("A YOLO-style detector (known patterns)") for n in data["notes"]), data["notes"]
    artifact = json.loads((tmp_path / "tuned" / "trials" / "01" / "artifact.json").read_text())
    assert any(n.startswith("Detector stem: 6 nodes") for n in artifact["notes"])
    assert not any(n.startswith("Bias correction (Nagel") for n in artifact["notes"])
    stem = [f"/model.{i}/{x}" for i in range(3) for x in ("Conv", "act/Relu")]
    # only the stem's last output is quantized: for the int8 Conv after it
    assert _quantized_around(tmp_path / "tuned" / "trials" / "01" / QDQ_FILE, tuple(stem)) == [stem[-1]]


# -- a Log's input: an audio front end, built here ---------------------------------------------------------------


def logmel_model() -> onnx.ModelProto:
    """An audio front end and a classifier on it: an STFT as two Convs (128-sample Hann windows, hop 64) over 4,032
    samples, the power re² + im², a 20-band triangular mel filterbank (MatMul), a clamp to 1e-10 and the Log, then a
    MatMul over the bands to 8 scores per frame."""
    n_fft, hop, bins, mels = 128, 64, 65, 20
    t, k = np.arange(n_fft), np.arange(bins)[:, None]
    win = np.hanning(n_fft)
    real = (np.cos(2 * np.pi * k * t / n_fft) * win).astype(np.float32)[:, None, :]
    imag = (-np.sin(2 * np.pi * k * t / n_fft) * win).astype(np.float32)[:, None, :]
    fb = np.zeros((bins, mels), np.float32)
    edges = np.linspace(0, bins - 1, mels + 2)
    for m in range(mels):
        lo, c, hi = edges[m:m + 3]
        x = np.arange(bins)
        fb[:, m] = np.clip(np.minimum((x - lo) / (c - lo), (hi - x) / (hi - c)), 0, None)
    inits = [numpy_helper.from_array(real, "stft.real"), numpy_helper.from_array(imag, "stft.imag"),
             numpy_helper.from_array(fb, "mel.fb"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-10, np.float32), "eps"),
             numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (mels, 8)).astype(np.float32), "head.w")]
    nodes = [helper.make_node("Conv", ["audio", "stft.real"], ["re"], "/stft/ConvReal", strides=[hop]),
             helper.make_node("Conv", ["audio", "stft.imag"], ["im"], "/stft/ConvImag", strides=[hop]),
             helper.make_node("Pow", ["re", "two"], ["re2"], "/power/PowReal"),
             helper.make_node("Pow", ["im", "two"], ["im2"], "/power/PowImag"),
             helper.make_node("Add", ["re2", "im2"], ["power"], "/power/Add"),
             helper.make_node("Transpose", ["power"], ["frames"], "/mel/Transpose", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["frames", "mel.fb"], ["mel"], "/mel/MatMul"),
             helper.make_node("Clip", ["mel", "eps"], ["clamped"], "/mel/Clip"),
             helper.make_node("Log", ["clamped"], ["logmel"], "/mel/Log"),
             helper.make_node("MatMul", ["logmel", "head.w"], ["scores"], "/head/MatMul")]
    frames = (4032 - n_fft) // hop + 1
    graph = helper.make_graph(nodes, "logmel", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, 4032])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, frames, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)

def clips(n: int, seed: int) -> list[np.ndarray]:
    """``n`` clips of a tone at a random pitch and level (-60..0 dB) between silences, with a faint noise floor."""
    rng, out = np.random.default_rng(seed), []
    t = np.arange(4032) / 8000
    for _ in range(n):
        a = np.zeros(4032, np.float32)
        f, amp = rng.uniform(200, 3000), 10 ** rng.uniform(-3, 0)
        on = slice(rng.integers(0, 2000), rng.integers(2500, 4032))
        a[on] = amp * np.sin(2 * np.pi * f * t[on])
        a += rng.normal(0, 1e-4, 4032).astype(np.float32)
        out.append(a.reshape(1, 1, 4032))
    return out


def test_a_log_mel_front_end_is_a_log_input_back_to_its_spectrum():
    (found,) = detect_patterns(logmel_model())
    assert found.kind == PatternKind.LOG_INPUT
    assert set(found.nodes) == {"/stft/ConvReal", "/stft/ConvImag", "/power/PowReal", "/power/PowImag", "/power/Add",
                                "/mel/Transpose", "/mel/MatMul", "/mel/Clip"}  # not the classifier after the Log
    assert found.note().startswith("Log input: 8 nodes (1 Log: Clip ← MatMul ← Transpose ← Add ← …) kept in float")


def test_a_softplus_log_keeps_only_its_offset():
    """Mish exported as x·tanh(log(1 + exp(x))) (YOLOv4): the walk stops at the Exp, so the network stays int8."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], "/conv"), helper.make_node("Exp", ["c"], ["e"], "/exp"),
             helper.make_node("Add", ["e", "one"], ["p"], "/add"), helper.make_node("Log", ["p"], ["s"], "/log"),
             helper.make_node("Tanh", ["s"], ["t"], "/tanh"), helper.make_node("Mul", ["c", "t"], ["y"], "/mul")]
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    graph = helper.make_graph(nodes, "mish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    (found,) = detect_patterns(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert found.nodes == ("/add",)


@pytest.mark.parametrize("known_patterns", [True, False])
def test_static_int8_of_a_log_mel_front_end_keeps_it_finite(tmp_path, known_patterns):
    """onnx-asr's log-mel preprocessors (nemo80, kaldi, wespeaker) under default static int8 gave NaN/inf features
    (BROKEN): the mel energies of quiet frames rounded to zero. With the front end in float the classifier after it
    is int8 and the scores stay finite and close."""

    class Clips:
        def __init__(self, xs):
            self.feeds = iter([{"audio": x} for x in xs])

        def get_next(self):
            return next(self.feeds, None)

    src, dst = tmp_path / "logmel.onnx", tmp_path / "int8.onnx"
    onnx.save(logmel_model(), str(src))
    quantize_static_model(src, dst, QuantConfig(known_patterns=known_patterns, range_split=False), Clips(clips(16, 1)))
    g = onnx.load(str(dst)).graph
    dq_out = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    int8 = {n.name for n in g.node if any(i in dq_out for i in n.input)}
    assert "/head/MatMul" in int8 and ("/mel/MatMul" in int8) is not known_patterns
    reference = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    quantized = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    errors = []
    for x in clips(8, 2):
        r, q = (s.run(None, {"audio": x})[0].astype(np.float64) for s in (reference, quantized))
        errors.append(np.sum((q - r) ** 2) / np.sum(r ** 2) if np.isfinite(q).all() else np.inf)
    if known_patterns:
        assert 10 * np.log10(1 / max(errors)) > 25  # SQNR of the worst clip, dB
    else:
        assert max(errors) == np.inf or 10 * np.log10(1 / max(errors)) < 10
