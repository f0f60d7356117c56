"""A time limit reached in each stage of a real run ends it within seconds, and so does a tune's budget in the
middle of a trial: static int8 on the digits sample (calibration, quantize, bias correction, verification), stopped
when its child reports that stage; no process of the run's group is left and no folder stays."""

from __future__ import annotations

import threading
import time

import pytest

from ortlab.runs import prepare
from ortlab.data.samples import get_sample
from ortlab.runs import service
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.runtime.child import STOP_GRACE_S, group_members
from ortlab.settings.config import Precision, Recipe

pytestmark = pytest.mark.slow

SLACK_S = 10.0  # the bound: a stopped run ends within 10 s of its limit


def digits_int8() -> RunSpec:
    s = get_sample("digits_cnn")
    return RunSpec(str(s.model_path), Recipe(precision=Precision.INT8), sample=s.name,
                   calibration=DataRef(sample=s.name, set="calibration"),
                   evaluation=DataRef(sample=s.name, set="evaluation", count=64), preprocess=s.preprocess,
                   verify_samples=64)


@pytest.mark.parametrize("stage", ["calibrate", "quantize", "bias_correction", "verify"])
def test_a_time_limit_reached_in_a_stage_ends_the_run_within_seconds(tmp_path, stage):
    ws = Workspace(tmp_path / "home")
    handle = prepare.start_recipe(digits_int8(), workspace=ws)
    group = handle.child_pid  # every process of the run is in the child's group
    assert group is not None, "the run never started its child"
    deadline = time.monotonic() + 180
    while stage not in handle.progress and not handle.done and time.monotonic() < deadline:
        handle.drain()
        time.sleep(0.02)
    assert stage in handle.progress, f"the run never reached {stage}: {handle.state} {handle.error}"
    limit = time.monotonic()
    handle.time_out()  # what the run's timer calls when the limit is reached: here, during this stage
    assert handle.wait(STOP_GRACE_S + SLACK_S + 30), f"the run went on after its limit in {stage}"
    took = time.monotonic() - limit
    print(f"limit reached in {stage}: the run ended {took:.1f} s later")
    assert took < SLACK_S, took
    assert handle.state == service.FAILED and "stopped after" in str(handle.error), (handle.state, handle.error)
    assert group_members(group) == [] and not handle.run_dir.exists() and ws.history().list() == []


def test_a_tune_budget_that_runs_out_during_a_trial_ends_the_search_within_seconds(tmp_path):
    from ortlab.runs.tune import Tuner, TuneSettings

    s = get_sample("digits_cnn")
    budget = 4.0  # a static int8 trial of this model takes longer than that here
    tuner = Tuner(s.model_path, DataRef(sample=s.name, set="calibration"),
                  DataRef(sample=s.name, set="evaluation", count=8), sample=s.name,
                  workspace=Workspace(tmp_path / "ws"), settings=TuneSettings(budget_s=budget, bench_s=0.2),
                  recipes=[Recipe(precision=Precision.INT8)])
    groups: list[int] = []
    real_start = prepare.start_recipe

    def start_recipe(*args, **kwargs):
        handle = real_start(*args, **kwargs)
        assert handle.child_pid is not None, "the trial's run never started its child"
        groups.append(handle.child_pid)
        return handle

    finished = threading.Event()
    began = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare, "start_recipe", start_recipe)
        def search() -> None:
            list(tuner.trials())
            finished.set()

        worker = threading.Thread(target=search, daemon=True)
        worker.start()
        assert finished.wait(budget + STOP_GRACE_S + SLACK_S + 60), "the search went on past its budget"
    took = time.monotonic() - began
    print(f"tune budget {budget:g} s: the search ended after {took:.1f} s")
    assert groups, "no trial started"
    assert took < budget + SLACK_S + 5, took  # + the source's own reading and timing before the first trial
    assert all(group_members(g) == [] for g in groups)
    # on a quiet machine the one trial may finish within the budget; what must hold is the end within seconds
    assert tuner.result is not None and len(tuner.result.trials) <= 1
