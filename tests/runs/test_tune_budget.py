"""Tune's budget in CPU seconds or trials, and its note when the machine was busy (fake clocks)."""

from __future__ import annotations

import math
import time

import pytest

from ortlab.api import UsageError
from ortlab.cli.tune import parse_budget
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.tune_budget import Clocks
from ortlab.runtime import cpu_time

from tests.runs.test_tune_order_speed import _OrderTuner, _recipes
from tests.support.models import conv_bn_model


class _ClockTuner(_OrderTuner):
    """Each canned trial costs ``cpu_per_trial`` CPU seconds and ``wall_per_trial`` wall seconds (fake clocks)."""

    cpu_per_trial = 40.0
    wall_per_trial = 0.0

    def __init__(self, *a, **kw):
        self.cpu = 0.0
        self.wall = 0.0  # wall seconds the canned trials took
        super().__init__(*a, clocks=Clocks(wall=lambda: time.monotonic() + self.wall, cpu=lambda: self.cpu,
                                           machine=lambda: None), **kw)
        self._retime = lambda finalists: finalists  # type: ignore[method-assign]

    def _trial(self, recipe, stage, note=""):
        self.cpu += self.cpu_per_trial
        self.wall += self.wall_per_trial  # elapsed grows
        return super()._trial(recipe, stage, note)

    finish = Tuner.finish  # the real one, not the canned search's


def _tuner(tmp_path, **settings):
    model = conv_bn_model(tmp_path / "m.onnx")
    return _ClockTuner(model, None, DataRef(random=4), workspace=object(), recipes=_recipes(),
                       settings=TuneSettings(exclusion_steps=0, int16_steps=0, **settings))


def test_a_cpu_budget_stops_the_search_by_cpu_seconds(tmp_path):
    tuner = _tuner(tmp_path, budget_s=math.inf, budget_cpu_s=100.0)
    assert len(list(tuner.trials())) == 3  # 40, 80, then 120 ≥ 100 CPU seconds: no fourth trial
    assert tuner.result is not None and tuner.result.best is not None


def test_max_trials_stops_after_n_trials(tmp_path):
    tuner = _tuner(tmp_path, budget_s=600.0, max_trials=2)
    tuner.cpu_per_trial = 0.0
    assert [t.index for t in tuner.trials()] == [1, 2]


def test_the_busy_note_appears_when_the_search_got_little_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_time, "cores", lambda: 2)
    tuner = _tuner(tmp_path, budget_s=600.0)
    tuner.cpu_per_trial, tuner.wall_per_trial = 10.0, 40.0  # 50 s of CPU in 200 s on 2 cores: 12%
    tuner.run()
    assert tuner.result is not None
    notes = [n for n in tuner.result.notes if n.startswith("The machine was busy")]
    assert notes and notes[0].startswith("The machine was busy: the search got 12% of 2 cores (50 s of CPU in 200 s)")


def test_no_busy_note_when_the_search_got_the_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_time, "cores", lambda: 2)
    tuner = _tuner(tmp_path, budget_s=600.0)
    tuner.cpu_per_trial, tuner.wall_per_trial = 70.0, 40.0  # 350 s of CPU in 200 s on 2 cores: 88%
    tuner.run()
    assert tuner.result is not None and not [n for n in tuner.result.notes if "busy" in n]


@pytest.mark.parametrize(("text", "want"), [("600", (600.0, None)), ("90s", (90.0, None)),
                                            ("300cpu", (math.inf, 300.0)), ("2.5 CPU", (math.inf, 2.5))])
def test_budget_spellings(text, want):
    assert parse_budget(text) == want


@pytest.mark.parametrize(("text", "message"), [("0", "--budget must be positive."), ("-5cpu", "--budget must be positive."),
                                               ("ten", "--budget must be a number of seconds: 600 (or 600s) of wall "
                                                       "time, or 300cpu of CPU time; not 'ten'.")])
def test_bad_budgets_are_usage_errors(text, message):
    with pytest.raises(UsageError) as e:
        parse_budget(text)
    assert str(e.value) == message


def test_the_default_budget_is_cpu_seconds_here_and_wall_seconds_on_a_cluster():
    from ortlab.runs.tune_budget import DEFAULT_CPU_BUDGET_S, DEFAULT_WALL_CAP_S, default_budget

    # the same search on a busy machine as on a quiet one (capped by an hour of wall time); a cluster's CPU is not
    # this machine's, so there the budget is wall time
    assert default_budget(False) == (DEFAULT_WALL_CAP_S, DEFAULT_CPU_BUDGET_S) == (3600.0, 600.0)
    assert default_budget(True) == (600.0, None)
