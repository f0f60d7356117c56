"""Tune on two nodes runs two trials' accuracy work at once: while one trial runs, the next queued recipe's
quantize + evaluate is already running on the other node (each task's start and end, taken on its node, overlap),
and the search's trials are the same as with one trial at a time."""

from __future__ import annotations

from pathlib import Path

from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.tune_cluster import ClusterTrials
from ortlab.runs.workspace import Workspace

DIGITS = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"


def _tune(address: str, home: Path) -> Tuner:
    settings = TuneSettings(budget_s=300, max_trials=3, exclusion_steps=0, int16_steps=0, bench_s=0.3,
                            verify_samples=64, ray=address, timing_resource="cpu_target")
    tuner = Tuner(DIGITS, DataRef(sample="digits_cnn", set="calibration"),
                  DataRef(sample="digits_cnn", set="evaluation", count=64), settings=settings, sample="digits_cnn",
                  workspace=Workspace(home))
    tuner.run()
    return tuner


def _overlapping(spans: list[tuple[str, float, float]]) -> list[tuple[str, str]]:
    return [(a[0], b[0]) for i, a in enumerate(spans) for b in spans[i + 1:]
            if a[0] != b[0] and max(a[1], b[1]) < min(a[2], b[2])]


def test_two_nodes_run_two_trials_at_once_and_the_search_finds_the_same_trials(ray_cluster, tmp_path, monkeypatch):
    ahead = _tune(ray_cluster.address, tmp_path / "ahead")
    runner = ahead.trial_runner
    assert isinstance(runner, ClusterTrials)
    trials = ahead.result.trials
    assert [t.status for t in trials] == ["done"] * 3, [t.error for t in trials]
    assert len(runner.spans) == 3 and len({n for n, _, _ in runner.spans}) == 2
    assert _overlapping(runner.spans), runner.spans  # two trials' accuracy work at the same time, on two nodes
    assert {t.timed_on for t in trials} == {runner.timing_node}  # timings still on the target node only

    monkeypatch.setattr(ClusterTrials, "prefetch", lambda self, specs, workspace: None)
    one_by_one = _tune(ray_cluster.address, tmp_path / "one_by_one")
    spans = one_by_one.trial_runner.spans
    assert not _overlapping(spans), spans
    assert [(t.label, t.status, t.stage) for t in one_by_one.result.trials] == \
        [(t.label, t.status, t.stage) for t in trials]
    assert [t.level for t in one_by_one.result.trials] == [t.level for t in trials]
