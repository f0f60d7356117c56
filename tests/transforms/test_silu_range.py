"""SiLU-aware ranges: the cut point against a grid scan written here, the scales ONNX Runtime then writes, and the
error of a real quantized Conv → SiLU → Conv against the float model, with and without the cut."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.settings.config import QuantConfig
from ortlab.transforms.quantize import quantize_static_model, quantize_calibrated_result, calibrate_model
from ortlab.transforms.silu_range import flat_below, silu_pairs
from tests.support.models import RandomFeeds

SHAPE = (1, 4, 8, 8)


def grid_cut(step: float) -> float:
    """The smallest t past the tail's peak with t·σ(−t) ≤ step/2, by scanning a grid of 1e-4 (independent of the
    bisection)."""
    t = np.arange(1.3, 40.0, 1e-4)
    tail = t * (1.0 / (1.0 + np.exp(t)))
    return float(t[np.argmax(tail <= step / 2)])


@pytest.mark.parametrize("step", [0.005, 0.02, 0.0747, 0.13, 0.3])
def test_the_cut_is_where_the_silu_is_flat_within_half_a_step(step):
    t = flat_below(step)
    assert abs(t - grid_cut(step)) < 2e-4
    assert abs(-t / (1 + math.exp(t))) <= step / 2 + 1e-9


def silu_model(path, *, extra_reader: bool = False, not_silu: bool = False):
    """x → Conv(4→8, 3×3; half its channels biased to −12, so the raw output reaches far below the SiLU's knee) →
    Sigmoid → Mul → Conv(8→4, 1×1) → y. ``extra_reader``: the Conv output also feeds an Identity output;
    ``not_silu``: the Mul multiplies the sigmoid by the input of another branch."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.6, (8, 4, 3, 3)).astype(np.float32)
    b1 = np.array([-12, 1, -12, 0.5, -12, 0, -12, 1], np.float32)
    w2 = rng.normal(0, 0.5, (4, 8, 1, 1)).astype(np.float32)
    b2 = np.zeros(4, np.float32)
    mul_in = "c2" if not_silu else "c"
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", [mul_in, "s"], ["m"], name="mul"),
             helper.make_node("Conv", ["m", "w2", "b2"], ["y"], name="conv2")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    if not_silu:
        nodes.insert(0, helper.make_node("Conv", ["x", "w1", "b1"], ["c2"], name="conv1b", pads=[1, 1, 1, 1]))
    if extra_reader:
        nodes.append(helper.make_node("Identity", ["c"], ["c_out"], name="tap"))
        outputs.append(helper.make_tensor_value_info("c_out", TensorProto.FLOAT, [1, 8, 8, 8]))
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return model


def test_only_a_sigmoid_times_its_own_input_read_by_nothing_else_is_a_silu(tmp_path):
    assert silu_pairs(silu_model(tmp_path / "a.onnx").graph) == [("c", "m")]
    assert silu_pairs(silu_model(tmp_path / "b.onnx", extra_reader=True).graph) == []
    assert silu_pairs(silu_model(tmp_path / "c.onnx", not_silu=True).graph) == []
    assert silu_pairs(silu_model(tmp_path / "d.onnx").graph, skip=("mul",)) == []


def _q_range(path, tensor: str) -> tuple[float, float, float]:
    """(low, high, scale) of the uint8 grid the QDQ model gives ``tensor``."""
    m = onnx.load(str(path))
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    scale, zero = float(init[q.input[1]]), int(init[q.input[2]])
    return -zero * scale, (255 - zero) * scale, scale


def _sqnr(model_path, float_path) -> float:
    feeds = RandomFeeds("x", SHAPE, 40, seed=9)
    ref_s = ort.InferenceSession(str(float_path), providers=["CPUExecutionProvider"])
    plain = ort.SessionOptions()  # the QDQ arithmetic as written: no fused int8 kernel, the same on any CPU
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    q_s = ort.InferenceSession(str(model_path), plain, providers=["CPUExecutionProvider"])
    signal = noise = 0.0
    while (f := feeds.get_next()) is not None:
        r, c = ref_s.run(None, f)[0], q_s.run(None, f)[0]
        signal += float((r * r).sum())
        noise += float(((r - c) ** 2).sum())
    return 10 * math.log10(signal / noise)


def test_the_silu_input_gets_the_cut_range_and_the_quantized_model_is_closer_to_float(tmp_path):
    src = tmp_path / "silu.onnx"
    silu_model(src)
    notes, paths = {}, {}
    for on in (True, False):
        q = QuantConfig(silu_range=on, bias_correction=False, known_patterns=False)
        cache = tmp_path / f"cal_{on}.json"
        calibrate_model(src, q, RandomFeeds("x", SHAPE, 32), cache)
        paths[on] = tmp_path / f"q_{on}.onnx"
        notes[on] = quantize_calibrated_result(src, paths[on], q, cache).notes
    low_on, high_on, _ = _q_range(paths[True], "c")
    low_off, high_off, _ = _q_range(paths[False], "c")
    _, _, step_out = _q_range(paths[True], "m")
    expected = -grid_cut(step_out)
    assert low_off < -12 < expected  # the calibrated range reaches the biased channels; the cut lies above them
    assert abs(low_on - expected) <= (high_on - low_on) / 255 + 1e-4  # the zero point rounds the low end
    assert abs(high_on - high_off) <= 0.02 * high_off  # the high end is kept
    assert any(n.startswith("SiLU-aware ranges: 1 SiLU input") for n in notes[True])
    assert not any(n.startswith("SiLU-aware ranges") for n in notes[False])
    assert _sqnr(paths[True], src) > _sqnr(paths[False], src) + 1.0


def test_a_shared_calibration_cache_is_left_as_calibrated(tmp_path):
    src = tmp_path / "silu.onnx"
    silu_model(src)
    q = QuantConfig(bias_correction=False, known_patterns=False)
    cache = tmp_path / "cal.json"
    calibrate_model(src, q, RandomFeeds("x", SHAPE, 16), cache)
    before = cache.read_bytes()
    quantize_calibrated_result(src, tmp_path / "q.onnx", q, cache)
    assert cache.read_bytes() == before
    quantize_static_model(src, tmp_path / "q2.onnx", q, RandomFeeds("x", SHAPE, 16))
    assert _q_range(tmp_path / "q2.onnx", "c")[0] > -12


def test_the_cli_cuts_by_default_says_so_and_no_silu_range_keeps_the_calibrated_range(tmp_path, capsys):
    from ortlab.cli import main as cli

    src = tmp_path / "silu.onnx"
    silu_model(src)
    runs = {}
    for label, flags in (("on", []), ("off", ["--no-silu-range"])):
        out = tmp_path / label
        code = cli.main(["optimize", str(src), str(out), "--precision", "int8", "--allow-random-data",
                         "--no-timing", "--json", *flags])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        runs[label] = json.loads(printed.out), out / "model.qdq.onnx"
    on, off = runs["on"][0], runs["off"][0]
    assert on["recipe"]["quant"]["silu_range"] is True and off["recipe"]["quant"]["silu_range"] is False
    assert [n for n in on["notes"] if n.startswith("SiLU-aware ranges: 1 SiLU input(s)")]
    assert not [n for n in off["notes"] if "SiLU-aware" in n]
    assert _q_range(runs["on"][1], "c")[0] > -12 > _q_range(runs["off"][1], "c")[0]
