"""The benchmark job through the run service (one benchmark per server process at a time, each variant × batch
size timed in its own child process, peak memory from that child, recorded in the history when it ends), and the
tables the Benchmark page draws from its samples."""

from __future__ import annotations

from ortlab import api
from ortlab.api import BenchConfig
from ortlab.api import BenchVariant
from ortlab.api import BenchHandle
from ortlab.ui.session import state
from ortlab.ui.session.actions import Variant, workspace
from ortlab.ui.jobs.status import started
from ortlab.ui.session.actions import bench_shapes, server_cluster


def start_benchmark(variants: list[Variant], cfg: BenchConfig, measure_memory: bool, on_cluster: bool = False) -> BenchHandle:
    """Start timing ``variants`` at every batch size of ``cfg``; peak memory is kept when ``measure_memory``;
    ``on_cluster``: on every kind of node of the cluster the server's operator configured (never one a page names)
    instead of this machine."""
    plain = [BenchVariant(v.id, v.name, str(v.path), v.artifact.run_id if v.artifact else None) for v in variants]

    info = state.model_info()
    values = api.data.control_values(state.eval_dataset(), info.inputs) if info is not None else {}
    job = api.benchmarks.start_benchmark(plain, cfg, measure_memory=measure_memory, workspace=workspace(), origin="app",
                                         shapes=bench_shapes(), values=values, cluster=server_cluster(on_cluster))
    job.meta = {"samples": {}, "config": cfg, "variants": [(v.id, v.name, v.path) for v in job.variants],
                "cluster": on_cluster}
    state.set_job("bench", job)
    return started(job)  # type: ignore[return-value]


def collect(job: BenchHandle) -> dict[str, list[float]]:
    """Move queued samples into ``job.meta['samples']`` (series id ``variant@batch`` → latencies in ms)."""
    series = job.meta["samples"]
    for s in job.drain():
        series.setdefault(api.benchmarks.series_id(s.variant, s.batch_size), []).append(s.ms)
    return series
