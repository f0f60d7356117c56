"""Task-aware evaluation and the verdict, on tiny real models built with onnx.helper.

Each test asserts what a user would be told: near-tie flips do not make a classifier look broken, an integer
copy of the input is compared exactly and never called a classifier, a 2-class model has no top-5, an fp16
heat-map model whose values overflow is BROKEN end to end (and ``--fail-on broken`` exits 3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.reference import nn_agreement

from ortlab.cli import common as cli_common, main as cli
from ortlab.settings.flags import config_from_args
from ortlab.data.loaders import load_tensor_file
from ortlab.checks.eval_report import EvalReport, Task
from ortlab.checks.evaluate import evaluate
from ortlab.core.serial import dumps, from_plain, loads
from ortlab.checks.verdict import NOTHING_QUANTIZED, Level, VerdictPolicy, judge
from ortlab.transforms.coverage import QuantCoverage

OPSET = 17


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(path))
    return path


def gemm_model(path: Path, w: np.ndarray, out: str = "logits") -> Path:
    """x [N, in] → Gemm(W) → ``out`` [N, classes]."""
    n_in, n_out = w.shape
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W"], [out], name="head/Gemm")], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array(w.astype(np.float32), "W")])
    return _save(g, path)


def npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


# -- classification: near ties ---------------------------------------------------------------------------


def test_near_tie_flips_are_counted_apart_and_leave_a_classifier_ok(tmp_path):
    eye = np.eye(3, dtype=np.float32)
    cand_w = eye.copy()
    cand_w[0, 1] = 0.02  # the candidate adds 0.02·x0 to class 1: decides every near tie between 0 and 1 for 1
    ref = gemm_model(tmp_path / "ref.onnx", eye)
    cand = gemm_model(tmp_path / "cand.onnx", cand_w)
    rng = np.random.default_rng(0)
    near = np.stack([np.ones(10), 1 - rng.uniform(0.001, 0.005, 10), np.full(10, -4.0)], axis=1)  # 0 ≳ 1
    confident = np.stack([np.full(10, 3.0), np.zeros(10), np.full(10, -3.0)], axis=1)
    data = load_tensor_file(npy(tmp_path / "x.npy", np.concatenate([near, confident]).astype(np.float32)))

    report = evaluate(ref, cand, data, None)
    tm = report.task
    assert tm is not None and tm.task == Task.CLASSIFICATION and tm.inferred
    c = tm.classification
    assert c is not None and c.n_classes == 3 and c.n_samples == 20
    assert report.top1_agreement == pytest.approx(0.5)          # plain agreement makes it look broken ...
    assert c.near_tie_flips() == 10 and c.confident_flips() == 0  # ... but every flip is a near tie
    assert all(m < 0.1 for m in c.flip_margins)
    assert report.top5_containment is None                       # 3 classes: top-5 says nothing
    v = judge(report)
    assert v.level == Level.OK, v.reasons
    assert "0 confident top-1 flips, 10 near-tie flips" in v.reasons[0]
    # the stored report can be judged again with another margin: the same flips become confident → broken
    strict = judge(from_plain(EvalReport, loads(dumps(report))), VerdictPolicy(margin=0.0))
    assert strict.level == Level.BROKEN and "10/20 confident top-1 flips" in strict.reasons[0]


def test_a_two_class_model_reports_no_top5(tmp_path):
    w = np.array([[1.0, -1.0], [0.5, 0.2]], dtype=np.float32)
    ref = gemm_model(tmp_path / "ref.onnx", w)
    cand = gemm_model(tmp_path / "cand.onnx", w * 1.001)
    x = np.random.default_rng(1).normal(size=(12, 2)).astype(np.float32)
    labels = (x[:, 0] < 0).astype(np.int64)
    np.savez(tmp_path / "d.npz", x=x, labels=labels)
    report = evaluate(ref, cand, load_tensor_file(tmp_path / "d.npz"), None)
    assert report.task is not None and report.task.classification is not None
    assert report.task.classification.n_classes == 2
    assert report.top5_containment is None and report.top5_accuracy_ref is None and report.top5_accuracy_cand is None
    assert report.top1_accuracy_ref is not None and report.top1_agreement == 1.0
    assert judge(report).level == Level.OK


# -- integer outputs -------------------------------------------------------------------------------------


def ids_model(path: Path, add: int = 0) -> Path:
    """input_ids int64 [N, 8] → ids (a copy, plus ``add``) int64 [N, 8]."""
    nodes = [helper.make_node("Identity", ["input_ids"], ["ids"])] if not add else \
        [helper.make_node("Add", ["input_ids", "k"], ["ids"])]
    inits = [] if not add else [numpy_helper.from_array(np.array(add, dtype=np.int64), "k")]
    g = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", 8])],
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 8])], inits)
    return _save(g, path)


def test_an_integer_copy_of_the_input_is_compared_exactly_not_called_a_classifier(tmp_path):
    ids = np.random.default_rng(2).integers(0, 30000, size=(6, 8)).astype(np.int64)
    data = load_tensor_file(npy(tmp_path / "ids.npy", ids))
    ref = ids_model(tmp_path / "ref.onnx")
    same = evaluate(ref, ids_model(tmp_path / "copy.onnx"), data, None)
    assert same.top1_agreement is None and same.top5_containment is None and same.top1_accuracy_cand is None
    assert same.task is not None and same.task.classification is None and same.task.task == Task.GENERIC
    assert [(e.output, e.dtype, e.n_elements, e.n_different) for e in same.task.exact] == [("ids", "int64", 48, 0)]
    assert judge(same).level == Level.OK
    off = evaluate(ref, ids_model(tmp_path / "plus1.onnx", add=1), data, None)
    assert off.task is not None and off.task.exact[0].n_different == 48
    v = judge(off)
    assert v.level == Level.BROKEN and "48 of 48 values differ" in v.reasons[0]
    assert not any("SQNR" in r or "accuracy" in r for r in v.reasons)


# -- embeddings ------------------------------------------------------------------------------------------


def test_embedding_nearest_neighbour_agreement(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(16, 8)).astype(np.float32)
    ref = gemm_model(tmp_path / "ref.onnx", w, out="sentence_embedding")
    close = gemm_model(tmp_path / "close.onnx", w + rng.normal(0, 1e-3, size=w.shape).astype(np.float32),
                       out="sentence_embedding")
    other_w = rng.normal(size=(16, 8)).astype(np.float32)
    other = gemm_model(tmp_path / "other.onnx", other_w, out="sentence_embedding")
    x = rng.normal(size=(20, 16)).astype(np.float32)
    data = load_tensor_file(npy(tmp_path / "x.npy", x))

    good = evaluate(ref, close, data, None)
    assert good.task is not None and good.task.task == Task.EMBEDDING and good.top1_agreement is None
    e = good.task.embeddings[0]
    assert e.nn_agreement == 1.0 and e.min_cosine > 0.999
    assert judge(good).level == Level.OK

    bad = evaluate(ref, other, data, None)
    e = bad.task.embeddings[0]

    expected = nn_agreement(x.astype(np.float64) @ w, x.astype(np.float64) @ other_w)
    assert e.nn_agreement == pytest.approx(expected) and expected < 0.7
    assert judge(bad).level == Level.BROKEN
    assert any("nearest-neighbour agreement" in r for r in judge(bad).reasons)
    # the same outputs given as "generic" get no embedding metrics
    generic = evaluate(ref, close, data, None, policy=VerdictPolicy(task=Task.GENERIC))
    assert generic.task.task == Task.GENERIC and not generic.task.inferred and not generic.task.embeddings


# -- dense maps: fp16 overflow end to end through the CLI --------------------------------------------------


def heatmap_model(path: Path) -> Path:
    """x [N, 3, 16, 16] → Conv(3→2, 3×3, weights ≈ 2e3) + bias ≈ −4e4 → heatmap [N, 2, 16, 16] logits of a
    few units: the difference of two values ~4e4, where fp16's spacing is 32 (a text detector's failure)."""
    rng = np.random.default_rng(5)
    w = rng.uniform(1900, 2100, size=(2, 3, 3, 3)).astype(np.float32)
    b = (-0.75 * w.sum(axis=(1, 2, 3))).reshape(1, 2, 1, 1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["conv"], name="head/Conv", pads=[0, 0, 0, 0]),
         helper.make_node("Add", ["conv", "B"], ["heatmap"], name="head/Add")], "heat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("heatmap", TensorProto.FLOAT, ["N", 2, 14, 14])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    return _save(g, path)


def test_fp16_of_a_large_logit_heatmap_is_broken_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    src = heatmap_model(tmp_path / "heat.onnx")
    x = (0.75 + np.random.default_rng(4).normal(0, 5e-4, size=(8, 3, 16, 16))).astype(np.float32)
    data = npy(tmp_path / "x.npy", x)
    argv = ["optimize", src, tmp_path / "out", "--precision", "fp16", "--eval", data, "--json"]
    code = cli.main([str(a) for a in argv])
    out = json.loads(capsys.readouterr().out)
    assert code == 0  # without --fail-on the verdict is reported, not an exit status
    assert out["verdict"]["level"] == "broken", out["verdict"]
    ev = out["evaluation"]
    assert ev["task"]["task"] == "dense_map" and ev["task"]["dense_maps"][0]["scale"] == "logit"
    assert any("heatmap" in r and ("SQNR" in r or "NaN/inf" in r) for r in out["verdict"]["reasons"]), ev

    code = cli.main([str(a) for a in [*argv[:2], tmp_path / "out2", *argv[3:], "--fail-on", "broken"]])
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["verdict"]["level"] == "broken"
    # the text output starts with the verdict; compare judges the same pair the same way
    code = cli.main([str(a) for a in ["compare", src, tmp_path / "out" / "model.onnx", "--data", data,
                                      "--fail-on", "degraded"]])
    text = capsys.readouterr().out
    assert code == 3 and text.startswith("verdict    BROKEN  ")
    # and History lists it as broken
    code = cli.main(["history"])
    assert code == 0 and "broken" in capsys.readouterr().out


def sigmoid_map_model(path: Path, bias: float) -> Path:
    """x [N, 1, 8, 8] → x·0.1 + ``bias`` → Sigmoid → prob [N, 1, 8, 8]: with bias −10 it finds nothing (≈5e-5)."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "S"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"]),
         helper.make_node("Sigmoid", ["a"], ["prob"])], "map",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "S"), numpy_helper.from_array(np.array(bias, np.float32), "B")])
    return _save(g, path)


def test_a_map_that_finds_nothing_cannot_judge_the_result(tmp_path):
    """On images without text a text detector's fp32 map is ≈0 everywhere: a candidate whose background moved
    (SQNR ≈ 4 dB) is not "broken" but "unknown", with the reason; one that finds text there is broken."""
    x = npy(tmp_path / "x.npy", np.random.default_rng(0).normal(0, 1, size=(6, 1, 8, 8)).astype(np.float32))
    data = load_tensor_file(x)
    ref = sigmoid_map_model(tmp_path / "ref.onnx", -10.0)
    quiet = sigmoid_map_model(tmp_path / "quiet.onnx", -11.0)
    loud = sigmoid_map_model(tmp_path / "loud.onnx", 10.0)
    policy = VerdictPolicy(task=Task.DENSE_MAP)
    report = evaluate(ref, quiet, data, None, policy=policy)
    d = report.task.dense_maps[0]
    assert d.ref_positive_fraction == 0 and d.crossing_fraction == 0 and report.outputs[0].sqnr_db < 10
    v = judge(report, policy)
    assert v.level == Level.UNKNOWN, v
    assert v.reasons[0].startswith("prob: the reference map finds nothing on this data (no element above the 0.3")
    assert any("on background only" in r for r in v.reasons)
    v = judge(evaluate(ref, loud, data, None, policy=policy), policy)
    assert v.level == Level.BROKEN and any("cross the 0.3 threshold" in r for r in v.reasons), v
    v = judge(evaluate(ref, ref, data, None, policy=policy), policy)
    assert v.level == Level.UNKNOWN  # even identical: this data cannot show what the model detects
    # an int8 run that quantized nothing is degraded whatever the data can judge, and says so first
    v = judge(report, policy, coverage=QuantCoverage(candidates={"Conv": 3}))
    assert v.level == Level.DEGRADED and v.reasons[0] == NOTHING_QUANTIZED, v


def test_no_evaluation_data_is_unknown_never_ok(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    w = np.eye(4, dtype=np.float32)
    src = gemm_model(tmp_path / "g.onnx", w)
    code = cli.main(["optimize", str(src), str(tmp_path / "o"), "--json", "--fail-on", "degraded"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"]["level"] == "unknown" and "no evaluation data" in out["verdict"]["reasons"][0]
    assert judge(None).level == Level.UNKNOWN


def test_random_data_caps_the_verdict_at_degraded(tmp_path):
    from ortlab.data.dataset import random_dataset

    w = np.eye(4, dtype=np.float32)
    ref = gemm_model(tmp_path / "ref.onnx", w)
    report = evaluate(ref, ref, random_dataset(4), None)
    v = judge(report)
    assert v.level == Level.DEGRADED and "evaluated on random data: not a verdict on accuracy" in v.reasons


# -- policy flags ----------------------------------------------------------------------------------------


def test_policy_flags_round_trip_through_the_cli_and_the_run_spec():
    from ortlab.settings.flags import config_cli_args
    from ortlab.settings.config import Recipe
    from ortlab.runs.runspec import RunSpec

    policy = VerdictPolicy(task=Task.DENSE_MAP, margin=0.05, threshold=0.5, min_sqnr_db=20.0, min_cosine=0.99,
                           max_confident_flips=0.02, broken_confident_flips=0.1, min_nn_agreement=0.95)
    flags = config_cli_args(policy)
    assert {"--task", "--margin", "--threshold", "--min-sqnr-db", "--min-cosine", "--max-confident-flips"} <= set(flags)
    ns = cli.build_parser().parse_args(["compare", "a.onnx", "b.onnx", "--data", "d", *flags])
    assert cli_common.checked_policy(config_from_args(VerdictPolicy, ns)) == policy
    ns = cli.build_parser().parse_args(["optimize", "a.onnx", "out", *flags, "--fail-on", "degraded"])
    assert cli_common.checked_policy(config_from_args(VerdictPolicy, ns)) == policy and ns.fail_on == "degraded"
    spec = RunSpec("m.onnx", Recipe(), policy=policy)
    assert "--min-sqnr-db 20.0" in spec.cli_line() and RunSpec.from_json(spec.to_json()) == spec
    assert cli.main(["compare", "a.onnx", "b.onnx", "--data", "d", "--max-crossing", "0.5"]) == 2  # > broken


def test_reports_written_before_task_metrics_still_load_and_are_judged():
    old = {"n_samples": 32, "outputs": [{"name": "logits", "max_abs": 0.1, "mean_abs": 0.01, "cosine": 0.999,
                                         "sqnr_db": 35.0, "identical": False}],
           "top1_agreement": 0.9, "random_data": False}
    report = EvalReport.from_dict(old)
    assert report.task is None and report.outputs[0].nonfinite == 0
    assert judge(report).level == Level.OK


def test_a_map_that_finds_almost_nothing_is_judged_and_says_why_its_sqnr_is_fragile(tmp_path):
    """PP-OCR's text detector on photos without text: the fp32 map is above 0.3 on a handful of elements, so one
    invented blob decides SQNR. The verdict stays as the policy says and adds why, with what to evaluate on."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, size=(20, 1, 8, 8)).astype(np.float32)
    x[0, 0, 0, 0] = 95.0  # one element of 1280 above the threshold in the reference (x·0.1 − 10 = −0.5 → 0.38)
    data = load_tensor_file(npy(tmp_path / "x.npy", x))
    ref = sigmoid_map_model(tmp_path / "ref.onnx", -10.0)
    loud = sigmoid_map_model(tmp_path / "loud.onnx", -8.0)  # its background rises e² times: SQNR falls
    policy = VerdictPolicy(task=Task.DENSE_MAP)
    report = evaluate(ref, loud, data, None, policy=policy)
    d = report.task.dense_maps[0]
    assert d.ref_positive_fraction == 1 / x.size and d.crossing_fraction < 0.01
    v = judge(report, policy)
    assert v.level == Level.BROKEN and v.reasons[0].startswith("prob: SQNR"), v
    assert v.reasons[-1] == ("prob: the reference map is above the 0.3 threshold on only 0.078% of elements on this "
                             "data, so its SQNR and cosine are decided by those few; judge it on data where the model "
                             "detects something (for a text detector: images with text, such as "
                             "sample_models/text_photos)"), v.reasons
    # a map the reference fills is judged without the remark
    busy = evaluate(ref, loud, load_tensor_file(npy(tmp_path / "b.npy", np.full((2, 1, 8, 8), 120, np.float32))),
                    None, policy=policy)
    assert busy.task.dense_maps[0].ref_positive_fraction == 1.0
    assert not [r for r in judge(busy, policy).reasons if "threshold on only" in r]


def sqrt_model(path: Path, scale: float) -> Path:
    """x [N, 6] → Sqrt(x · ``scale``) → y [N, 6]: NaN wherever x · scale is negative."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "S"], ["m"]), helper.make_node("Sqrt", ["m"], ["y"])], "sqrt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])],
        [numpy_helper.from_array(np.array(scale, np.float32), "S")])
    return _save(g, path)


def test_a_result_equal_to_a_source_that_gives_nan_is_not_broken_and_the_nans_are_said(tmp_path):
    """A Sqrt fed negative values (the onnx package's test_operator_sqrt on random data): the source's output is NaN
    there and the result's too. SQNR was NaN and the verdict broken for a result identical to its source."""
    data = load_tensor_file(npy(tmp_path / "x.npy", np.random.default_rng(0).normal(
        0, 1, size=(8, 6)).astype(np.float32)))
    src = sqrt_model(tmp_path / "src.onnx", 1.0)
    negative = int((np.load(tmp_path / "x.npy") < 0).sum())
    v = judge(evaluate(src, src, data, None))
    assert v.level == Level.OK, v
    assert (f"y: the source's own output is NaN/inf at {negative} of 48 values on these inputs, left out of SQNR and "
            "cosine (the result is NaN/inf at the same places)") in v.reasons
    report = evaluate(src, sqrt_model(tmp_path / "off.onnx", 1.001), data, None)  # a small error on the rest
    assert 25 < report.outputs[0].sqnr_db < 70 and judge(report).level == Level.OK
    # a source that gives NaN at every value: nothing to compare, so no verdict of ok on it
    everywhere = load_tensor_file(npy(tmp_path / "neg.npy", -1.0 - np.abs(np.load(tmp_path / "x.npy"))))
    v = judge(evaluate(src, src, everywhere, None))
    assert v.level == Level.UNKNOWN and v.reasons == [
        "y: the source's own output is NaN/inf at every one of its 48 values on these inputs, so there is nothing to "
        "compare; give inputs on which the source computes numbers"], v
    flipped = judge(evaluate(src, sqrt_model(tmp_path / "neg.onnx", -1.0), data, None))  # NaN where it was finite
    assert flipped.level == Level.BROKEN and any(f"{48 - negative} NaN/inf values where the reference is finite" in r
                                                 for r in flipped.reasons), flipped


def test_static_int8_of_a_model_with_nothing_to_quantize_says_so_in_plain_words(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    src = _save(helper.make_graph(  # Sqrt alone: no op ONNX Runtime's static quantizer takes
        [helper.make_node("Sqrt", ["x"], ["y"])], "sqrt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])]), tmp_path / "src.onnx")
    code = cli.main([str(a) for a in ["optimize", src, tmp_path / "out", "--precision", "int8", "--allow-random-data",
                                      "--no-timing", "--json"]])
    art = json.loads(capsys.readouterr().out)
    assert code == 0 and art["coverage"]["quantized"] == {}
    assert ("Nothing was quantized: the model has no node of a type ONNX Runtime's quantizer takes (subgraphs "
            "included); the result computes like the source model.") in art["warnings"], art["warnings"]
