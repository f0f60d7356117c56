"""A tune trial's task measure as its search judged it: on the samples the search chooses on, with its 95% interval
and the evidence it rests on (the Tune page's table and chart, and History's rows of tune trials, from a trial's
stored evaluation report)."""

from __future__ import annotations

from ortlab.checks.eval_report import EvalReport
from ortlab.runs.tune_evidence import evidence_of
from ortlab.runs.tune_recommend import TrialMeasure, measure_on_choosing_part

__all__ = ["TrialMeasure", "stored_trial_measure"]


def stored_trial_measure(report: EvalReport | None, trial: bool = True) -> TrialMeasure | None:
    """:func:`~ortlab.runs.tune_recommend.measure_on_choosing_part` of a stored run's evaluation report (a tune
    ``trial``'s on the samples its search chose on; another run's on all); None without a per-sample record (an old
    report, or plain tensors)."""
    ev = evidence_of(report)
    return measure_on_choosing_part(ev, whole=not trial) if ev is not None and len(ev) else None
