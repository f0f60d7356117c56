"""The run service's handles: how the app and the CLI follow a recipe run or a benchmark once it has started.

:func:`ortlab.runs.prepare.start_recipe` runs a :class:`RunSpec` in a fresh child interpreter (never a fork of the
caller, whose threads, memory, locks, stdout and stderr stay untouched) and returns a :class:`RecipeHandle`: the
child's stdout/stderr go to a temp log, its progress comes back over a pipe, and the child itself writes the
artifact and records it in the workspace history, so a run is recorded when it ends whether or not anybody is
watching; the handle adopts a complete result whose child died, and times it against its source when asked
(:mod:`ortlab.runs.result_speed`). Benchmarks (:mod:`ortlab.runs.bench_service`) return a handle built on the same
:class:`Handle`: ``state``, ``progress``, ``drain()``, ``cancel()``, ``follow()``, ``result`` and ``error``.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ortlab.runs.recipe_request import RecipeRequest, describe_run, install_result, tidy_run
from ortlab.core.errors import BenchmarkError, Cancelled, OrtlabError
from ortlab.core.layout import ARTIFACT_FILE, MODEL_FILE, QDQ_FILE, qdq_path
from ortlab.core.progress import CancelToken, Completion, ProgressEvent
from ortlab.core.text import one_line
from ortlab.runtime.child import STOP_GRACE_S, ChildJob, error_of
from ortlab.runtime.executor import TimeLimit
from ortlab.runs import outputs
from ortlab.model.inspect import sha256_file
from ortlab.runs import pipeline
from ortlab.runs.history import History, record_run
from ortlab.runs.artifact import Artifact, load_artifact
from ortlab.runs import result_speed
from ortlab.runs.result_speed import SKIP, SpeedCheck

RUN_TIMEOUT_VAR = "ORTLAB_RUN_TIMEOUT_S"  # seconds a recipe run may take before it is stopped
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
    def put(self, item: Any) -> None:
        """Hand the watcher a progress event or a sample (the worker's side)."""
        self._items.put(item)

    def end(self, state: str, result: Any = None, error: OrtlabError | Cancelled | None = None) -> None:
        """The job ended in ``state`` with ``result`` or ``error`` (the worker's side; a second end is ignored)."""
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

    @property
    def cancel_token(self) -> CancelToken:
        """The token the worker's steps watch (set by :meth:`cancel`)."""
        return self._cancel

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

    def __init__(self, request: RecipeRequest, job: ChildJob, *, remove_on_cancel: bool,
                 speed_check: SpeedCheck = SKIP) -> None:
        """The handle of ``job``, the child started with ``request``; its watcher starts here."""
        self.plan = pipeline.plan(request.spec.recipe)
        super().__init__([s.name for s in self.plan] + ([result_speed.STAGE] if speed_check.enabled else []))
        self.speed_check = speed_check
        self.request = request  # what the child was given
        self.spec = request.spec
        self.run_dir = request.run_dir
        self.pid: int | None = None
        self.returncode: int | None = None
        self._remove_on_cancel = remove_on_cancel
        self._job = job
        threading.Thread(target=self._watch, name=f"ortlab-recipe-{self.id}", daemon=True).start()

    @property
    def timeout_s(self) -> float | None:
        """The run's time limit (:func:`run_timeout_s`)."""
        return self.request.timeout_s

    @property
    def timed_out(self) -> bool:
        return self._job.timed_out

    @property
    def child_pid(self) -> int | None:
        """The pid of the run's child (its process group's id), once started."""
        return self._job.pid

    def time_out(self) -> None:
        """What the time limit does when reached (callable at once): stop the child and its process group
        (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`); the watcher reports why."""
        if not self.done:
            self._job.time_out()

    def cancel(self) -> None:
        """Stop the child and its process group (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`, in the
        background) and remove the run folder it created."""
        super().cancel()
        if not self.done:
            self._job.cancel()

    def _watch(self) -> None:
        result: Any = None
        error: OrtlabError | Cancelled | None = None
        job = self._job
        try:
            while (msg := job.receive()) is not None:
                kind = msg[0]
                if kind == "start":
                    self.pid = int(msg[1])
                    self.state = RUNNING
                elif kind == "event":
                    self.put(ProgressEvent(*msg[1:]))
                elif kind == "done":
                    result = Artifact.from_dict(msg[1])
                elif kind == "error":
                    error = error_of(msg[1], msg[2], msg[3])
        finally:
            self.returncode = job.finish()
        failed = error is not None and not isinstance(error, Cancelled) and not self.timed_out  # the child said so
        if result is None and not failed:
            result = self._recorded()  # the child died (or was stopped) after recording its run: the run is finished
        dropped = ""
        if result is None and (error is None or self.timed_out) and not self.cancel_requested:
            # the child died (or met its time limit while recording) after its result was complete: checked and kept
            result, dropped = self._adopted(f"The time limit ({self.timeout_s:g} s) was reached after the result was "
                                            "complete, while it was being recorded." if self.timed_out else "")
        if result is None and self.timed_out:
            after = job.stopped_after if job.stopped_after is not None else job.limit.elapsed()
            error = OrtlabError(f"The run was stopped after {after:.0f} s (limit {self.timeout_s:g} s): it went "
                                f"past its time limit (set ${RUN_TIMEOUT_VAR} to allow more).")
        if result is not None:
            self._close_log()
            self.end(DONE, self._time_result(result))
        elif self.cancel_requested or isinstance(error, Cancelled):
            self._close_log()
            self._drop_folder()
            self.end(CANCELLED, error=error if isinstance(error, Cancelled) else Cancelled())
        else:
            if error is None:
                error = OrtlabError(f"The run process ended unexpectedly (exit code {self.returncode})"
                                    f"{job.last_line()}.{dropped}")
            self._close_log()
            self._drop_folder()
            self.end(FAILED, error=error)

    def _time_result(self, artifact: Artifact) -> Artifact:
        """After the verdict, here in the parent: time the result against its source (:attr:`speed_check`), keep
        the figure with the run (its ``artifact.json`` and History row) and say it as the stage's last event. A
        timing that fails or is cancelled leaves the run as it is, with the reason in its record."""
        check = self.speed_check
        if not check.enabled:
            return artifact
        check = result_speed.with_data_values(check, artifact.source_path, (self.spec.evaluation, self.spec.calibration),
                                              self.spec.model_info)
        stage = result_speed.STAGE
        self.put(ProgressEvent(stage, 0, 1, f"timing the result against its source for {check.seconds:g} s"))
        speed = result_speed.time_result(
            artifact.source_path, artifact.model_path, check, target=artifact.recipe.target,
            shapes=result_speed.shapes_of(artifact), cancel=self._cancel)
        artifact = replace(artifact, speed=speed)
        request = self.request
        try:
            if request.out_file is None and (Path(artifact.model_path).parent / ARTIFACT_FILE).is_file():
                artifact.save()
            if request.db is not None and artifact.run_id is not None:
                History(request.db).update(artifact)
        except (OrtlabError, OSError, sqlite3.Error) as exc:
            artifact = replace(artifact, notes=[*artifact.notes, f"The speed figure was not stored ({one_line(exc)})."])
        self.put(ProgressEvent(stage, 1, 1, speed.sentence()))
        return artifact

    def _recorded(self) -> Artifact | None:
        """The run the child recorded in the history before it ended without reporting (None when it did not; an
        earlier run into the same folder is not it): read back from the history; the run folder's markers are
        tidied as the child would have."""
        db, out_file = self.request.db, self.request.out_file
        if db is None:
            return None
        run_id: int | None = None
        try:
            run_id = int((self.run_dir / outputs.RECORDED_FILE).read_text().strip())
        except (OSError, ValueError):
            pass
        before = self.request.runs_before
        try:
            hist = History(db)
            if run_id is None and out_file is None and before is not None:
                run_id = hist.find_folder(self.run_dir, after=before)
            if run_id is None or (before is not None and run_id <= before):  # an earlier run's is not this one's
                return None
            artifact = hist.get(run_id)
        except (OrtlabError, OSError, sqlite3.Error):
            return None
        if out_file is not None:
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
        request = self.request
        if not request.recorded or not self._remove_on_cancel:
            return None, ""
        try:
            artifact = load_artifact(self.run_dir)
        except (OrtlabError, OSError) as exc:
            return None, (f" Its folder was removed: the result was not complete ({one_line(exc)})."
                          if (self.run_dir / ARTIFACT_FILE).exists() else
                          f" Its folder was removed: the run had not finished (no {ARTIFACT_FILE}).")
        model, target = self.run_dir / MODEL_FILE, request.out_file
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
                    artifact = replace(artifact, model_path=target)
                    if (self.run_dir / QDQ_FILE).is_file():
                        outputs.install_model(self.run_dir / QDQ_FILE, qdq_path(target))
                else:
                    artifact = install_result(artifact, self.spec, self.run_dir, target)
            except (OrtlabError, OSError) as exc:
                return None, f" Its folder was removed: its result could not be installed ({one_line(exc)})."
        artifact = describe_run(artifact, request, notes=(ADOPTED_NOTE, note) if note else (ADOPTED_NOTE,))
        artifact = record_run(artifact, request.db, request.run_dir, into_file=request.out_file is not None)
        tidy_run(request, self.run_dir / outputs.OWNER_FILE)
        return artifact, ""

    def _drop_folder(self) -> None:
        """Remove the run folder this run created, unless a history row points at it."""
        if not self._remove_on_cancel:
            return
        if self.request.db is not None and self.request.out_file is None:
            try:
                if History(self.request.db).find_folder(self.run_dir, after=self.request.runs_before or 0) is not None:
                    return
            except (OrtlabError, OSError, sqlite3.Error):
                return  # cannot tell: keep it (a later start re-indexes or cleans it)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _close_log(self) -> None:
        self._job.close()


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

def start_time_limit(handle: Any) -> TimeLimit:
    """The started time limit of a benchmark: ``handle.time_out()`` after ``handle.timeout_s`` (None: no limit);
    cancel it when the benchmark ends."""
    return TimeLimit(handle.timeout_s, handle.time_out).start()


def end_with_error(handle: Any, exc: BaseException, began: float) -> None:
    """Finish a benchmark that raised ``exc``: past its time limit → failed, saying the limit; cancelled →
    cancelled; an ortlab error as it is; anything else as an unexpected error."""
    if isinstance(exc, Cancelled):
        if handle.timed_out:
            handle.end(FAILED, error=BenchmarkError(
                f"The benchmark was stopped after {time.monotonic() - began:.0f} s (limit {handle.timeout_s:g} s): "
                f"it went past its time limit (set ${RUN_TIMEOUT_VAR} to allow more)."))
        else:
            handle.end(CANCELLED, error=exc)
    elif isinstance(exc, OrtlabError):
        handle.end(FAILED, error=exc)
    else:
        handle.end(FAILED, error=BenchmarkError(f"Unexpected {type(exc).__name__}: {one_line(exc)}"))
