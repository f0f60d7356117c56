"""A tune trial's task measure as its search judged it: on the samples the search chooses on, with its 95% interval
and the evidence it rests on (the Tune page's table and chart, and History's rows of tune trials, from a trial's
stored evaluation report)."""

from __future__ import annotations

from dataclasses import dataclass

from ortlab.checks.eval_report import EvalReport
from ortlab.runs.tune_evidence import SampleEvidence, evidence_of
from ortlab.runs.tune_recommend import interval, split

__all__ = ["TrialMeasure", "choosing_measure", "stored_trial_measure"]


@dataclass(frozen=True)
class TrialMeasure:
    """``measure`` (e.g. "detection F1") = ``value`` with its 95% interval ``low``–``high`` (all None when the
    samples hold no unit), resting on ``evidence`` ("120 reference detections in 200 samples")."""

    measure: str
    value: float | None
    low: float | None
    high: float | None
    evidence: str


def choosing_measure(ev: SampleEvidence, whole: bool = False) -> TrialMeasure:
    """The measure of ``ev`` on the samples the search chooses on (:func:`split`; all of them when too few to
    split, or with ``whole``: a run no search chose), with its interval and evidence."""
    choose, confirm = (tuple(range(len(ev))), ()) if whole else split(len(ev))
    got = interval(ev, choose if confirm else None)
    if got is None:
        return TrialMeasure(ev.measure, None, None, None, f"no {ev.unit} in {len(choose)} samples")
    return TrialMeasure(ev.measure, got.value, got.low, got.high, (ev.subset(choose) if confirm else ev).text())


def stored_trial_measure(report: EvalReport | None, trial: bool = True) -> TrialMeasure | None:
    """:func:`choosing_measure` of a stored run's evaluation report (a tune ``trial``'s on the samples its search
    chose on; another run's on all); None without a per-sample record (an old report, or plain tensors)."""
    ev = evidence_of(report)
    return choosing_measure(ev, whole=not trial) if ev is not None and len(ev) else None
