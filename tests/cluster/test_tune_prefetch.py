"""Tune on two nodes runs two trials' accuracy work at once: while one trial runs, the next queued recipe's
quantize + evaluate is already running on the other node (each task's start and end, taken on its node, overlap),
and the search's trials are the same as with one trial at a time; a node with nothing to do takes the next trial,
except the timing node while a timing waits for it."""

from __future__ import annotations

from pathlib import Path

from ortlab.runs import prepare
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.tune_cluster import ClusterTrials
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import Recipe

DIGITS = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"


def _tune(address: str, home: Path, monkeypatch) -> tuple[Tuner, list[tuple[str, float, float]]]:
    """The search, and (node, start, end) of each trial's accuracy work, as each trial's handle tells it."""
    handles = []
    start = ClusterTrials.start

    def recording(self, spec, out, workspace):
        handles.append(start(self, spec, out, workspace))
        return handles[-1]

    monkeypatch.setattr(ClusterTrials, "start", recording)
    settings = TuneSettings(budget_s=300, max_trials=3, exclusion_steps=0, int16_steps=0, bench_s=0.3,
                            verify_samples=64, ray=address, timing_resource="cpu_target")
    tuner = Tuner(DIGITS, DataRef(sample="digits_cnn", set="calibration"),
                  DataRef(sample="digits_cnn", set="evaluation", count=64), settings=settings, sample="digits_cnn",
                  workspace=Workspace(home))
    tuner.run()
    return tuner, [(h.node, *h.span) for h in handles if h.span is not None]


def _overlapping(spans: list[tuple[str, float, float]]) -> list[tuple[str, str]]:
    return [(a[0], b[0]) for i, a in enumerate(spans) for b in spans[i + 1:]
            if a[0] != b[0] and max(a[1], b[1]) < min(a[2], b[2])]


def test_two_nodes_run_two_trials_at_once_and_the_search_finds_the_same_trials(ray_cluster, tmp_path, monkeypatch):
    ahead, spans = _tune(ray_cluster.address, tmp_path / "ahead", monkeypatch)
    runner = ahead.trial_runner
    assert isinstance(runner, ClusterTrials)
    trials = ahead.result.trials
    assert [t.status for t in trials] == ["done"] * 3, [t.error for t in trials]
    assert len(spans) == 3 and len({n for n, _, _ in spans}) == 2
    assert _overlapping(spans), spans  # two trials' accuracy work at the same time, on two nodes
    assert {t.timed_on for t in trials} == {runner.timing_node}  # timings still on the target node only
    assert runner.timing_node == runner.timing.node.name()

    monkeypatch.setattr(ClusterTrials, "prefetch", lambda self, specs, workspace: None)
    one_by_one, spans = _tune(ray_cluster.address, tmp_path / "one_by_one", monkeypatch)
    assert not _overlapping(spans), spans
    assert [(t.label, t.status, t.stage) for t in one_by_one.result.trials] == \
        [(t.label, t.status, t.stage) for t in trials]
    assert [t.level for t in one_by_one.result.trials] == [t.level for t in trials]


def _spec(samples: int) -> RunSpec:
    return RunSpec(str(DIGITS), Recipe(), calibration=DataRef(sample="digits_cnn", set="calibration"),
                   evaluation=DataRef(sample="digits_cnn", set="evaluation", count=samples), verify_samples=samples)


def test_a_free_node_takes_the_next_trial_but_the_timing_node_not_while_a_timing_waits(ray_cluster, tmp_path):
    ws = Workspace(tmp_path / "home")
    trials = ClusterTrials(ray_cluster.address, "cpu_target", str(DIGITS), launch=prepare.start_unrecorded_recipe)
    try:
        timing_node = trials.timing.node.node_id
        specs = [_spec(n) for n in (32, 40, 48, 56)]
        trials.prefetch(specs, ws)
        first = dict(trials.ahead.started)
        assert len(first) == 2 and {t.node_id for t in first.values()} == {n.node_id for n in trials.nodes}
        trials.cluster.wait(list(first.values()))  # both nodes free again; the tuner has not taken either

        trials.timing.waiting = True  # a timing waits for the timing node: the next trial starts on the other node only
        trials.refill(now=True)
        [third] = [t for k, t in trials.ahead.started.items() if k not in first]
        assert third.node_id != timing_node

        trials.timing.waiting = False
        trials.refill(now=True)  # the timing node is free for trials again: it takes the fourth
        [fourth] = [t for k, t in trials.ahead.started.items() if k not in first and t is not third]
        assert fourth.node_id == timing_node
        handle = trials.start(specs[3], None, ws)  # the tuner takes the task that started ahead
        assert handle.wait(240) and handle.error is None and handle.result is not None, handle.error
        assert handle.node == trials.node_name(timing_node)
    finally:
        trials.close()
