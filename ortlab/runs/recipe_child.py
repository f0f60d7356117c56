"""The recipe child: what runs inside the child interpreter that :func:`ortlab.runs.prepare.start_recipe` starts.

It receives one typed :class:`RecipeRequest` (its spec already prepared by the parent: nothing is parsed, validated
or inspected again), loads the data, runs the pipeline, writes and records the artifact, and reports progress, the
result or the error over its pipe: ("start", pid), ("event", stage, done, total, message), ("done", artifact) or
("error", class name, message, step). The parent's side (the handle and its watcher) is :mod:`ortlab.runs.service`,
which also uses :mod:`ortlab.runs.recipe_request` (the result installed, described, its folder tidied) and
:func:`ortlab.runs.history.record_run` to record a run whose child died after its result was complete.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

from ortlab.checks.verdict import VerdictPolicy
from ortlab.core.disk import RUN_SPACE_MARGIN, disk_full_message, free_bytes, is_disk_full
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.limits import apply_memory_limit, is_alloc_failure
from ortlab.core.progress import CancelToken, ProgressEvent, null_reporter
from ortlab.core.text import one_line
from ortlab.data.preprocess import resolve_preprocess
from ortlab.data.samples import get_sample
from ortlab.model.inspect import ModelInfo
from ortlab.runs import outputs
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.pipeline import PreparedRun, run_prepared
from ortlab.runs.history import record_run
from ortlab.runs.recipe_request import RecipeRequest, describe_run, install_result, tidy_run
from ortlab.runs.runspec import RunSpec
from ortlab.runtime.child import ParentWatch, too_big


def load_prepared(spec: RunSpec) -> PreparedRun:
    """The run a prepared ``spec`` describes, its data loaded (its decisions are trusted: nothing is validated or
    inspected again; the parent checked the model just before it started the child,
    :func:`ortlab.runs.prepare.prepare_run`)."""
    if spec.model_info is None:
        raise OrtlabError("This run was not prepared: the process that starts a run reads the model and validates "
                          "the recipe first (ortlab.runs.prepare.prepare_run).")
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
            artifact = record_run(artifact, request.db, request.run_dir, into_file=request.out_file is not None)
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
