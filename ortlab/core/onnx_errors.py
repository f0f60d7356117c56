"""What the onnx package raises when a model file or graph is malformed: its C++ checker, shape inference and
schema look-ups raise their own types, and its bindings the plain ``RuntimeError``/``ValueError``/``TypeError``
(a proto over 2 GB, an attribute or data type they do not know); protobuf its DecodeError."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from onnx import checker, defs, shape_inference

ONNX_ERRORS: tuple[type[Exception], ...] = (
    checker.ValidationError, shape_inference.InferenceError, defs.SchemaError, RuntimeError, ValueError, TypeError,
    DecodeError,  # a file that is not a protobuf at all
    KeyError,  # onnx.helper's data-type tables are plain dicts: an unknown elem type is a KeyError
)
