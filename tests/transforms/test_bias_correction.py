"""Empirical bias correction (ortlab.transforms.bias_correction) on the bundled digits_cnn sample: the shift it writes
and whether it keeps it equal an independent computation on the fitting and held-back calibration samples, it gains
SQNR on held-out digits with the graph unchanged, the CLI flag runs end to end and round-trips through recipe JSON,
validation explains bad combinations, and cancel stops it. On hand-built models: a correction fitted on an
unrepresentative part of the calibration data is reverted, a step that makes the model's outputs (or a detector's score
channels alone) worse is dropped, and too few samples skip it — each with a note."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from ortlab.checks.task_metrics import output_channel_groups
from ortlab.cli import main as cli
from ortlab.core.errors import Cancelled
from ortlab.core.progress import CancelToken, ProgressEvent
from ortlab.data.feeds import batch_inputs
from ortlab.data.samples import load_manifest
from ortlab.model.inspect import inspect_model
from ortlab.runs.pipeline import BIAS_CORRECTION_SKIPPED, BIAS_ON_RANDOM_DATA, plan
from ortlab.runs.in_process import run_recipe
from ortlab.runs.prepare import validate_recipe
from ortlab.runtime.hardware import advise, real_cpu
from ortlab.settings.config import Precision, QuantConfig, QuantFormat, QuantMode, Recipe, errors_of, recipe_cli_line
from ortlab.transforms.bias_correction import STAGE, correct_biases, correct_model, held_back_indices
from ortlab.transforms.calibration import CalibrationReader
from ortlab.transforms.quantize import calibrate_model, preprocess_for_quantization, quantize_calibrated_model

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_models" / "digits_cnn"
pytestmark = pytest.mark.skipif(not (SAMPLE / "manifest.json").is_file(), reason="digits_cnn sample not present")

# measured on digits_cnn (100 calibration digits, 360 held-out digits): 34.5 dB → 36.2 dB
MIN_GAIN_DB = 1.0


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """digits_cnn pre-processed (the float model), its static QDQ int8 and the bias-corrected copy."""
    tmp = tmp_path_factory.mktemp("bias")
    s = load_manifest(SAMPLE / "manifest.json")
    info = inspect_model(s.model_path)
    cal = s.calibration_data()
    pre = tmp / "pre.onnx"
    preprocess_for_quantization(s.model_path, pre)
    q = QuantConfig(reduce_range=advise(real_cpu()).reduce_range)  # accurate int8 on this CPU (no VNNI: 7-bit)
    calibrate_model(pre, q, CalibrationReader(cal, s.preprocess, info.inputs), tmp / "cal.json")
    quantize_calibrated_model(pre, tmp / "qdq.onnx", q, tmp / "cal.json")
    feeds = [batch_inputs(cal, [i], s.preprocess, info.inputs) for i in range(len(cal))]
    events: list[ProgressEvent] = []
    result = correct_biases(pre, tmp / "qdq.onnx", tmp / "bc.onnx", feeds, reporter=events.append)
    return {"s": s, "info": info, "pre": pre, "qdq": tmp / "qdq.onnx", "bc": tmp / "bc.onnx", "feeds": feeds,
            "result": result, "events": events}


def _output_of(path: Path, tensor: str, feeds) -> np.ndarray:
    """Run the whole model (onnxruntime, default options) with ``tensor`` as its only output, sample by sample."""
    m = onnx.load(str(path))
    del m.graph.output[:]
    m.graph.output.append(onnx.helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run([tensor], f)[0] for f in feeds], axis=0)


def _with_bias(path: Path, bias_name: str, values: np.ndarray, dst: Path) -> Path:
    m = onnx.load(str(path))
    for t in m.graph.initializer:
        if t.name == bias_name:
            t.CopyFrom(numpy_helper.from_array(values.astype(np.int32), bias_name))
    onnx.save(m, str(dst))
    return dst


def test_first_node_shift_and_keep_decision_match_an_independent_computation(built, tmp_path):
    qdq = onnx.load(str(built["qdq"]))
    inits = {t.name: t for t in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    # the first Conv/Gemm whose bias is DequantizeLinear(int32 initializer, scale)
    first = next(n for n in qdq.graph.node if n.op_type in ("Conv", "Gemm") and len(n.input) > 2
                 and producer[n.input[2]].op_type == "DequantizeLinear")
    dq = producer[first.input[2]]
    bias = numpy_helper.to_array(inits[dq.input[0]])
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
    assert bias.dtype == np.int32
    fp32 = onnx.load(str(built["pre"]))
    ref_node = next(n for n in fp32.graph.node if n.name == first.name)
    feeds = built["feeds"]
    fit_i, held_i = held_back_indices(len(feeds))
    fit, held = [feeds[i] for i in fit_i], [feeds[i] for i in held_i]
    assert len(fit) == 75 and len(held) == 25 and not set(fit_i) & set(held_i)
    # the shift: from the fitting samples only
    y_ref = _output_of(built["pre"], ref_node.output[0], fit).astype(np.float64)
    y_q = _output_of(built["qdq"], first.output[0], fit).astype(np.float64)
    expected = np.rint((y_ref.mean(axis=(0, 2, 3)) - y_q.mean(axis=(0, 2, 3))) / scale).astype(np.int64)
    assert np.count_nonzero(expected) >= len(expected) // 2  # a real shift, not a no-op
    # the decision: the node's output MSE vs float on the held-back samples, with the shifted bias really run
    shifted = _with_bias(built["qdq"], dq.input[0], bias.astype(np.int64) + expected, tmp_path / "shifted.onnx")
    h_ref = _output_of(built["pre"], ref_node.output[0], held).astype(np.float64)
    mse_before = np.mean((_output_of(built["qdq"], first.output[0], held) - h_ref) ** 2)
    mse_after = np.mean((_output_of(shifted, first.output[0], held) - h_ref) ** 2)
    keep = mse_after < mse_before
    written = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(built["bc"])).graph.initializer}[dq.input[0]]
    assert written.dtype == np.int32
    assert (first.name in built["result"].corrected) == keep
    assert (first.name in built["result"].kept) == (not keep)
    np.testing.assert_array_equal(written.astype(np.int64) - bias.astype(np.int64), expected if keep else 0)
    if keep:
        assert built["result"].corrected[0] == first.name
        np.testing.assert_array_equal(built["result"].shifts[first.name], expected)


def _sqnr(ref: np.ndarray, y: np.ndarray) -> float:
    return float(10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((ref - y).astype(np.float64) ** 2).sum()))


def test_sqnr_improves_on_held_out_digits_and_only_bias_values_change(built):
    s, info = built["s"], built["info"]
    ev = s.evaluation_data()
    x = batch_inputs(ev, list(range(len(ev))), s.preprocess, info.inputs)

    def logits(p):
        return ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, x)[0]

    ref = logits(s.model_path)
    before, after = _sqnr(ref, logits(built["qdq"])), _sqnr(ref, logits(built["bc"]))
    assert after >= before + MIN_GAIN_DB, (before, after)

    a, b = onnx.load(str(built["qdq"])), onnx.load(str(built["bc"]))
    assert [(n.op_type, n.name, list(n.input), list(n.output)) for n in a.graph.node] == \
           [(n.op_type, n.name, list(n.input), list(n.output)) for n in b.graph.node]
    assert Counter(n.op_type for n in a.graph.node) == Counter(n.op_type for n in b.graph.node)
    ia = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    ib = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    assert ia.keys() == ib.keys()
    changed = {k for k in ia if ia[k].dtype != ib[k].dtype or not np.array_equal(ia[k], ib[k])}
    assert not built["result"].dropped
    corrected = set(built["result"].corrected)
    conv_biases = {n.input[2] for n in a.graph.node if n.name in corrected}
    producer = {o: n for n in a.graph.node for o in n.output}
    assert changed and changed <= {producer[x].input[0] for x in conv_biases}
    assert all(ib[k].dtype == np.int32 for k in changed)
    # every weighted node of digits_cnn (9 Conv + 1 Gemm) has an int32 bias: each corrected or kept, in graph order
    assert built["result"].targets == 10 and not built["result"].skipped and len(corrected) >= 5


def test_progress_counts_each_node(built):
    events = [e for e in built["events"] if e.stage == STAGE]
    n = built["result"].targets
    assert [(e.done, e.total) for e in events] == [(k, n) for k in range(n + 1)]
    assert events[-1].message == f"bias correction {n}/{n}"


def test_cancel_stops_bias_correction(tmp_path):
    s = load_manifest(SAMPLE / "manifest.json")
    token = CancelToken()
    seen: list[ProgressEvent] = []

    def reporter(e: ProgressEvent) -> None:
        seen.append(e)
        if e.stage == STAGE and e.done == 2:
            token.cancel()

    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=True, calibration_samples=20))
    with pytest.raises(Cancelled) as err:
        run_recipe(s.model_path, recipe, tmp_path / "out", dataset=s.calibration_data(), preprocess=s.preprocess,
                   reporter=reporter, cancel=token, verify_samples=0)
    assert err.value.step == STAGE
    done = [e.done for e in seen if e.stage == STAGE]
    assert max(done) == 2  # stopped at the next node, not at the end of the stage
    assert not any(e.stage == "optimize" for e in seen)
    assert not (tmp_path / "out").exists()


def test_plan_has_the_stage_only_for_static_qdq_with_the_option():
    def names(**q):
        return [st.name for st in plan(Recipe(precision=Precision.INT8, quant=QuantConfig(**q)))]

    assert names() == ["validate", "preprocess", "calibrate", "quantize", "weight_rounding", STAGE, "optimize",
                       "verify"]  # on by default
    assert STAGE not in names(bias_correction=False)
    assert STAGE not in names(quant_format=QuantFormat.QOPERATOR)
    assert STAGE not in names(mode=QuantMode.DYNAMIC)
    assert STAGE not in [st.name for st in plan(Recipe(quant=QuantConfig(bias_correction=True)))]  # fp32


@pytest.mark.parametrize("quant, allow_random, level, expected", [
    (QuantConfig(bias_correction=True), False, None, None),
    (QuantConfig(bias_correction=True, mode=QuantMode.DYNAMIC), False, None, None),  # does not apply: nothing said
    (QuantConfig(bias_correction=True, quant_format=QuantFormat.QOPERATOR), False, "note", "works on the QDQ format"),
    (QuantConfig(bias_correction=True), True, "note", "skipped when the calibration data is random"),
])
def test_validation_explains_bad_combinations(quant, allow_random, level, expected):
    findings = [f for f in validate_recipe(Recipe(precision=Precision.INT8, quant=quant,
                                                  allow_random_data=allow_random))
                if f.field == "quant.bias_correction"]
    if expected is None:
        assert findings == [] and errors_of(validate_recipe(Recipe(precision=Precision.INT8, quant=quant))) == []
    else:
        assert [f.level for f in findings] == [level] and expected in findings[0].message


def test_random_data_skips_it_with_a_note(tmp_path):
    s = load_manifest(SAMPLE / "manifest.json")
    recipe = Recipe(precision=Precision.INT8, allow_random_data=True, quant=QuantConfig(calibration_samples=8))
    events: list[ProgressEvent] = []
    art = run_recipe(s.model_path, recipe, tmp_path / "out", preprocess=s.preprocess, verify_samples=0,
                     reporter=events.append)
    assert BIAS_CORRECTION_SKIPPED in art.notes and STAGE in art.timings
    assert BIAS_ON_RANDOM_DATA not in art.notes  # what the check said might happen, now said once as what did
    assert [(e.done, e.total) for e in events if e.stage == STAGE] == [(1, 1)]


@pytest.mark.slow
def test_cli_flag_end_to_end_and_recipe_round_trip(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["optimize", str(SAMPLE / "model.onnx"), str(out), "--precision", "int8",
                     "--calibration", str(SAMPLE / "calibration"), "--eval", str(SAMPLE / "evaluation")])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"Bias correction \(Nagel et al\. 2019\): \d+ of 10 node\(s\) corrected", text), text
    assert "bias_correction" in text  # its own timing
    data = json.loads((out / "recipe.json").read_text())
    assert data["quant"]["bias_correction"] is True
    recipe = Recipe.from_json((out / "recipe.json").read_text())
    assert recipe.quant.bias_correction is True
    line = recipe_cli_line(recipe)
    assert "bias-correction" not in line  # the default is not spelled out
    # the rendered line parses back into the same recipe
    code = cli.main(["optimize", str(SAMPLE / "model.onnx"), str(tmp_path / "again"), *shlex.split(line)[4:],
                     "--calibration", str(SAMPLE / "calibration"), "--verify-samples", "0"])
    capsys.readouterr()
    assert code == 0
    again = Recipe.from_json((tmp_path / "again" / "recipe.json").read_text())
    assert again == recipe
    # the corrected QDQ model is the one kept beside the result, and it differs from plain quantization in biases only
    assert (out / "model.qdq.onnx").is_file()


def test_cli_flag_turns_it_off_and_round_trips(tmp_path, capsys):
    out = tmp_path / "off"
    code = cli.main(["optimize", str(SAMPLE / "model.onnx"), str(out), "--precision", "int8", "--no-bias-correction",
                     "--calibration", str(SAMPLE / "calibration"), "--verify-samples", "0"])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "Bias correction" not in text and "bias_correction" not in text
    recipe = Recipe.from_json((out / "recipe.json").read_text())
    assert recipe.quant.bias_correction is False and "--no-bias-correction" in shlex.split(recipe_cli_line(recipe))


def test_tune_tries_bias_correction_on_static_qdq_only():
    from ortlab.runtime.hardware import parse_cpuinfo
    from ortlab.runs.tune_space import search_space
    from ortlab.settings.config import Target

    space = search_space(Target.CPU, parse_cpuinfo("flags : sse2 avx2 avx512_vnni"), model_ops=("Conv", "Gemm"))
    without = [r for r in space if r.precision == Precision.INT8 and r.quant.mode == QuantMode.STATIC
               and r.quant.quant_format == QuantFormat.QDQ and not r.quant.bias_correction]
    assert [r.name for r in without] == ["int8 no bias correction"]  # on by default: the trial turns it off
    assert not errors_of(validate_recipe(without[0]))


# -- hand-built models: float Gemm nodes beside "quantized" twins whose int8 weights err on one input ------------

BIAS_SCALE = 1 / 1024


def _gemm_pair(weights_q: dict[str, list[int]], relu: bool = False) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(float, QDQ) models of x [N, 3] → one Gemm per entry of ``weights_q`` (→ Relu when ``relu``), each an
    output. The float Gemm computes y = x[:, 0]; the QDQ twin's weight is DequantizeLinear(int8 ``weights_q``,
    1/127), so its error is the weight error times x[:, 1] or x[:, 2]; its bias is DequantizeLinear(int32 0,
    1/1024)."""
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])

    def build(quantized: bool) -> onnx.ModelProto:
        nodes, inits, outs = [], [], []
        for name, wq in weights_q.items():
            y = f"{name}_out"
            if quantized:
                inits += [numpy_helper.from_array(np.array(wq, np.int8).reshape(3, 1), f"{name}_wq"),
                          numpy_helper.from_array(np.array(1 / 127, np.float32), f"{name}_ws"),
                          numpy_helper.from_array(np.zeros(1, np.int32), f"{name}_bq"),
                          numpy_helper.from_array(np.array(BIAS_SCALE, np.float32), f"{name}_bs")]
                nodes += [h.make_node("DequantizeLinear", [f"{name}_wq", f"{name}_ws"], [f"{name}_w"]),
                          h.make_node("DequantizeLinear", [f"{name}_bq", f"{name}_bs"], [f"{name}_b"])]
            else:
                inits += [numpy_helper.from_array(np.array([[1.0], [0.0], [0.0]], np.float32), f"{name}_w"),
                          numpy_helper.from_array(np.zeros(1, np.float32), f"{name}_b")]
            nodes.append(h.make_node("Gemm", ["x", f"{name}_w", f"{name}_b"], [y], name=name))
            if relu:
                nodes.append(h.make_node("Relu", [y], [f"{name}_relu"], name=f"{name}_relu"))
                y = f"{name}_relu"
            outs.append(h.make_tensor_value_info(y, onnx.TensorProto.FLOAT, ["N", 1]))
        g = h.make_graph(nodes, "g", [x], outs, inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)

    return build(False), build(True)


def _bias(model: onnx.ModelProto, name: str) -> int:
    """The first int32 value of node ``name``'s bias ("" for the one-node detector's)."""
    bias = f"{name}_bq" if name else "bq"
    return int(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == bias)[0])


def _feeds(rows: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{"x": r.reshape(1, 3).astype(np.float32)} for r in rows]


def test_a_correction_fitted_on_unrepresentative_samples_is_reverted_with_a_note():
    rng = np.random.default_rng(0)
    n = 40
    x1 = rng.uniform(-1, 1, n)
    held = np.isin(np.arange(n), held_back_indices(n)[1])
    # "steady" errs by -x[:, 1] = -1 on every sample: its correction (+1) helps on the held-back samples too.
    # "shifty" errs by -x[:, 2], which is +1 on the fitting samples but -1 on the held-back ones: its correction
    # (+1, fitted) doubles the held-back error (+1 → +2)
    x3 = np.where(held, -1.0, 1.0)
    rows = np.stack([x1, np.ones(n), x3], axis=1)
    fp32, qdq = _gemm_pair({"steady": [127, -127, 0], "shifty": [127, 0, -127]})
    model, result = correct_model(fp32, qdq, _feeds(rows))
    assert result.corrected == ["steady"] and list(result.kept) == ["shifty"] and not result.dropped
    assert _bias(model, "steady") == 1024 and _bias(model, "shifty") == 0
    before, after = result.kept["shifty"]
    assert after > before  # held-back squared mean error: 1 → 4
    assert result.held_back == 10
    assert ("1 of 2 node(s) corrected (1 kept their bias: the correction did not lower their error on held-back "
            "calibration samples)") in result.notes[0]
    assert "Held-back output SQNR without → with it: steady_out" in result.notes[0]
    # the same model with a representative fitting part (x[:, 2] = -1 everywhere) keeps both corrections
    rows[:, 2] = -1.0
    model, result = correct_model(fp32, qdq, _feeds(rows))
    assert result.corrected == ["steady", "shifty"] and not result.kept
    assert _bias(model, "shifty") == -1024


def test_a_step_that_makes_the_outputs_worse_is_dropped_with_a_note():
    # y = x1 → Relu. The quantized twin errs by -x[:, 1], and x[:, 1] = 1 exactly where x1 < 0, so its error
    # lies where Relu clips it anyway: the output is exact. The mean-shift correction (+0.5) lowers the Gemm
    # output's MSE (0.5 → 0.25) and is kept by the node check, but it moves every positive output by +0.5.
    rng = np.random.default_rng(1)
    x1 = rng.uniform(-1, 1, 40)
    x1[:4] = [-0.5, 0.5, -0.5, 0.5]
    rows = np.stack([x1, (x1 < 0).astype(np.float64), np.zeros_like(x1)], axis=1)
    fp32, qdq = _gemm_pair({"clipped": [127, -127, 0]}, relu=True)
    model, result = correct_model(fp32, qdq, _feeds(rows))
    assert result.corrected == ["clipped"] and not result.kept  # the node check alone would keep it
    assert result.dropped and result.applied == []
    assert _bias(model, "clipped") == 0  # the model is left as quantized
    before, after = result.step_sqnr_db["clipped_relu"]
    assert before > 100 and after < 20  # exact but for float rounding → off by 0.5 on half the samples
    assert "The step was dropped and the biases are as quantized: it lowered the held-back SQNR of clipped_relu" \
        in result.notes[0]


def test_the_held_back_quarter_is_not_every_4th_sample():
    # calibration data in a periodic order (lines turned 180° every other one) must not give a held-back part of
    # one kind: every 4th sample would be odd-indexed only
    fit, held = held_back_indices(100)
    assert len(held) == 25 and sorted(fit + held) == list(range(100))
    assert 5 <= sum(i % 2 for i in held) <= 20
    assert held_back_indices(100) == (fit, held)  # fixed: the same split every run
    assert [len(held_back_indices(n)[1]) for n in (7, 8, 11, 40)] == [1, 2, 2, 10]


def test_too_few_samples_skip_it_with_a_note():
    fp32, qdq = _gemm_pair({"steady": [127, -127, 0]})
    rows = np.stack([np.linspace(-1, 1, 7), np.ones(7), np.zeros(7)], axis=1)
    model, result = correct_model(fp32, qdq, _feeds(rows))
    assert result.too_few and result.corrected == [] and _bias(model, "steady") == 0
    assert "skipped: 7 calibration sample(s) are too few" in result.notes[0]
    model, result = correct_model(fp32, qdq, _feeds(np.concatenate([rows, rows[:1]])))  # 8 are enough
    assert result.corrected == ["steady"] and _bias(model, "steady") == 1024


def test_samples_whose_activations_pass_the_memory_budget_are_cut_and_said():
    """PP-OCRv6's 640×640 detector: 135 MB of corrected-node outputs per sample, 100 samples, an 8 GB run: the step
    failed the whole run. One sample's outputs here are 4 bytes (one float of one Gemm); a budget of 48 bytes keeps
    12 of 40 samples, 28 bytes 7 (too few to check: skipped, saying why)."""
    fp32, qdq = _gemm_pair({"steady": [127, -127, 0]})
    rows = np.stack([np.linspace(-1, 1, 40), np.ones(40), np.zeros(40)], axis=1)
    model, result = correct_model(fp32, qdq, _feeds(rows), memory_budget=48)
    assert result.samples == 12 and result.held_back == len(held_back_indices(12)[1])
    assert result.memory_cut is not None and result.memory_cut.given == 40 and result.memory_cut.sample_bytes == 4
    assert result.corrected == ["steady"] and _bias(model, "steady") == 1024
    assert "fitted on 9 calibration samples and checked on 3 held back (one calibration sample's outputs of the " \
           "corrected nodes take 0 MB, so 12 of the 40 fit in the step's memory budget" in result.notes[0]
    model, result = correct_model(fp32, qdq, _feeds(rows), memory_budget=28)
    assert result.too_few and _bias(model, "steady") == 0 and not result.warnings
    assert "skipped: 7 calibration sample(s) are too few" in result.notes[0] and "so 7 of the 40 fit" in result.notes[0]
    _, whole = correct_model(fp32, qdq, _feeds(rows), memory_budget=4 * 40)
    assert whole.samples == 40 and whole.memory_cut is None


def test_running_out_of_memory_past_the_estimate_drops_the_step_not_the_run(tmp_path, monkeypatch):
    from ortlab.transforms import bias_correction

    fp32, qdq = _gemm_pair({"steady": [127, -127, 0]})
    onnx.save(fp32, str(tmp_path / "fp32.onnx"))
    onnx.save(qdq, str(tmp_path / "qdq.onnx"))

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(bias_correction, "correct_model", exhausted)
    rows = np.stack([np.linspace(-1, 1, 12), np.ones(12), np.zeros(12)], axis=1)
    result = correct_biases(tmp_path / "fp32.onnx", tmp_path / "qdq.onnx", tmp_path / "out.onnx", _feeds(rows))
    assert result.out_of_memory and result.applied == []
    assert result.notes == ["Bias correction (Nagel et al. 2019) skipped: it ran out of memory on 12 calibration "
                            "samples (this run's limit, $ORTLAB_RUN_MEMORY_GB); the biases are as quantized."]
    assert _bias(onnx.load(str(tmp_path / "out.onnx")), "steady") == 0  # the QDQ model as quantized, written


def _detector_pair() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(float, QDQ) models of x [N, 4, 1, 16] → 1×1 Conv (4 box + 8 score channels) → Relu → Squeeze → "boxes"
    [N, 12, 16]. Inputs: a score signal s in (-1, 1), the indicator s < 0, a box signal in (1, 2), a constant 1.
    Box channels are 100·box; the QDQ twin's weight also takes -5 × the constant (a steady error of -5). Score
    channels are s; the QDQ twin's weight also takes -1 × the indicator, an error only where Relu clips anyway."""
    h = onnx.helper
    w = np.zeros((12, 4, 1, 1), np.float32)
    w[:4, 2], w[4:, 0] = 100.0, 1.0
    wq = w.copy()
    wq[:4, 3], wq[4:, 1] = -5.0, -1.0

    def build(quantized: bool) -> onnx.ModelProto:
        if quantized:
            inits = [numpy_helper.from_array(wq.astype(np.int8), "wq"), numpy_helper.from_array(np.array(1.0, np.float32), "ws"),
                     numpy_helper.from_array(np.zeros(12, np.int32), "bq"),
                     numpy_helper.from_array(np.array(BIAS_SCALE, np.float32), "bs")]
            nodes = [h.make_node("DequantizeLinear", ["wq", "ws"], ["w"]),
                     h.make_node("DequantizeLinear", ["bq", "bs"], ["b"])]
        else:
            inits, nodes = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(12, np.float32), "b")], []
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "axes"))
        nodes += [h.make_node("Conv", ["x", "w", "b"], ["conv"], name="head"),
                  h.make_node("Relu", ["conv"], ["act"], name="act"),
                  h.make_node("Squeeze", ["act", "axes"], ["boxes"], name="squeeze")]
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4, 1, 16])],
                         [h.make_tensor_value_info("boxes", onnx.TensorProto.FLOAT, ["N", 12, 16])], inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)

    return build(False), build(True)


def test_worse_score_channels_drop_the_step_though_the_whole_output_improves():
    rng = np.random.default_rng(2)
    s = rng.uniform(-1, 1, (40, 1, 1, 16))
    x = np.concatenate([s, (s < 0).astype(np.float64), rng.uniform(1, 2, s.shape), np.ones_like(s)], axis=1)
    feeds = [{"x": r[None].astype(np.float32)} for r in x]
    fp32, qdq = _detector_pair()
    # judged on the whole tensor, the box channels' gain (error 5 → 0) hides the scores' loss (exact → 0.5 off)
    model, whole = correct_model(fp32, qdq, feeds)
    assert whole.corrected == ["head"] and not whole.dropped and _bias(model, "") != 0
    (before, after), = whole.step_sqnr_db.values()
    assert after > before + 10
    # judged per channel group, as analyze and the verdict score a detector, the step is dropped
    model, grouped = correct_model(fp32, qdq, feeds, output_groups=output_channel_groups)
    assert set(grouped.step_sqnr_db) == {"boxes boxes", "boxes scores"}
    assert grouped.dropped and "boxes scores" in grouped.dropped and _bias(model, "") == 0
    assert grouped.step_sqnr_db["boxes boxes"][1] > grouped.step_sqnr_db["boxes boxes"][0] + 10
