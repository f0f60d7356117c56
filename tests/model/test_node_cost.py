"""A node's estimated work, to order a keep-in-float set by its cost: a Conv's MACs at the shapes fed, the output
elements of an elementwise op."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortlab.model.node_cost import node_costs


def _conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.zeros((8, 4, 3, 3), np.float32), "w")
    m = np.zeros((16, 10), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Reshape", ["s", "shape"], ["r"], name="flat"),
             helper.make_node("MatMul", ["r", "m"], ["y"], name="mm")]
    shape = numpy_helper.from_array(np.array([-1, 16], np.int64), "shape")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, shape, numpy_helper.from_array(m, "m")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_conv_costs_its_macs_at_the_shapes_fed_and_an_elementwise_op_its_outputs():
    costs = node_costs(_conv_model(), {"x": [1, 4, 6, 6]})
    assert costs["conv"] == 8 * 6 * 6 * (4 * 3 * 3)  # output elements × products each sums
    assert costs["sig"] == 8 * 6 * 6
    assert costs["mm"] == (8 * 6 * 6 // 16) * 10 * 16


def test_open_dims_left_open_cost_what_is_known():
    costs = node_costs(_conv_model())  # no shapes: the Conv's weight elements, nothing for the rest
    assert costs["conv"] == 8 * 4 * 3 * 3 and costs["sig"] == 0


def test_on_the_yolov8_fixture_a_conv_outweighs_the_activation_after_it():
    model = onnx.load(str(Path(__file__).parents[1] / "fixtures" / "yolov8_detector.onnx"))
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    costs = node_costs(model, {model.graph.input[0].name: shape})
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert convs and all(costs[n.name] > 0 for n in convs)
    first = convs[0]
    after = next(n for n in model.graph.node if first.output[0] in n.input)
    assert costs[first.name] > 10 * costs[after.name] > 0
