"""History's table rows: one row per thing the person did, a tune search's trials folded into one row."""

from __future__ import annotations

from dataclasses import dataclass

from ortlab.api import Artifact, TrialMeasure
from ortlab import api

TUNE_ORIGIN = "tune"  # the origin a tune search's trials are recorded with


@dataclass
class TuneSearch:
    """The trials of one tune search (newest first), recorded one after another on one model."""

    trials: list[Artifact]

    @property
    def recommended(self) -> Artifact | None:
        """The trial its search recommended (None: it recommended none, or ended before saying)."""
        return next((t for t in self.trials if api.tuning.RECOMMENDED_NOTE in t.notes), None)

    @property
    def started_at(self) -> str:
        return self.trials[-1].created_at


def fold_tune_searches(runs: list[Artifact]) -> list[Artifact | TuneSearch]:
    """``runs`` (newest first, one model) with each unbroken stretch of tune trials folded into a
    :class:`TuneSearch`; a run started by hand between trials ends a stretch."""
    out: list[Artifact | TuneSearch] = []
    for r in runs:
        if r.origin != TUNE_ORIGIN:
            out.append(r)
        elif out and isinstance(out[-1], TuneSearch):
            out[-1].trials.append(r)
        else:
            out.append(TuneSearch([r]))
    return out


def search_recipe_text(search: TuneSearch, label: str | None, run_id: int | None = None) -> str:
    """The recipe cell of a search's row, the recommended trial's recipe (``label``) first, where a narrow column
    still shows what it is: "pick of 6: #3 int8 static" (run 3, the trial its search recommended, of 6 trials);
    "tune search · 6 trials · none recommended"."""
    n = len(search.trials)
    if search.recommended is None:
        return f"tune search · {n} trial{'s' if n != 1 else ''} · none recommended"
    return f"pick of {n}: {f'#{run_id} ' if run_id is not None else ''}{label}"


def run_measure(run: Artifact) -> TrialMeasure | None:
    """The run's task measure with its 95% interval and evidence: a tune trial's on the samples its search chose on
    (as the Tune page showed it), another run's on all its evaluation samples; None without a per-sample record."""
    return api.tuning.stored_trial_measure(run.evaluation, trial=run.origin == TUNE_ORIGIN)


def measure_text(m: TrialMeasure | None) -> str:
    """History's "task (95%)" cell, the measure's name in the column's heading (one model, one measure):
    "0.946 (0.921–0.965) · 120 ref. detections"; "–" without a measure."""
    if m is None:
        return "–"
    count = m.evidence.split(" in ")[0].replace("reference ", "ref. ")
    if m.value is None or m.low is None or m.high is None:
        return count
    return f"{m.value:.3f} ({m.low:.3f}–{m.high:.3f}) · {count}"


def measure_heading(measures: set[str]) -> str:
    """The "task (95%)" column's heading: "detection F1 (95%)" when the rows share one measure."""
    return f"{next(iter(measures))} (95%)" if len(measures) == 1 else "task (95%)"
