"""Element types, one naming: ONNX ``TensorProto`` types, ONNX Runtime's ``"tensor(...)"`` strings and numpy
dtypes all meet in the numpy-style name ortlab shows and stores (``"float32"``, ``"int8"``, ``"bfloat16"``…).

ONNX and ONNX Runtime name types the same way (ORT's ``tensor(float)`` is ONNX's ``FLOAT``), so one
lookup through ONNX's own table serves both; numpy arrays exist only for the plain numeric types
(``NUMPY_NAMES``), which is what the data loader and the benchmark can feed.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

# the types ortlab can hold in a plain numpy array (and so read from files or generate at random)
NUMPY_NAMES = frozenset({"float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                         "int64", "uint64", "bool"})
_BY_LOWER_NAME = {name.lower(): value for name, value in TensorProto.DataType.items()}  # "float" → FLOAT


def from_onnx(elem_type: int) -> str:
    """``"float32"``, ``"float16"``, ``"int8"``, ``"bfloat16"``, ``"string"``… for an ONNX ``TensorProto`` data type."""
    if elem_type == TensorProto.STRING:
        return "string"
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError):  # no numpy type (bfloat16, float8, int4…): ONNX's own name
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
        return name.lower()


def from_ort(type_string: str) -> str:
    """The same name for an ONNX Runtime type string: ``"tensor(float)"`` → ``"float32"``. Strings that are
    not a tensor type (``"seq(tensor(float))"``, ``"map(...)"``) come back unchanged."""
    if not (type_string.startswith("tensor(") and type_string.endswith(")")):
        return type_string
    elem_type = _BY_LOWER_NAME.get(type_string[len("tensor("):-1])
    return type_string if elem_type is None else from_onnx(elem_type)


def to_numpy(name: str) -> np.dtype | None:
    """The numpy dtype for a name from :func:`from_onnx`/:func:`from_ort`, or None when ortlab cannot hold
    that type in a plain numpy array (string, bfloat16, float8, int4, complex…)."""
    return np.dtype(name) if name in NUMPY_NAMES else None
