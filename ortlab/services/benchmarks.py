"""Benchmarks: time variants here or on a cluster, compare them as they stream, and the stored timings that speak
for a pair, a run and a report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ortlab.runs import bench_service, cluster_bench
from ortlab.runs.bench_service import BenchHandle, bench_busy, start_pair_timing, timed_variants
from ortlab.runs.cluster_bench import ClusterBenchHandle
from ortlab.runs.history import BenchVariant
from ortlab.runs.result_speed import default_check
from ortlab.timing.stats import times
from ortlab.runs.runtime_judge import judge_runtime_rows
from ortlab.runs.stored_timing import latest_pair, machine_text, report_timing, run_latency, speed_interval_text
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import DEFAULT_BENCH_DURATION_S, BenchConfig
from ortlab.timing.bench import THROUGHPUT_METHOD, config_problems
from ortlab.timing.compare import MAX_SPREAD, MIN_RUNS, compare_benchmarks, running_stats, series_id, split_series_id
from ortlab.timing.settle import CAP_S, TARGET
from ortlab.timing.stats import of_summaries


def start_benchmark(variants: Sequence[BenchVariant], config: BenchConfig, *, cluster: str | None = None,
                    nodes: Sequence[str] = (), measure_memory: bool = False, workspace: Workspace | None = None,
                    origin: str = "app", shapes: dict[str, list[int]] | None = None,
                    values: dict[str, float] | None = None, **local: Any) -> BenchHandle | ClusterBenchHandle:
    """A benchmark (the app's and the command line's one way to start one): on this machine
    (:func:`ortlab.runs.bench_service.start_benchmark`, which takes ``local``'s arguments), or with ``cluster``
    (a Ray address, "auto" or host:port) on every kind of node of that cluster, or on the ``nodes`` resources
    named (:func:`ortlab.runs.cluster_bench.start`: its ``result`` is a ``ClusterBenchmark``)."""
    if cluster and cluster.strip():
        return cluster_bench.start(variants, config, cluster, nodes=nodes, measure_memory=measure_memory,
                                   workspace=workspace, origin=origin, shapes=shapes, values=values)
    return bench_service.start_benchmark(variants, config, measure_memory=measure_memory, workspace=workspace,
                                         origin=origin, shapes=shapes, values=values, **local)


class Benchmarks:
    """Starting benchmarks and pair timings, comparing what they measured, and the stored timings of a run."""

    DEFAULT_BENCH_DURATION_S = DEFAULT_BENCH_DURATION_S
    BENCH_MAX_SPREAD = MAX_SPREAD
    BENCH_MIN_RUNS = MIN_RUNS
    THROUGHPUT_METHOD = THROUGHPUT_METHOD
    SETTLE_CAP_S = CAP_S
    SETTLE_TARGET = TARGET

    start_benchmark = staticmethod(start_benchmark)
    start_pair_timing = staticmethod(start_pair_timing)
    timed_variants = staticmethod(timed_variants)
    bench_busy = staticmethod(bench_busy)
    bench_config_problems = staticmethod(config_problems)
    compare_benchmarks = staticmethod(compare_benchmarks)
    running_stats = staticmethod(running_stats)
    series_id = staticmethod(series_id)
    split_series_id = staticmethod(split_series_id)
    judge_runtime_rows = staticmethod(judge_runtime_rows)
    of_summaries = staticmethod(of_summaries)
    default_speed_check = staticmethod(default_check)
    times = staticmethod(times)
    report_timing = staticmethod(report_timing)
    latest_pair = staticmethod(latest_pair)
    run_latency = staticmethod(run_latency)
    machine_text = staticmethod(machine_text)
    speed_interval_text = staticmethod(speed_interval_text)


benchmarks = Benchmarks()
