"""A tensor name where a node name is expected (issue 27: analyze printed a tensor under "node", and
--exclude-nodes silently ignored it): the messages say it is a tensor, which node writes it and what to type."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.core.errors import RecipeError
from ortlab.model.node_names import check_node_names
from tests.cli.test_cli import run
from tests.support.models import conv_bn_model


def _models(tmp_path):
    """An fp32 MatMul → Relu ("act") and its QDQ form whose Relu has no name (as ORT's pre-processing leaves the
    Reshapes it adds)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])
    ref = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"], name="mm"), helper.make_node("Relu", ["H"], ["Y"], name="act")],
        "ref", [x], [y], [numpy_helper.from_array(w, "W")]), opset_imports=[helper.make_opsetid("", 13)])
    ref.ir_version = 8
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    zp = helper.make_tensor("z", TensorProto.UINT8, [], [128])
    wscale = helper.make_tensor("ws", TensorProto.FLOAT, [], [float(np.abs(w).max() / 127)])
    wq = numpy_helper.from_array(np.round(w / (np.abs(w).max() / 127)).astype(np.int8), "Wq")
    wzp = helper.make_tensor("wz", TensorProto.INT8, [], [0])
    nodes = [
        helper.make_node("QuantizeLinear", ["X", "s", "z"], ["Xq"], name="xq"),
        helper.make_node("DequantizeLinear", ["Xq", "s", "z"], ["Xd"], name="xd"),
        helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["Wd"], name="wd"),
        helper.make_node("MatMul", ["Xd", "Wd"], ["H"], name="mm"),
        helper.make_node("QuantizeLinear", ["H", "s", "z"], ["Hq"], name="hq"),
        helper.make_node("DequantizeLinear", ["Hq", "s", "z"], ["Hd"], name="hd"),
        helper.make_node("Relu", ["Hd"], ["Y"]),  # no name
    ]
    cand = helper.make_model(helper.make_graph(nodes, "cand", [x], [y], [scale, zp, wscale, wq, wzp]),
                             opset_imports=[helper.make_opsetid("", 13)])
    cand.ir_version = 8
    onnx.save(ref, tmp_path / "ref.onnx")
    onnx.save(cand, tmp_path / "cand.onnx")
    np.save(tmp_path / "x.npy", rng.standard_normal((8, 4)).astype(np.float32))
    return tmp_path / "ref.onnx", tmp_path / "cand.onnx", tmp_path / "x.npy"


def test_analyze_says_a_row_named_by_a_tensor_is_not_a_node_and_names_the_node_to_give(tmp_path, capsys):
    ref, cand, data = _models(tmp_path)
    code, out, err = run(["analyze", ref, cand, "--data", data], capsys)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert ["Y", "Relu"] in [r[1:3] for r in rows]  # the row of the unnamed Relu is named by its tensor …
    assert ("Y is a tensor, not a node: the Relu node that writes it in the quantized graph has no name, so "
            "--exclude-nodes cannot name it; in the fp32 model node act writes it: give --exclude-nodes act") in out


def test_a_tensor_given_to_exclude_nodes_is_refused_with_the_node_that_writes_it(tmp_path, capsys):
    ref, _, _ = _models(tmp_path)
    with pytest.raises(RecipeError, match=r"'H' is a tensor, not a node: node mm \(MatMul\) writes it; give "
                                          r"--exclude-nodes mm\."):
        check_node_names(ref, ["mm", "H"], "--exclude-nodes")
    with pytest.raises(RecipeError, match=r"'X' is a tensor, not a node \(it is an input or a weight, written by no "
                                          r"node\); the node\(s\) that read it: mm \(MatMul\); give --exclude-nodes mm"):
        check_node_names(ref, ["X"], "--exclude-nodes")
    assert check_node_names(ref, ["mm", "act"], "--exclude-nodes") == []
    (warning,) = check_node_names(ref, ["acts"], "--int16-weight-nodes")
    assert warning.startswith("--int16-weight-nodes: no node named 'acts' in ref.onnx (did you mean act?)")


def test_optimize_refuses_a_tensor_name_in_exclude_nodes_before_running(tmp_path, capsys):
    src = conv_bn_model(tmp_path / "conv.onnx")
    model = onnx.load(src)
    conv = next(n for n in model.graph.node if n.op_type == "Conv" and n.name)
    code, _, err = run(["optimize", src, tmp_path / "o.onnx", "--precision", "int8", "--allow-random-data",
                        "--exclude-nodes", conv.output[0]], capsys)
    assert code == 2
    assert err == (f"ortlab: error: --exclude-nodes: {conv.output[0]!r} is a tensor, not a node: node {conv.name} "
                   f"(Conv) writes it; give --exclude-nodes {conv.name}.\n")
    assert not (tmp_path / "o.onnx").exists()
