"""How the verdict judges a detector's detections (:class:`ortlab.checks.task_kind.Detections`): their F1 against
the reference's at the policy's threshold, held to the detection bars, and above a score of 0.5, held to the broken
bar (:func:`judge_detections`)."""

from __future__ import annotations

import math

from ortlab.checks.eval_report import BoxesMetrics
from ortlab.checks.verdict_findings import Figure, Findings, share
from ortlab.checks.verdict_policy import VerdictPolicy

__all__ = ["MIN_HIGH_DETECTIONS", "judge_detections"]


def judge_detections(b: BoxesMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
    """``b``'s detections on ``n`` samples into ``f``: the F1 at the policy's threshold against both detection bars,
    then the F1 above the second threshold."""
    f1 = b.f1
    if f1 is None:  # nothing to compare (Detections.unjudged says so), or a report without the counts
        if b.ref_detections or b.cand_detections:
            per = f"{b.ref_detections:g} → {b.cand_detections:g}"
            f.checked.append((f"{b.output}: detections per sample {per}",
                              Figure(f"{b.output}: detections per sample", b.cand_detections, per)))
        return
    text = (f"{b.output}: detections F1 {f1:.2f} vs the reference (precision {b.precision or 0:.2f}, recall "
            f"{b.recall or 0:.2f}; {b.matched} of {b.ref_total} reference detections matched by class and "
            f"IoU ≥ {b.match_iou:g}, {b.cand_total} found)")
    trials = (b.ref_total + b.cand_total) / 2  # matched pairs count once
    evidence = (f"{b.ref_total} reference and {b.cand_total} candidate detection"
                f"{'s' if b.cand_total != 1 else ''} in {n} samples")
    fig = Figure(f"{b.output}: detections F1 vs reference", f1, f"{f1:.2f}", share(f1, trials, n, "f1", evidence),
                 (policy.min_det_f1, policy.broken_det_f1))
    f.grade_low(f1, policy.min_det_f1, policy.broken_det_f1, text, fig, fmt=lambda x: f"{x:g}")
    f.checked.append((f"{b.output}: detections F1 {f1:.2f}", fig))  # its groups' SQNR: verdict._judge_tensors
    _judge_high_threshold(b, policy, f, n)


MIN_HIGH_DETECTIONS = 30  # reference detections above the second threshold for its F1 to be judged


def _judge_high_threshold(b: BoxesMetrics, policy: VerdictPolicy, f: Findings, n: int) -> None:
    """The detections above the second, higher threshold (:attr:`BoxesMetrics.high_threshold`): broken when their
    F1 lies below the broken bar and the reference has :data:`MIN_HIGH_DETECTIONS` there; else shown. A model whose
    scores are capped keeps its detections at the policy's threshold and loses them above a higher one (an int8
    YOLOv8n: F1 0.96 at 0.3, 0.78 at 0.5); the degraded bar stays the policy threshold's, since a few detections
    near any threshold move either way (the same model's fixed form: 0.96 at 0.3, 0.93 at 0.5)."""
    f1 = b.high_f1
    if f1 is None or b.high_threshold is None:
        return
    at = f"above a score of {b.high_threshold:g}"
    if b.high_ref_total < MIN_HIGH_DETECTIONS:
        f.checked.append((f"{b.output}: detections F1 {f1:.2f} {at} ({b.high_matched} of {b.high_ref_total} "
                          f"matched: too few to judge)", Figure(f"{b.output}: detections F1 {at}", f1, f"{f1:.2f}")))
        return
    counts = f"{b.high_matched} of {b.high_ref_total} reference detections matched, {b.high_cand_total} found"
    trials = (b.high_ref_total + b.high_cand_total) / 2
    evidence = f"{b.high_ref_total} reference and {b.high_cand_total} candidate detections {at} in {n} samples"
    text = f"{b.output}: detections F1 {f1:.2f} {at} ({counts})"
    fig = Figure(f"{b.output}: detections F1 {at}", f1, f"{f1:.2f}", share(f1, trials, n, "f1", evidence),
                 (policy.broken_det_f1,))
    f.grade_low(f1, -math.inf, policy.broken_det_f1, text, fig, fmt=lambda x: f"{x:g}")
    f.checked.append((text, fig))
