"""The benchmark side of the run service: one benchmark per server process at a time, each variant × batch size
timed in its own child (interleaved block by block across the variants), recorded in the workspace history."""

from __future__ import annotations

import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ortlab.settings.config import BenchConfig
from ortlab.runs.history import BenchmarkRecord, BenchVariant, HistoryFull
from ortlab.core.errors import Cancelled
from ortlab.core.progress import ProgressEvent
from ortlab.core.text import utc_timestamp
from ortlab.runtime.child import (
    default_memory_gb,
)
from ortlab.runs.bench_queue import bench_busy as bench_busy  # re-exported: the callers' one name
from ortlab.runs.bench_queue import bench_queue_position, enqueue, leave_queue, wait_for_slot
from ortlab.runs.workspace import Workspace
from ortlab.runtime.executor import TimeLimit
from ortlab.runtime import openvino as ov
from ortlab.runtime.hardware import detect
from ortlab.runtime.machine import this_machine
from ortlab.timing import bench, child_runs, settle, stats
from ortlab.runs.service import CANCELLED as CANCELLED, FAILED as FAILED  # re-exported: a benchmark's end states
from ortlab.runs.service import DONE, RUNNING, Handle, end_with_error, start_time_limit, timeout_from_env

PROFILES_DIR = "profiles"  # under the workspace: one folder of ORT profiles per benchmark
PAIR_TIMING = BenchConfig(batch_sizes=(1,), warmup=5, duration_s=1.5)  # a pair's batch-1 rounds: at least 1.5 s each


# -- benchmarks: one at a time per process (:mod:`ortlab.runs.bench_queue`), each variant × batch size timed in its
# own child ----------------------------------------------------------------------------------------------------

class BenchHandle(Handle):
    """A benchmark; drained items are ``LatencySample``; ``result`` is the list of ``LatencySummary`` and
    ``record`` the :class:`ortlab.runs.history.BenchmarkRecord` stored in the history when it ended."""

    kind = "bench"

    def __init__(self, variants: Sequence[BenchVariant], config: BenchConfig) -> None:
        super().__init__()
        self.variants = list(variants)
        self.config = config
        self.bench_id: int | None = None
        self.not_recorded: str | None = None  # why the finished benchmark is not in the history (a full disk)
        self.record: BenchmarkRecord | None = None
        self.baseline_rss_mb: float | None = None
        self.shapes: dict[str, list[int]] = {}
        self.values: dict[str, float] = {}  # control inputs' values (--input-value)
        self.profile_dir: Path | None = None  # the workspace folder of its profiles, when the service chose it
        self.timeout_s: float | None = None  # its time limit once it runs ($ORTLAB_RUN_TIMEOUT_S), or None
        self.timed_out = False
        self.until: settle.UntilSettled | None = None  # the stop rule of a pair timed until settled

    def settled(self) -> settle.SettledSpeed | None:
        """A pair timed until settled (:func:`start_pair_timing`), once done: its candidate's speed-up against its
        reference at batch 1 with how the timing stopped; None before, or for another benchmark."""
        got = self.result if self.state == DONE else None
        if self.until is None or not got or len(got) != 2:
            return None
        sp = stats.of_summaries(got[0], got[1])
        return settle.settled(sp, self.until) if sp is not None else None

    def time_out(self) -> None:
        """The benchmark went past its time limit: cancel it (its children are stopped, then killed with their
        process groups after ``STOP_GRACE_S``); the worker says why."""
        if not self.done:
            self.timed_out = True
            self._cancel.cancel()

    @property
    def queue_position(self) -> int:
        return bench_queue_position(self.id)


def start_benchmark(variants: Sequence[BenchVariant], config: BenchConfig, *, measure_memory: bool = False,
                    workspace=None, origin: str = "app", profile_dir=None,
                    timer: Callable | None = None, memory_gb: float | None = None,
                    shapes: dict[str, list[int]] | None = None,
                    values: dict[str, float] | None = None, interleave: bool = True,
                    blocks: Callable | None = None, until: Any = None) -> BenchHandle:
    """Time every variant at every batch size of ``config`` (each in its own child process, peak memory from
    that child when ``measure_memory``), after the benchmarks already queued in this process; record it in the
    workspace history when it ends. Returns the handle at once.

    ``interleave`` (default): at each batch size the variants' children are all loaded and warmed up, then
    timed in rounds of short blocks, one child at a time, in turn (``child_runs.time_interleaved``), so that every
    speed-up is measured side by side with its baseline and can be taken round by round. ``blocks`` makes one
    series (default ``child_runs.latency_blocks`` in a child). ``until`` (an
    :class:`ortlab.timing.settle.UntilSettled`, one batch size) times until it says stop instead of for
    ``config.duration_s`` (:func:`start_pair_timing`). ``interleave=False`` times each variant × batch size
    in one go, one after the other, with ``timer`` (default ``child_runs.latency_samples_isolated``).

    ``memory_gb`` (default :func:`memory_limit_gb`, none for a GPU target unless ``$ORTLAB_RUN_MEMORY_GB`` is
    set) limits each timing child's address space. With ``config.profile`` and no ``profile_dir`` the profiles
    go into ``<workspace>/profiles/<handle id>/`` (:func:`profile_folder`), removed with the benchmark.
    ``shapes`` (``{input name: shape}``) sets dims the models leave open, ``values`` (``{input name: number}``) the
    value of control inputs such as a sample rate (``bench.make_inputs``).

    Each timing child leads its own process group; Cancel, or ``$ORTLAB_RUN_TIMEOUT_S`` when set (counted from
    when the benchmark leaves the queue), stops them all, killed with their groups after ``STOP_GRACE_S``; a
    benchmark past its limit fails with "stopped after N s (limit M s)"."""

    ws = workspace if workspace is not None else Workspace()
    handle = BenchHandle(timed_variants(variants, config), config)
    handle.timeout_s = timeout_from_env()
    handle.shapes = {k: [int(x) for x in v] for k, v in (shapes or {}).items()}
    handle.values = dict(values or {})
    handle.until = until
    own_profiles = bool(config.profile and profile_dir is None)
    if own_profiles:
        profile_dir = profile_folder(ws, handle.id)
    if timer is None:
        timer = _default_timer(memory_gb if memory_gb is not None else default_memory_gb(config.target))
    enqueue(handle)
    handle.profile_dir = Path(profile_dir) if own_profiles else None
    if interleave:
        limit = memory_gb if memory_gb is not None else default_memory_gb(config.target)
        timer = blocks or functools.partial(child_runs.latency_blocks, memory_gb=limit)
    threading.Thread(target=_bench_worker, args=(handle, ws, origin, measure_memory, profile_dir, timer, interleave),
                     name=f"ortlab-bench-{handle.id}", daemon=True).start()
    return handle


def start_pair_timing(reference: BenchVariant, candidate: BenchVariant, *, workspace=None, origin: str = "app",
                      shapes: dict[str, list[int]] | None = None, values: dict[str, float] | None = None,
                      target: float = settle.TARGET, cap_s: float = settle.CAP_S, clock: Callable | None = None,
                      blocks: Callable | None = None) -> BenchHandle:
    """Time ``candidate`` against ``reference`` at batch 1, interleaved (:data:`PAIR_TIMING`'s blocks, at least
    its rounds), until the 95 % interval of the speed-up is within ±``target`` or ``cap_s`` seconds have passed
    (:class:`ortlab.timing.settle.UntilSettled`); recorded in History like any benchmark. Compare's speed cards and
    ``ortlab compare`` both time through it; ``handle.settled()`` is the result once done."""
    rule = settle.UntilSettled(target, cap_s) if clock is None else settle.UntilSettled(target, cap_s, clock=clock)
    return start_benchmark([reference, candidate], PAIR_TIMING, workspace=workspace, origin=origin, shapes=shapes,
                           values=values, blocks=blocks, until=rule)


def timed_variants(variants: Sequence[BenchVariant], config: BenchConfig, cpu: Any = None) -> list[BenchVariant]:
    """The variants a benchmark times: each as given (ONNX Runtime) and, with ``config.openvino``, each again
    under OpenVINO compiled in f32, from its portable file (``openvino_runtime.portable_model``), plus the first
    (the baseline, usually the fp32 source) compiled in bf16 ("· OpenVINO bf16") where ``cpu`` (default: this
    one) runs bf16 natively."""
    from dataclasses import replace

    out = [v for v in variants if v.runtime not in ov.RUNTIME_PRECISION]
    if config.openvino:
        ort = list(out)
        out += [replace(v, id=f"{v.id} · OpenVINO", name=f"{v.name} · OpenVINO", runtime=ov.RUNTIME,
                        path=str(ov.portable_model(v.path))) for v in ort]
        if ort and ov.bf16_supported(cpu if cpu is not None else detect()):
            v = ort[0]
            out.append(replace(v, id=f"{v.id} · OpenVINO bf16", name=f"{v.name} · OpenVINO bf16",
                               runtime=ov.RUNTIME_BF16, path=str(ov.portable_model(v.path))))
    return out


def _bench_worker(handle: BenchHandle, ws, origin: str, measure_memory: bool, profile_dir, timer,
                  interleave: bool = False) -> None:

    timer_limit: TimeLimit | None = None
    began = time.monotonic()
    try:
        try:
            wait_for_slot(handle)
            handle.state = RUNNING
            began = time.monotonic()
            timer_limit = start_time_limit(handle)
            if interleave:
                summaries = _bench_interleaved(handle, measure_memory, profile_dir, timer)
            else:
                summaries = _bench_all(handle, measure_memory, profile_dir, timer or _default_timer())
        finally:
            if timer_limit is not None:
                timer_limit.cancel()
            leave_queue(handle)
        if measure_memory:
            handle.baseline_rss_mb = bench.baseline_memory_mb()
        machine = this_machine(handle.config.intra_op_threads, openvino=handle.config.openvino)
        record = BenchmarkRecord(None, utc_timestamp(), list(handle.variants), handle.config, list(summaries),
                                 origin=origin, machine=machine)
        try:
            record.id = handle.bench_id = ws.history().add_benchmark(record.variants, record.config,
                                                                     record.summaries, record.created_at,
                                                                     origin=origin, machine=machine)
        except HistoryFull as exc:  # a full disk: the timings stand, unrecorded (the reason is kept)
            handle.not_recorded = exc.message
        handle.record = record
        handle.end(DONE, summaries)
    except (Cancelled, Exception) as exc:  # any failure ends the job with its words, never lost in the thread
        _drop_profiles(handle, profile_dir)
        end_with_error(handle, exc, began)


def _close_all(series: list, at_once: bool) -> None:
    """Close every series (its child is reaped; one that does not exit is killed after the grace); ``at_once``
    (a cancel or the time limit) closes them side by side, so stopping takes one grace, not one per variant."""
    if not at_once:
        for s in series:
            s.close()
        return
    closers = [threading.Thread(target=s.close, name="ortlab-bench-close", daemon=True) for s in series]
    for t in closers:
        t.start()
    for t in closers:
        t.join()


def _drop_profiles(handle: BenchHandle, profile_dir) -> None:
    """A benchmark that records nothing keeps no profiles in the workspace (a folder the caller chose stays)."""
    if handle.profile_dir is not None:
        shutil.rmtree(handle.profile_dir, ignore_errors=True)


def profile_folder(ws, bench_key: str) -> Path:
    """Where a benchmark's ORT profiles go: ``<workspace>/profiles/<bench_key>/`` (not created here)."""
    return Path(ws.root) / PROFILES_DIR / bench_key


def _default_timer(memory_gb: float | None = None):
    if os.name != "posix":
        return bench.latency_samples
    return functools.partial(child_runs.latency_samples_isolated, memory_gb=memory_gb)


def _bench_all(handle: BenchHandle, measure_memory: bool, profile_dir, timer) -> list:
    plan = [(v, bs) for v in handle.variants for bs in handle.config.batch_sizes]
    summaries = []
    for k, (v, bs) in enumerate(plan):
        handle.put(ProgressEvent("bench", k, len(plan), f"{v.name} at batch {bs}"))
        extra: dict[str, Any] = {k: v for k, v in (("shapes", handle.shapes), ("values", handle.values)) if v}
        if v.runtime != "onnxruntime":
            extra["runtime"] = v.runtime
        run = timer(v.path, handle.config, bs, variant=v.id, cancel=handle.cancel_token, profile_dir=profile_dir, **extra)
        for sample in run:
            handle.put(sample)
        if run.cancelled or handle.cancel_requested:
            raise Cancelled(step="bench")
        peak = getattr(run, "peak_rss_mb", None) if measure_memory else None
        if measure_memory and peak is None:
            peak = bench.peak_memory_mb(v.path, handle.config, bs, shapes=handle.shapes, values=handle.values)
        summaries.append(run.summary(peak_rss_mb=peak))
    handle.put(ProgressEvent("bench", len(plan), len(plan), "done"))
    return summaries


def _bench_interleaved(handle: BenchHandle, measure_memory: bool, profile_dir, blocks) -> list:
    """Each batch size: every variant in its own child, all warmed up, then timed in alternating rounds."""
    summaries = []
    sizes = list(handle.config.batch_sizes)
    extra: dict[str, Any] = {k: v for k, v in (("shapes", handle.shapes), ("values", handle.values)) if v}
    for j, bs in enumerate(sizes):
        handle.put(ProgressEvent("bench", j, len(sizes), f"batch {bs}: loading {len(handle.variants)} "
                                                            f"variant{'s' if len(handle.variants) != 1 else ''}"))
        series = [blocks(v.path, handle.config, bs, variant=v.id, cancel=handle.cancel_token, profile_dir=profile_dir,
                         **({**extra, "runtime": v.runtime} if v.runtime != "onnxruntime" else extra))
                  for v in handle.variants]
        try:
            def on_round(done: int, planned: int, bs: int = bs, j: int = j) -> None:
                handle.put(ProgressEvent("bench", j, len(sizes), f"batch {bs}: round {done} of ~{max(done, planned)} "
                                                                   f"(variants alternate block by block)"))

            def on_block(samples: list) -> None:
                for sample in samples:
                    handle.put(sample)

            ok = child_runs.time_interleaved(series, handle.config, handle.cancel_token, on_block=on_block, on_round=on_round,
                                             until=handle.until)
            if not ok or handle.cancel_requested:
                raise Cancelled(step="bench")
            for s in series:
                s.finish()
        finally:
            _close_all(series, at_once=handle.cancel_requested)
        for v, s in zip(handle.variants, series):
            peak = s.peak_rss_mb if measure_memory else None
            if measure_memory and peak is None:
                peak = bench.peak_memory_mb(v.path, handle.config, bs, shapes=handle.shapes, values=handle.values)
            summaries.append(s.summary(peak_rss_mb=peak))
    handle.put(ProgressEvent("bench", len(sizes), len(sizes), "done"))
    order = {v.id: k for k, v in enumerate(handle.variants)}
    return sorted(summaries, key=lambda s: order.get(s.variant, 0))  # variant by variant, as timed apart
