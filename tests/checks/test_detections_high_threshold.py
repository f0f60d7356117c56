"""Detections are compared at a second, higher score threshold too: a candidate whose scores are capped just under
0.5 (as an int8 YOLOv8n's stride-8 scores were, its score logits quantized up to 0) keeps every detection at the
policy's 0.3 and loses those above 0.5, and the verdict says so."""

from __future__ import annotations

import numpy as np

from ortlab.checks.eval_report import EvalReport, OutputError, Task
from ortlab.checks.task_metrics import HIGH_THRESHOLD, TaskAccumulator
from ortlab.checks.verdict import Level, judge


def _yolo(scores: np.ndarray) -> np.ndarray:
    """[1, 4 + classes, anchors]: boxes far apart (no NMS between them), the given class probabilities."""
    anchors = scores.shape[1]
    boxes = np.stack([np.arange(anchors) * 50.0 + 20, np.full(anchors, 20.0), np.full(anchors, 10.0),
                      np.full(anchors, 10.0)])
    return np.concatenate([boxes, scores]).astype(np.float32)[None]


def _report(refs: list[np.ndarray], cands: list[np.ndarray]) -> EvalReport:
    acc = TaskAccumulator(["output0"], [_yolo(refs[0])], False, Task.BOXES)
    for r, c in zip(refs, cands):
        acc.add([_yolo(r)], [_yolo(c)])
    return EvalReport(len(refs), [OutputError("output0", 0.01, 0.001, 0.9999, 40.0)], task=acc.result())


def _expected(refs: list[np.ndarray], cands: list[np.ndarray], cut: float) -> tuple[int, int, int]:
    """(matched, reference, candidate) detections above ``cut``, counted the plain way: one box per anchor, far
    apart, so a detection is an anchor whose best class clears the cut, matched when the other model's same anchor
    does with the same class."""
    matched = ref = cand = 0
    for r, c in zip(refs, cands):
        r_best, c_best = r.max(axis=0), c.max(axis=0)
        r_on, c_on = r_best > cut, c_best > cut
        ref += int(r_on.sum())
        cand += int(c_on.sum())
        matched += int((r_on & c_on & (r.argmax(axis=0) == c.argmax(axis=0))).sum())
    return matched, ref, cand


def test_scores_capped_under_the_second_threshold_break_the_verdict_that_the_first_alone_calls_ok():
    rng = np.random.default_rng(3)
    refs = [rng.uniform(0.0, 0.2, size=(3, 30)) for _ in range(6)]
    for r in refs:
        r[0, :12] = rng.uniform(0.55, 0.99, size=12)  # 12 confident detections a sample
        r[1, 12:16] = rng.uniform(0.35, 0.45, size=4)  # and 4 faint ones
    refs = [np.where(r > 0.5, 0.5 + (r - 0.5) * 0.05, r) for r in refs]  # confident ones just over 0.5
    capped = [np.minimum(r, 0.499) for r in refs]
    report = _report(refs, capped)
    (b,) = report.task.boxes
    assert b.f1 == 1.0 and b.high_threshold == HIGH_THRESHOLD == 0.5
    assert (b.high_matched, b.high_ref_total, b.high_cand_total) == _expected(refs, capped, 0.5) == (0, 72, 0)
    v = judge(report)
    assert v.level == Level.BROKEN and len(v.reasons) == 1  # the scores' SQNR stays clear of its bars
    assert any(r.startswith("output0: detections F1 0.00 above a score of 0.5 (0 of 72 reference detections "
                            "matched, 0 found)") for r in v.reasons)
    # the same scores, uncapped and a little noisy: the same detections above both thresholds
    noisy = [np.clip(r + rng.normal(0, 1e-4, size=r.shape), 0, 1) for r in refs]
    report = _report(refs, noisy)
    (b,) = report.task.boxes
    assert (b.high_matched, b.high_ref_total, b.high_cand_total) == _expected(refs, noisy, 0.5)
    assert b.high_f1 == 1.0 and judge(report).level == Level.OK
    # a few detections lost above it: shown, not judged (the degraded bar is the policy threshold's)
    some = [r.copy() for r in refs]
    for c in some:
        c[0, :2] = 0.499  # 2 of each sample's 12 confident detections: F1 2·60 / (72 + 60)
    v = judge(_report(refs, some))
    assert v.level == Level.OK
    assert "output0: detections F1 0.91 above a score of 0.5 (60 of 72 reference detections matched" in v.reasons[0]
    # fewer than 30 reference detections above it: shown, not judged
    v = judge(_report(refs[:2], capped[:2]))
    assert v.level == Level.OK
    assert "output0: detections F1 0.00 above a score of 0.5 (0 of 24 matched: too few to judge)" in v.reasons[0]
