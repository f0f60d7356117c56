"""One clock: the same pair of models, of known cost ratio, timed through Benchmark, Tune and Compare gives the
same speed-up within the intervals (the one timer, :func:`ortlab.timing.child_runs.time_interleaved`, and the one
statistic, :mod:`ortlab.timing.stats`)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.api import PairSpeed
from ortlab.timing.compare import compare_benchmarks
from ortlab.runs import bench_service, tune_timing
from ortlab.runs.history import BenchVariant
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import TuneSettings, Tuner
from ortlab.runs.tune_policy import Stage, Trial
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import BenchConfig, Recipe
from ortlab.timing.stats import SpeedUp

SHORT, LONG = 3, 12  # MatMuls in the chains: the long one costs 4× the short one
SECONDS = 2.0  # each timing: a few seconds, as Compare's quick timing


def chain_model(path, matmuls: int, width: int = 256, rows: int = 64):
    """``matmuls`` MatMul + Relu steps of one [rows, width] × [width, width] product each. Every step uses the same
    weight, so both chains keep the same data in the CPU's caches and the cost grows with the steps alone (with a
    weight per step the long chain's weights spill from the cache and it runs 14× the short one, not 4×)."""
    w = np.random.default_rng(0).normal(0, width ** -0.5, (width, width)).astype(np.float32)
    nodes, inits, x = [], [numpy_helper.from_array(w, "w")], "x"
    for i in range(matmuls):
        nodes += [helper.make_node("MatMul", [x, "w"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x = f"r{i}"
    graph = helper.make_graph(nodes, f"chain{matmuls}", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                         [1, rows, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, rows, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


DRIFT = 0.05  # load drift between two timings taken minutes apart on a shared machine (relative)


def widened(r: tuple[float, float]) -> tuple[float, float]:
    return r[0] * (1 - DRIFT), r[1] * (1 + DRIFT)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


@pytest.mark.slow
def test_benchmark_tune_and_compare_agree_on_a_pair_of_known_cost_ratio(tmp_path, monkeypatch):
    """Each path times with its own call; all three pinned to one ORT thread (on a busy 2-core machine two threads
    per run make a run's latency depend on the scheduler more than on its work: 5-30× for this 4× pair)."""
    one_thread = functools.partial(BenchConfig, intra_op_threads=1)
    monkeypatch.setattr(tune_timing, "BenchConfig", one_thread)
    ref, cand = chain_model(tmp_path / "long.onnx", LONG), chain_model(tmp_path / "short.onnx", SHORT)
    ws = Workspace(tmp_path / "ws")
    variants = [BenchVariant("long", "long", str(ref)), BenchVariant("short", "short", str(cand))]

    # Benchmark: the page's and `ortlab bench`'s path, a speed-up row against the first variant
    summaries = bench_service.start_benchmark(variants, one_thread(duration_s=SECONDS, warmup=3),
                                              workspace=ws, origin="test").follow()
    bench = compare_benchmarks(summaries, baseline="long").rows[1].speed

    # Tune: a trial timed against the source
    tuner = Tuner(ref, None, DataRef(random=4), workspace=ws, settings=TuneSettings(bench_s=SECONDS))
    trial = Trial(1, "short", Stage.SEARCH, Recipe(), model_path=str(cand))
    try:
        trial = tuner.timing.time(trial, tuner.budget.token)
    finally:
        tuner.release_timing()
    (tune,) = trial.speed

    # Compare: its quick batch-1 timing of the pair, read back as Compare reads it
    quick = replace(bench_service.PAIR_TIMING, duration_s=SECONDS, intra_op_threads=1)
    pair = bench_service.start_benchmark(variants, quick, workspace=ws, origin="test").follow()
    compare = PairSpeed(pair[0], pair[1], None).speed

    speeds: dict[str, SpeedUp | None] = {"benchmark": bench, "tune": tune, "compare": compare}
    print({k: v.text() if v is not None else None for k, v in speeds.items()})
    ranges = {}
    for name, sp in speeds.items():
        assert sp is not None and sp.paired and sp.rounds >= 10, name
        assert sp.candidate_runs >= sp.rounds and sp.reference_runs >= sp.rounds
        ranges[name] = sp.speedup_range
        assert overlap(ranges[name], (2.0, 8.0)), (name, sp.text())  # the cost ratio is 4: within a factor 2
    # The three paths time one after the other, so a change of load between them is in no interval (CI here: 3.92×
    # (3.83–4.00) from Benchmark, then 3.66× (3.61–3.70) from Tune): each interval is widened by DRIFT before the
    # check. A second statistic or timer would differ by far more (the in-process timer read 8.40× for this pair).
    for a in ranges:
        for b in ranges:
            assert overlap(widened(ranges[a]), widened(ranges[b])), (a, speeds[a].text(), b, speeds[b].text())
