"""A trial's task measure per evaluation sample, so two trials can be compared on the same samples.

:func:`evidence_of` reads an :class:`ortlab.checks.eval_report.EvalReport` (no ONNX Runtime, no numpy) and gives a
:class:`SampleEvidence`: for each sample a numerator and a denominator whose sums make the task's measure, and the
evidence the measure rests on, counted the way the task counts it:

* a detector: detection F1 = Σ 2·matched / Σ (reference + candidate detections); evidence: reference detections;
* a classifier: no confident flip = 1 − confident flips / samples; evidence: confident samples (the reference's
  top-1 − top-2 softmax margin at least the policy's margin: only those can flip confidently);
* an OCR recognizer: strings kept; evidence: strings;
* an embedding model: nearest neighbours kept; evidence: neighbours (one per sample);
* a dense map: map elements kept; evidence: samples.

None when the report has no per-sample record (an old report, or plain tensors).
"""

from __future__ import annotations

from ortlab.checks.eval_report import EvalReport
from ortlab.checks.sample_evidence import SampleEvidence
from ortlab.checks.task_kind import main_kind

__all__ = ["SampleEvidence", "evidence_of"]


def evidence_of(report: EvalReport | None) -> SampleEvidence | None:
    """The per-sample task measure of ``report`` (the same measure as :func:`ortlab.runs.tune_policy.task_quality`,
    of the same task kind: :func:`ortlab.checks.task_kind.main_kind`), or None without a per-sample record."""
    tm = report.task if report is not None else None
    kind = main_kind(tm)
    if report is None or tm is None or kind is None:
        return None
    return kind.evidence(report, tm)
