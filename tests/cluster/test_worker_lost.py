"""A node lost mid-trial: the worker node is killed while it runs a tune trial; the trial runs again on the
head and the search finishes. Runs last: it leaves the session's cluster without its worker."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.workspace import Workspace
from ortlab.runtime.ray_cluster import RayCluster

DIGITS = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"


def _running_a_task(pids: list[int]) -> bool:
    """A Ray worker of these processes is running a task (Ray names its process after the task's function)."""
    for pid in pids:
        try:
            if "_run_and_say_where" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return True
        except OSError:
            continue
    return False


def test_a_trial_whose_node_is_killed_runs_again_on_the_head_and_the_search_finishes(ray_cluster, tmp_path):
    with RayCluster.connect(ray_cluster.address) as rc:
        head = next(n.name() for n in rc.nodes() if "lab" in n.resources)
        worker = next(n.name() for n in rc.nodes() if "cpu_target" in n.resources)
    settings = TuneSettings(budget_s=300, max_trials=2, exclusion_steps=0, int16_steps=0, bench_s=0.3,
                            verify_samples=64, ray=ray_cluster.address, timing_resource="lab")
    tuner = Tuner(DIGITS, DataRef(sample="digits_cnn", set="calibration"),
                  DataRef(sample="digits_cnn", set="evaluation", count=64), settings=settings, sample="digits_cnn",
                  workspace=Workspace(tmp_path / "home"))
    done = threading.Thread(target=tuner.run, daemon=True)
    done.start()
    deadline = time.monotonic() + 200
    while not _running_a_task(ray_cluster.worker_pids()) and time.monotonic() < deadline and done.is_alive():
        time.sleep(0.2)
    assert done.is_alive(), "the search ended before a trial ran on the worker"
    time.sleep(1.0)  # mid-trial
    ray_cluster.kill_worker()
    done.join(240)
    assert not done.is_alive() and tuner.result is not None
    trials = tuner.result.trials
    assert [t.status for t in trials] == ["done", "done"], [t.error for t in trials]
    # the worker was killed while it ran a trial: that trial ran again on the head, as did every later one
    assert {t.ran_on for t in trials} == {head} and {t.timed_on for t in trials} == {head}
    assert any(n.startswith(f"A trial's node was lost ({worker}") and n.endswith(f"ran again on {head}.")
               for n in tuner.result.notes), tuner.result.notes
