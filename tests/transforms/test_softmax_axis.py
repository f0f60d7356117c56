"""A float Softmax over an inner axis is computed over the last axis between two Transposes, with the same values."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ortlab.settings.config import OptLevel
from ortlab.transforms.optimize import optimize_model
from ortlab.transforms.softmax_axis import inner_axis_softmaxes, softmax_over_last_axis

SHAPE = [2, 5, 3, 4]
PERM = [0, 2, 1, 3]  # as a YOLOv8's distribution-focal-loss head, before its Softmax over axis 1
OUT = [SHAPE[i] for i in PERM]


def _model(axis: int, opset: int = 17, quantized: bool = False, transposed: bool = True) -> onnx.ModelProto:
    """x → Mul(2) → Transpose(PERM) → Softmax(axis) → y; ``quantized``: the Softmax between a DequantizeLinear and
    a QuantizeLinear; not ``transposed``: the Softmax reads a Neg of the Transpose."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["m"], name="scale"),
             helper.make_node("Transpose", ["m"], ["h"], name="swap", perm=PERM) if transposed else
             helper.make_node("Neg", ["m"], ["n"], name="neg")]
    nodes += [] if transposed else [helper.make_node("Transpose", ["n"], ["t"], name="swap", perm=PERM),
                                    helper.make_node("Neg", ["t"], ["h"], name="back")]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])]
    if quantized:
        inits += [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
                  helper.make_tensor("z", TensorProto.UINT8, [], [128]),
                  helper.make_tensor("s_out", TensorProto.FLOAT, [], [1 / 255]),
                  helper.make_tensor("z_out", TensorProto.UINT8, [], [0])]
        nodes += [helper.make_node("QuantizeLinear", ["h", "s", "z"], ["hq"]),
                  helper.make_node("DequantizeLinear", ["hq", "s", "z"], ["hd"]),
                  helper.make_node("Softmax", ["hd"], ["p"], name="soft", axis=axis),
                  helper.make_node("QuantizeLinear", ["p", "s_out", "z_out"], ["pq"]),
                  helper.make_node("DequantizeLinear", ["pq", "s_out", "z_out"], ["y"])]
    else:
        nodes.append(helper.make_node("Softmax", ["h"], ["y"], name="soft", axis=axis))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model: onnx.ModelProto | str, x: np.ndarray) -> np.ndarray:
    src = model if isinstance(model, str) else model.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """The model's function, computed apart: softmax over ``axis`` of 2·x transposed."""
    h = 2 * x.astype(np.float64).transpose(PERM)
    e = np.exp(h - h.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, 2, -3])
def test_a_softmax_over_an_inner_axis_is_rewritten_with_the_same_values(axis):
    x = np.random.default_rng(0).normal(0, 2, size=SHAPE).astype(np.float32)
    m = _model(axis)
    assert softmax_over_last_axis(m) == ["soft"]
    onnx.checker.check_model(m, full_check=True)
    assert [n.op_type for n in m.graph.node] == ["Mul", "Transpose", "Transpose", "Softmax", "Transpose"]
    assert [a.i for a in m.graph.node[3].attribute if a.name == "axis"] == [-1]
    np.testing.assert_allclose(_run(m, x), _softmax(x, axis), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axis, opset, quantized, transposed", [
    (3, 17, False, True), (-1, 17, False, True), (1, 11, False, True), (1, 17, True, True), (1, 17, False, False)])
def test_a_softmax_that_is_not_rewritten(axis, opset, quantized, transposed):
    """The last axis already; opset 11, where axis 1 normalises over every axis from 1 on, flattened (another
    function); a Softmax between Q/DQ, which ONNX Runtime runs as QLinearSoftmax on any axis; one that reads no
    Transpose (alone the rewrite runs no faster)."""
    m = _model(axis, opset, quantized, transposed)
    before = m.SerializeToString()
    assert inner_axis_softmaxes(m) == {} and softmax_over_last_axis(m) == []
    assert m.SerializeToString() == before
    if opset == 11:  # what the rewrite would have changed: the older Softmax is not a per-axis one
        x = np.random.default_rng(1).normal(size=SHAPE).astype(np.float32)
        h = 2 * x.astype(np.float64).transpose(PERM).reshape(2, -1)
        e = np.exp(h - h.max(axis=1, keepdims=True))
        flat = (e / e.sum(axis=1, keepdims=True)).reshape(OUT)
        np.testing.assert_allclose(_run(m, x), flat, rtol=1e-5, atol=1e-7)


def test_optimize_rewrites_it_says_so_and_never_touches_the_source(tmp_path):
    src, dst = tmp_path / "model.onnx", tmp_path / "out" / "model.onnx"
    onnx.save(_model(1), str(src))
    before = src.read_bytes()
    r = optimize_model(src, dst, OptLevel.EXTENDED)
    assert src.read_bytes() == before
    assert any("1 Softmax over an inner axis after a Transpose ('soft') computed over the last axis" in n for n in r.notes)
    x = np.random.default_rng(2).normal(size=SHAPE).astype(np.float32)
    np.testing.assert_allclose(_run(str(dst), x), _softmax(x, 1), rtol=1e-5, atol=1e-7)
    kept = optimize_model(src, tmp_path / "disabled" / "model.onnx", OptLevel.DISABLED)
    assert not any("Softmax" in n for n in kept.notes)  # "disabled" copies the graph through unchanged
    assert [n.op_type for n in onnx.load(str(tmp_path / "disabled" / "model.onnx")).graph.node] == [
        "Mul", "Transpose", "Softmax"]
