"""Outputs no node of their own makes (a returned input, a returned initializer, an output listed twice): ONNX
Runtime's quantizers failed on the first ("Graph is not a DAG") and its float16 converter on all three; the runs now
keep them as the source has them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.cli import main as cli
from ortlab.transforms import graph_outputs

ANCHORS = np.arange(6, dtype=np.float32).reshape(2, 3) / 7


def returning_model(path):
    """x [1, 3, 16, 16] → Conv → y; the graph also returns x itself and the initializer ``anchors``, which the
    Conv's bias is sliced from."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(ANCHORS, "anchors"),
             numpy_helper.from_array(np.array([-1], np.int64), "shape")]
    nodes = [helper.make_node("Reshape", ["anchors", "shape"], ["flat"]),
             helper.make_node("Slice", ["flat", "zero", "four"], ["B"]),
             helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv")]
    inits += [numpy_helper.from_array(np.array([0], np.int64), "zero"),
              numpy_helper.from_array(np.array([4], np.int64), "four")]
    graph = helper.make_graph(nodes, "returning", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 14, 14]),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16]),
                               helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def outputs_of(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return {o.name: v for o, v in zip(sess.get_outputs(), sess.run(None, {"x": x}))}


@pytest.mark.parametrize("recipe", [["--precision", "int8"], ["--precision", "int8", "--quant-format", "QOperator"],
                                    ["--precision", "fp16"]])
def test_a_model_that_returns_its_input_and_a_constant_keeps_both_through_a_run(tmp_path, capsys, recipe):
    src = returning_model(tmp_path / "m.onnx")
    data = np.random.default_rng(1).normal(size=(8, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=data)
    code = cli.main(["optimize", str(src), str(tmp_path / "out"), *recipe, "--calibration", str(tmp_path / "x.npz"),
                     "--no-timing"])
    err = capsys.readouterr().err
    assert code == 0, err
    result = tmp_path / "out" / "model.onnx"
    model = onnx.load(str(result))
    assert [o.name for o in model.graph.output] == ["y", "x", "anchors"]
    assert not any(graph_outputs.SUFFIX in n for node in model.graph.node for n in [*node.input, *node.output])
    got, want = outputs_of(result, data[:1]), outputs_of(src, data[:1])
    np.testing.assert_array_equal(got["x"], data[:1])
    np.testing.assert_allclose(got["anchors"], ANCHORS, rtol=1e-3)  # fp16 rounds the constant as a weight
    assert np.abs(got["y"] - want["y"]).max() < 0.05 * np.abs(want["y"]).max()


def test_detach_gives_each_unmade_output_a_node_and_reattach_takes_the_identity_away(tmp_path):
    model = onnx.load(str(returning_model(tmp_path / "m.onnx")))
    assert graph_outputs.detach(model) == 2
    assert [o.name for o in model.graph.output] == ["y", "x" + graph_outputs.SUFFIX + "1", "anchors"]
    assert "anchors" not in {t.name for t in model.graph.initializer}
    made = {n.output[0]: n.op_type for n in model.graph.node if n.name.startswith("ortlab_output_")}
    assert made == {"anchors": "Constant", "x" + graph_outputs.SUFFIX + "1": "Identity"}
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "detached.onnx"
    onnx.save(model, str(path))
    assert graph_outputs.reattach(path) and not graph_outputs.reattach(path)  # once; then nothing to do
    again = onnx.load(str(path))
    assert [o.name for o in again.graph.output] == ["y", "x", "anchors"]
    assert [n.op_type for n in again.graph.node].count("Identity") == 0
    x = np.ones((1, 3, 16, 16), np.float32)
    np.testing.assert_array_equal(outputs_of(path, x)["x"], x)


def test_float16_io_names_a_returned_input_once_by_its_own_name(tmp_path):
    from ortlab.transforms.fp16 import convert_fp16

    warnings = convert_fp16(returning_model(tmp_path / "m.onnx"), tmp_path / "h.onnx", keep_io_types=False)
    said = [w for w in warnings if w.startswith("Inputs/outputs")]
    assert said and said[0].startswith("Inputs/outputs x, y, anchors are now float16"), warnings


def test_an_output_listed_twice_stays_listed_twice_through_fp16(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]) for _ in range(2)]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "twice", [x], y)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    code = cli.main(["optimize", str(tmp_path / "m.onnx"), str(tmp_path / "out"), "--precision", "fp16",
                     "--allow-random-data", "--no-timing"])
    assert code == 0, capsys.readouterr().err
    result = onnx.load(str(tmp_path / "out" / "model.onnx"))
    assert [o.name for o in result.graph.output] == ["y", "y"]
    sess = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    first, second = sess.run(None, {"x": np.array([[-1, 0, 2, 3]], np.float32)})
    np.testing.assert_array_equal(first, [[0, 0, 2, 3]])
    np.testing.assert_array_equal(second, first)
