"""Bias correction's whole-step check on the task's metric: the verdict's own measure (confident flips, detections'
F1, decoded strings changed, nearest-neighbour agreement, …; :func:`ortlab.runs.tune_policy.task_quality`) of the
model as quantized and of the corrected model, each against the float model on the held-back calibration samples
(:class:`ortlab.checks.evaluate.OutputComparison`, as ``evaluate`` compares them)."""

from __future__ import annotations

from collections.abc import Sequence

from ortlab.checks.eval_report import EvalReport
from ortlab.checks.evaluate import OutputComparison
from ortlab.checks.task_kind import main_kind
from ortlab.checks.verdict import VerdictPolicy
from ortlab.runs.tune_policy import task_quality
from ortlab.transforms.bias_correction import Outputs, TaskChange, TaskJudge

HELD_BACK = "on the held-back samples"


def _report(names: Sequence[str], ref: Outputs, cand: Outputs, labeled: bool, policy: VerdictPolicy,
            copies: int) -> EvalReport:
    comparison = OutputComparison(names, labeled, policy, copies)
    for r, c in zip(ref, cand, strict=True):
        comparison.add([r[n] for n in names], [c[n] for n in names])
    return comparison.report()


def _shown(report: EvalReport, measure: str, value: float) -> tuple[str, str, bool]:
    """What the note names, its value as shown, and whether lower is better (counts of what changed)."""
    kind = main_kind(report.task)
    if kind is None or report.task is None:
        return measure, f"{value:.1%}", False
    return kind.change_shown(report.task, measure, value)


def held_back_task_judge(policy: VerdictPolicy | None = None, labeled: bool = False, copies: int = 1) -> TaskJudge:
    """A :data:`ortlab.transforms.bias_correction.TaskJudge` on the verdict's task metric (``policy``: the task,
    near-tie margin and threshold the verdict uses; ``labeled``: whether the calibration data has labels, which
    the task is inferred from as ``evaluate`` infers it; ``copies``: each feed is one sample repeated so often, to
    fill a batch the model fixes). None when the outputs have no task metric."""
    policy = policy or VerdictPolicy()

    def judge(ref: Outputs, base: Outputs, cand: Outputs) -> TaskChange | None:
        if not ref:
            return None
        names = list(ref[0])
        before, after = (_report(names, ref, base, labeled, policy, copies),
                         _report(names, ref, cand, labeled, policy, copies))
        qb, qa = task_quality(before), task_quality(after)
        if qb.value is None or qa.value is None or not qb.measure:
            return None
        what, shown_b, lower_better = _shown(before, qb.measure, qb.value)
        _, shown_a, _ = _shown(after, qa.measure, qa.value)
        if shown_a == shown_b or abs(qa.value - qb.value) < 1e-12:
            return TaskChange(0, f"left {what} {HELD_BACK} at {shown_a}")
        change = 1 if qa.value > qb.value else -1
        verb = "raised" if (change < 0) == lower_better else "lowered"
        return TaskChange(change, f"{verb} {what} {HELD_BACK} from {shown_b} to {shown_a}")

    return judge
