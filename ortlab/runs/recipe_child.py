"""The recipe child: what runs inside the child interpreter that :func:`ortlab.runs.service.start_recipe` starts.

It receives one typed :class:`RecipeRequest` (its spec already prepared by the parent: nothing is parsed, validated
or inspected again), loads the data, runs the pipeline, writes and records the artifact, and reports progress, the
result or the error over its pipe: ("start", pid), ("event", stage, done, total, message), ("done", artifact) or
("error", class name, message, step). The parent's side (the handle and its watcher) is :mod:`ortlab.runs.service`,
which also uses :func:`install_result`, :func:`describe_run`, :func:`record_run` and :func:`tidy_run` to record a
run whose child died after its result was complete.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from ortlab.checks.verdict import VerdictPolicy
from ortlab.core.disk import RUN_SPACE_MARGIN, disk_full_message, free_bytes, is_disk_full
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.layout import QDQ_FILE, qdq_path
from ortlab.core.limits import apply_memory_limit, is_alloc_failure
from ortlab.core.progress import CancelToken, ProgressEvent, null_reporter
from ortlab.core.text import one_line
from ortlab.data.preprocess import resolve_preprocess
from ortlab.data.samples import get_sample
from ortlab.model.inspect import ModelInfo
from ortlab.runs import history, outputs
from ortlab.runs.artifact import Artifact
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.history import History
from ortlab.runs.pipeline import run_prepared
from ortlab.runs.prepare import PreparedRun, prepare_run
from ortlab.runs.runspec import RunSpec
from ortlab.runtime.child import ParentWatch, too_big


@dataclass(frozen=True)
class RecipeRequest:
    """What a recipe child is given: the prepared ``spec``, the folder it runs into (``run_dir``), the single file
    the result is installed at (``out_file``, None: the folder is the result), the history it is recorded in
    (``db``, None: not recorded), the kept calibrations (``calibrations``, None: the workspace's beside ``db``),
    where the run was started (``origin``), its time limit and why (``timeout_s``, ``timeout_why``), its memory
    limit (``memory_gb``) and a folder the child removes when its parent dies first (``owned_dir``)."""

    spec: RunSpec
    run_dir: Path
    out_file: Path | None = None
    db: Path | None = None
    calibrations: Path | None = None
    origin: str = ""
    timeout_s: float | None = None
    timeout_why: str = ""
    memory_gb: float | None = None
    owned_dir: Path | None = None

    @property
    def recorded(self) -> bool:
        return self.db is not None

    @property
    def volume(self) -> Path:
        """The folder whose volume the run writes to: OUT's folder, else the workspace, else the run's folder's."""
        if self.out_file is not None:
            return self.out_file.parent
        return self.db.parent if self.db is not None else self.run_dir.parent


def load_prepared(spec: RunSpec) -> PreparedRun:
    """The run a prepared ``spec`` describes, its data loaded (its decisions are trusted: nothing is validated or
    inspected again; the parent checked the model just before it started the child). A spec nobody prepared is
    prepared here first."""
    if spec.model_info is None:
        spec = prepare_run(spec)
    info = ModelInfo.from_dict(spec.model_info or {})
    sample = get_sample(spec.sample) if spec.sample else None
    labels = sample.labels if sample is not None and sample.labels else None
    cal = spec.calibration.load(labels) if spec.calibration is not None else None
    ev = spec.evaluation.load(labels) if spec.evaluation is not None else None
    pre = spec.preprocess
    if pre is None and (cal or ev) is not None:
        pre = resolve_preprocess(info.inputs, sample, cal if cal is not None else ev)
    shapes = {str(k): [int(d) for d in v] for k, v in (spec.shapes or {}).items()}
    return PreparedRun(Path(spec.model), spec.recipe, info, cal, ev, pre, spec.verify_samples,
                       spec.policy or VerdictPolicy(), shapes, spec.warnings, spec.notes,
                       {str(k): float(v) for k, v in (spec.values or {}).items()})


def run_recipe_spec(spec: RunSpec, out_dir, reporter=None, cancel: CancelToken | None = None, *,
                    calibrations: CalibrationCache | None = None):
    """Load what ``spec`` references and run it into ``out_dir`` in this process (the child's work; a prepared spec
    is trusted). ``calibrations``: the workspace's kept calibrations (None: calibrate afresh)."""
    return run_prepared(load_prepared(spec), out_dir, reporter or null_reporter, cancel, calibrations=calibrations)


def run_recipe_child(request: RecipeRequest, fd: int) -> None:
    """The child's entry (:class:`~ortlab.runtime.child.ChildExecutor`): run the request, write and record the
    artifact, report over ``fd``."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    _confine(request.memory_gb)
    owned = request.owned_dir
    watch = ParentWatch(fd, lambda: _removed(owned)) if owned is not None else None
    try:
        conn.send(("start", os.getpid()))
    except OSError:
        if watch is not None:
            watch.finish()
        raise
    owner = _claim(request.run_dir)
    scratch = _private_scratch(owned)
    calibrated_on: list[int] = []

    def report(ev: ProgressEvent) -> None:
        if ev.stage == "calibrate" and ev.total and not calibrated_on:
            calibrated_on.append(ev.total)
        conn.send(("event", ev.stage, ev.done, ev.total, ev.message))

    try:
        artifact = run_recipe_spec(request.spec, request.run_dir, report,  # the model and artifact.json, on disk
                                   calibrations=_calibrations(request))
        if request.recorded:
            artifact = install_result(artifact, request.spec, request.run_dir, request.out_file)
            artifact = describe_run(artifact, request, calibrated_on[0] if calibrated_on else None)
            artifact = record_run(artifact, request)
            tidy_run(request, owner)
        else:  # unrecorded: the artifact folder is the result, for the caller to take
            artifact.save()
            owner.unlink(missing_ok=True)
        conn.send(("done", artifact.to_dict()))
    except BaseException as exc:  # the child's last net: the parent always gets one error message
        conn.send(("error", *_reported_error(exc, request)))
    finally:
        if watch is not None:
            watch.finish()
        conn.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _calibrations(request: RecipeRequest) -> CalibrationCache:
    """The kept calibrations a run reads and adds to: the folder it was given, else its workspace's."""
    if request.calibrations is not None:
        return CalibrationCache(request.calibrations)
    assert request.db is not None, "a request names its calibrations or its workspace"
    return CalibrationCache.in_workspace(request.db.parent)


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


def install_result(artifact: Artifact, spec: RunSpec, run_dir: Path, out_file: Path | None) -> Artifact:
    """For a run into a single file: the model (and its external data, as OUT.onnx.data) installed at OUT.onnx,
    with the QDQ model beside it when the run made one; the artifact naming the installed model."""
    if out_file is None:
        return artifact
    target = Path(out_file)
    outputs.check_targets(spec.model, outputs.result_files(target, as_file=True))
    installed = replace(artifact, model_path=outputs.install_model(artifact.model_path, target))
    qdq = qdq_path(target)
    if (run_dir / QDQ_FILE).is_file():  # ortlab analyze M OUT.onnx reads it (static int8 QDQ)
        outputs.install_model(run_dir / QDQ_FILE, qdq)
    else:
        qdq.unlink(missing_ok=True)  # an earlier run's, which this result does not match
    return installed


def describe_run(artifact: Artifact, request: RecipeRequest, calibrated_on: int | None = None,
                 notes: tuple[str, ...] = ()) -> Artifact:
    """The artifact with where the run was started, what was asked for, and the time limit it ran under (with the
    samples really used: ``calibrated_on`` calibration samples, when known, and the verification's), then
    ``notes``."""
    said = list(artifact.notes)
    if request.timeout_s:
        used = [f"{calibrated_on} calibration"] if calibrated_on else []
        if artifact.evaluation is not None:
            used.append(f"{artifact.evaluation.n_samples} verification")
        said.append(f"Time limit: {float(request.timeout_s):g} s ({request.timeout_why or 'set'})"
                    + (f"; this run used {' + '.join(used)} samples." if used else "."))
    return replace(artifact, origin=request.origin, spec=request.spec.undecided(), notes=[*said, *notes])


def record_run(artifact: Artifact, request: RecipeRequest) -> Artifact:
    """Save the artifact, then add its row to the history (last: the folder is the source of truth, the history
    its index) and mark the folder as recorded; the artifact with its run id. A history that cannot be written
    leaves a note, not a failure."""
    if request.db is None:  # an unrecorded request has no history to add to
        return artifact
    if request.out_file is None:
        artifact.save()  # complete, with its recipe, before the row that points at it
    try:
        hist = History(request.db)
        artifact = replace(artifact, run_id=hist.add(artifact))
        if hist.recovered is not None:  # found damaged while recording: the person hears it with the run
            artifact = replace(artifact, notes=[*artifact.notes, hist.recovered.message])
    except (OrtlabError, OSError, sqlite3.Error) as exc:
        return replace(artifact, notes=[*artifact.notes, _not_recorded(artifact, request, exc)])
    outputs.write_text_atomic(request.run_dir / outputs.RECORDED_FILE, str(artifact.run_id))
    if request.out_file is None:
        artifact.save()  # again, now with its run_id
    return artifact


def _not_recorded(artifact: Artifact, request: RecipeRequest, exc: BaseException) -> str:
    """The note of a finished run the history could not take: why, where the result is, and when it will be
    listed: a workspace folder is indexed at the next start; a run into OUT.onnx is kept for it beside the
    history (``history.defer_run``)."""
    later = " and will be listed when ortlab next starts (the app, or any ortlab command that uses the workspace)"
    if request.out_file is not None and request.db is not None:
        try:
            history.defer_run(request.db, artifact)
        except OSError:
            later = ""
    return f"Not recorded in the history yet: {one_line(exc).rstrip('.')}. The result is kept{later}."


def tidy_run(request: RecipeRequest, owner: Path) -> None:
    """After a recorded run: the temp folder of a run into OUT.onnx goes; a workspace folder loses its markers."""
    if request.out_file is not None:
        shutil.rmtree(request.run_dir, ignore_errors=True)
    else:
        (request.run_dir / outputs.RUNNING_FILE).unlink(missing_ok=True)
        (request.run_dir / outputs.RECORDED_FILE).unlink(missing_ok=True)
    owner.unlink(missing_ok=True)


def _reported_error(exc: BaseException, request: RecipeRequest) -> tuple[str, str, str | None]:
    """What the child reports for a run that failed with ``exc``: (error class name, message, step). Running out
    of memory under the limit and a full disk are said as such."""
    limit = request.memory_gb
    if isinstance(exc, Cancelled):
        return "Cancelled", exc.message, exc.step
    if isinstance(exc, MemoryError):
        return "OrtlabError", too_big(limit), None
    if isinstance(exc, OrtlabError):
        message = exc.message
        if limit and is_alloc_failure(message):
            message = too_big(limit)
        elif _out_of_space(exc, request.run_dir):
            message = disk_full_message(request.volume)
        return type(exc).__name__, message, exc.step
    if _out_of_space(exc, request.run_dir):
        return "DiskFullError", disk_full_message(request.volume), None
    return "OrtlabError", f"Unexpected {type(exc).__name__}: {one_line(exc)}", None


def _out_of_space(exc: BaseException, run_dir: Path) -> bool:
    """Whether a run failed because its disk is full: a "no space left" error, or a write that failed (ONNX
    Runtime says only "Protobuf serialization failed") with almost nothing free on the run's volume."""
    if is_disk_full(exc):
        return True
    text = str(exc).lower()
    free = free_bytes(run_dir)
    return ("serializ" in text or "write" in text) and free is not None and free < RUN_SPACE_MARGIN
