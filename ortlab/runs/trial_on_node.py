"""A tune trial's work on a Ray cluster node: the Ray tasks :class:`ortlab.runs.tune_cluster.ClusterTrials` submits
(:func:`run_trial_on_node`: quantize and evaluate; :func:`time_pair_on_node`: time against the source), and the
zipping of folders both sides share.

On its node a trial runs as a local one does: in a recipe child of the run service
(:func:`ortlab.runs.prepare.start_unrecorded_recipe`, through :class:`ortlab.runtime.child.Child`), under the
same memory limit (``$ORTLAB_RUN_MEMORY_GB`` where the search runs, else the node's default) and time limit; a
trial over the limit fails with the local message and the node named. Ray reuses its worker processes, so the
limit is set in the child, never in the worker. The trial's files (the child's scratch folder too) live in a
folder ``ortlab-trial-<worker pid>-ns<pid namespace>-…`` in the node's temp folder, removed when the task ends.
Cancelling the task (the search no longer wants a prefetched trial, Cancel, a time limit) force-kills its Ray worker, and Ray
kills that worker's child processes (its default, ``RAY_kill_child_processes_on_worker_exit``); where it does
not, the child sees its pipe to the worker close, removes the trial folder and kills its process group. A
folder left by a killed trial is removed by the next trial task that starts on that node, once both the worker
and the child named in it are gone (only folders with that name, of this user and pid namespace, whose pids
are dead); when the search ends, each node it used removes the folders its cancelled trials left
(:func:`ortlab.runs.trial_folders.clean_trial_folders`), and ``ortlab cluster stop`` removes what is left on its
machine.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ortlab.core.progress import CancelToken
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.trial_folders import remove_stale_trial_folders, trial_folder_prefix
from ortlab.runtime.child import STOP_GRACE_S, default_memory_gb
from ortlab.runtime.machine import Machine, this_machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.stats import SpeedUp

__all__ = ["keep_new_calibrations", "pack_dir", "run_trial_on_node", "time_pair_on_node"]


def _unpack(blob: bytes, is_dir: bool, name: str, into: Path) -> str:
    into.mkdir()
    target = into / name
    if is_dir:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            zf.extractall(target)
    else:
        target.write_bytes(blob)
    return str(target)


def pack_dir(folder: Path) -> bytes:
    """The files of ``folder`` as a zip (stored, not compressed), by their paths relative to it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(folder).as_posix())
    return buf.getvalue()


def run_trial_on_node(launch: Callable[..., Any], spec_plain: dict[str, Any], model_name: str, model_blob: bytes,
                      calibration: tuple[str, bool] | None, calibration_blob: bytes | None,
                      evaluation: tuple[str, bool] | None, evaluation_blob: bytes | None,
                      calibrations_blob: bytes | None = None, memory_setting: str | None = None,
                      ) -> tuple[dict[str, Any], bytes, bytes, tuple[float, float]]:
    """A Ray task: run the spec on this node in a recipe child (with the memory and time limits of a run; the source
    and path data — ``(name, is a folder)`` and its bytes, a folder zipped — written to a trial folder first) and
    return the artifact (plain) and its folder's files (zip), the calibration cache after the run (zip) and when the
    work started and ended (epoch seconds). ``launch``: :func:`ortlab.runs.prepare.start_unrecorded_recipe` (handed
    in by the tuner: this module stays below it), which prepares the spec here (the model read, the recipe validated
    for this node's providers and CPU, which run it). ``calibrations_blob``: the workspace's kept calibrations
    (zip), so a trial reuses one made on any node. ``memory_setting``: ``$ORTLAB_RUN_MEMORY_GB`` where the search
    runs (None: this node's default limit). The blobs are top-level arguments: Ray hands them over from the object
    store."""
    began = time.time()
    here = Path(tempfile.gettempdir())
    remove_stale_trial_folders(here)
    tmp = Path(tempfile.mkdtemp(prefix=trial_folder_prefix(), dir=here))
    handle: Any = None
    try:
        source = tmp / "source"
        source.mkdir()
        (source / model_name).write_bytes(model_blob)
        spec = RunSpec.from_dict(spec_plain)
        spec = replace(spec, model=str(source / model_name),
                       calibration=_moved(spec.calibration, calibration, calibration_blob, tmp / "calibration"),
                       evaluation=_moved(spec.evaluation, evaluation, evaluation_blob, tmp / "evaluation"))
        kept = tmp / "calibrations"
        kept.mkdir()
        if calibrations_blob:
            with zipfile.ZipFile(io.BytesIO(calibrations_blob)) as zf:
                zf.extractall(kept)
        out = tmp / "out"
        out.mkdir()
        handle = launch(spec, out, calibrations=kept, owned_dir=tmp,
                        memory_gb=default_memory_gb(spec.recipe.target, memory_setting))
        artifact = handle.follow()  # Ray's cancel without force (KeyboardInterrupt here) stops the child
        return artifact.to_dict(), pack_dir(out), pack_dir(kept), (began, time.time())
    finally:
        if handle is not None and not handle.wait(0):  # left by an error here: its child stops first
            handle.cancel()
            handle.wait(STOP_GRACE_S * 2)
        shutil.rmtree(tmp, ignore_errors=True)


def time_pair_on_node(source_name: str, source_blob: bytes, candidate_blob: bytes, cfg: BenchConfig,
                      batch_size: int, shapes: dict[str, list[int]],
                      values: dict[str, float] | None = None) -> tuple[SpeedUp, Any, Machine]:
    """A Ray task: time the candidate against the source on this node with the one clock (``values``: control
    inputs' values, ``--input-value``); returns the speed-up, the (source, candidate) summaries and this node's
    machine."""
    from ortlab.timing.child_runs import PairTimer

    tmp = Path(tempfile.mkdtemp(prefix="ortlab-timing-"))
    try:
        ref, cand = tmp / source_name, tmp / f"candidate-{source_name}"
        ref.write_bytes(source_blob)
        cand.write_bytes(candidate_blob)
        timer = PairTimer(str(ref), shapes=shapes, values=values)
        try:
            speed = timer(str(cand), cfg, batch_size, cancel=CancelToken())
            return speed, timer.last, this_machine(cfg.intra_op_threads)
        finally:
            timer.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def keep_new_calibrations(blob: bytes, folder: Path) -> None:
    """Calibrations a node made, added to this workspace's (a file already here is kept)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        for name in zf.namelist():
            target = folder / Path(name).name
            if name.endswith(".json") and not target.exists():
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))


def _moved(ref: DataRef | None, what: tuple[str, bool] | None, blob: bytes | None, into: Path) -> DataRef | None:
    if ref is None or what is None or blob is None:
        return ref
    return replace(ref, path=_unpack(blob, what[1], what[0], into))
