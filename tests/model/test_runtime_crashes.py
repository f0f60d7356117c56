"""A graph that crashes ONNX Runtime in native code is refused when it is read, with how to rewrite it (found by
mutating a test model: the int8 run's child died of SIGSEGV, 'ended unexpectedly (exit code -11)')."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.core.errors import ModelLoadError
from ortlab.model.inspect import inspect_model

_SESSION = ("import sys, onnxruntime as ort\n"
            "so = ort.SessionOptions()\n"
            "so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED\n"
            "ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n")


def _layer_norm(path, inputs):
    node = helper.make_node("LayerNormalization", inputs, ["Y"], axis=-1, name="ln")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(np.ones(8, np.float32), "W")])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                       ir_version=8).SerializeToString())
    return path


def test_a_layer_norm_with_an_empty_bias_name_is_refused_and_one_without_it_is_read(tmp_path):
    empty = _layer_norm(tmp_path / "empty.onnx", ["X", "W", ""])
    omitted = _layer_norm(tmp_path / "omitted.onnx", ["X", "W"])
    crashed = subprocess.run([sys.executable, "-c", _SESSION, str(empty)], capture_output=True)
    survived = subprocess.run([sys.executable, "-c", _SESSION, str(omitted)], capture_output=True)
    assert survived.returncode == 0, survived.stderr[-500:]
    if crashed.returncode >= 0:
        pytest.fail("this ONNX Runtime loads LayerNormalization [X, Scale, ''] at the extended level: the refusal "
                    "in ortlab.model.runtime_crashes is no longer needed for it")
    with pytest.raises(ModelLoadError, match=r"^LayerNormalization 'ln' names its bias input with an empty name.*"
                                             r"crashes \(SIGSEGV\).*del node.input\[2\]"):
        inspect_model(empty)
    assert inspect_model(omitted).op_counts == {("", "LayerNormalization"): 1}
