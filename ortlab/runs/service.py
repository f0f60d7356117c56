"""The run service: the one way the app and the CLI run recipes and benchmarks.

A :class:`RunSpec` says what to run (model, recipe, data references, preprocessing) in a form another process
can load again, and renders the equivalent ``ortlab optimize`` line. :func:`start_recipe` runs it in a fresh
child interpreter (never a fork of the caller, whose threads, memory, locks, stdout and stderr stay untouched):
the child's stdout/stderr go to a temp log, its progress comes back over a pipe, and the child itself writes
the artifact and records it in the workspace history, so a run is recorded when it ends whether or not anybody
is watching. :func:`start_benchmark` times each variant × batch size in its own child
(``bench.latency_samples_isolated``), one benchmark per process at a time, and records the result.

Both return a handle (:class:`RecipeHandle`, :class:`BenchHandle`) with ``state``, ``progress``, ``drain()``,
``cancel()``, ``wait()``, ``result`` and ``error``.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ortlab.settings.config import BenchConfig
from ortlab.runs.history import BenchmarkRecord, BenchVariant
from ortlab.runs.runspec import RunSpec
from ortlab.core.errors import BenchmarkError, Cancelled, OrtlabError
from ortlab.core.layout import QDQ_FILE, qdq_path
from ortlab.core.progress import CancelToken, Completion, ProgressEvent
from ortlab.core.text import one_line, utc_timestamp
from ortlab.runtime.child import (
    STOP_GRACE_S, child_env, default_memory_gb, error_of, last_line, reap, too_big,
)
from ortlab.runs.workspace import Workspace
from ortlab.runs import outputs
from ortlab.data import samples
from ortlab.model.inspect import inspect_model
from ortlab.runs.pipeline import run_recipe
from ortlab.core.progress import null_reporter
from ortlab.data.preprocess import resolve_preprocess
from ortlab.runs.history import History
from ortlab.core.limits import apply_memory_limit, is_alloc_failure
from ortlab.runtime import openvino as ov
from ortlab.timing import bench
from ortlab.runs import history
from ortlab.runs.artifact import Artifact

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
PROFILES_DIR = "profiles"  # under the workspace: one folder of ORT profiles per benchmark


# -- handles ---------------------------------------------------------------------------------------------------


class Handle(Completion):
    """A running job: ``state`` (queued/running/done/failed/cancelled), ``progress`` (stage → latest event)
    with ``stages`` in order, ``drain()``, ``cancel()``, ``wait()``, ``result`` and ``error``."""

    kind = "job"

    def __init__(self, stages: Sequence[str] = ()) -> None:
        super().__init__()
        self.id = uuid.uuid4().hex[:12]
        self.state = QUEUED
        self.stages: list[str] = list(stages)
        self.progress: dict[str, ProgressEvent] = {}
        self.result: Any = None
        self.error: OrtlabError | None = None
        self.meta: dict[str, Any] = {}
        self.handled = False  # set by a page once it showed the result
        self._items: queue.Queue = queue.Queue()
        self._cancel = CancelToken()

    # worker side
    def _put(self, item: Any) -> None:
        self._items.put(item)

    def _finish(self, state: str, result: Any = None, error: OrtlabError | None = None) -> None:
        if self._done.is_set():
            return
        self.result, self.error = result, error
        self.state = state
        self._ended()

    # watcher side
    def drain(self, on_event: Callable[[ProgressEvent], None] | None = None) -> list[Any]:
        """Take what arrived so far: progress events update ``progress`` (and go to ``on_event``); the other
        items (latency samples) are returned."""
        items = []
        while True:
            try:
                item = self._items.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, ProgressEvent):
                if item.stage not in self.stages:
                    self.stages.append(item.stage)
                self.progress[item.stage] = item
                if on_event is not None:
                    on_event(item)
            else:
                items.append(item)
        return items

    def cancel(self) -> None:
        """Ask the job to stop (a recipe's child is terminated)."""
        self._cancel.cancel()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.cancelled

    def follow(self, on_event: Callable[[ProgressEvent], None] | None = None, poll_s: float = 0.1) -> Any:
        """Wait for the end, passing events to ``on_event``; return the result or raise the error. Ctrl-C
        cancels the job."""
        try:
            while not self.wait(poll_s):
                self.drain(on_event)
        except KeyboardInterrupt:
            self.cancel()
            self.wait(STOP_GRACE_S * 2)
            raise
        self.drain(on_event)
        if self.error is not None:
            raise self.error
        return self.result


# -- recipes in a child process --------------------------------------------------------------------------------

_CHILD = r"""
import sys
from ortlab.runs.service import _recipe_child
_recipe_child(sys.argv[1], int(sys.argv[2]))
"""








class RecipeHandle(Handle):
    """A recipe running in a child process; ``result`` is the recorded :class:`ortlab.runs.artifact.Artifact`."""

    kind = "recipe"

    def __init__(self, spec: RunSpec, run_dir: Path, *, remove_on_cancel: bool) -> None:
        from ortlab.runs.pipeline import plan

        self.plan = plan(spec.recipe)
        super().__init__([s.name for s in self.plan])
        self.spec = spec
        self.run_dir = run_dir
        self.pid: int | None = None
        self.returncode: int | None = None
        self._remove_on_cancel = remove_on_cancel
        self._proc: subprocess.Popen | None = None
        self._log: Any = None

    def cancel(self) -> None:
        """Terminate the child (then kill it after a grace period) and remove the run folder it created."""
        super().cancel()
        proc = self._proc
        if proc is not None and proc.poll() is None and not self.done:
            proc.terminate()

    def _watch(self, conn) -> None:

        result: Any = None
        error: OrtlabError | None = None
        proc = self._proc
        assert proc is not None
        try:
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    break
                kind = msg[0]
                if kind == "start":
                    self.pid = int(msg[1])
                    self.state = RUNNING
                elif kind == "event":
                    self._put(ProgressEvent(*msg[1:]))
                elif kind == "done":
                    result = Artifact.from_dict(msg[1])
                elif kind == "error":
                    error = error_of(msg[1], msg[2], msg[3])
        finally:
            conn.close()
            self.returncode = reap(proc)
        if result is not None:
            self._close_log()
            self._finish(DONE, result)
        elif self.cancel_requested:
            self._close_log()
            if self._remove_on_cancel:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            self._finish(CANCELLED, error=Cancelled())
        else:
            if error is None:
                error = OrtlabError(f"The run process ended unexpectedly (exit code {self.returncode})"
                                    f"{last_line(self._log)}.")
            self._close_log()
            if self._remove_on_cancel:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            self._finish(FAILED, error=error)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None








def start_recipe(spec: RunSpec, out=None, *, workspace=None, origin: str = "app",
                 memory_gb: float | None = None) -> RecipeHandle:
    """Run ``spec`` in a child process and return its handle at once.

    ``out``: None = a new folder in the workspace; a folder = the artifact folder (model.onnx, recipe.json,
    artifact.json); a ``*.onnx`` path = just that model (and its external data) written there. Every run is
    recorded in the workspace history (``origin`` "app" or "cli") by the child when it ends. ``memory_gb``
    (default :func:`memory_limit_gb`: ``$ORTLAB_RUN_MEMORY_GB``, else min(8 GB, 60 % of RAM); none for a GPU
    target unless the variable is set) limits the child's address space.
    """
    from multiprocessing import Pipe



    ws = workspace if workspace is not None else Workspace()
    target: Path | None = None
    as_file = out is not None and Path(out).suffix.lower() == ".onnx" and not Path(out).is_dir()
    if out is not None:  # refused before anything is written: OUT must not be the source or a file it needs
        outputs.check_targets(spec.model, outputs.result_files(out, as_file=as_file))
    if out is None:
        run_dir, created = ws.new_artifact_dir(), True
        (run_dir / outputs.OWNER_FILE).write_text(str(os.getpid()))
    elif as_file:
        target = Path(out).expanduser().absolute()
        target.parent.mkdir(parents=True, exist_ok=True)
        outputs.clean_stale(folders=[target.parent])
        run_dir, created = outputs.make_temp_dir(outputs.RUN_PREFIX, target.parent), True
    else:
        run_dir = Path(out).expanduser().resolve()
        created = not run_dir.exists()
    handle = RecipeHandle(spec, run_dir, remove_on_cancel=created)
    args = {"spec": spec.to_dict(), "run_dir": str(run_dir), "out_file": str(target) if target is not None else None,
            "db": str(ws.db_path), "origin": origin,
            "memory_gb": memory_gb if memory_gb is not None else default_memory_gb(spec.recipe.target)}
    env, cwd = child_env()
    ours, theirs = Pipe(duplex=False)
    handle._log = tempfile.TemporaryFile()
    try:
        handle._proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(args), str(theirs.fileno())],
                                        pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=handle._log,
                                        stderr=handle._log, env=env, cwd=cwd)
    except BaseException:
        ours.close()
        handle._close_log()
        raise
    finally:
        theirs.close()
    threading.Thread(target=handle._watch, args=(ours,), name=f"ortlab-recipe-{handle.id}", daemon=True).start()
    return handle


def run_recipe_spec(spec: RunSpec, out_dir, reporter=None, cancel: CancelToken | None = None):
    """Load what ``spec`` references and run it into ``out_dir`` in this process (the child's work)."""

    sample = samples.get_sample(spec.sample) if spec.sample else samples.find_for_model(spec.model)
    labels = sample.labels if sample is not None and sample.labels else None
    cal = spec.calibration.load(labels) if spec.calibration is not None else None
    ev = spec.evaluation.load(labels) if spec.evaluation is not None else None
    pre = spec.preprocess
    if pre is None and (cal or ev) is not None and Path(spec.model).is_file():

        pre = resolve_preprocess(inspect_model(spec.model).inputs, sample, cal if cal is not None else ev)
    return run_recipe(spec.model, spec.recipe, out_dir, cal, pre, reporter or null_reporter, cancel,
                      verify_samples=spec.verify_samples, verify_dataset=ev, policy=spec.policy, shapes=spec.shapes)




def _recipe_child(args_json: str, fd: int) -> None:
    """Runs inside the child interpreter: run the spec, write and record the artifact, report over ``fd``."""
    from multiprocessing.connection import Connection


    conn = Connection(fd)
    args = json.loads(args_json)

    def terminated(signum, frame):  # cancel: unwind, so temp files and folders are removed on the way out
        raise Cancelled()

    import signal

    signal.signal(signal.SIGTERM, terminated)
    limit = args.get("memory_gb")

    apply_memory_limit(limit)
    os.umask(0o077)  # every file the run writes is private to its owner (0600)
    conn.send(("start", os.getpid()))
    spec = RunSpec.from_dict(args["spec"])
    run_dir = Path(args["run_dir"])

    owner = run_dir / outputs.OWNER_FILE
    if owner.exists():
        owner.write_text(str(os.getpid()))
    # scratch files (quantization copies) go to a private temp folder named for clean_stale after a kill -9
    scratch = outputs.make_temp_dir(outputs.TEMP_PREFIX, tempfile.gettempdir())
    tempfile.tempdir = str(scratch)

    def report(ev: ProgressEvent) -> None:
        conn.send(("event", ev.stage, ev.done, ev.total, ev.message))

    try:
        artifact = run_recipe_spec(spec, run_dir, report)
        if args.get("out_file"):  # just the model (and its external data, as OUT.onnx.data) at OUT.onnx
            target = Path(args["out_file"])
            outputs.check_targets(spec.model, outputs.result_files(target, as_file=True))
            artifact.model_path = outputs.install_model(artifact.model_path, target)
            qdq = qdq_path(target)
            if (run_dir / QDQ_FILE).is_file():  # ortlab analyze M OUT.onnx reads it (static int8 QDQ)
                outputs.install_model(run_dir / QDQ_FILE, qdq)
            else:
                qdq.unlink(missing_ok=True)  # an earlier run's, which this result does not match
            shutil.rmtree(run_dir, ignore_errors=True)
        artifact.origin, artifact.spec = str(args.get("origin") or ""), spec
        History(args["db"]).add(artifact)
        if not args.get("out_file"):
            artifact.save()  # again, now with its run_id
        owner.unlink(missing_ok=True)
        conn.send(("done", artifact.to_dict()))
    except MemoryError:
        conn.send(("error", "OrtlabError", too_big(limit), None))
    except OrtlabError as exc:
        message = exc.message
        if limit and is_alloc_failure(message):
            message = too_big(limit)
        conn.send(("error", type(exc).__name__, message, exc.step))
    except BaseException as exc:
        conn.send(("error", "OrtlabError", f"Unexpected {type(exc).__name__}: {one_line(exc)}", None))
    finally:
        conn.close()
        shutil.rmtree(scratch, ignore_errors=True)


# -- benchmarks: one at a time per process, each variant × batch size timed in its own child -----------------


_BENCH = threading.Condition()
_BENCH_QUEUE: list[str] = []  # handle ids; the first one runs


def bench_busy() -> int:
    """Benchmarks running or waiting in this process."""
    with _BENCH:
        return len(_BENCH_QUEUE)


def bench_queue_position(handle_id: str) -> int:
    """How many benchmarks run or wait ahead of ``handle_id`` (0 = it runs, or has ended)."""
    with _BENCH:
        return _BENCH_QUEUE.index(handle_id) if handle_id in _BENCH_QUEUE else 0


class BenchHandle(Handle):
    """A benchmark; drained items are ``LatencySample``; ``result`` is the list of ``LatencySummary`` and
    ``record`` the :class:`ortlab.runs.history.BenchmarkRecord` stored in the history when it ended."""

    kind = "bench"

    def __init__(self, variants: Sequence[BenchVariant], config: BenchConfig) -> None:
        super().__init__()
        self.variants = list(variants)
        self.config = config
        self.bench_id: int | None = None
        self.record: BenchmarkRecord | None = None
        self.baseline_rss_mb: float | None = None
        self.shapes: dict[str, list[int]] = {}
        self.values: dict[str, float] = {}  # control inputs' values (--input-value)
        self.profile_dir: Path | None = None  # the workspace folder of its profiles, when the service chose it

    @property
    def queue_position(self) -> int:
        return bench_queue_position(self.id)


def start_benchmark(variants: Sequence[BenchVariant], config: BenchConfig, *, measure_memory: bool = False,
                    workspace=None, origin: str = "app", profile_dir=None,
                    timer: Callable | None = None, memory_gb: float | None = None,
                    shapes: dict[str, list[int]] | None = None,
                    values: dict[str, float] | None = None) -> BenchHandle:
    """Time every variant at every batch size of ``config`` (each in its own child process, peak memory from
    that child when ``measure_memory``), after the benchmarks already queued in this process; record it in the
    workspace history when it ends. Returns the handle at once.

    ``memory_gb`` (default :func:`memory_limit_gb`, none for a GPU target unless ``$ORTLAB_RUN_MEMORY_GB`` is
    set) limits each timing child's address space. With ``config.profile`` and no ``profile_dir`` the profiles
    go into ``<workspace>/profiles/<handle id>/`` (:func:`profile_folder`), removed with the benchmark.
    ``shapes`` (``{input name: shape}``) sets dims the models leave open, ``values`` (``{input name: number}``) the
    value of control inputs such as a sample rate (``bench.make_inputs``)."""

    ws = workspace if workspace is not None else Workspace()
    handle = BenchHandle(timed_variants(variants, config), config)
    handle.shapes = {k: [int(x) for x in v] for k, v in (shapes or {}).items()}
    handle.values = dict(values or {})
    own_profiles = bool(config.profile and profile_dir is None)
    if own_profiles:
        profile_dir = profile_folder(ws, handle.id)
    if timer is None:
        timer = _default_timer(memory_gb if memory_gb is not None else default_memory_gb(config.target))
    with _BENCH:
        _BENCH_QUEUE.append(handle.id)
    handle.profile_dir = Path(profile_dir) if own_profiles else None
    threading.Thread(target=_bench_worker, args=(handle, ws, origin, measure_memory, profile_dir, timer),
                     name=f"ortlab-bench-{handle.id}", daemon=True).start()
    return handle


def timed_variants(variants: Sequence[BenchVariant], config: BenchConfig) -> list[BenchVariant]:
    """The variants a benchmark times: each as given (ONNX Runtime) and, with ``config.openvino``, each again
    under OpenVINO, from its portable file (``openvino_runtime.portable_model``)."""
    from dataclasses import replace


    out = [v for v in variants if v.runtime != ov.RUNTIME]
    if config.openvino:
        out += [replace(v, id=f"{v.id} · OpenVINO", name=f"{v.name} · OpenVINO", runtime=ov.RUNTIME,
                        path=str(ov.portable_model(v.path))) for v in list(out)]
    return out


def _bench_worker(handle: BenchHandle, ws, origin: str, measure_memory: bool, profile_dir, timer) -> None:

    try:
        try:
            _wait_for_slot(handle)
            handle.state = RUNNING
            summaries = _bench_all(handle, measure_memory, profile_dir, timer or _default_timer())
        finally:
            with _BENCH:
                if handle.id in _BENCH_QUEUE:
                    _BENCH_QUEUE.remove(handle.id)
                _BENCH.notify_all()
        if measure_memory:
            handle.baseline_rss_mb = bench.baseline_memory_mb()
        record = BenchmarkRecord(None, utc_timestamp(), list(handle.variants), handle.config, list(summaries), origin=origin)
        record.id = handle.bench_id = ws.history().add_benchmark(record.variants, record.config, record.summaries,
                                                                 record.created_at, origin=origin)
        handle.record = record
        handle._finish(DONE, summaries)
    except Cancelled as exc:
        _drop_profiles(handle, profile_dir)
        handle._finish(CANCELLED, error=exc)
    except OrtlabError as exc:
        _drop_profiles(handle, profile_dir)
        handle._finish(FAILED, error=exc)
    except Exception as exc:
        _drop_profiles(handle, profile_dir)
        handle._finish(FAILED, error=BenchmarkError(f"Unexpected {type(exc).__name__}: {one_line(exc)}"))


def _drop_profiles(handle: BenchHandle, profile_dir) -> None:
    """A benchmark that records nothing keeps no profiles in the workspace (a folder the caller chose stays)."""
    if handle.profile_dir is not None:
        shutil.rmtree(handle.profile_dir, ignore_errors=True)


def profile_folder(ws, bench_key: str) -> Path:
    """Where a benchmark's ORT profiles go: ``<workspace>/profiles/<bench_key>/`` (not created here)."""
    return Path(ws.root) / PROFILES_DIR / bench_key


def _default_timer(memory_gb: float | None = None):
    import functools


    if os.name != "posix":
        return bench.latency_samples
    return functools.partial(bench.latency_samples_isolated, memory_gb=memory_gb)


def _wait_for_slot(handle: BenchHandle) -> None:
    said = -1
    with _BENCH:
        while _BENCH_QUEUE[0] != handle.id:
            ahead = _BENCH_QUEUE.index(handle.id)
            if ahead != said:
                handle._put(ProgressEvent("queued", 0, None, f"Queued behind {ahead} benchmark"
                                                             f"{'s' if ahead != 1 else ''}."))
                said = ahead
            if handle.cancel_requested:
                raise Cancelled(step="queued")
            _BENCH.wait(0.2)
    if said >= 0:
        handle._put(ProgressEvent("queued", 1, 1, "Started."))


def _bench_all(handle: BenchHandle, measure_memory: bool, profile_dir, timer) -> list:

    plan = [(v, bs) for v in handle.variants for bs in handle.config.batch_sizes]
    summaries = []
    for k, (v, bs) in enumerate(plan):
        handle._put(ProgressEvent("bench", k, len(plan), f"{v.name} at batch {bs}"))
        extra: dict[str, Any] = {k: v for k, v in (("shapes", handle.shapes), ("values", handle.values)) if v}
        if v.runtime != "onnxruntime":
            extra["runtime"] = v.runtime
        run = timer(v.path, handle.config, bs, variant=v.id, cancel=handle._cancel, profile_dir=profile_dir, **extra)
        for sample in run:
            handle._put(sample)
        if run.cancelled or handle.cancel_requested:
            raise Cancelled(step="bench")
        peak = getattr(run, "peak_rss_mb", None) if measure_memory else None
        if measure_memory and peak is None:
            peak = bench.peak_memory_mb(v.path, handle.config, bs, shapes=handle.shapes, values=handle.values)
        summaries.append(run.summary(peak_rss_mb=peak))
    handle._put(ProgressEvent("bench", len(plan), len(plan), "done"))
    return summaries


# -- start-up ---------------------------------------------------------------------------------------------------


def startup(workspace=None) -> list[OrtlabError]:
    """When the app or a CLI command that uses the workspace starts: remove what killed runs left behind
    (``outputs.clean_stale``), open the history (a damaged one is moved aside and rebuilt), and return the
    notices to show the person once (``history.HistoryRecovered``)."""

    ws = workspace if workspace is not None else Workspace()
    outputs.clean_stale(ws)
    ws.history()
    return list(history.take_notices())
