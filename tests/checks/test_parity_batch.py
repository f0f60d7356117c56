"""The optimization parity check on a model whose input leaves the batch axis open but whose graph reshapes to a
batch of one (as YOLO exports with fixed anchor tables do): the samples go one at a time instead of failing the run
with ONNX Runtime's broadcast error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.checks.parity import check_parity
from ortlab.data.dataset import random_dataset
from ortlab.runtime.providers import ORT_ERRORS, create_session
from ortlab.settings.config import OptLevel, Recipe


def _batch_of_one(path):
    """x [batch, 4] → Reshape [1, -1] → + a [1, 4] table: right at batch 1, a broadcast error at batch 2."""
    table = numpy_helper.from_array(np.arange(4, dtype=np.float32)[None], "table")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("Add", ["flat", "table"], ["y"])]
    graph = helper.make_graph(nodes, "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [table, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_graph_that_only_runs_at_batch_one_is_checked_one_sample_at_a_time(tmp_path):
    model = _batch_of_one(tmp_path / "one.onnx")
    sess, _ = create_session(str(model))
    with pytest.raises(ORT_ERRORS):  # the graph really fails on a batch of two
        sess.run(None, {"x": np.zeros((2, 4), np.float32)})
    data = random_dataset(6, seed=0)
    result = check_parity(model, model, data, None, Recipe(opt_level=OptLevel.ALL), n=6)
    assert result.ok and result.n_samples == 6 and result.relative == 0.0


def _log_of(path, shift: float):
    """y = Log(x + shift): NaN for x < −shift, −inf at it, finite above."""
    bias = numpy_helper.from_array(np.array(shift, np.float32), "shift")
    nodes = [helper.make_node("Add", ["x", "shift"], ["moved"]), helper.make_node("Log", ["moved"], ["y"])]
    graph = helper.make_graph(nodes, "log", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_nan_and_inf_both_graphs_compute_alike_are_no_difference(tmp_path):
    """A mel front end quantized to int8 (onnx_asr's nemo80) takes the log of zeros: both the graph run as is and the
    optimized one give the same NaN and −inf. nan − nan made the check call that a change by graph optimization
    ("use --opt-level disabled"); a value finite in one and not in the other still is one."""
    data = random_dataset(6, seed=0)  # N(0, 1) inputs: Log of negatives is NaN
    same = _log_of(tmp_path / "a.onnx", 0.0)
    result = check_parity(same, same, data, None, Recipe(opt_level=OptLevel.EXTENDED), n=6)
    assert result.ok and result.relative == 0.0
    moved = check_parity(same, _log_of(tmp_path / "b.onnx", 10.0), data, None, Recipe(opt_level=OptLevel.EXTENDED), n=6)
    assert not moved.ok and moved.relative == float("inf")
