"""A benchmark's timing children stop like a recipe's: Cancel or the time limit ($ORTLAB_RUN_TIMEOUT_S) ends the
benchmark, and every timing child, with every process it started, is gone after the grace, also a child that
ignores SIGTERM once its timing ended."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ortlab.core.errors import BenchmarkError, Cancelled
from ortlab.runs import bench_service, service
from ortlab.runs.history import BenchVariant
from ortlab.runs.workspace import Workspace
from ortlab.runtime.child import STOP_GRACE_S
from ortlab.settings.config import BenchConfig
from tests.runs.test_run_safety import gone
from tests.support.models import conv_bn_model

# every timing child this test starts ignores SIGTERM, starts a helper process (its pid, with the child's, is
# appended to the file), times as asked, then stays (deaf) instead of exiting
STUBBORN_TIMER = """
import os, signal, subprocess, sys, time
from ortlab.timing import child_runs

_real = child_runs._isolated_child


def _stubborn(*args):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open({pids!r}, "a") as f:
        f.write(f"{{os.getpid()}} {{helper.pid}}\\n")
    try:
        _real(*args)
    finally:
        time.sleep(300)


child_runs._isolated_child = _stubborn
"""

LONG = BenchConfig(warmup=1, duration_s=120, batch_sizes=(1,))


@pytest.fixture
def stubborn(tmp_path, monkeypatch) -> Path:
    hook, pids = tmp_path / "stubborn_hook", tmp_path / "pids"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(STUBBORN_TIMER.format(pids=str(pids)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    return pids


@pytest.fixture
def variants(tmp_path) -> list[BenchVariant]:
    a = conv_bn_model(tmp_path / "a.onnx", seed=0)
    b = conv_bn_model(tmp_path / "b.onnx", seed=1)
    return [BenchVariant("a", "A", str(a)), BenchVariant("b", "B", str(b))]


def _processes(pids: Path, want: int) -> list[int]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        if len(found) >= 2 * want:
            return found
        time.sleep(0.05)
    raise AssertionError("the timing children never started")


def _timing(handle: bench_service.BenchHandle, timeout: float = 90) -> int:
    """Wait until samples arrive (the children are timing); how many were taken."""
    deadline = time.monotonic() + timeout
    got = 0
    while got == 0 and not handle.done and time.monotonic() < deadline:
        got += len(handle.drain())
        time.sleep(0.05)
    return got


def test_a_benchmark_cancelled_mid_timing_leaves_no_process(tmp_path, stubborn, variants):
    handle = bench_service.start_benchmark(variants, LONG, workspace=Workspace(tmp_path / "home"))
    try:
        assert _timing(handle) > 0, (handle.state, handle.error)
        procs = _processes(stubborn, len(variants))
        begin = time.monotonic()
        handle.cancel()
        assert handle.wait(2 * STOP_GRACE_S + 30), "the benchmark went on after Cancel"
        took = time.monotonic() - begin
    finally:
        handle.cancel()
    assert handle.state == bench_service.CANCELLED and isinstance(handle.error, Cancelled)
    assert took < 10, took  # one grace to exit on its own, one after SIGTERM, for all children at once
    assert all(gone(p) for p in procs), [p for p in procs if not gone(p)]  # children and what they started
    print(f"Cancel to the end of the benchmark: {took:.1f} s")


def test_a_benchmark_past_its_time_limit_is_stopped_and_says_so(tmp_path, stubborn, variants, monkeypatch):
    monkeypatch.setenv(service.RUN_TIMEOUT_VAR, "8")  # time to load and warm up both children under load
    begin = time.monotonic()
    handle = bench_service.start_benchmark(variants, LONG, workspace=Workspace(tmp_path / "home"))
    try:
        assert handle.timeout_s == 8
        procs = _processes(stubborn, len(variants))
        assert handle.wait(8 + 2 * STOP_GRACE_S + 30), "the benchmark went on past its limit"
        took = time.monotonic() - begin
    finally:
        handle.cancel()
    assert handle.state == bench_service.FAILED and handle.timed_out
    assert isinstance(handle.error, BenchmarkError)
    assert "The benchmark was stopped after" in str(handle.error) and "(limit 8 s)" in str(handle.error)
    assert took < 8 + 10, took  # within 10 s of the limit
    assert all(gone(p) for p in procs), [p for p in procs if not gone(p)]
    print(f"limit 8 s; ended after {took:.1f} s: {handle.error}")


def test_a_bad_time_limit_is_refused_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv(service.RUN_TIMEOUT_VAR, "soon")
    with pytest.raises(service.OrtlabError, match=r"must be a number of seconds, not 'soon'"):
        bench_service.start_benchmark([], LONG, workspace=Workspace(tmp_path / "home"))
    assert bench_service.bench_busy() == 0
