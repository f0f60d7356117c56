"""A model that contradicts its own declarations is refused naming the tensor, what it is declared as and what
makes it, not only the checker's "(1) vs (13)"."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.core.errors import ModelLoadError
from ortlab.model import declared_types
from ortlab.model.inspect import load_model

import numpy as np


def _model(out_type=TensorProto.FLOAT, out_shape=(2, 4), info=()):
    """x [2, 4] → Relu 'act' → Mul by the weight 'w' → y."""
    w = numpy_helper.from_array(np.ones((2, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="act"), helper.make_node("Mul", ["h", "w"], ["y"], name="scale")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", out_type, list(out_shape))], [w], value_info=list(info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("model, says", [
    (_model(out_type=TensorProto.UINT64), "'y' is declared uint64, but Mul node 'scale' makes float32"),
    (_model(info=[helper.make_tensor_value_info("h", TensorProto.INT8, [2, 4])]),
     "'h' is declared int8, but Relu node 'act' makes float32"),
    (_model(info=[helper.make_tensor_value_info("w", TensorProto.INT64, [2, 4])]),
     "'w' is declared int64, but its initializer holds float32"),
    (_model(out_shape=(2, 3)), "'y' is declared with shape [2, 3], but Mul node 'scale' makes [2, 4]"),
    (_model(out_type=99), "'y' is declared type 99, which ONNX does not define, but Mul node 'scale' makes float32"),
])
def test_the_contradicted_tensor_is_named_with_both_sides(model, says, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    before = model.SerializeToString()
    with pytest.raises(ModelLoadError) as caught:
        load_model(path)
    message = caught.value.message
    assert message.startswith(f"invalid model: {says} (ONNX's checker: "), message
    assert message.endswith("export it again, or correct the declared type or shape."), message
    assert declared_types.contradicted_declarations(model) == [says]
    assert model.SerializeToString() == before  # the declarations are put back


def test_only_the_pair_the_checker_names_is_said_and_other_failures_keep_their_words(tmp_path):
    two = _model(out_type=TensorProto.UINT64, info=[helper.make_tensor_value_info("h", TensorProto.INT8, [2, 4])])
    both = declared_types.contradicted_declarations(two)
    assert sorted(both) == ["'h' is declared int8, but Relu node 'act' makes float32",
                            "'y' is declared uint64, but Mul node 'scale' makes float32"]
    named = "[TypeInferenceError] Inferred elem type differs from existing elem type: (1) vs (3)"
    assert declared_types.contradicted_declarations(two, named) == ["'h' is declared int8, but Relu node 'act' makes "
                                                                    "float32"]  # 3 is int8
    unsorted = _model()
    unsorted.graph.node.reverse()  # not topologically sorted: another failure, said in the checker's words
    path = tmp_path / "m.onnx"
    path.write_bytes(unsorted.SerializeToString())
    with pytest.raises(ModelLoadError, match=r"^invalid model: Nodes in a graph must be topologically sorted"):
        load_model(path)
