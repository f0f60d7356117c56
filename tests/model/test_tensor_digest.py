"""What computes each tensor, as a digest (ortlab.model.tensor_digest): equal for the same computation under other
names and beside other branches, different when anything upstream differs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortlab.model.tensor_digest import tensor_digests


def two_branch(names: str = "", scale: float = 2.0, other: float = 3.0, stride: int = 1,
               opset: int = 13) -> onnx.ModelProto:
    """x → Conv(w) → Mul(s) → a, and x → Mul(o) → b; tensor names prefixed by ``names``."""
    p = names
    w = np.arange(2 * 2 * 3 * 3, dtype=np.float32).reshape(2, 2, 3, 3) / 10
    inits = [numpy_helper.from_array(w, p + "w"), numpy_helper.from_array(np.array(scale, np.float32), p + "s"),
             numpy_helper.from_array(np.array(other, np.float32), p + "o")]
    nodes = [helper.make_node("Conv", ["x", p + "w"], [p + "c"], name=p + "conv", pads=[1, 1, 1, 1],
                              strides=[stride, stride]),
             helper.make_node("Mul", [p + "c", p + "s"], [p + "a"], name=p + "mul"),
             helper.make_node("Mul", ["x", p + "o"], [p + "b"], name=p + "other")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info(p + "a", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info(p + "b", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_the_same_computation_under_other_names_has_the_same_digests():
    a, b = tensor_digests(two_branch()), tensor_digests(two_branch(names="renamed_"))
    for name in ("c", "a", "b", "w"):
        assert a[name] == b["renamed_" + name]
    assert len(set(a.values())) == len(a)  # no two different computations share one


def test_a_change_upstream_changes_the_tensors_below_it_and_no_other():
    base = tensor_digests(two_branch())
    scaled = tensor_digests(two_branch(scale=2.5))
    assert scaled["c"] == base["c"] and scaled["b"] == base["b"]
    assert scaled["a"] != base["a"]
    other = tensor_digests(two_branch(other=4.0))
    assert other["a"] == base["a"] and other["b"] != base["b"]


def test_an_attribute_or_the_opset_changes_the_digest():
    base = tensor_digests(two_branch())
    assert tensor_digests(two_branch(stride=2))["c"] != base["c"]
    newer = tensor_digests(two_branch(opset=17))
    assert newer["c"] != base["c"] and newer["x"] != base["x"]


def test_a_node_with_a_subgraph_matches_only_within_the_same_model():
    def with_if(other: float) -> onnx.ModelProto:
        m = two_branch(other=other)
        then = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "then", [],
                                 [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
        orelse = helper.make_graph([helper.make_node("Identity", ["c"], ["e"])], "else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
        m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
        m.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=then, else_branch=orelse))
        return m

    same, again, changed = tensor_digests(with_if(3.0)), tensor_digests(with_if(3.0)), tensor_digests(with_if(4.0))
    assert same["z"] == again["z"]
    assert changed["a"] == same["a"] and changed["z"] != same["z"]  # the If reads outer tensors by name
