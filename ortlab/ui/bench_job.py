"""The benchmark job: times every variant × batch size in one background worker (one benchmark per process
at a time) and streams each ``LatencySample`` to the page. The timed loop runs in a child process
(``bench.latency_samples_isolated``) so the page's redraws cannot disturb it; peak memory is read from that
same child."""

from __future__ import annotations

import os

from ..config import BenchConfig
from ..errors import Cancelled
from ..progress import ProgressEvent
from . import state
from .actions import Variant
from .jobs import Job


def start_benchmark(variants: list[Variant], cfg: BenchConfig, measure_memory: bool) -> Job:
    """Start timing ``variants`` at every batch size of ``cfg``, each in a child process whose peak memory is
    kept when ``measure_memory``."""
    from .. import bench

    plan = [(v.id, str(v.path), bs) for v in variants for bs in cfg.batch_sizes]
    isolated = os.name == "posix"

    def work(job: Job) -> list[bench.LatencySummary]:
        summaries = []
        total = len(plan)
        for k, (vid, path, bs) in enumerate(plan):
            job.report(ProgressEvent("bench", k, total, f"{vid} at batch {bs}"))
            timer = bench.latency_samples_isolated if isolated else bench.latency_samples
            run = timer(path, cfg, bs, variant=vid, cancel=job.cancel)
            for sample in run:
                job.emit(sample)
            if run.cancelled:
                raise Cancelled(step="bench")
            peak = None
            if measure_memory:
                peak = run.peak_rss_mb if isolated else bench.peak_memory_mb(path, cfg, bs)
            summaries.append(run.summary(peak_rss_mb=peak))
        job.report(ProgressEvent("bench", total, total, "done"))
        return summaries

    job = Job("bench", work, exclusive=True)
    job.meta = {"samples": {}, "config": cfg, "variants": [(v.id, v.name, str(v.path)) for v in variants]}
    state.set_job("bench", job)
    return job.start()


def collect(job: Job) -> dict[str, list[float]]:
    """Move queued samples into ``job.meta['samples']`` (series id ``variant@batch`` → latencies in ms)."""
    series = job.meta["samples"]
    for s in job.drain():
        series.setdefault(f"{s.variant}@{s.batch_size}", []).append(s.ms)
    return series
