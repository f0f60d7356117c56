"""Latency generator, summary and peak memory on tiny real models."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

from ortlab.timing import bench, child_runs
from ortlab.timing.bench import LatencySample, latency_samples, make_inputs, summarize
from ortlab.settings.config import BenchConfig, ExecutionMode
from ortlab.core.errors import BenchmarkError, DataError, ModelLoadError
from ortlab.core.progress import CancelToken

from tests.support.models import conv_bn_model, matmul_model


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("bench") / "conv.onnx")


@pytest.fixture(scope="module")
def fixed_batch(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("bench") / "fixed.onnx", batch=2)


def test_runs_count_indices_and_summary(conv):
    cfg = BenchConfig(warmup=2, duration_s=0, runs=25, intra_op_threads=1)
    run = latency_samples(conv, cfg, batch_size=4, variant="fp32")
    samples = list(run)
    assert len(samples) == 25
    assert [s.index for s in samples] == list(range(25))
    assert all(s.variant == "fp32" and s.batch_size == 4 and s.ms > 0 for s in samples)
    ts = [s.t for s in samples]
    assert ts == sorted(ts) and ts[-1] > 0
    assert run.input_shapes == {"input": (4, 3, 32, 32)}
    assert run.providers == ["CPUExecutionProvider"]
    assert not run.cancelled

    s = run.summary()
    ms = np.array([x.ms for x in samples])
    assert s.n == 25 and s.batch_size == 4 and s.variant == "fp32"
    assert s.p50 == pytest.approx(np.median(ms))
    assert s.min == pytest.approx(ms.min()) and s.max == pytest.approx(ms.max())
    assert s.min <= s.p50 <= s.p90 <= s.p99 <= s.max
    assert s.throughput_per_s == pytest.approx(4 * 1000.0 / np.median(ms))  # batch ÷ p50
    assert s.providers == ["CPUExecutionProvider"] and s.profile_path is None
    assert json.loads(json.dumps(s.to_dict()))["n"] == 25


def test_summarize_exact_numbers():
    samples = [LatencySample("v", 2, i, float(ms), 0.0) for i, ms in enumerate(range(1, 101))]
    s = summarize(samples)
    assert (s.p50, s.p90, s.p99) == (pytest.approx(50.5), pytest.approx(90.1), pytest.approx(99.01))
    assert s.mean == pytest.approx(50.5) and s.min == 1.0 and s.max == 100.0
    assert s.std == pytest.approx(np.std(np.arange(1, 101)))
    assert s.throughput_per_s == pytest.approx(2 * 1000 / 50.5)


def test_throughput_comes_from_the_median_so_one_outlier_cannot_flip_the_winner():
    fast = [LatencySample("a", 1, i, 0.131, 0.0) for i in range(49)] + [LatencySample("a", 1, 49, 50.0, 0.0)]
    slow = [LatencySample("b", 1, i, 0.133, 0.0) for i in range(50)]
    a, b = summarize(fast), summarize(slow)
    assert a.p50 < b.p50 and a.throughput_per_s > b.throughput_per_s


def test_cli_benchmark_runs_a_few_seconds_by_default_and_runs_alone_means_runs():
    from ortlab.cli import bench as cli_bench, main as cli

    parse = cli.build_parser().parse_args
    assert cli_bench.bench_from_args(parse(["bench", "m.onnx"])).duration_s == 3.0
    cfg = cli_bench.bench_from_args(parse(["bench", "m.onnx", "--runs", "7"]))
    assert cfg.duration_s == 0.0 and cfg.runs == 7
    assert BenchConfig(runs=7).duration_s == 0.0  # the engine's own default stays a run count


def test_summarize_refuses_empty_and_mixed():
    with pytest.raises(BenchmarkError, match="No timed runs"):
        summarize([])
    with pytest.raises(BenchmarkError, match="one variant at one batch size"):
        summarize([LatencySample("a", 1, 0, 1.0, 0.0), LatencySample("a", 8, 0, 1.0, 0.0)])


def test_duration_mode_stops_on_time(conv):
    cfg = BenchConfig(warmup=0, runs=1, duration_s=0.3)
    start = time.perf_counter()
    samples = list(latency_samples(conv, cfg, 1))
    elapsed = time.perf_counter() - start
    assert len(samples) > 1  # runs=1 is ignored when a duration is set
    assert samples[-1].t >= 0.3 and samples[-2].t < 0.3
    assert elapsed < 3.0


def test_cancel_between_runs(conv):
    token = CancelToken()
    run = latency_samples(conv, BenchConfig(warmup=0, duration_s=0, runs=1000), 1, cancel=token)
    got = []
    for s in run:
        got.append(s)
        if len(got) == 5:
            token.cancel()
    assert len(got) == 5 and run.cancelled
    assert run.summary().n == 5


def test_session_created_lazily_and_errors_are_typed(tmp_path, conv, fixed_batch):
    run = latency_samples(tmp_path / "missing.onnx", BenchConfig(), 1)  # nothing happens yet
    with pytest.raises(BenchmarkError, match="Model file not found"):
        next(run)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="could not load the model"):
        next(latency_samples(junk, BenchConfig(), 1))
    with pytest.raises(BenchmarkError, match="fixed batch size of 2; batch size 8 cannot be timed"):
        next(latency_samples(fixed_batch, BenchConfig(warmup=0, duration_s=0, runs=1), 8))
    assert len(list(latency_samples(fixed_batch, BenchConfig(warmup=0, duration_s=0, runs=3), 2))) == 3
    with pytest.raises(BenchmarkError, match="at least 1"):
        next(latency_samples(conv, BenchConfig(), 0))


def test_make_inputs_dims_dtypes_and_seed():
    args = [SimpleNamespace(name="ids", type="tensor(int64)", shape=["batch", "seq"]),
            SimpleNamespace(name="x", type="tensor(float16)", shape=[None, 3, "h", "w"]),
            SimpleNamespace(name="m", type="tensor(bool)", shape=[4])]
    with pytest.raises(DataError, match=r"input 'x' .*'w' \(axis 3\).*--shape x=1,3,5,W"):  # never silently 1
        make_inputs(args, 3, seed=7, dims={"seq": 12, "h": 5})
    feeds = make_inputs(args, 3, seed=7, dims={"seq": 12, "h": 5}, shapes={"x": [1, 3, 5, 6]})
    assert feeds["ids"].shape == (3, 12) and feeds["ids"].dtype == np.int64
    assert set(np.unique(feeds["ids"])) <= {0, 1}
    assert feeds["x"].shape == (3, 3, 5, 6) and feeds["x"].dtype == np.float16  # the batch follows batch_size
    assert feeds["m"].shape == (4,) and feeds["m"].dtype == np.bool_
    again = make_inputs(args, 3, seed=7, dims={"seq": 12, "h": 5}, shapes={"x": [1, 3, 5, 6]})
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)
    with pytest.raises(BenchmarkError, match="tensor\\(string\\)"):
        make_inputs([SimpleNamespace(name="s", type="tensor(string)", shape=[1])], 1)


def test_session_options_are_applied_and_matmul_model_runs(tmp_path):
    path = matmul_model(tmp_path / "mm.onnx")
    cfg = BenchConfig(warmup=1, duration_s=0, runs=4, intra_op_threads=1, inter_op_threads=2,
                      execution_mode=ExecutionMode.PARALLEL, enable_mem_pattern=False, enable_cpu_mem_arena=False)
    run = latency_samples(path, cfg, 5)
    assert len(list(run)) == 4
    assert run.input_shapes == {"input": (5, 16, 32)}


def test_profiling_writes_json_into_the_given_dir(conv, tmp_path):
    cfg = BenchConfig(warmup=1, duration_s=0, runs=3, profile=True)
    run = latency_samples(conv, cfg, 2, variant="int8 static · cpu", profile_dir=tmp_path / "prof")
    list(run)
    path = run.summary().profile_path
    assert path is not None
    from pathlib import Path

    assert Path(path).parent == tmp_path / "prof" and Path(path).name.startswith("int8_static___cpu_b2")
    events = json.loads(Path(path).read_text())
    assert any(e.get("name", "").endswith("_kernel_time") for e in events)


def test_peak_memory_grows_with_batch_and_exceeds_baseline(conv):
    cfg = BenchConfig()
    small = bench.peak_memory_mb(conv, cfg, 1, runs=1)
    large = bench.peak_memory_mb(conv, cfg, 512, runs=1)
    base = bench.baseline_memory_mb()
    # batch 512 activations: 512×8×32×32 floats ≈ 16 MB per tensor
    assert base > 10 and small > base
    assert large > small + 40


def test_peak_memory_does_not_count_the_parent(conv):
    hog = np.ones(400 * 2**20 // 8)  # 400 MB in this process must not show up in the child
    hog += 1
    assert bench.peak_memory_mb(conv, BenchConfig(), 1, runs=1) < 300
    del hog


def test_peak_memory_errors(tmp_path):
    with pytest.raises(BenchmarkError, match="Model file not found"):
        bench.peak_memory_mb(tmp_path / "nope.onnx", BenchConfig(), 1)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"garbage")
    with pytest.raises(BenchmarkError, match="Measuring memory failed: .*could not load the model"):
        bench.peak_memory_mb(junk, BenchConfig(), 1)


# -- timing in a child process ------------------------------------------------------------------------------

def _gone(pid: int) -> bool:
    """True when no process (not even a zombie) with this pid is left."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_isolated_samples_come_from_a_child_and_summarize_like_in_process(conv, tmp_path):
    import os

    cfg = BenchConfig(warmup=2, duration_s=0, runs=40, intra_op_threads=1, profile=True)
    run = child_runs.latency_samples_isolated(conv, cfg, batch_size=4, variant="fp32", profile_dir=tmp_path / "prof")
    samples = list(run)
    assert run.child_pid is not None and run.child_pid != os.getpid()
    assert run.returncode == 0 and run.child_pid is not None and _gone(run.child_pid)
    assert [s.index for s in samples] == list(range(40))
    assert all(s.variant == "fp32" and s.batch_size == 4 and s.ms > 0 for s in samples)
    assert [s.t for s in samples] == sorted(s.t for s in samples)
    assert run.input_shapes == {"input": (4, 3, 32, 32)} and run.providers == ["CPUExecutionProvider"]
    assert not run.cancelled
    s = run.summary(peak_rss_mb=run.peak_rss_mb)
    ms = np.array([x.ms for x in samples])
    assert s.n == 40 and s.p50 == pytest.approx(np.median(ms)) and s.max == pytest.approx(ms.max())
    assert s.providers == ["CPUExecutionProvider"]
    # the child's own peak memory: more than an interpreter with ORT, far less than the parent's test process
    assert s.peak_rss_mb is not None and bench.baseline_memory_mb() < s.peak_rss_mb < 300
    from pathlib import Path

    assert s.profile_path is not None
    assert Path(s.profile_path).parent == tmp_path / "prof" and Path(s.profile_path).is_file()


def test_isolated_duration_mode_streams_samples_in_batches(conv):
    cfg = BenchConfig(warmup=0, duration_s=0.4)
    run = child_runs.latency_samples_isolated(conv, cfg, 1)
    arrivals = []
    for s in run:
        arrivals.append((time.perf_counter(), s.t))
    assert arrivals[-1][1] >= 0.4 and arrivals[-2][1] < 0.4
    # samples reach the parent while the child still runs, not all at the end
    spread = arrivals[-1][0] - arrivals[0][0]
    assert spread > 0.25, spread


def test_isolated_cancel_stops_the_child_quickly(conv):
    token = CancelToken()
    run = child_runs.latency_samples_isolated(conv, BenchConfig(warmup=0, duration_s=30), 1, cancel=token)
    got = 0
    for _ in run:
        got += 1
        if got == 200:
            token.cancel()
            t0 = time.perf_counter()
    stopped = time.perf_counter() - t0
    assert got == 200 and run.cancelled and run.summary().n == 200
    assert stopped < 0.5, stopped
    assert run.returncode == 0 and run.child_pid is not None and _gone(run.child_pid)  # it stopped by itself, and was reaped


def test_isolated_closing_early_leaves_no_child(conv):
    run = child_runs.latency_samples_isolated(conv, BenchConfig(warmup=0, duration_s=30), 1)
    next(run)
    pid = run.child_pid
    t0 = time.perf_counter()
    run.close()
    assert time.perf_counter() - t0 < 1.0
    assert run.returncode is not None and pid is not None and _gone(pid)


def test_isolated_errors_come_back_typed_with_their_message(tmp_path, fixed_batch):
    with pytest.raises(BenchmarkError, match="Model file not found"):
        next(child_runs.latency_samples_isolated(tmp_path / "missing.onnx", BenchConfig(), 1))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    run = child_runs.latency_samples_isolated(junk, BenchConfig(), 1)
    with pytest.raises(ModelLoadError, match="could not load the model"):
        next(run)
    assert run.child_pid is not None and _gone(run.child_pid)
    with pytest.raises(BenchmarkError, match="fixed batch size of 2; batch size 8 cannot be timed"):
        next(child_runs.latency_samples_isolated(fixed_batch, BenchConfig(warmup=0, duration_s=0, runs=1), 8))


def test_isolated_cancel_reaches_the_child_during_warm_up(conv):
    import threading

    token = CancelToken()
    run = child_runs.latency_samples_isolated(conv, BenchConfig(warmup=10**7, duration_s=0, runs=1), 1, cancel=token)
    threading.Timer(0.8, token.cancel).start()
    t0 = time.perf_counter()
    assert list(run) == []
    assert run.cancelled and run.returncode == 0  # the child stopped by itself, not terminated
    # 10**7 warm-up runs take minutes; stopping within seconds of the cancel shows the child saw it (the bound
    # is loose on purpose: a shared, loaded machine must not fail a test about cancellation, not speed)
    assert time.perf_counter() - t0 < 0.8 + 15


@pytest.mark.parametrize("level,expect_fused", [("disabled", False), ("all", True)])
def test_session_opt_level_decides_which_graph_is_timed(conv, tmp_path, level, expect_fused):
    cfg = BenchConfig(warmup=1, duration_s=0, runs=2, profile=True, session_opt_level=level)
    run = latency_samples(conv, cfg, 1, variant=level, profile_dir=tmp_path)
    list(run)
    profile = run.summary().profile_path
    assert profile is not None
    events = json.loads(open(profile).read())
    kernels = {e["args"]["op_name"] for e in events if e.get("cat") == "Node" and "op_name" in e.get("args", {})}
    assert ("BatchNormalization" not in kernels) is expect_fused
    assert ("ReorderOutput" in kernels) is expect_fused  # level all: NCHWc layout
