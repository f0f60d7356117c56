"""A soak of stops: runs in a row, each cancelled or stopped by a time limit at a random point of its work (a
static int8 run with bias correction, or a short graph-optimization run that may finish first), into the workspace
or into OUT.onnx. Afterwards no process of any run is left, no folder is left that is not a recorded run, every
finished run is in the history once with its files, and the next start has nothing to adopt."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from ortlab.runs import prepare
from ortlab.model.inspect import sha256_file
from ortlab.runs import outputs, run_recovery, service
from ortlab.runs.artifact import Artifact
from ortlab.runs.runspec import RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.runtime.child import STOP_GRACE_S, group_members
from ortlab.settings.config import OptLevel, Precision, Recipe
from tests.support.models import conv_bn_model

pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"
RUNS = 10
SEED = 26


def _specs(src: Path) -> list[RunSpec]:
    """Static int8 on the digits sample with its own images (calibration, bias correction, verification: some
    20 s here), and a graph optimization of a small model (a few seconds)."""
    from ortlab.data.samples import get_sample
    from ortlab.runs.runspec import DataRef

    sample = get_sample("digits_cnn")
    int8 = RunSpec(str(sample.model_path), Recipe(precision=Precision.INT8), sample=sample.name,
                   calibration=DataRef(sample=sample.name, set="calibration"),
                   evaluation=DataRef(sample=sample.name, set="evaluation", count=32), preprocess=sample.preprocess,
                   verify_samples=32)
    return [int8, RunSpec(str(src), Recipe(opt_level=OptLevel.BASIC))]


@pytest.mark.skipif(not SAMPLE.is_file(), reason="the digits_cnn sample is not here")
def test_runs_stopped_at_random_points_leave_no_process_no_half_folder_and_a_consistent_history(tmp_path,
                                                                                                 monkeypatch):
    rng = random.Random(SEED)
    ws = Workspace(tmp_path / "home")
    outs = tmp_path / "outs"
    outs.mkdir()
    specs = _specs(conv_bn_model(tmp_path / "conv.onnx"))
    began = time.monotonic()
    ended: list[tuple[service.RecipeHandle, int, str, float]] = []
    late: list[float] = []  # seconds from each stop (the limit, or Cancel) to the end of a stopped run
    for i in range(RUNS):
        spec = specs[0] if rng.random() < 0.6 else specs[1]
        out = outs / f"run{i}.onnx" if rng.random() < 0.5 else None
        how, at = ("limit", rng.uniform(0.5, 7.0)) if rng.random() < 0.5 else ("cancel", rng.uniform(0.0, 7.0))
        monkeypatch.setenv(service.RUN_TIMEOUT_VAR, f"{at:.2f}" if how == "limit" else "600")
        handle = prepare.start_recipe(spec, out, workspace=ws)
        start = time.monotonic()
        child = handle.child_pid  # the group's id: every process of the run is in it
        assert child is not None, f"run {i} never started its child"
        if how == "cancel":
            handle.wait(at)
            handle.cancel()
        assert handle.wait(at + STOP_GRACE_S + 30), f"run {i} ({how} at {at:.1f} s) went on"
        if handle.state != service.DONE:
            late.append(time.monotonic() - start - at)
        ended.append((handle, child, how, at))
    took = time.monotonic() - began

    assert [h for h, *_ in ended if h.state not in (service.DONE, service.FAILED, service.CANCELLED)] == []
    for handle, child, how, at in ended:
        assert group_members(child) == [], f"{how} at {at:.1f} s left processes {group_members(child)}"
        if handle.state == service.FAILED:  # a time limit, said as such, never an unexpected end
            assert how == "limit" and "stopped after" in str(handle.error), str(handle.error)
        if handle.state != service.DONE:
            assert not handle.run_dir.exists()
    done = [h.result for h, *_ in ended if h.state == service.DONE]
    stopped = len(ended) - len(done)
    rows = [r for r in ws.history().list() if isinstance(r, Artifact)]
    assert sorted(r.run_id or 0 for r in rows) == sorted(a.run_id or 0 for a in done)  # 0 runs lost, none twice
    for row in rows:
        assert Path(row.model_path).is_file() and sha256_file(row.model_path) == row.sha256
    folders = {p for p in ws.artifacts_dir.iterdir()}
    assert folders == {Path(r.model_path).parent for r in rows if Path(r.model_path).parent.parent == ws.artifacts_dir}
    assert [p.name for p in outs.iterdir() if p.name.startswith(outputs.RUN_PREFIX)] == []  # no temp folder beside OUT
    assert run_recovery.interrupted_runs(ws) == []
    assert run_recovery.startup(ws) == [] and len(ws.history().list()) == len(rows)  # nothing left to adopt
    print(f"{RUNS} runs in {took:.1f} s: {len(done)} finished first, {stopped} stopped "
          f"({sum(1 for h, _, how, _ in ended if h.state != service.DONE and how == 'limit')} by a time limit); "
          f"stop to end at most {max(late, default=0):.1f} s")
    assert max(late, default=0) < STOP_GRACE_S + 10
    assert stopped >= 1  # the soak stopped runs, it did not only watch them finish (a quiet machine finishes more)
