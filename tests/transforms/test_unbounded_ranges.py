"""A mask of -inf or float32's lowest value under static int8: the nodes that make and read it stay in float."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.data.dataset import random_dataset
from ortlab.model.inspect import inspect_model
from ortlab.settings.config import QuantConfig
from ortlab.transforms.calibration import CalibrationReader
from ortlab.transforms.quantize import calibrate_model, quantize_calibrated_result


def _masked_attention(path, fill: float):
    """Self-attention over 6 positions with a causal mask added to the scores (``fill`` above the diagonal, as
    exporters write it: -inf, or float32's lowest value), unnamed nodes as ONNX's function bodies have them."""
    rng = np.random.default_rng(0)
    mask = np.triu(np.full((6, 6), fill, np.float32), k=1)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32) * 0.5, n) for n in ("Wq", "Wk", "Wv")]
    inits.append(numpy_helper.from_array(mask, "mask"))
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q"]), helper.make_node("MatMul", ["x", "Wk"], ["k"]),
             helper.make_node("MatMul", ["x", "Wv"], ["v"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]), helper.make_node("Add", ["scores", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["weights"], axis=-1),
             helper.make_node("MatMul", ["weights", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def _sqnr(src, result, x):
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    b = ort.InferenceSession(str(result), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return 10 * np.log10(np.sum(a.astype(np.float64) ** 2) / np.sum((a.astype(np.float64) - b) ** 2))


@pytest.mark.parametrize("fill", [-np.inf, float(np.finfo(np.float32).min)])
def test_a_masked_tensor_is_kept_in_float_and_the_rest_quantized(tmp_path, fill):
    """ONNX's expanded Attention test models under static int8 gave SQNR 0 dB, cosine 0: the masked scores'
    calibrated range (-inf..x) made one int8 step infinite. The Add that makes them and the Softmax that reads them
    now stay in float, said in a note; every MatMul is still quantized."""
    src = _masked_attention(tmp_path / "attn.onnx", fill)
    reader = CalibrationReader(random_dataset(16), None, inspect_model(src).inputs)
    calibrate_model(src, QuantConfig(), reader, tmp_path / "calibration.json")
    result = quantize_calibrated_result(src, tmp_path / "q.onnx", QuantConfig(), tmp_path / "calibration.json")
    (note,) = [n for n in result.notes if n.startswith("Kept ")]
    assert note.startswith("Kept Add_5, Softmax_6 in float: tensor 'masked' was calibrated to ")
    assert ("-inf.." if fill == -np.inf else "-3.4e+38..") in note
    q = onnx.load(str(tmp_path / "q.onnx"))
    read_by = {i: n.op_type for n in q.graph.node for i in n.input}
    assert read_by["masked"] == "Softmax"  # no QuantizeLinear between them: float
    assert sum(n.op_type == "DequantizeLinear" for n in q.graph.node) >= 8  # the four MatMuls' inputs
    x = np.random.default_rng(1).standard_normal((1, 6, 8)).astype(np.float32)
    assert _sqnr(src, tmp_path / "q.onnx", x) > 20


def test_the_histogram_methods_say_what_to_do_with_an_infinite_mask(tmp_path):
    """Percentile, Entropy and Distribution failed on the -inf mask with numpy's "autodetected range of [0.0, inf]
    is not finite", said as "The model fails on random data of its input shapes"; a float32-lowest mask is finite
    and calibrates, and its range is kept out of int8 as MinMax's is."""
    from ortlab.core.errors import QuantizationError
    from ortlab.settings.config import CalibrationMethod

    src = _masked_attention(tmp_path / "inf.onnx", -np.inf)
    inputs = inspect_model(src).inputs
    for method in (CalibrationMethod.PERCENTILE, CalibrationMethod.ENTROPY):
        q = QuantConfig(calibration_method=method)
        with pytest.raises(QuantizationError, match=rf"^calibrate: A tensor of this model holds -inf or inf .* the "
                                                    rf"{method.value} calibration method cannot put in a histogram\. "
                                                    r"Calibrate with MinMax"):
            calibrate_model(src, q, CalibrationReader(random_dataset(8), None, inputs), tmp_path / "c.json")
    lowest = _masked_attention(tmp_path / "lowest.onnx", float(np.finfo(np.float32).min))
    q = QuantConfig(calibration_method=CalibrationMethod.PERCENTILE)
    calibrate_model(lowest, q, CalibrationReader(random_dataset(8), None, inputs), tmp_path / "p.json")
    result = quantize_calibrated_result(lowest, tmp_path / "p.onnx", q, tmp_path / "p.json")
    assert any(n.startswith("Kept Add_5, Softmax_6 in float") for n in result.notes), result.notes


def test_an_empty_tensor_is_said_to_hold_no_value_not_a_mask(tmp_path):
    """invisible-watermark's RivaGAN encoder slices its attention map past the last channel (32 of 32): an empty
    tensor, whose calibrated range stays inf..-inf. Its Slice and the Concat that reads it stay in float, and the note
    says the tensor was empty instead of blaming a mask."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(4, 4, 1, 1)).astype(np.float32), "w")
    consts = [numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((4, "start"), (8, "end"), (1, "axis"))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Slice", ["c", "start", "end", "axis"], ["empty"], name="slice"),
             helper.make_node("Concat", ["c", "empty"], ["joined"], axis=1, name="join"),
             helper.make_node("Relu", ["joined"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [w, *consts])
    src = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(src))
    reader = CalibrationReader(random_dataset(8), None, inspect_model(src).inputs)
    calibrate_model(src, QuantConfig(), reader, tmp_path / "calibration.json")
    result = quantize_calibrated_result(src, tmp_path / "q.onnx", QuantConfig(), tmp_path / "calibration.json")
    (note,) = [n for n in result.notes if n.startswith("Kept ")]
    assert note.startswith("Kept slice, join in float: tensor 'empty' held no value in calibration (an empty tensor")
    assert "mask" not in note
    q = onnx.load(str(tmp_path / "q.onnx"))
    made_by = {o: n.op_type for n in q.graph.node for o in n.output}
    conv = next(n for n in q.graph.node if n.op_type == "Conv")
    assert [made_by.get(i) for i in conv.input[:2]] == ["DequantizeLinear", "DequantizeLinear"]  # the Conv: int8
    read_by = {i: n.op_type for n in q.graph.node for i in n.input}
    assert made_by["empty"] == "Slice" and read_by["empty"] == "Concat"  # no QuantizeLinear between: float
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    assert _sqnr(src, tmp_path / "q.onnx", x) > 20
