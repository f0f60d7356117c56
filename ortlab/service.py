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
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .config import BenchConfig
from .history import BenchmarkRecord, BenchVariant
from .runspec import RunSpec
from .errors import BenchmarkError, Cancelled, OrtlabError
from .progress import CancelToken, ProgressEvent
from .text import one_line, utc_timestamp

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
STOP_GRACE_S = 3.0  # after terminate(), how long a child may take before it is killed
MEMORY_ENV = "ORTLAB_RUN_MEMORY_GB"  # optional address-space limit of a recipe's child process


# -- handles ---------------------------------------------------------------------------------------------------


class Handle:
    """A running job: ``state`` (queued/running/done/failed/cancelled), ``progress`` (stage → latest event)
    with ``stages`` in order, ``drain()``, ``cancel()``, ``wait()``, ``result`` and ``error``."""

    kind = "job"

    def __init__(self, stages: Sequence[str] = ()) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.state = QUEUED
        self.stages: list[str] = list(stages)
        self.progress: dict[str, ProgressEvent] = {}
        self.result: Any = None
        self.error: OrtlabError | None = None
        self.meta: dict[str, Any] = {}
        self.handled = False  # set by a page once it showed the result
        self.started_at = time.time()
        self.finished_at: float | None = None
        self._items: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._cancel = CancelToken()

    # worker side
    def _put(self, item: Any) -> None:
        self._items.put(item)

    def _finish(self, state: str, result: Any = None, error: OrtlabError | None = None) -> None:
        if self._done.is_set():
            return
        self.result, self.error = result, error
        self.finished_at = time.time()
        self.state = state
        self._done.set()

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

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ended (or ``timeout`` seconds passed); True when it ended."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def elapsed(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

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
from ortlab.service import _recipe_child
_recipe_child(sys.argv[1], int(sys.argv[2]))
"""


def _child_env() -> tuple[dict, str]:
    from .bench import _child_env as env

    return env()


def memory_limit_gb() -> float | None:
    """The address-space limit of a recipe's child (``$ORTLAB_RUN_MEMORY_GB``), None when unset."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    try:
        value = float(text) if text else 0.0
    except ValueError:
        return None
    return value if value > 0 else None


class RecipeHandle(Handle):
    """A recipe running in a child process; ``result`` is the recorded :class:`ortlab.artifact.Artifact`."""

    kind = "recipe"

    def __init__(self, spec: RunSpec, run_dir: Path, *, remove_on_cancel: bool) -> None:
        from .pipeline import plan

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
        from . import errors as errors_mod
        from .artifact import Artifact

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
                    cls = getattr(errors_mod, msg[1], None)
                    if not (isinstance(cls, type) and issubclass(cls, OrtlabError)):
                        cls = OrtlabError
                    error = cls(msg[2], step=msg[3])
        finally:
            conn.close()
            self.returncode = _reap(proc)
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
                                    f"{_last_line(self._log)}.")
            self._close_log()
            if self._remove_on_cancel:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            self._finish(FAILED, error=error)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _last_line(log) -> str:
    if log is None:
        return ""
    try:
        log.seek(0)
        lines = [ln.strip() for ln in log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except (OSError, ValueError):
        return ""
    return f": {lines[-1][:300]}" if lines else ""


def _reap(proc: subprocess.Popen) -> int:
    """Wait for the child; terminate, then kill it when it does not exit in time. Never leaves a zombie."""
    try:
        return proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        return proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def start_recipe(spec: RunSpec, out=None, *, workspace=None, origin: str = "app",
                 memory_gb: float | None = None) -> RecipeHandle:
    """Run ``spec`` in a child process and return its handle at once.

    ``out``: None = a new folder in the workspace; a folder = the artifact folder (model.onnx, recipe.json,
    artifact.json); a ``*.onnx`` path = just that model (and its external data) written there. Every run is
    recorded in the workspace history (``origin`` "app" or "cli") by the child when it ends. ``memory_gb``
    (default ``$ORTLAB_RUN_MEMORY_GB``) limits the child's address space.
    """
    from multiprocessing import Pipe

    from .workspace import Workspace

    ws = workspace if workspace is not None else Workspace()
    target: Path | None = None
    as_file = out is not None and Path(out).suffix.lower() == ".onnx" and not Path(out).is_dir()
    if out is None:
        run_dir, created = ws.new_artifact_dir(), True
    elif as_file:
        target = Path(out).expanduser().resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        run_dir, created = Path(tempfile.mkdtemp(prefix=".ortlab-", dir=target.parent)), True
    else:
        run_dir = Path(out).expanduser().resolve()
        created = not run_dir.exists()
    handle = RecipeHandle(spec, run_dir, remove_on_cancel=created)
    args = {"spec": spec.to_dict(), "run_dir": str(run_dir), "out_file": str(target) if target is not None else None,
            "db": str(ws.db_path), "origin": origin,
            "memory_gb": memory_gb if memory_gb is not None else memory_limit_gb()}
    env, cwd = _child_env()
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
    from . import samples
    from .model import inspect_model
    from .pipeline import run_recipe
    from .progress import null_reporter

    sample = samples.get_sample(spec.sample) if spec.sample else samples.find_for_model(spec.model)
    labels = sample.labels if sample is not None and sample.labels else None
    cal = spec.calibration.load(labels) if spec.calibration is not None else None
    ev = spec.evaluation.load(labels) if spec.evaluation is not None else None
    pre = spec.preprocess
    if pre is None and (cal or ev) is not None and Path(spec.model).is_file():
        from .data import resolve_preprocess

        pre = resolve_preprocess(inspect_model(spec.model).inputs, sample, cal if cal is not None else ev)
    return run_recipe(spec.model, spec.recipe, out_dir, cal, pre, reporter or null_reporter, cancel,
                      verify_samples=spec.verify_samples, verify_dataset=ev, policy=spec.policy)


def _too_big(limit) -> str:
    if not limit:
        return "This run ran out of memory."
    return (f"This run needed more than {float(limit):g} GB of memory (the limit of its process, "
            f"${MEMORY_ENV}); use smaller inputs or fewer samples, or raise the limit.")


def _recipe_child(args_json: str, fd: int) -> None:
    """Runs inside the child interpreter: run the spec, write and record the artifact, report over ``fd``."""
    from multiprocessing.connection import Connection

    from .artifact import ARTIFACT_FILE, RECIPE_FILE
    from .history import History
    from .pipeline import QDQ_FILE

    conn = Connection(fd)
    args = json.loads(args_json)

    def terminated(signum, frame):  # cancel: unwind, so temp files and folders are removed on the way out
        raise Cancelled()

    import signal

    signal.signal(signal.SIGTERM, terminated)
    limit = args.get("memory_gb")
    if limit and sys.platform.startswith("linux"):
        import resource

        cap = int(float(limit) * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    conn.send(("start", os.getpid()))
    spec = RunSpec.from_dict(args["spec"])
    run_dir = Path(args["run_dir"])

    def report(ev: ProgressEvent) -> None:
        conn.send(("event", ev.stage, ev.done, ev.total, ev.message))

    try:
        artifact = run_recipe_spec(spec, run_dir, report)
        if args.get("out_file"):  # just the model (and its external data) at OUT.onnx
            target = Path(args["out_file"])
            os.replace(artifact.model_path, target)
            for extra in run_dir.iterdir():
                if extra.is_file() and extra.name not in (RECIPE_FILE, ARTIFACT_FILE, QDQ_FILE):
                    os.replace(extra, target.parent / extra.name)
            shutil.rmtree(run_dir, ignore_errors=True)
            artifact.model_path = target
        artifact.origin, artifact.spec = str(args.get("origin") or ""), spec
        History(args["db"]).add(artifact)
        if not args.get("out_file"):
            artifact.save()  # again, now with its run_id
        conn.send(("done", artifact.to_dict()))
    except MemoryError:
        conn.send(("error", "OrtlabError", _too_big(limit), None))
    except OrtlabError as exc:
        message = exc.message
        if limit and any(k in message for k in ("bad_alloc", "Failed to allocate", "Unable to allocate")):
            message = _too_big(limit)
        conn.send(("error", type(exc).__name__, message, exc.step))
    except BaseException as exc:
        conn.send(("error", "OrtlabError", f"Unexpected {type(exc).__name__}: {one_line(exc)}", None))
    finally:
        conn.close()


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
    ``record`` the :class:`ortlab.history.BenchmarkRecord` stored in the history when it ended."""

    kind = "bench"

    def __init__(self, variants: Sequence[BenchVariant], config: BenchConfig) -> None:
        super().__init__()
        self.variants = list(variants)
        self.config = config
        self.bench_id: int | None = None
        self.record: BenchmarkRecord | None = None
        self.baseline_rss_mb: float | None = None

    @property
    def queue_position(self) -> int:
        return bench_queue_position(self.id)


def start_benchmark(variants: Sequence[BenchVariant], config: BenchConfig, *, measure_memory: bool = False,
                    workspace=None, origin: str = "app", profile_dir=None,
                    timer: Callable | None = None) -> BenchHandle:
    """Time every variant at every batch size of ``config`` (each in its own child process, peak memory from
    that child when ``measure_memory``), after the benchmarks already queued in this process; record it in the
    workspace history when it ends. Returns the handle at once."""
    from .workspace import Workspace

    ws = workspace if workspace is not None else Workspace()
    handle = BenchHandle(variants, config)
    with _BENCH:
        _BENCH_QUEUE.append(handle.id)
    threading.Thread(target=_bench_worker, args=(handle, ws, origin, measure_memory, profile_dir, timer),
                     name=f"ortlab-bench-{handle.id}", daemon=True).start()
    return handle


def _bench_worker(handle: BenchHandle, ws, origin: str, measure_memory: bool, profile_dir, timer) -> None:
    from . import bench

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
        handle._finish(CANCELLED, error=exc)
    except OrtlabError as exc:
        handle._finish(FAILED, error=exc)
    except Exception as exc:
        handle._finish(FAILED, error=BenchmarkError(f"Unexpected {type(exc).__name__}: {one_line(exc)}"))


def _default_timer():
    from . import bench

    return bench.latency_samples_isolated if os.name == "posix" else bench.latency_samples


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
    from . import bench

    plan = [(v, bs) for v in handle.variants for bs in handle.config.batch_sizes]
    summaries = []
    for k, (v, bs) in enumerate(plan):
        handle._put(ProgressEvent("bench", k, len(plan), f"{v.name} at batch {bs}"))
        run = timer(v.path, handle.config, bs, variant=v.id, cancel=handle._cancel, profile_dir=profile_dir)
        for sample in run:
            handle._put(sample)
        if run.cancelled or handle.cancel_requested:
            raise Cancelled(step="bench")
        peak = getattr(run, "peak_rss_mb", None) if measure_memory else None
        if measure_memory and peak is None:
            peak = bench.peak_memory_mb(v.path, handle.config, bs)
        summaries.append(run.summary(peak_rss_mb=peak))
    handle._put(ProgressEvent("bench", len(plan), len(plan), "done"))
    return summaries
