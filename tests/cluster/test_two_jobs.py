"""Two cluster jobs of one process at once, as the app's server runs them: a tune on the cluster and a benchmark
across it, each on its own thread, share the process's one Ray connection; both finish with their results, and
the connection stays up until the last of them ends. A tune that cannot use the cluster lets the connection go at
once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ortlab.runs import prepare
from ortlab.runs import cluster_bench
from ortlab.runs.history import BenchVariant
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import Tuner, TuneSettings
from ortlab.runs.tune_cluster import ClusterTrials
from ortlab.runs.workspace import Workspace
from ortlab.runtime.ray_cluster import ClusterError, RayCluster
from ortlab.settings.config import BenchConfig

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
DIGITS = SAMPLES / "digits_cnn" / "model.onnx"
ATTENTION = SAMPLES / "digits_attention" / "model.onnx"
QUICK = BenchConfig(runs=20, warmup=2, duration_s=0.0, intra_op_threads=1)


def _tuner(address: str, ws: Workspace) -> Tuner:
    settings = TuneSettings(budget_s=400, max_trials=2, exclusion_steps=0, int16_steps=0, bench_s=0.3,
                            verify_samples=64, ray=address, timing_resource="cpu_target")
    return Tuner(DIGITS, DataRef(sample="digits_cnn", set="calibration"),
                 DataRef(sample="digits_cnn", set="evaluation", count=64), settings=settings, sample="digits_cnn",
                 workspace=ws)


def test_a_tune_and_a_benchmark_at_once_share_the_connection_until_the_last_ends(ray_cluster, tmp_path):
    import ray

    assert not ray.is_initialized()  # no job of an earlier test holds the connection
    with RayCluster.connect(ray_cluster.address) as rc:
        names = {("worker" if "cpu_target" in n.resources else "head"): n for n in rc.nodes()}
    ws = Workspace(tmp_path / "home")
    tuner = _tuner(ray_cluster.address, ws)
    ended: list[tuple[str, bool]] = []  # each job as it ends, and whether the connection was still up then
    failures: list[BaseException] = []

    def tune() -> None:
        try:
            tuner.run()
        except BaseException as exc:  # the test's thread reports it
            failures.append(exc)
        ended.append(("tune", ray.is_initialized()))

    tuning = threading.Thread(target=tune, name="test-tune")
    tuning.start()
    deadline = time.monotonic() + 200
    while not isinstance(tuner.trial_runner, ClusterTrials) and tuning.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert isinstance(tuner.trial_runner, ClusterTrials), failures or "the tune did not reach the cluster"
    bench = cluster_bench.start([BenchVariant("cnn", "digits_cnn", str(DIGITS)),
                                 BenchVariant("attention", "digits_attention", str(ATTENTION))],
                                QUICK, ray_cluster.address, workspace=ws, origin="test")
    assert tuning.is_alive()  # the benchmark runs while the tune does

    def benchmark() -> None:
        bench.wait(400)
        ended.append(("bench", ray.is_initialized()))

    benching = threading.Thread(target=benchmark, name="test-bench")
    benching.start()
    tuning.join(420)
    benching.join(420)
    assert not tuning.is_alive() and not benching.is_alive() and failures == []

    # the tune: its trials ran on the cluster, every timing on the node carrying cpu_target
    trials = tuner.result.trials
    assert [t.status for t in trials] == ["done", "done"], [t.error for t in trials]
    assert {t.ran_on for t in trials} <= {names["head"].name(), names["worker"].name()}
    assert {t.timed_on for t in trials} == {names["worker"].name()}
    # the benchmark: both node kinds timed both models, each on its own node
    assert bench.error is None, bench.error
    kinds = {k.kind.label: k for k in bench.result.kinds}
    assert set(kinds) == {"lab", "cpu_target"} and all(k.timing is not None for k in kinds.values())
    assert kinds["lab"].ran_on == names["head"].node_id and kinds["cpu_target"].ran_on == names["worker"].node_id
    assert sorted((r.variant, r.kind) for r in bench.result.rows()) == [
        ("attention", "cpu_target"), ("attention", "lab"), ("cnn", "cpu_target"), ("cnn", "lab")]
    # the first job to end left the connection to the other; the last one ended it
    assert [up for _, up in ended] == [True, False], ended


def test_a_tune_that_cannot_use_the_cluster_lets_the_connection_go(ray_cluster):
    import ray

    assert not ray.is_initialized()
    with pytest.raises(ClusterError, match="No node of the cluster carries the timing resource 'gpu_nowhere'"):
        ClusterTrials(ray_cluster.address, "gpu_nowhere", str(DIGITS), launch=prepare.start_unrecorded_recipe)
    assert not ray.is_initialized()
