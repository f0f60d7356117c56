"""`ortlab tune --ray` on a real two-node cluster, traced: the accuracy trials land on both nodes, every timing
on the node carrying the named resource (and the result names its machine), the model and the data go to the
object store from here, and every connection the run opens stays on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ortlab.runs.history import History
from ortlab.runtime.machine import this_machine
from ortlab.runtime.ray_cluster import RayCluster
from ortlab.runs.workspace import Workspace
from tests.integration.test_no_telemetry import _strace_works

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "sample_models" / "digits_cnn"


@pytest.fixture(scope="module")
def traced_tune(ray_cluster, tmp_path_factory):
    """One traced `ortlab tune digits_cnn --ray … --timing-resource cpu_target` of two trials (path data, so it
    travels through the object store); (its JSON result, the strace lines, the workspace)."""
    tmp = tmp_path_factory.mktemp("tune_ray")
    home = tmp / "home"
    args = [sys.executable, "-m", "ortlab", "tune", "digits_cnn", "--out", str(tmp / "out"), "--budget", "300",
            "--max-trials", "2", "--exclusion-steps", "0", "--bench-seconds", "0.3", "--verify-samples", "64",
            "--data", str(DIGITS / "calibration"), "--eval", str(DIGITS / "evaluation"),
            "--ray", ray_cluster.address, "--timing-resource", "cpu_target", "--json"]
    trace = tmp / "trace.txt"
    traced = _strace_works() is None
    if traced:
        args = ["strace", "-f", "-qq", "-e", "trace=connect,sendto", "-o", str(trace), *args]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=400, cwd=tmp,
                          env={**os.environ, "ORTLAB_HOME": str(home), "PYTHONPATH": str(REPO)})
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    lines = trace.read_text(encoding="utf-8", errors="replace").splitlines() if traced else None
    return json.loads(proc.stdout), lines, Workspace(home)


def test_trials_land_on_both_nodes_and_timings_only_on_the_target_node(traced_tune, ray_cluster):
    result, _, ws = traced_tune
    trials = result["trials"]
    assert [t["status"] for t in trials] == ["done", "done"], [t.get("error") for t in trials]
    with RayCluster.connect(ray_cluster.address) as rc:
        names = {("worker" if "cpu_target" in n.resources else "head"): n.name() for n in rc.nodes()}
    assert {t["ran_on"] for t in trials} == {names["head"], names["worker"]}  # one trial on each node
    assert {t["timed_on"] for t in trials} == {names["worker"]}  # timed only where cpu_target is
    assert any(f"timings on {names['worker']}" in n for n in result["notes"])
    assert result["hardware"].startswith(this_machine().summary().split(" · ")[0])  # the timing node's CPU
    assert " · 1 thread · " in result["hardware"]  # timed on the one CPU the node has, as the trials ran
    # each trial is a run of this workspace, made on its node, with a timing kept in History
    hist = History(ws.db_path)
    runs = [hist.get(t["run_id"]) for t in trials]
    assert all(any("on the cluster node" in n for n in r.notes) for r in runs)
    assert len(hist.list_benchmarks()) >= 2
    # what the nodes calibrated and rounded came back into this workspace, for the next trial on any node
    assert list((ws.root / "calibration").glob("*.json")) and list((ws.root / "rounding").glob("*.npz"))


def test_every_connection_of_a_cluster_run_stays_on_loopback(traced_tune):
    _, lines, _ = traced_tune
    if lines is None:
        pytest.skip(_strace_works() or "strace did not run")
    connects = [ln for ln in lines if "connect(" in ln and re.search(r"AF_INET6?\b", ln)]
    outside = [ln for ln in connects if not re.search(r'127\.0\.0\.1|"::1"|::ffff:127\.', ln)]
    assert connects and outside == [], "\n".join(outside[:10])
