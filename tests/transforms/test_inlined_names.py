"""A node that ONNX Runtime's pre-processing replaces (a HardSwish it inlines into HardSigmoid + Mul) can still be
kept in float by its name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortlab.settings.config import QuantConfig
from ortlab.transforms.inlined_names import name_replacements, with_inlined
from ortlab.transforms.quantize import preprocess_for_quantization, quantize_static_model
from tests.transforms.test_quantize import reader


def hardswish_model(path: Path) -> Path:
    """Conv → HardSwish ("hs") → Conv, opset 15 (HardSwish is a function op there), every node named."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.2, (4, 8, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["h"], name="hs"),
             helper.make_node("Conv", ["h", "w2"], ["out"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "hardswish",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


def test_the_nodes_that_replace_a_named_node_take_its_name():
    source = helper.make_graph([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], "s", [], [])
    processed = helper.make_graph([helper.make_node("HardSigmoid", ["x"], ["t"]),
                                   helper.make_node("Mul", ["x", "t"], ["y"]),
                                   helper.make_node("Relu", ["y"], ["z"])], "p", [], [])
    assert name_replacements(source, processed) == {"hs": ["hs", "hs/inlined/HardSigmoid"]}
    assert [n.name for n in processed.node] == ["hs/inlined/HardSigmoid", "hs", ""]  # the Relu replaced nothing
    assert with_inlined(["hs", "other"], processed) == ["hs", "other", "hs/inlined/HardSigmoid"]


def test_a_node_that_kept_its_name_is_left_alone():
    source = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "s", [], [])
    processed = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
                                   helper.make_node("Relu", ["y"], ["z"])], "p", [], [])
    assert name_replacements(source, processed) == {}
    assert [n.name for n in processed.node] == ["conv", ""]


def test_an_inlined_hardswish_named_in_exclude_nodes_stays_in_float(tmp_path):
    pre = tmp_path / "pre.onnx"
    preprocess_for_quantization(hardswish_model(tmp_path / "m.onnx"), pre)
    by_name = {n.name: n for n in onnx.load(str(pre)).graph.node}
    assert by_name["hs"].op_type == "Mul" and by_name["hs/inlined/HardSigmoid"].op_type == "HardSigmoid"

    def mul_reads_dequantized(q: QuantConfig) -> bool:
        out = tmp_path / "q.onnx"
        quantize_static_model(pre, out, q, reader(4))
        graph = onnx.load(str(out)).graph
        writer = {o: n.op_type for n in graph.node for o in n.output}
        mul = next(n for n in graph.node if n.op_type == "Mul")
        return all(writer.get(i) == "DequantizeLinear" for i in mul.input)

    assert mul_reads_dequantized(QuantConfig())
    assert not mul_reads_dequantized(QuantConfig(nodes_to_exclude=("hs",)))


def test_a_name_the_quantized_model_lacks_is_said(tmp_path):
    pre = tmp_path / "pre.onnx"
    preprocess_for_quantization(hardswish_model(tmp_path / "m.onnx"), pre)
    warnings = quantize_static_model(pre, tmp_path / "q.onnx", QuantConfig(nodes_to_exclude=("bn7",)), reader(4))
    assert any("No node named bn7" in w and "not kept in float" in w for w in warnings)
