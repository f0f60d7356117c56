"""Output error and accuracy of a candidate model against its reference, on real tiny models."""

from __future__ import annotations

import io
import json
import math
import shutil

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from tests.support.models import conv_bn_model, matmul_model
from ortlab.settings.config import QuantConfig
from ortlab.transforms.calibration import CalibrationReader
from ortlab.data.dataset import random_dataset
from ortlab.data.loaders import load_image_folder, load_tensor_file
from ortlab.data.preprocess import preprocess_image
from ortlab.core.errors import Cancelled, DataError
from ortlab.checks.evaluate import EvalReport, OutputError, accuracy, evaluate
from ortlab.model.inspect import TensorInfo
from ortlab.core.progress import CancelToken
from tests.support.reporting import CollectingReporter
from ortlab.transforms.quantize import quantize_static_model

CONV_IN = (TensorInfo("input", "float32", ("N", 3, 32, 32)),)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    src = conv_bn_model(d / "fp32.onnx")
    shutil.copyfile(src, d / "copy.onnx")
    quantize_static_model(src, d / "int8.onnx", QuantConfig(), CalibrationReader(random_dataset(8), None, CONV_IN))
    return d


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    for c in ("a", "b", "c"):
        (root / c).mkdir()
        for i in range(4):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
            (root / c / f"{i}.png").write_bytes(buf.getvalue())
    return load_image_folder(root)


def manual_logits(path, ds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    from ortlab.data.preprocess import detect_preprocess

    cfg = detect_preprocess(CONV_IN[0])
    return np.concatenate([sess.run(None, {"input": preprocess_image(ds.load_image(i), cfg)[None]})[0]
                           for i in range(len(ds))])


def test_identical_models_have_infinite_sqnr_and_json_safe_report(models_dir, images):
    rep = evaluate(models_dir / "fp32.onnx", models_dir / "copy.onnx", images, None)
    out = rep.outputs[0]
    assert out.name == "logits" and out.max_abs == 0.0 and out.mean_abs == 0.0 and out.cosine == pytest.approx(1.0)
    assert out.sqnr_db == math.inf
    d = json.loads(json.dumps(rep.to_dict(), allow_nan=False))
    assert d["outputs"][0]["sqnr_db"] == "inf" and out.identical
    assert EvalReport.from_dict(d) == rep
    assert rep.top1_agreement == 1.0 and rep.top5_containment == 1.0
    assert rep.top1_accuracy_ref == rep.top1_accuracy_cand
    assert rep.providers_ref == ["CPUExecutionProvider"] and rep.random_data is False


def test_int8_error_and_accuracy_match_a_manual_computation(models_dir, images):
    events = CollectingReporter()
    rep = evaluate(models_dir / "fp32.onnx", models_dir / "int8.onnx", images, None, reporter=events)
    ref, cand = manual_logits(models_dir / "fp32.onnx", images), manual_logits(models_dir / "int8.onnx", images)
    labels = np.array([s.label for s in images.samples])
    out = rep.outputs[0]
    assert out.max_abs == pytest.approx(np.abs(ref - cand).max(), rel=1e-6)
    assert out.mean_abs == pytest.approx(np.abs(ref - cand).mean(), rel=1e-6)
    assert out.sqnr_db == pytest.approx(10 * np.log10((ref.astype(np.float64) ** 2).sum()
                                                      / ((ref - cand).astype(np.float64) ** 2).sum()), rel=1e-5)
    cos = (ref * cand).sum() / np.sqrt((ref ** 2).sum() * (cand ** 2).sum())
    assert out.cosine == pytest.approx(cos, rel=1e-5) and 0.9 < out.cosine <= 1.0
    assert rep.n_samples == 12
    assert rep.top1_accuracy_ref == pytest.approx(float((ref.argmax(1) == labels).mean()))
    assert rep.top1_accuracy_cand == pytest.approx(float((cand.argmax(1) == labels).mean()))
    assert rep.top1_agreement == pytest.approx(float((ref.argmax(1) == cand.argmax(1)).mean()))
    top5 = np.argsort(-ref, axis=1)[:, :5]
    assert rep.top5_accuracy_ref == pytest.approx(float(np.mean([y in t for y, t in zip(labels, top5)])))
    assert [(r["class"], r["n"]) for r in rep.per_class] == [("a", 4), ("b", 4), ("c", 4)]
    assert rep.per_class[0]["ref_acc"] == pytest.approx(float((ref.argmax(1)[:4] == 0).mean()))
    assert [(e.stage, e.done, e.total) for e in events.events] == [("verify", i, 12) for i in range(1, 13)]


def test_random_data_is_flagged_and_unlabeled_has_no_accuracy(models_dir):
    rep = evaluate(models_dir / "fp32.onnx", models_dir / "int8.onnx", random_dataset(5), None)
    assert rep.random_data is True and rep.to_dict()["random_data"] is True
    assert rep.top1_accuracy_ref is None and rep.per_class == []
    assert rep.top1_agreement is not None
    acc = accuracy(models_dir / "fp32.onnx", random_dataset(5), None)
    assert acc["random_data"] is True and acc["top1"] is None and len(acc["predictions"]) == 5


def test_n_subsamples_and_cancel(models_dir, images):
    rep = evaluate(models_dir / "fp32.onnx", models_dir / "int8.onnx", images, None, n=6)
    assert rep.n_samples == 6 and [r["n"] for r in rep.per_class] == [2, 2, 2]
    token = CancelToken()
    stop = lambda e: token.cancel() if e.done == 2 else None
    with pytest.raises(Cancelled) as info:
        evaluate(models_dir / "fp32.onnx", models_dir / "int8.onnx", images, None, reporter=stop, cancel=token)
    assert info.value.step == "verify"


def test_accuracy_alone(models_dir, images):
    acc = accuracy(models_dir / "fp32.onnx", images, None)
    ref = manual_logits(models_dir / "fp32.onnx", images)
    labels = np.array([s.label for s in images.samples])
    assert acc["n"] == 12 and acc["predictions"] == ref.argmax(1).tolist()
    assert acc["top1"] == pytest.approx(float((ref.argmax(1) == labels).mean()))
    assert acc["providers"] == ["CPUExecutionProvider"]


def test_non_classifier_outputs_and_tensor_data(tmp_path):
    src = matmul_model(tmp_path / "mm.onnx")
    x = np.random.default_rng(0).standard_normal((3, 16, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ds = load_tensor_file(tmp_path / "x.npy")
    rep = evaluate(src, src, ds, None)
    assert rep.n_samples == 3 and rep.top1_agreement is None and rep.outputs[0].name == "output"
    with pytest.raises(DataError, match=r"Output 'output' has shape \[1, 16, 32\]; accuracy needs a classifier"):
        accuracy(src, ds, None)


def test_labels_beyond_the_model_outputs(models_dir, tmp_path):
    x = np.zeros((2, 3, 32, 32), dtype=np.float32)
    np.savez(tmp_path / "t.npz", input=x, labels=np.array([0, 12]))
    with pytest.raises(DataError, match=r"labels up to 12 \(13 classes\) but the model outputs 10 scores"):
        accuracy(models_dir / "fp32.onnx", load_tensor_file(tmp_path / "t.npz"), None)


def test_output_error_to_dict_writes_non_finite_numbers_as_text():
    d = OutputError("y", float("nan"), 1.0, 0.5, -math.inf).to_dict()
    assert d == {"name": "y", "max_abs": "nan", "mean_abs": 1.0, "cosine": 0.5, "sqnr_db": "-inf", "nonfinite": 0,
                 "source_nonfinite": 0, "source_nonfinite_differs": 0, "values": 0, "sample_signal": [],
                 "sample_noise": [],
                 "real_tokens": 0, "padding": 0, "size_changed": 0, "sample_sizes": []}
    assert json.loads(json.dumps(d, allow_nan=False)) == d



def test_a_nan_where_the_reference_is_finite_is_the_largest_difference_not_none():
    """An int8 mel front end (log of a zero) gave NaN where fp32 was finite; its verify line said max|Δ| 0
    (Python's max() drops a NaN). NaN against a finite value is an infinite difference; NaN where both are NaN
    (the reference's own) is not counted."""
    from ortlab.checks.evaluate import _Stats

    s = _Stats("y")
    s.add(np.array([[1.0, 2.0, np.nan]]), np.array([[1.5, np.nan, np.nan]]))
    r = s.result()
    assert r.max_abs == math.inf and r.nonfinite == 1
    alike = _Stats("y")
    alike.add(np.array([[1.0, np.nan]]), np.array([[1.25, np.nan]]))
    assert alike.result().max_abs == 0.25


def test_the_sources_own_nans_are_left_out_of_sqnr_and_cosine_and_said():
    """A Sqrt fed negative inputs: the source's output is NaN there, the result's too. The SQNR was NaN and the
    verdict broken for a result identical to its source; it is computed on the values finite in both, and the
    report says how many the source left NaN and whether the result repeats them."""
    from ortlab.checks.evaluate import _Stats

    ref = np.array([[1.0, 2.0, np.nan, 4.0, np.inf]])
    s = _Stats("y")
    s.add(ref, np.array([[1.0, 2.5, np.nan, 4.0, np.inf]]))
    r = s.result()
    expected = 10 * math.log10((1 + 4 + 16) / 0.25)  # on the three values finite in both
    assert r.sqnr_db == pytest.approx(expected) and r.cosine == pytest.approx(
        (1 + 5 + 16) / math.sqrt(21 * (1 + 6.25 + 16)))
    assert r.mean_abs == pytest.approx(0.5 / 3) and r.max_abs == 0.5
    assert (r.nonfinite, r.source_nonfinite, r.source_nonfinite_differs) == (0, 2, 0)
    assert r.source_nonfinite_note == ("y: the source's own output is NaN/inf at 2 of 5 values on these inputs, left "
                                       "out of SQNR and cosine (the result is NaN/inf at the same places)")
    same = _Stats("y")
    same.add(ref, ref.copy())
    assert same.result().identical
    other = _Stats("y")  # the result gives a number where the source gave NaN, and NaN where it gave a number
    other.add(ref, np.array([[np.nan, 2.0, 3.0, 4.0, np.inf]]))
    r = other.result()
    assert (r.nonfinite, r.source_nonfinite, r.source_nonfinite_differs) == (1, 2, 1) and r.max_abs == math.inf
    assert "the result differs at 1 of them" in r.source_nonfinite_note
    assert _Stats("y").result().source_nonfinite_note == ""


def _boxes_after_nms(path, threshold=0.5):
    """A tiny detector whose output keeps only the rows scoring above ``threshold``: [kept boxes, 6], the size of
    an NMS'd detector's output, which differs from sample to sample and between a model and its int8 result."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(size=(16, 60)).astype(np.float32) * 0.3, "W"),
             numpy_helper.from_array(np.array(threshold, np.float32), "half"),
             numpy_helper.from_array(np.array([10, 6], np.int64), "rows"),
             numpy_helper.from_array(np.array([4], np.int64), "start"),
             numpy_helper.from_array(np.array([5], np.int64), "end"),
             numpy_helper.from_array(np.array([1], np.int64), "axis")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Reshape", ["m", "rows"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["s"]), helper.make_node("Slice", ["s", "start", "end", "axis"], ["c"]),
             helper.make_node("Squeeze", ["c", "axis"], ["score"]), helper.make_node("Greater", ["score", "half"], ["keep"]),
             helper.make_node("Compress", ["s", "keep"], ["dets"], axis=0)]
    graph = helper.make_graph(nodes, "dets", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("dets", TensorProto.FLOAT, [None, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return path


def test_an_output_whose_size_changes_is_judged_not_refused(tmp_path):
    """A detector with NMS in its graph keeps another number of boxes after int8 on some samples. The verify step
    refused such a result ("Output 'dets' has 18 values in the reference but 24 in the candidate; the models do not
    compute the same thing") and the run failed. Now the samples of equal size are compared as usual, and the
    agreement the counts allow (2·Σmin / Σ(ref + cand), an upper bound of detection F1) is held to the detection
    bars."""
    from ortlab.checks.evaluate import _Stats
    from ortlab.checks.verdict import Level, judge

    s = _Stats("dets")
    s.add(np.ones((3, 6)), np.ones((4, 6)))
    s.add(np.ones((2, 6)), np.full((2, 6), 1.5))
    r = s.result()
    assert (r.size_changed, r.values) == (1, 12) and r.max_abs == 0.5
    assert r.sample_sizes == [[18, 24], [12, 12]] and r.size_agreement == pytest.approx(2 * 30 / 66)

    src = _boxes_after_nms(tmp_path / "dets.onnx")
    x = np.random.default_rng(1).standard_normal((40, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ds = load_tensor_file(tmp_path / "x.npy")
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    ref = [sess.run(None, {"x": row[None]})[0].size for row in x]
    for threshold, level in ((0.48, Level.OK), (0.45, Level.DEGRADED), (0.3, Level.BROKEN)):
        loose = _boxes_after_nms(tmp_path / f"loose{threshold}.onnx", threshold=threshold)  # keeps more boxes
        other = ort.InferenceSession(str(loose), providers=["CPUExecutionProvider"])
        cand = [other.run(None, {"x": row[None]})[0].size for row in x]
        bound = 2 * sum(min(a, b) for a, b in zip(ref, cand)) / sum(a + b for a, b in zip(ref, cand))
        expected = Level.OK if bound >= 0.95 else Level.DEGRADED if bound >= 0.8 else Level.BROKEN
        assert expected == level, (threshold, bound)  # the three cases stand on both sides of each bar
        report = evaluate(src, loose, ds, None)
        out = report.outputs[0]
        assert (len(out.sample_sizes), out.size_changed) == (40, sum(a != b for a, b in zip(ref, cand)))
        assert out.size_agreement == pytest.approx(bound)
        v = judge(report)
        assert v.level == level and v.deciding == "dets: size agreement (F1 bound)" and v.deciding_value == bound
        assert f"size changed on {out.size_changed}/40 samples" in v.reasons[0]
        assert v.uncertainty is not None and v.uncertainty.low <= bound <= v.uncertainty.high
    same = judge(evaluate(src, src, ds, None))
    assert same.deciding != "dets: size agreement (F1 bound)" and "size changed" not in " ".join(same.reasons)


def _with_trailing_unit_axes(src, dst):
    """``src`` with its [N, C] output ``logits`` given as [N, C, 1, 1] (as classifiers converted from Caffe are)."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(src))
    old = m.graph.output[0]
    for node in m.graph.node:
        node.output[:] = ["flat" if o == old.name else o for o in node.output]
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "unit_axes"))
    m.graph.node.append(helper.make_node("Unsqueeze", ["flat", "unit_axes"], [old.name]))
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(old.name, onnx.TensorProto.FLOAT, ["N", 10, 1, 1]))
    onnx.save(m, str(dst))
    return dst


def test_a_classifier_output_with_trailing_unit_axes_is_judged_as_a_classifier(models_dir, images, tmp_path):
    ref = _with_trailing_unit_axes(models_dir / "fp32.onnx", tmp_path / "fp32_4d.onnx")
    cand = _with_trailing_unit_axes(models_dir / "int8.onnx", tmp_path / "int8_4d.onnx")
    r, c = manual_logits(ref, images), manual_logits(cand, images)
    assert r.shape == (12, 10, 1, 1)
    r, c = r.reshape(12, 10), c.reshape(12, 10)
    labels = np.array([s.label for s in images.samples])
    rep = evaluate(ref, cand, images, None)
    tm = rep.task
    assert tm is not None and tm.task.value == "classification" and not tm.dense_maps
    assert "[1, 10, 1, 1], read without its trailing axes of size 1" in tm.why
    assert tm.classification is not None and tm.classification.n_classes == 10
    assert rep.top1_agreement == pytest.approx(float((r.argmax(1) == c.argmax(1)).mean()))
    assert rep.top1_accuracy_cand == pytest.approx(float((c.argmax(1) == labels).mean()))
    acc = accuracy(ref, images, None)
    assert acc["predictions"] == r.argmax(1).tolist()
    assert acc["top1"] == pytest.approx(float((r.argmax(1) == labels).mean()))
