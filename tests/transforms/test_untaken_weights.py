"""A recurrent model whose LSTM/GRU weights int8 leaves in float: the quantizer's warnings say how much, and what takes
them (as on openWakeWord's hey_mycroft_v0.1.onnx, where int8 made a file of 102% of the source's size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortlab.settings.config import QuantConfig, QuantMode
from ortlab.transforms.quantize import quantize_dynamic_result, quantize_static_model
from ortlab.transforms.untaken_weights import untaken_weights, weight_bytes
from tests.support.models import RandomFeeds

SEQ, INPUT, HIDDEN = 16, 96, 64


def recurrent_model(path: Path, op: str = "LSTM", dense: int = 1) -> Path:
    """[SEQ, 1, INPUT] → ``op`` (one direction, HIDDEN) → its last hidden state [1, HIDDEN] → MatMul [HIDDEN, dense]."""
    gates = {"LSTM": 4, "GRU": 3}[op]
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((1, gates * HIDDEN, INPUT)) * 0.1).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, gates * HIDDEN, HIDDEN)) * 0.1).astype(np.float32), "R")
    b = numpy_helper.from_array(np.zeros((1, 2 * gates * HIDDEN), np.float32), "B")
    fc = numpy_helper.from_array((rng.standard_normal((HIDDEN, dense)) * 0.1).astype(np.float32), "fc")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node(op, ["x", "W", "R", "B"], ["", "h"], name="rnn", hidden_size=HIDDEN),
             helper.make_node("Squeeze", ["h", "axes"], ["h2"], name="squeeze"),
             helper.make_node("MatMul", ["h2", "fc"], ["y"], name="dense")]
    graph = helper.make_graph(nodes, "recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, 1, INPUT])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, dense])], [w, r, b, fc, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what ONNX Runtime 1.31 reads
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def share_of_recurrent_weights(path: Path) -> float:
    """W and R (the inputs ONNX Runtime would quantize) over every float tensor, from the arrays themselves."""
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    total = sum(a.nbytes for a in arrays.values() if a.dtype == np.float32)
    return (arrays["W"].nbytes + arrays["R"].nbytes) / total


def test_static_int8_says_the_lstm_stays_float_and_names_the_dynamic_recipe_that_takes_it(tmp_path):
    src = recurrent_model(tmp_path / "lstm.onnx")
    share = share_of_recurrent_weights(src)
    warnings = quantize_static_model(src, tmp_path / "q.onnx", QuantConfig(), RandomFeeds("x", (SEQ, 1, INPUT), 8))
    said = [w for w in warnings if "LSTM node(s) hold" in w]
    assert said == [f"1 LSTM node(s) hold {share:.0%} of the model's weights, which stay in float, as large as in the "
                    "source: ONNX Runtime's static int8 has no LSTM kernel; its dynamic int8 takes LSTM when "
                    "asked (--quant-mode dynamic --op-types MatMul,Gemm,LSTM, DynamicQuantizeLSTM): time it, as a "
                    "small LSTM can run slower in int8 than in float at batch 1."]
    assert share > 0.95
    assert (tmp_path / "q.onnx").stat().st_size > 0.9 * src.stat().st_size  # what the warning says


def test_dynamic_int8_says_so_until_asked_for_lstm_and_then_quantizes_it(tmp_path):
    src = recurrent_model(tmp_path / "lstm.onnx")
    default = quantize_dynamic_result(src, tmp_path / "d.onnx", QuantConfig(mode=QuantMode.DYNAMIC))
    assert default.coverage.quantized == {"MatMul": 1}
    assert any(w.startswith("1 LSTM node(s) hold") and "dynamic int8 takes LSTM only when asked (--quant-mode dynamic "
               "--op-types Gemm,MatMul,LSTM" in w for w in default.warnings)
    asked = quantize_dynamic_result(src, tmp_path / "l.onnx",
                                    QuantConfig(mode=QuantMode.DYNAMIC, op_types=("MatMul", "Gemm", "LSTM")))
    assert asked.coverage.quantized == {"LSTM": 1, "MatMul": 1}
    assert not any("node(s) hold" in w for w in asked.warnings)
    assert (tmp_path / "l.onnx").stat().st_size < 0.4 * src.stat().st_size


def test_a_gru_has_no_int8_kernel_and_a_small_recurrent_part_is_not_mentioned(tmp_path):
    gru = recurrent_model(tmp_path / "gru.onnx", op="GRU")
    warnings = quantize_dynamic_result(gru, tmp_path / "g.onnx", QuantConfig(mode=QuantMode.DYNAMIC)).warnings
    assert any(w.startswith("1 GRU node(s) hold") and "no int8 kernel for GRU in either mode" in w for w in warnings)
    wide = recurrent_model(tmp_path / "wide.onnx", dense=4096)  # the dense layer outweighs the LSTM
    assert share_of_recurrent_weights(wide) < 0.25
    res = quantize_dynamic_result(wide, tmp_path / "w.onnx", QuantConfig(mode=QuantMode.DYNAMIC))
    assert not any("node(s) hold" in w for w in res.warnings)


def test_weight_bytes_and_nodes_kept_in_float_on_purpose(tmp_path):
    src = recurrent_model(tmp_path / "lstm.onnx")
    model = onnx.load(str(src))
    per_node, total = weight_bytes(model)
    assert per_node == {"rnn": 4 * (4 * HIDDEN * INPUT + 4 * HIDDEN * HIDDEN), "dense": 4 * HIDDEN}
    assert total == per_node["rnn"] + per_node["dense"] + 4 * 8 * HIDDEN  # the bias is stored, not quantized
    assert untaken_weights(model, ["MatMul"], dynamic=True, excluded=["rnn"]) == []
    assert untaken_weights(model, ["MatMul", "LSTM"], dynamic=True) == []
    assert len(untaken_weights(model, ["MatMul"], dynamic=True)) == 1
