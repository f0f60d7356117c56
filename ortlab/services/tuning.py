"""Tuning: a search over recipes for the fastest (or smallest) the accuracy policy accepts, as a job."""

from __future__ import annotations

from ortlab.runs.runspec import DataRef
from ortlab.runs.trial_measure import stored_trial_measure
from ortlab.runs.tune import RECOMMENDED_NOTE, Tuner, TuneSettings
from ortlab.runs.tune_budget import DEFAULT_CPU_BUDGET_S, DEFAULT_WALL_CAP_S, budget_limits, default_budget
from ortlab.runs.tune_headline import headline
from ortlab.runs.tune_job import TuneJob
from ortlab.runs.tune_policy import DEFAULT_MIN_SQNR_DB, sqnr_policy, verdict_policy
from ortlab.runs.workspace import Workspace


def start_tune(model, calibration: DataRef | None, evaluation: DataRef, settings: TuneSettings, policy, *,
               preprocess=None, sample: str | None = None, workspace: Workspace | None = None, out_dir=None,
               background: bool = True, meta: dict | None = None) -> TuneJob:
    """A tune search of ``model`` on the calibration and evaluation data (the app's and the command line's one
    way to start one). ``background``: it runs on a thread now (the caller drains its trials); else the caller
    runs it with :meth:`TuneJob.follow`."""
    tuner = Tuner(model, calibration, evaluation, settings=settings, policy=policy, preprocess=preprocess,
                  sample=sample, workspace=workspace, out_dir=out_dir)
    job = TuneJob(tuner, meta, latest=tuner.latest)
    return job.start() if background else job


class Tuning:
    """Starting a tune search, the accuracy policies it searches under, and its recommendation in words."""

    DEFAULT_MIN_SQNR_DB = DEFAULT_MIN_SQNR_DB
    RECOMMENDED_NOTE = RECOMMENDED_NOTE
    DEFAULT_CPU_BUDGET_S = DEFAULT_CPU_BUDGET_S
    DEFAULT_WALL_CAP_S = DEFAULT_WALL_CAP_S

    start_tune = staticmethod(start_tune)
    verdict_policy = staticmethod(verdict_policy)
    sqnr_policy = staticmethod(sqnr_policy)
    headline = staticmethod(headline)
    budget_limits = staticmethod(budget_limits)
    default_budget = staticmethod(default_budget)
    stored_trial_measure = staticmethod(stored_trial_measure)


tuning = Tuning()
