"""The run service: the one way the app and the CLI run recipes and benchmarks.

A :class:`RunSpec` says what to run (model, recipe, data references, preprocessing) in a form another process
can load again, and renders the equivalent ``ortlab optimize`` line. :func:`start_recipe` runs it in a fresh
child interpreter (never a fork of the caller, whose threads, memory, locks, stdout and stderr stay untouched):
the child's stdout/stderr go to a temp log, its progress comes back over a pipe, and the child itself writes
the artifact and records it in the workspace history, so a run is recorded when it ends whether or not anybody
is watching. :func:`start_benchmark` times each variant × batch size in its own child
(``child_runs.latency_samples_isolated``), one benchmark per process at a time, and records the result.

Both return a handle (:class:`RecipeHandle`, :class:`BenchHandle`) with ``state``, ``progress``, ``drain()``,
``cancel()``, ``wait()``, ``result`` and ``error``.

Size: the handle, the recipe child and its parent's watcher are one protocol (messages both ways, crash
consistency, interrupted runs); benchmarks are in :mod:`ortlab.runs.bench_service`.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import shutil
import signal
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ortlab.runs.runspec import RunSpec
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.prepare import load_run, prepare_run
from ortlab.core.errors import BenchmarkError, Cancelled, HistoryError, OrtlabError
from ortlab.core.layout import ARTIFACT_FILE, MODEL_FILE, QDQ_FILE, qdq_path
from ortlab.core.progress import CancelToken, Completion, ProgressEvent
from ortlab.core.text import one_line, utc_timestamp
from ortlab.runtime.child import STOP_GRACE_S, Child, default_memory_gb, error_of, ParentWatch, too_big
from ortlab.runs.workspace import Workspace
from ortlab.runs import outputs
from ortlab.model.inspect import ModelInfo, external_data_files, sha256_file
from ortlab.runs import pipeline
from ortlab.runs.pipeline import run_prepared
from ortlab.core.progress import null_reporter
from ortlab.runs.history import History
from ortlab.core.limits import apply_memory_limit, is_alloc_failure
from ortlab.core.disk import check_space, disk_full_message, free_bytes, is_disk_full, run_space_needed, RUN_SPACE_MARGIN
from ortlab.runs import history
from ortlab.runs.artifact import Artifact, load_artifact
from ortlab.runs import result_speed
from ortlab.runs.result_speed import SKIP, SpeedCheck

RUN_TIMEOUT_VAR = "ORTLAB_RUN_TIMEOUT_S"  # seconds a recipe run may take before it is stopped
RUN_TIMEOUT_BASE_S = 600.0       # default: a generous base…
RUN_TIMEOUT_PER_SAMPLE_S = 2.0   # …plus this per calibration and verification sample…
RUN_TIMEOUT_PER_100MB_S = 60.0   # …and this per 100 MB of model
ADOPTED_NOTE = "The run process died after its result was complete; the result was checked and recorded."
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"


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
        self.error: OrtlabError | Cancelled | None = None
        self.meta: dict[str, Any] = {}
        self.handled = False  # set by a page once it showed the result
        self._items: queue.Queue = queue.Queue()
        self._cancel = CancelToken()

    # worker side
    def _put(self, item: Any) -> None:
        self._items.put(item)

    def _finish(self, state: str, result: Any = None, error: OrtlabError | Cancelled | None = None) -> None:
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

class RecipeHandle(Handle):
    """A recipe running in a child process; ``result`` is the recorded :class:`ortlab.runs.artifact.Artifact`."""

    kind = "recipe"

    def __init__(self, spec: RunSpec, run_dir: Path, *, remove_on_cancel: bool,
                 speed_check: SpeedCheck = SKIP) -> None:
        self.plan = pipeline.plan(spec.recipe)
        super().__init__([s.name for s in self.plan] + ([result_speed.STAGE] if speed_check.enabled else []))
        self.speed_check = speed_check
        self.spec = spec
        self.run_dir = run_dir
        self.pid: int | None = None
        self.returncode: int | None = None
        self._remove_on_cancel = remove_on_cancel
        self._child: Child | None = None
        self._db: Path | None = None  # the history the child records the run in
        self._args: dict | None = None  # what the child was given
        self._out_file: Path | None = None  # OUT.onnx of a run into a single file
        self.timeout_s: float | None = None  # the run's time limit (run_timeout_s)
        self.timed_out = False
        self._timer: threading.Timer | None = None
        self._started = time.monotonic()
        self._stopped_after: float | None = None  # seconds from the start to the end of a timed-out child

    def _time_out(self) -> None:
        """The run went past its time limit: stop its child and its process group (SIGTERM, then SIGKILL after
        :data:`STOP_GRACE_S`); the watcher reports why."""
        child = self._child
        if child is not None and child.running() and not self.done:
            self.timed_out = True
            child.stop(STOP_GRACE_S)
            self._stopped_after = time.monotonic() - self._started

    def cancel(self) -> None:
        """Stop the child and its process group (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`, in the
        background) and remove the run folder it created."""
        super().cancel()
        child = self._child
        if child is not None and child.running() and not self.done:
            threading.Thread(target=child.stop, args=(STOP_GRACE_S,), name=f"ortlab-stop-{self.id}",
                             daemon=True).start()

    def _watch(self) -> None:
        result: Any = None
        error: OrtlabError | Cancelled | None = None
        child = self._child
        assert child is not None
        try:
            while (msg := child.receive()) is not None:
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
            self.returncode = child.finish()
            if self._timer is not None:
                self._timer.cancel()
        if result is None:
            result = self._recorded()  # the child died after recording its run: the run is finished
        dropped = ""
        if result is None and (error is None or self.timed_out) and not self.cancel_requested:
            # the child died (or met its time limit while recording) after its result was complete: checked and kept
            result, dropped = self._adopted(f"The time limit ({self.timeout_s:g} s) was reached after the result was "
                                            "complete, while it was being recorded." if self.timed_out else "")
        if result is None and self.timed_out:
            after = self._stopped_after if self._stopped_after is not None else time.monotonic() - self._started
            error = OrtlabError(f"The run was stopped after {after:.0f} s (limit {self.timeout_s:g} s): it went "
                                f"past its time limit (set ${RUN_TIMEOUT_VAR} to allow more).")
        if result is not None:
            self._close_log()
            self._time_result(result)
            self._finish(DONE, result)
        elif self.cancel_requested or isinstance(error, Cancelled):
            self._close_log()
            self._drop_folder()
            self._finish(CANCELLED, error=error if isinstance(error, Cancelled) else Cancelled())
        else:
            if error is None:
                error = OrtlabError(f"The run process ended unexpectedly (exit code {self.returncode})"
                                    f"{child.last_line()}.{dropped}")
            self._close_log()
            self._drop_folder()
            self._finish(FAILED, error=error)

    def _time_result(self, artifact: Artifact) -> None:
        """After the verdict, here in the parent: time the result against its source (:attr:`speed_check`), keep
        the figure with the run (its ``artifact.json`` and History row) and say it as the stage's last event. A
        timing that fails or is cancelled leaves the run as it is, with the reason in its record."""
        check = self.speed_check
        if not check.enabled:
            return
        stage = result_speed.STAGE
        self._put(ProgressEvent(stage, 0, 1, f"timing the result against its source for {check.seconds:g} s"))
        artifact.speed = result_speed.time_result(
            artifact.source_path, artifact.model_path, check, target=artifact.recipe.target,
            shapes=result_speed.shapes_of(artifact), cancel=self._cancel)
        try:
            if self._out_file is None and (Path(artifact.model_path).parent / ARTIFACT_FILE).is_file():
                artifact.save()
            if self._db is not None and artifact.run_id is not None:
                History(self._db).update(artifact)
        except (OrtlabError, OSError, sqlite3.Error) as exc:
            artifact.notes.append(f"The speed figure was not stored ({one_line(exc)}).")
        self._put(ProgressEvent(stage, 1, 1, artifact.speed.sentence()))

    def _recorded(self) -> Artifact | None:
        """The run the child recorded in the history before it ended without reporting (None when it did not):
        read back from the history; the run folder's markers are tidied as the child would have."""
        if self._db is None:
            return None
        run_id: int | None = None
        try:
            run_id = int((self.run_dir / outputs.RECORDED_FILE).read_text().strip())
        except (OSError, ValueError):
            pass
        try:
            hist = History(self._db)
            if run_id is None and self._out_file is None:
                run_id = hist.find_folder(self.run_dir)
            if run_id is None:
                return None
            artifact = hist.get(run_id)
        except (OrtlabError, OSError, sqlite3.Error):
            return None
        if self._out_file is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)  # the temp folder of a run into OUT.onnx
        else:
            for name in (outputs.RUNNING_FILE, outputs.RECORDED_FILE, outputs.OWNER_FILE):
                (self.run_dir / name).unlink(missing_ok=True)
        return artifact

    def _adopted(self, note: str = "") -> tuple[Artifact | None, str]:
        """A run whose child died after its result was complete on disk: its ``artifact.json`` parses and names
        this folder's model, whose sha256 matches (for a run into OUT.onnx: the model still in the folder, then
        installed here, or the one the child already installed at OUT.onnx); then it is recorded as the child
        would have, with a note saying so (and ``note``). Else (None, the reason its folder is removed, as a
        sentence to add to the error)."""
        if self._args is None or not self._remove_on_cancel:
            return None, ""
        try:
            artifact = load_artifact(self.run_dir)
        except (OrtlabError, OSError) as exc:
            return None, (f" Its folder was removed: the result was not complete ({one_line(exc)})."
                          if (self.run_dir / ARTIFACT_FILE).exists() else
                          f" Its folder was removed: the run had not finished (no {ARTIFACT_FILE}).")
        model, target = self.run_dir / MODEL_FILE, self._out_file
        installed = target is not None and not model.exists()  # the child moved it to OUT.onnx before it died
        try:
            same = (Path(artifact.model_path).resolve() == model.resolve()
                    and sha256_file(target if installed and target is not None else model) == artifact.sha256)
        except OSError:
            same = False
        if not same:
            return None, f" Its folder was removed: its {MODEL_FILE} does not match {ARTIFACT_FILE}."
        if target is not None:
            try:
                if installed:
                    artifact.model_path = target
                    if (self.run_dir / QDQ_FILE).is_file():
                        outputs.install_model(self.run_dir / QDQ_FILE, qdq_path(target))
                else:
                    _install(artifact, self.spec, self.run_dir, str(target))
            except (OrtlabError, OSError) as exc:
                return None, f" Its folder was removed: its result could not be installed ({one_line(exc)})."
        _describe(artifact, self.spec, self._args)
        artifact.notes.extend([ADOPTED_NOTE, note] if note else [ADOPTED_NOTE])
        _record_run(artifact, self.run_dir, self._args)
        _tidy(self.run_dir, self._args.get("out_file"), self.run_dir / outputs.OWNER_FILE)
        return artifact, ""

    def _drop_folder(self) -> None:
        """Remove the run folder this run created, unless a history row points at it."""
        if not self._remove_on_cancel:
            return
        if self._db is not None and self._out_file is None:
            try:
                if History(self._db).find_folder(self.run_dir) is not None:
                    return
            except (OrtlabError, OSError, sqlite3.Error):
                return  # cannot tell: keep it (a later start re-indexes or cleans it)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _close_log(self) -> None:
        if self._child is not None:
            self._child.close()


def start_recipe(spec: RunSpec, out=None, *, workspace=None, origin: str = "app",
                 memory_gb: float | None = None, info: ModelInfo | None = None,
                 speed_check: SpeedCheck = SKIP) -> RecipeHandle:
    """Run ``spec`` in a child process and return its handle at once.

    ``out``: None = a new folder in the workspace; a folder = the artifact folder (model.onnx, recipe.json,
    artifact.json); a ``*.onnx`` path = just that model (and its external data) written there. Every run is
    recorded in the workspace history (``origin`` "app" or "cli") by the child when it ends; then, with
    ``speed_check`` enabled, the parent times the result against its source (:mod:`ortlab.runs.result_speed`)
    and stores the figure with the run before the handle is done. ``memory_gb``
    (default :func:`memory_limit_gb`: ``$ORTLAB_RUN_MEMORY_GB``, else min(8 GB, 60 % of RAM); none for a GPU
    target unless the variable is set) limits the child's address space. The spec is prepared here, before the
    child starts (:func:`ortlab.runs.prepare.prepare_run`; ``info``: the model's facts when the caller read them):
    a model that cannot load or a recipe that cannot run is refused at once, and the child decides nothing again.
    """
    spec = prepare_run(spec, info)
    ws = workspace if workspace is not None else Workspace()
    target: Path | None = None
    size = _model_bytes(spec.model)
    timeout, timeout_why = run_timeout_s(spec, size)
    needed = run_space_needed(size)
    check_space(ws.root, needed)
    if out is not None:
        check_space(Path(out).expanduser().absolute().parent, needed)
    as_file = out is not None and Path(out).suffix.lower() == ".onnx" and not Path(out).is_dir()
    if out is not None:  # refused before anything is written: OUT must not be the source or a file it needs
        outputs.check_targets(spec.model, outputs.result_files(out, as_file=as_file))
    if out is None:
        run_dir, created = ws.new_artifact_dir(), True
        (run_dir / outputs.OWNER_FILE).write_text(str(os.getpid()))
        # what is running, to list it as interrupted (and run it again) if the server dies before it ends
        outputs.write_text_atomic(run_dir / outputs.RUNNING_FILE, json.dumps(
            {"spec": spec.to_dict(), "origin": origin, "started_at": utc_timestamp()}))
    elif as_file:
        target = Path(out).expanduser().absolute()
        target.parent.mkdir(parents=True, exist_ok=True)
        outputs.clean_stale(folders=[target.parent])
        run_dir, created = outputs.make_temp_dir(outputs.RUN_PREFIX, target.parent), True
    else:
        run_dir = Path(out).expanduser().resolve()
        created = not run_dir.exists()
    handle = RecipeHandle(spec, run_dir, remove_on_cancel=created, speed_check=speed_check)
    handle._db, handle._out_file = Path(ws.db_path), target
    handle._args = args = {"spec": spec.to_dict(), "run_dir": str(run_dir), "out_file": str(target) if target is not None else None,
            "db": str(ws.db_path), "origin": origin, "timeout_s": timeout, "timeout_why": timeout_why,
            "memory_gb": memory_gb if memory_gb is not None else default_memory_gb(spec.recipe.target)}
    return _launch(handle, args, timeout, remove=created)


def start_unrecorded_recipe(spec: RunSpec, run_dir: Path, *, calibrations: Path, memory_gb: float | None,
                            owned_dir: Path | None = None) -> RecipeHandle:
    """Run a prepared ``spec`` into the existing folder ``run_dir`` in a child process, as :func:`start_recipe`
    does (the same child, memory limit ``memory_gb``, time limit and errors), but outside any workspace: nothing
    is recorded, ``calibrations`` is the folder of kept calibrations it reads and adds to, and the handle's
    ``result`` is the artifact left in ``run_dir`` (a tune trial on a cluster node). ``owned_dir``: a folder that
    holds the child's scratch folder, and that the child removes, before it kills itself and its process group,
    when this process dies first (its end of the pipe closes)."""
    handle = RecipeHandle(spec, run_dir, remove_on_cancel=False)
    timeout, timeout_why = run_timeout_s(spec)
    (run_dir / outputs.OWNER_FILE).write_text(str(os.getpid()))
    args = {"spec": spec.to_dict(), "run_dir": str(run_dir), "out_file": None, "db": None,
            "calibrations": str(calibrations), "origin": "", "timeout_s": timeout, "timeout_why": timeout_why,
            "memory_gb": memory_gb, "owned_dir": str(owned_dir) if owned_dir is not None else None}
    return _launch(handle, args, timeout, remove=False)


def _launch(handle: RecipeHandle, args: dict, timeout: float, *, remove: bool) -> RecipeHandle:
    """Start the recipe child with ``args``, its time limit and the watcher of ``handle``; ``remove``: the run
    folder goes when the child cannot start."""
    # a process group of its own: a time limit or Cancel stops every process the run started
    try:
        handle._child = Child.run(_recipe_child, json.dumps(args), new_session=True)
    except BaseException as exc:  # no folder is left behind by a run that never started
        if remove:
            shutil.rmtree(handle.run_dir, ignore_errors=True)
        if isinstance(exc, OSError):
            raise OrtlabError(f"The run's process could not be started ({exc.strerror or exc}: "
                              f"{exc.filename or 'python'}).") from None
        raise
    handle._started = time.monotonic()
    handle.timeout_s = timeout
    handle._timer = threading.Timer(timeout, handle._time_out)
    handle._timer.daemon = True
    handle._timer.start()
    threading.Thread(target=handle._watch, name=f"ortlab-recipe-{handle.id}", daemon=True).start()
    return handle


def timeout_from_env() -> float | None:
    """``$ORTLAB_RUN_TIMEOUT_S`` in seconds when set to a positive number, else None; any other text is an error."""
    raw = os.environ.get(RUN_TIMEOUT_VAR, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise OrtlabError(f"${RUN_TIMEOUT_VAR} must be a number of seconds, not {raw!r}.") from None
    return value if value > 0 else None

def start_time_limit(handle: Any) -> threading.Timer | None:
    """A daemon timer that calls ``handle._time_out()`` after ``handle.timeout_s`` (None: no limit); cancel it when
    the benchmark ends."""
    if handle.timeout_s is None:
        return None
    timer = threading.Timer(handle.timeout_s, handle._time_out)
    timer.daemon = True
    timer.start()
    return timer


def end_with_error(handle: Any, exc: BaseException, began: float) -> None:
    """Finish a benchmark that raised ``exc``: past its time limit → failed, saying the limit; cancelled →
    cancelled; an ortlab error as it is; anything else as an unexpected error."""
    if isinstance(exc, Cancelled):
        if handle.timed_out:
            handle._finish(FAILED, error=BenchmarkError(
                f"The benchmark was stopped after {time.monotonic() - began:.0f} s (limit {handle.timeout_s:g} s): "
                f"it went past its time limit (set ${RUN_TIMEOUT_VAR} to allow more)."))
        else:
            handle._finish(CANCELLED, error=exc)
    elif isinstance(exc, OrtlabError):
        handle._finish(FAILED, error=exc)
    else:
        handle._finish(FAILED, error=BenchmarkError(f"Unexpected {type(exc).__name__}: {one_line(exc)}"))


def run_timeout_s(spec: RunSpec, model_bytes: int | None = None) -> tuple[float, str]:
    """(seconds, how it was chosen) a run of ``spec`` may take: ``$ORTLAB_RUN_TIMEOUT_S`` when set, else a
    generous base plus time per sample (calibration and verification) and per 100 MB of model."""
    value = timeout_from_env()
    if value is not None:
        return value, f"${RUN_TIMEOUT_VAR}"
    recipe = spec.recipe
    calibration = recipe.quant.calibration_samples if recipe.is_static else 0
    verification = max(0, int(spec.verify_samples))
    samples = calibration + verification
    size = _model_bytes(spec.model) if model_bytes is None else model_bytes
    limit = RUN_TIMEOUT_BASE_S + RUN_TIMEOUT_PER_SAMPLE_S * samples + RUN_TIMEOUT_PER_100MB_S * size / 1e8
    caps = f"{calibration} calibration + {verification} verification" if calibration else f"{verification} verification"
    return round(limit), (f"the default: {RUN_TIMEOUT_BASE_S:.0f} s + {RUN_TIMEOUT_PER_SAMPLE_S:g} s per sample for "
                          f"up to {caps} samples + {RUN_TIMEOUT_PER_100MB_S:.0f} s per 100 MB of model; set "
                          f"${RUN_TIMEOUT_VAR} to change it")


def _model_bytes(model) -> int:
    """The model file and its external data, in bytes (0 when it cannot be read: the run says why)."""
    try:
        total = Path(model).stat().st_size
    except OSError:
        return 0
    try:
        total += sum(f.stat().st_size for f in set(external_data_files(model).values()))
    except (OSError, OrtlabError):
        pass
    return total


def run_recipe_spec(spec: RunSpec, out_dir, reporter=None, cancel: CancelToken | None = None, *,
                    calibrations: CalibrationCache | None = None):
    """Load what ``spec`` references and run it into ``out_dir`` in this process (the child's work; a prepared spec
    is trusted). ``calibrations``: the workspace's kept calibrations (None: calibrate afresh)."""
    return run_prepared(load_run(spec), out_dir, reporter or null_reporter, cancel, calibrations=calibrations)


def _recipe_child(args_json: str, fd: int) -> None:
    """Runs inside the child interpreter: run the spec, write and record the artifact, report over ``fd``."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    args = json.loads(args_json)
    _confine(args.get("memory_gb"))
    owned = Path(args["owned_dir"]) if args.get("owned_dir") else None
    watch = ParentWatch(fd, lambda: _removed(owned)) if owned is not None else None
    try:
        conn.send(("start", os.getpid()))
    except OSError:
        if watch is not None:
            watch.finish()
        raise
    spec = RunSpec.from_dict(args["spec"])
    run_dir = Path(args["run_dir"])
    owner = _claim(run_dir)
    scratch = _private_scratch(owned)

    calibrated_on: list[int] = []

    def report(ev: ProgressEvent) -> None:
        if ev.stage == "calibrate" and ev.total and not calibrated_on:
            calibrated_on.append(ev.total)
        conn.send(("event", ev.stage, ev.done, ev.total, ev.message))

    try:
        artifact = run_recipe_spec(spec, run_dir, report,  # the model and artifact.json, complete on disk
                                   calibrations=_calibrations(args))
        if args.get("db"):
            _install(artifact, spec, run_dir, args.get("out_file"))
            _describe(artifact, spec, args, calibrated_on[0] if calibrated_on else None)
            _record_run(artifact, run_dir, args)
            _tidy(run_dir, args.get("out_file"), owner)
        else:  # unrecorded: the artifact folder is the result, for the caller to take
            artifact.save()
            owner.unlink(missing_ok=True)
        conn.send(("done", artifact.to_dict()))
    except BaseException as exc:  # the child's last net: the parent always gets one error message
        conn.send(("error", *_reported_error(exc, run_dir, args)))
    finally:
        if watch is not None:
            watch.finish()
        conn.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _calibrations(args: dict) -> CalibrationCache:
    """The kept calibrations a run reads and adds to: the folder it was given, else its workspace's."""
    if args.get("calibrations"):
        return CalibrationCache(Path(args["calibrations"]))
    return CalibrationCache.in_workspace(Path(args["db"]).parent)


def _removed(folder: Path) -> bool:
    """Removes the folder; whether it is gone."""
    shutil.rmtree(folder, ignore_errors=True)
    return not folder.exists()


def _confine(memory_gb: float | None) -> None:
    """What the recipe child sets up before it runs anything: a stop request (SIGTERM) unwinds the run (temp
    files and folders are removed on the way out), its address space is limited to ``memory_gb``, and every file
    it writes is private to its owner (0600)."""

    def terminated(signum, frame):
        raise Cancelled()

    signal.signal(signal.SIGTERM, terminated)
    apply_memory_limit(memory_gb)
    os.umask(0o077)


def _claim(run_dir: Path) -> Path:
    """The run folder's owner marker, now naming this child (when the parent wrote one)."""
    owner = run_dir / outputs.OWNER_FILE
    if owner.exists():
        owner.write_text(str(os.getpid()))
    return owner


def _private_scratch(parent: Path | None = None) -> Path:
    """A private temp folder for the run's scratch files (quantization copies), named so that
    ``outputs.clean_stale`` removes it after a kill -9; this process's temp files go there from now on.
    ``parent``: where (default: the system temp folder)."""
    scratch = outputs.make_temp_dir(outputs.TEMP_PREFIX, parent if parent is not None else tempfile.gettempdir())
    tempfile.tempdir = str(scratch)
    return scratch


def _install(artifact: Artifact, spec: RunSpec, run_dir: Path, out_file: str | None) -> None:
    """For a run into a single file: the model (and its external data, as OUT.onnx.data) installed at OUT.onnx,
    with the QDQ model beside it when the run made one."""
    if not out_file:
        return
    target = Path(out_file)
    outputs.check_targets(spec.model, outputs.result_files(target, as_file=True))
    artifact.model_path = outputs.install_model(artifact.model_path, target)
    qdq = qdq_path(target)
    if (run_dir / QDQ_FILE).is_file():  # ortlab analyze M OUT.onnx reads it (static int8 QDQ)
        outputs.install_model(run_dir / QDQ_FILE, qdq)
    else:
        qdq.unlink(missing_ok=True)  # an earlier run's, which this result does not match


def _describe(artifact: Artifact, spec: RunSpec, args: dict, calibrated_on: int | None = None) -> None:
    """Where the run was started, what was asked for, and the time limit it ran under (with the samples really
    used: ``calibrated_on`` calibration samples, when known, and the verification's)."""
    artifact.origin, artifact.spec = str(args.get("origin") or ""), spec.undecided()
    if args.get("timeout_s"):
        used = [f"{calibrated_on} calibration"] if calibrated_on else []
        if artifact.evaluation is not None:
            used.append(f"{artifact.evaluation.n_samples} verification")
        artifact.notes.append(f"Time limit: {float(args['timeout_s']):g} s ({args.get('timeout_why') or 'set'})"
                              + (f"; this run used {' + '.join(used)} samples." if used else "."))


def _record_run(artifact: Artifact, run_dir: Path, args: dict) -> None:
    """Save the artifact, then add its row to the history (last: the folder is the source of truth, the history
    its index) and mark the folder as recorded. A history that cannot be written leaves a note, not a failure."""
    out_file = args.get("out_file")
    if not out_file:
        artifact.save()  # complete, with its recipe, before the row that points at it
    try:
        hist = History(args["db"])
        hist.add(artifact)
        if hist.recovered is not None:  # found damaged while recording: the person hears it with the run
            artifact.notes.append(hist.recovered.message)
    except (OrtlabError, OSError, sqlite3.Error) as exc:
        artifact.notes.append(_not_recorded(artifact, args, exc))
        return
    outputs.write_text_atomic(run_dir / outputs.RECORDED_FILE, str(artifact.run_id))
    if not out_file:
        artifact.save()  # again, now with its run_id


def _not_recorded(artifact: Artifact, args: dict, exc: BaseException) -> str:
    """The note of a finished run the history could not take: why, where the result is, and when it will be
    listed: a workspace folder is indexed at the next start; a run into OUT.onnx is kept for it beside the
    history (``history.defer_run``)."""
    later = " and will be listed when ortlab next starts (the app, or any ortlab command that uses the workspace)"
    if args.get("out_file"):
        try:
            history.defer_run(args["db"], artifact)
        except OSError:
            later = ""
    return f"Not recorded in the history yet: {one_line(exc).rstrip('.')}. The result is kept{later}."


def _tidy(run_dir: Path, out_file: str | None, owner: Path) -> None:
    """After a recorded run: the temp folder of a run into OUT.onnx goes; a workspace folder loses its markers."""
    if out_file:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        (run_dir / outputs.RUNNING_FILE).unlink(missing_ok=True)
        (run_dir / outputs.RECORDED_FILE).unlink(missing_ok=True)
    owner.unlink(missing_ok=True)


def _reported_error(exc: BaseException, run_dir: Path, args: dict) -> tuple[str, str, str | None]:
    """What the child reports for a run that failed with ``exc``: (error class name, message, step). Running out
    of memory under the limit and a full disk are said as such."""
    limit = args.get("memory_gb")
    if isinstance(exc, Cancelled):
        return "Cancelled", exc.message, exc.step
    if isinstance(exc, MemoryError):
        return "OrtlabError", too_big(limit), None
    if isinstance(exc, OrtlabError):
        message = exc.message
        if limit and is_alloc_failure(message):
            message = too_big(limit)
        elif _out_of_space(exc, run_dir):
            message = disk_full_message(_volume(args))
        return type(exc).__name__, message, exc.step
    if _out_of_space(exc, run_dir):
        return "DiskFullError", disk_full_message(_volume(args)), None
    return "OrtlabError", f"Unexpected {type(exc).__name__}: {one_line(exc)}", None


def _out_of_space(exc: BaseException, run_dir: Path) -> bool:
    """Whether a run failed because its disk is full: a "no space left" error, or a write that failed (ONNX
    Runtime says only "Protobuf serialization failed") with almost nothing free on the run's volume."""
    if is_disk_full(exc):
        return True
    text = str(exc).lower()
    free = free_bytes(run_dir)
    return ("serializ" in text or "write" in text) and free is not None and free < RUN_SPACE_MARGIN


def _volume(args: dict) -> Path:
    """The folder whose volume a run writes to: the workspace (or OUT's folder; an unrecorded run's folder)."""
    if args.get("out_file"):
        return Path(args["out_file"]).parent
    return Path(args["db"]).parent if args.get("db") else Path(args["run_dir"]).parent


# -- start-up ---------------------------------------------------------------------------------------------------


def startup(workspace=None) -> list[OrtlabError]:
    """When the app or a CLI command that uses the workspace starts: remove what killed runs left behind
    (``outputs.clean_stale``), open the history (a damaged one is moved aside and rebuilt), store the run
    folders that have a result but no row and the runs kept while the history was busy (``History.reindex``), and
    return the notices to show the person once (``history.HistoryRecovered``, and how many runs were listed late)."""

    ws = workspace if workspace is not None else Workspace()
    outputs.clean_stale(ws)
    read_only = None
    try:
        hist = ws.history()
        read_only = hist.read_only
        added = hist.reindex(skip=outputs.owner_alive)
    except HistoryError as exc:  # unusable and not even movable aside: said, and runs go on unrecorded
        return [*history.take_notices(), exc]
    except (OrtlabError, OSError, sqlite3.Error):
        added = []  # the folders stay; the next start tries again
    notices: list[OrtlabError] = list(history.take_notices())
    if read_only is not None:  # a full disk: the history is listed, and the line says what frees space
        notices.append(HistoryError(read_only))
    if added:
        n = len(added)
        notices.append(OrtlabError(
            f"{n} finished run{'s' if n != 1 else ''} that could not be recorded when {'they' if n != 1 else 'it'} "
            f"ended (the history was busy, or the run process died first) {'are' if n != 1 else 'is'} now listed "
            f"in History (run{'s' if n != 1 else ''} {', '.join(str(i) for i in added)})."))
    return notices


@dataclass(frozen=True)
class InterruptedRun:
    """A run that was going when the server (or the machine) stopped: its folder, what it ran (``spec``, None
    when the marker cannot be read), where it was started and when."""

    folder: Path
    spec: RunSpec | None
    origin: str
    started_at: str


def interrupted_runs(workspace=None) -> list[InterruptedRun]:
    """The workspace's run folders still marked as running (:data:`outputs.RUNNING_FILE`) whose process is gone
    and that no history row points at: runs the end of the server cut short. Newest first."""
    ws = workspace if workspace is not None else Workspace()
    out: list[InterruptedRun] = []
    hist: History | None = None
    for marker in sorted(Path(ws.artifacts_dir).glob(f"*/{outputs.RUNNING_FILE}"), reverse=True):
        folder = marker.parent
        if outputs.owner_alive(folder):
            continue
        try:
            hist = hist or ws.history()
            if hist.find_folder(folder) is not None:
                continue
        except (OrtlabError, OSError, sqlite3.Error):
            continue
        spec: RunSpec | None = None
        origin = started = ""
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
            origin, started = str(data.get("origin") or ""), str(data.get("started_at") or "")
            spec = RunSpec.from_dict(data["spec"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, OrtlabError):
            pass
        out.append(InterruptedRun(folder, spec, origin, started))
    return out


def dismiss_interrupted(run: InterruptedRun, workspace=None) -> None:
    """Remove an interrupted run's folder (after it was run again, or when the person does not want it)."""
    ws = workspace if workspace is not None else Workspace()
    folder = Path(run.folder).resolve()
    if folder.parent == Path(ws.artifacts_dir).resolve() and (folder / outputs.RUNNING_FILE).is_file():
        shutil.rmtree(folder, ignore_errors=True)
