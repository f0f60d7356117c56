"""ortlab.core.dtypes: one naming for ONNX element types, ONNX Runtime type strings and numpy dtypes."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ortlab.core import dtypes


@pytest.mark.parametrize(("elem", "ort_type", "name"), [
    (TensorProto.FLOAT, "tensor(float)", "float32"), (TensorProto.DOUBLE, "tensor(double)", "float64"),
    (TensorProto.FLOAT16, "tensor(float16)", "float16"), (TensorProto.BFLOAT16, "tensor(bfloat16)", "bfloat16"),
    (TensorProto.INT8, "tensor(int8)", "int8"), (TensorProto.UINT8, "tensor(uint8)", "uint8"),
    (TensorProto.INT64, "tensor(int64)", "int64"), (TensorProto.BOOL, "tensor(bool)", "bool"),
    (TensorProto.STRING, "tensor(string)", "string"),
])
def test_onnx_and_ort_names_meet(elem, ort_type, name):
    assert dtypes.from_onnx(elem) == dtypes.from_ort(ort_type) == name


def test_non_tensor_ort_types_pass_through():
    assert dtypes.from_ort("seq(tensor(float))") == "seq(tensor(float))"
    assert dtypes.from_ort("tensor(nonsense)") == "tensor(nonsense)"


def test_numpy_only_for_plain_numeric_types():
    assert dtypes.to_numpy("float32") == np.float32 and dtypes.to_numpy("bool") == np.bool_
    for name in ("string", "bfloat16", "float8_e4m3fn", "int4", "complex64"):
        assert dtypes.to_numpy(name) is None


def test_ort_session_types_are_named_like_onnx_graph_types(tmp_path):
    """What ORT reports for a session input matches what the ONNX graph declares, for every numpy type."""
    for name in sorted(dtypes.NUMPY_NAMES):
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(name))
        x = helper.make_tensor_value_info("x", elem, [2])
        y = helper.make_tensor_value_info("y", elem, [2])
        g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        (ort_in,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).get_inputs()
        assert dtypes.from_ort(ort_in.type) == dtypes.from_onnx(elem) == name
