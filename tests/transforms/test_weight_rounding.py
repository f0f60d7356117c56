"""GPTQ weight rounding (ortlab.transforms.weight_rounding): the algorithm against Optimal Brain Quantization written
step by step here, the layers' input columns against ONNX Runtime's Conv, and the step on real quantized models."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.settings.config import QuantConfig
from ortlab.transforms import gptq
from ortlab.transforms import weight_rounding as wr
from ortlab.transforms.layer_columns import layer_columns
from ortlab.transforms.quantize import quantize_static_model
from tests.support.memo import DictMemo
from tests.support.models import RandomFeeds


def correlated_inputs(k: int, n: int, seed: int) -> np.ndarray:
    """``n`` input vectors of size ``k`` ([k, n]) with strongly correlated entries, as a layer's inputs are."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(0, 1, (k, k)) * 0.4 + np.eye(k)
    return mix @ rng.normal(0, 1, (k, n))


def obq_reference(w: np.ndarray, h: np.ndarray, scale: np.ndarray, lo: int, hi: int, order) -> np.ndarray:
    """Optimal Brain Quantization as its paper states it: round one column, then move every column not yet
    rounded by ``-(w_i - q_i) / [H_F⁻¹]_ii · [H_F⁻¹]_{:,i}`` with ``H_F⁻¹`` inverted afresh for the columns
    ``F`` still free (no Cholesky factor, no blocks)."""
    w = w.astype(np.float64).copy()
    q = np.zeros_like(w)
    free = list(order)
    while free:
        i = free[0]
        hinv = np.linalg.inv(h[np.ix_(free, free)])
        q[:, i] = np.clip(np.rint(w[:, i] / scale), lo, hi)
        err = (w[:, i] - q[:, i] * scale) / hinv[0, 0]
        for j_pos, j in enumerate(free[1:], start=1):
            w[:, j] -= err * hinv[0, j_pos]
        free = free[1:]
    return q


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_gives_the_integers_optimal_brain_quantization_gives(act_order):
    rng = np.random.default_rng(0)
    k = 24
    w = rng.normal(0, 0.3, (6, k))
    x = correlated_inputs(k, 400, seed=1)
    h = x @ x.T
    scale = np.abs(w).max(axis=1) / 127
    got = gptq.gptq_rows(w, h, scale, np.zeros(6), -127, 127, act_order=act_order, block=5)  # blocks cut columns
    damped = h + gptq.DAMPING * np.mean(np.diag(h)) * np.eye(k)
    order = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    want = obq_reference(w, damped, scale, -127, 127, order)
    assert np.array_equal(got, want)
    nearest = gptq.quantize_rows(w, scale, np.zeros(6), -127, 127)
    assert np.count_nonzero(got != nearest) > 10  # it does re-round, by at most one step
    assert np.abs(got - nearest).max() <= 1


def test_gptq_lowers_the_layer_output_error_on_inputs_it_was_not_fitted_on():
    rng = np.random.default_rng(2)
    k, out = 48, 16
    w = rng.normal(0, 0.2, (out, k))
    fit, held = correlated_inputs(k, 2000, seed=3)[:, :1000], correlated_inputs(k, 2000, seed=3)[:, 1000:]
    scale, zp = np.abs(w).max(axis=1) / 127, np.zeros(out)
    q_gptq = gptq.gptq_rows(w, fit @ fit.T, scale, zp, -127, 127)
    q_near = gptq.quantize_rows(w, scale, zp, -127, 127)

    def error(q):  # the layer's output error written out, not through gptq.output_error
        return float(np.sum((w @ held - ((q * scale[:, None]) @ held)) ** 2))

    assert error(q_gptq) < 0.7 * error(q_near)  # 0.52× with these seeds
    assert gptq.output_error(w, q_gptq, scale, zp, held @ held.T) == pytest.approx(error(q_gptq), rel=1e-9)


def test_an_input_that_was_always_zero_keeps_nearest_rounding_and_moves_nothing():
    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.3, (3, 5))
    x = correlated_inputs(5, 100, seed=5)
    x[2] = 0
    scale = np.full(3, 0.01)
    got = gptq.gptq_rows(w, x @ x.T, scale, np.zeros(3), -127, 127)
    assert np.array_equal(got[:, 2], gptq.quantize_rows(w, scale, np.zeros(3), -127, 127)[:, 2])


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2], group=2),
    dict(pads=[1, 1, 1, 1], group=6),  # depthwise
    dict(),
])
def test_the_input_columns_times_the_weight_rows_are_onnx_runtimes_conv(attrs):
    rng = np.random.default_rng(6)
    cin, cout, kh, kw = 6, 6, 3, 2
    group = attrs.get("group", 1)
    w = rng.normal(0, 1, (cout, cin // group, kh, kw)).astype(np.float32)
    x = rng.normal(0, 1, (2, cin, 9, 8)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    t = wr.RoundingTarget("conv", "Conv", "x", "w", np.ones(cout), np.zeros(cout), w.reshape(cout, -1).astype(float),
                          groups=group, conv={k: v for k, v in attrs.items() if k != "group"} | {"kernel": [kh, kw]})
    cols = layer_columns(x, t.op_type, t.conv)
    per, k = cout // group, t.columns
    got = np.concatenate([t.rows[g * per:(g + 1) * per] @ cols[g * k:(g + 1) * k] for g in range(group)])
    n, c, ho, wo = want.shape
    assert np.allclose(got.reshape(c, n, ho, wo).transpose(1, 0, 2, 3), want, atol=1e-4)


@pytest.mark.parametrize("op_type, shape, conv", [
    ("Conv", (3, 4, 11, 9), {"kernel": [3, 2], "strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ("Conv", (2, 6, 8, 8), {"kernel": [3, 3], "pads": [1, 1, 1, 1]}),
    ("Gemm", (5, 7), {}),
    ("MatMul", (2, 6, 7), {}),
])
def test_drawn_columns_are_those_columns_of_the_whole_im2col(op_type, shape, conv):
    x = np.random.default_rng(8).normal(0, 1, shape).astype(np.float32)
    whole = layer_columns(x, op_type, conv)
    most = min(whole.shape[1] - 1, 17)
    got = layer_columns(x, op_type, conv, most, np.random.default_rng(9))
    want = whole[:, np.random.default_rng(9).choice(whole.shape[1], most, replace=False)]
    assert got.dtype == np.float64 and np.array_equal(got, want)
    assert np.array_equal(layer_columns(x, op_type, conv, whole.shape[1], np.random.default_rng(9)), whole)


def conv_gemm_model(path) -> None:
    """x [1,8,10,10] → Conv 3×3 (8→16) → Relu → depthwise Conv 3×3 → Relu → GlobalAveragePool → Flatten →
    Gemm (transB, 16→10) → MatMul (10→6) → y. Weights seeded, with a few large ones per channel as trained
    weights have."""
    rng = np.random.default_rng(7)

    def weights(*shape):
        w = rng.normal(0, 0.2, shape)
        w.reshape(shape[0], -1)[:, 0] *= 4
        return w.astype(np.float32)

    inits = [numpy_helper.from_array(a, n) for a, n in (
        (weights(16, 8, 3, 3), "w1"), (np.zeros(16, np.float32), "b1"), (weights(16, 1, 3, 3), "w2"),
        (weights(10, 16), "w3"), (np.zeros(10, np.float32), "b3"), (weights(10, 6), "w4"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw", pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], name="fc", transB=1),
             helper.make_node("MatMul", ["g", "w4"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    reader = RandomFeeds("x", (1, 8, 10, 10), n, seed=seed, uniform=True)
    return [f for f in iter(reader.get_next, None)]


def _sqnr(model: onnx.ModelProto, src, feeds) -> float:
    plain = ort.SessionOptions()  # the QDQ arithmetic as written, the same on any CPU
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    q = ort.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    r = np.concatenate([ref.run(None, f)[0] for f in feeds])
    c = np.concatenate([q.run(None, f)[0] for f in feeds])
    return 10 * math.log10(float((r * r).sum()) / float(((r - c) ** 2).sum()))


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wr")
    src, qdq = tmp / "net.onnx", tmp / "net.qdq.onnx"
    conv_gemm_model(src)
    quantize_static_model(src, qdq, QuantConfig(bias_correction=False, known_patterns=False, op_types=()),
                          RandomFeeds("x", (1, 8, 10, 10), 32, seed=1, uniform=True))
    return src, qdq


def test_the_step_re_rounds_every_weighted_node_and_changes_nothing_else(quantized):
    src, qdq_path = quantized
    fp32, qdq = onnx.load(str(src)), onnx.load(str(qdq_path))
    out, result = wr.round_model(fp32, qdq, _feeds(40, seed=2))
    assert sorted(result.rounded) == ["conv1", "dw", "fc", "proj"] and not result.dropped
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in qdq.graph.node]
    before = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert changed and all(after[k].dtype == np.int8 for k in changed)  # only int8 weights moved
    assert all(np.abs(after[k].astype(int) - before[k].astype(int)).max() <= 2 for k in changed)
    assert all(np.abs(after[k]).max() <= 127 for k in changed)
    fresh = _feeds(40, seed=11)  # inputs neither fit nor check saw
    assert _sqnr(out, src, fresh) > _sqnr(qdq, src, fresh) + 1.0
    (note,) = result.notes
    assert note.startswith("GPTQ weight rounding (Frantar et al. 2023): 4 of 4 weighted node(s) re-rounded")
    assert "checked on 10 held back" in note


def test_a_step_that_makes_the_outputs_worse_is_dropped(quantized, monkeypatch):
    src, qdq_path = quantized
    qdq = onnx.load(str(qdq_path))

    def flipped(rows, hessian, scale, zero_point, lo, hi, **_):  # rounds every weight the wrong way
        q = np.rint(rows / scale[:, None])
        return np.clip(q + np.where(rows / scale[:, None] > q, -1, 1), lo, hi)

    monkeypatch.setattr(wr, "gptq_rows", flipped)
    monkeypatch.setattr(wr, "output_error", lambda rows, q, *a: float(np.abs(q).sum()))  # the per-node check fooled
    out, result = wr.round_model(onnx.load(str(src)), qdq, _feeds(40, seed=2))
    assert result.rounded and result.dropped.startswith("it lowered the held-back SQNR of y")
    assert result.applied == []
    assert [numpy_helper.to_array(t).tobytes() for t in out.graph.initializer] == \
           [numpy_helper.to_array(t).tobytes() for t in qdq.graph.initializer]
    assert "The step was dropped and the weights are rounded to nearest" in result.notes[0]


def test_too_few_samples_change_nothing_and_say_so(quantized):
    src, qdq_path = quantized
    qdq = onnx.load(str(qdq_path))
    out, result = wr.round_model(onnx.load(str(src)), qdq, _feeds(5, seed=2))
    assert result.too_few and result.applied == []
    assert "5 calibration sample(s) are too few" in result.notes[0]
    assert out.SerializeToString() == qdq.SerializeToString()


def test_a_node_kept_in_float_or_with_16_bit_weights_is_not_re_rounded(tmp_path):
    src, qdq = tmp_path / "net.onnx", tmp_path / "net.qdq.onnx"
    conv_gemm_model(src)
    quantize_static_model(src, qdq, QuantConfig(bias_correction=False, known_patterns=False,
                                                nodes_to_exclude=("dw",), int16_weight_nodes=("fc",)),
                          RandomFeeds("x", (1, 8, 10, 10), 16, seed=1, uniform=True))
    targets, skipped = wr.find_targets(onnx.load(str(src)), onnx.load(str(qdq)))
    assert sorted(t.name for t in targets) == ["conv1", "proj"]
    assert skipped == {"fc": "weight not 8-bit"}


def test_with_memory_for_one_node_at_a_time_each_node_gets_a_pass_of_its_own(quantized, monkeypatch):
    src, qdq_path = quantized
    qdq = onnx.load(str(qdq_path))
    passes: list[list[str]] = []
    real = wr._collect

    def collect(model, targets, *rest):
        passes.append([t.name for t in targets])
        return real(model, targets, *rest)

    monkeypatch.setattr(wr, "memory_budget_bytes", lambda share: 1)
    monkeypatch.setattr(wr, "_collect", collect)
    out, result = wr.round_model(onnx.load(str(src)), qdq, _feeds(40, seed=2))
    assert passes == [["conv1"], ["dw"], ["fc"], ["proj"]]
    assert sorted(result.applied) == ["conv1", "dw", "fc", "proj"]
    fresh = _feeds(40, seed=11)
    assert _sqnr(out, src, fresh) > _sqnr(qdq, src, fresh) + 1.0


def test_the_step_change_interval_is_a_paired_bootstrap_of_the_noise_energies():
    from ortlab.transforms.held_back import sqnr_change_interval

    rng = np.random.default_rng(8)
    ref = [{"y": rng.normal(0, 1, (1, 50))} for _ in range(30)]
    worse = [{"y": r["y"] + rng.normal(0, 0.2, (1, 50))} for r in ref]
    better = [{"y": r["y"] + rng.normal(0, 0.1, (1, 50))} for r in ref]
    parts = {"y": ("y", 0, None)}
    lo, hi = sqnr_change_interval(parts, ref, worse, better)["y"]
    assert 0 < lo < 20 * math.log10(2) < hi  # noise halved: +6 dB, inside a clearly positive interval
    lo, hi = sqnr_change_interval(parts, ref, better, worse)["y"]
    assert lo < -20 * math.log10(2) < hi < 0
    one_bad = [dict(r) for r in better]
    one_bad[0] = {"y": ref[0]["y"] + 3.0}  # one sample far off: the interval spans both signs or is wide
    lo, hi = sqnr_change_interval(parts, ref, better, one_bad)["y"]
    assert hi - lo > 6


DIGITS = __import__("pathlib").Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn"


def test_random_calibration_data_skips_it_with_one_note(tmp_path):
    from ortlab.data.samples import load_manifest
    from ortlab.runs.in_process import run_recipe
    from ortlab.runs.pipeline import WEIGHT_ROUNDING_ON_RANDOM_DATA, WEIGHT_ROUNDING_SKIPPED
    from ortlab.settings.config import Precision, Recipe

    s = load_manifest(DIGITS / "manifest.json")
    recipe = Recipe(precision=Precision.INT8, allow_random_data=True, quant=QuantConfig(calibration_samples=8))
    events: list = []
    art = run_recipe(s.model_path, recipe, tmp_path / "out", preprocess=s.preprocess, verify_samples=0,
                     reporter=events.append)
    assert WEIGHT_ROUNDING_SKIPPED in art.notes and WEIGHT_ROUNDING_ON_RANDOM_DATA not in art.notes
    assert wr.STAGE in art.timings and [(e.done, e.total) for e in events if e.stage == wr.STAGE] == [(1, 1)]


def test_a_qoperator_recipe_is_told_it_keeps_nearest_rounding():
    from ortlab.runs.prepare import validate_recipe
    from ortlab.runs.pipeline import plan
    from ortlab.settings.config import Precision, QuantFormat, Recipe

    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(quant_format=QuantFormat.QOPERATOR))
    notes = [f.message for f in validate_recipe(recipe) if f.field == "quant.weight_rounding"]
    assert len(notes) == 1 and "this QOperator run keeps nearest rounding" in notes[0]
    assert wr.STAGE not in [st.name for st in plan(recipe)]
    assert not [f for f in validate_recipe(Recipe(precision=Precision.INT8)) if f.field == "quant.weight_rounding"]


def test_the_cli_re_rounds_by_default_says_so_and_no_weight_rounding_keeps_nearest(tmp_path, capsys):
    import json
    import re

    from ortlab.cli import main as cli

    runs = {}
    for label, flags in (("on", []), ("off", ["--no-weight-rounding"])):
        out = tmp_path / label
        code = cli.main(["optimize", str(DIGITS / "model.onnx"), str(out), "--precision", "int8", "--calibration",
                         str(DIGITS / "calibration"), "--eval", str(DIGITS / "evaluation"), "--no-timing", "--json",
                         *flags])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        runs[label] = json.loads(printed.out)
    on, off = runs["on"], runs["off"]
    assert on["recipe"]["quant"]["weight_rounding"] is True and off["recipe"]["quant"]["weight_rounding"] is False
    (note,) = [n for n in on["notes"] if n.startswith("GPTQ weight rounding")]
    assert re.match(r"GPTQ weight rounding \(Frantar et al\. 2023\): \d+ of 10 weighted node\(s\) re-rounded", note)
    assert not [n for n in off["notes"] if "GPTQ" in n] and "weight_rounding" not in off["timings"]
    q_on = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "on" / "model.qdq.onnx")).graph.initializer}
    q_off = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "off" / "model.qdq.onnx")).graph.initializer}
    assert q_on.keys() == q_off.keys()
    assert any(v.dtype == np.int8 and not np.array_equal(v, q_off[k]) for k, v in q_on.items())


def test_weight_rounding_and_bias_correction_read_the_calibration_samples_once(tmp_path, monkeypatch):
    from ortlab.data.samples import load_manifest
    from ortlab.runs import pipeline
    from ortlab.runs.in_process import run_recipe
    from ortlab.settings.config import Precision, Recipe

    readers: list[int] = []
    real = pipeline.CalibrationReader

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            readers.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pipeline, "CalibrationReader", Counting)
    s = load_manifest(DIGITS / "manifest.json")
    art = run_recipe(s.model_path, Recipe(precision=Precision.INT8), tmp_path / "out", s.calibration_data(),
                     s.preprocess, verify_samples=0)
    assert {"weight_rounding", "bias_correction"} <= set(art.timings)
    assert len(readers) == 2  # the calibrate stage's, and one for both steps that refit on its samples


def _integers(model: onnx.ModelProto, targets) -> dict[str, np.ndarray]:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {t.name: inits[t.weight] for t in targets}


def test_a_second_step_with_a_memo_reuses_every_node_without_reading_the_samples(quantized, monkeypatch):
    src, qdq_path = quantized
    fp32, qdq, feeds = onnx.load(str(src)), onnx.load(str(qdq_path)), _feeds(40, seed=2)
    memo = DictMemo()
    first, r1 = wr.round_model(fp32, qdq, feeds, memo=memo)
    assert len(memo.kept) == 4 and memo.found == 0 and r1.reused == 0
    monkeypatch.setattr(wr, "_collect", lambda *a, **k: pytest.fail("a reused node's inputs were collected"))
    second, r2 = wr.round_model(fp32, qdq, feeds, memo=memo)
    assert r2.reused == 4 and memo.found == 4
    assert second.SerializeToString() == first.SerializeToString()
    assert r2.rounded == r1.rounded and r2.kept == r1.kept
    assert "(4 node(s) reused from an earlier run" in r2.notes[0]


def test_other_samples_miss_the_memo(quantized):
    src, qdq_path = quantized
    fp32, qdq = onnx.load(str(src)), onnx.load(str(qdq_path))
    memo = DictMemo()
    wr.round_model(fp32, qdq, _feeds(40, seed=2), memo=memo)
    _, result = wr.round_model(fp32, qdq, _feeds(40, seed=3), memo=memo)
    assert result.reused == 0 and memo.found == 0 and len(memo.kept) == 8


def test_a_node_kept_in_float_makes_only_the_nodes_after_it_fit_again_and_the_reused_equal_a_fresh_fit(tmp_path):
    src, default, head = tmp_path / "net.onnx", tmp_path / "a.qdq.onnx", tmp_path / "b.qdq.onnx"
    conv_gemm_model(src)
    for dst, excluded in ((default, ()), (head, ("fc",))):
        quantize_static_model(src, dst, QuantConfig(bias_correction=False, known_patterns=False,
                                                    nodes_to_exclude=excluded),
                              RandomFeeds("x", (1, 8, 10, 10), 32, seed=1, uniform=True))
    fp32, feeds, memo = onnx.load(str(src)), _feeds(40, seed=2), DictMemo()
    wr.round_model(fp32, onnx.load(str(default)), feeds, memo=memo)
    reused, result = wr.round_model(fp32, onnx.load(str(head)), feeds, memo=memo)
    assert result.reused == 2 and memo.found == 2  # conv1 and dw: proj reads fc's float output
    fresh, alone = wr.round_model(fp32, onnx.load(str(head)), feeds)
    assert sorted(result.rounded) == sorted(alone.rounded) == ["conv1", "dw", "proj"]
    targets, _ = wr.find_targets(fp32, onnx.load(str(head)))
    a, b = _integers(reused, targets), _integers(fresh, targets)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_a_node_s_draw_of_input_positions_does_not_depend_on_the_nodes_fitted_with_it(tmp_path):
    src, qdq_path = tmp_path / "two.onnx", tmp_path / "two.qdq.onnx"
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), n) for n in ("w1", "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 32, 32])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(src))
    quantize_static_model(src, qdq_path, QuantConfig(bias_correction=False, known_patterns=False),
                          RandomFeeds("x", (1, 4, 32, 32), 8, seed=1, uniform=True))
    fp32, qdq = onnx.load(str(src)), onnx.load(str(qdq_path))
    targets, _ = wr.find_targets(fp32, qdq)
    assert [t.name for t in targets] == ["conv1", "conv2"] and wr.COLUMNS_PER_SAMPLE < 32 * 32  # a draw is made
    feeds = [f for f in iter(RandomFeeds("x", (1, 4, 32, 32), 6, seed=4, uniform=True).get_next, None)]
    parts = [0] * 4 + [1] * 2
    together = wr._collect(qdq, targets, feeds, parts, lambda e: None, None)
    alone = wr._collect(qdq, targets[1:], feeds, parts, lambda e: None, None)
    assert np.array_equal(together.take("conv2"), alone.take("conv2"))


def test_a_kept_outcome_that_does_not_fit_the_weight_is_fitted_afresh(quantized):
    src, qdq_path = quantized
    fp32, qdq, feeds = onnx.load(str(src)), onnx.load(str(qdq_path)), _feeds(40, seed=2)
    plain, _ = wr.round_model(fp32, qdq, feeds)
    memo = DictMemo()
    wr.round_model(fp32, qdq, feeds, memo=memo)
    for key in memo.kept:  # every kept outcome replaced by integers of another shape
        memo.kept[key] = wr.NodeRounding(np.zeros(3, np.int8), 0.5)
    out, result = wr.round_model(fp32, qdq, feeds, memo=memo)
    assert result.reused == 0 and out.SerializeToString() == plain.SerializeToString()
