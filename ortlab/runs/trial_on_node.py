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
from ortlab.runs.calibration_cache import FOLDER as CALIBRATION_FOLDER
from ortlab.runs.rounding_cache import FOLDER as ROUNDING_FOLDER
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.trial_folders import remove_stale_trial_folders, trial_folder_prefix
from ortlab.runtime.child import STOP_GRACE_S, default_memory_gb
from ortlab.runtime.machine import Machine, this_machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.stats import SpeedUp

KEPT_SUFFIXES = {CALIBRATION_FOLDER: ".json", ROUNDING_FOLDER: ".npz"}  # the kept results a trial ships both ways

__all__ = ["keep_new_results", "pack_dir", "pack_kept", "run_trial_on_node", "time_pair_on_node"]


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
    return the artifact (plain) and its folder's files (zip), the kept calibrations and node roundings after the run
    (zip, as :func:`pack_kept` makes it) and when the work started and ended (epoch seconds). ``launch``:
    :func:`ortlab.runs.prepare.start_unrecorded_recipe` (handed in by the tuner: this module stays below it), which
    prepares the spec here (the model read, the recipe validated for this node's providers and CPU, which run it).
    ``calibrations_blob``: the workspace's kept calibrations and node roundings (:func:`pack_kept`), so a trial
    reuses those made on any node. ``memory_setting``: ``$ORTLAB_RUN_MEMORY_GB`` where the search runs (None: this
    node's default limit). The blobs are top-level arguments: Ray hands them over from the object store."""
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
        kept = tmp / "kept"  # the workspace's kept results: calibration/ and rounding/ beside it
        (kept / CALIBRATION_FOLDER).mkdir(parents=True)
        if calibrations_blob:
            keep_new_results(calibrations_blob, kept)
        out = tmp / "out"
        out.mkdir()
        handle = launch(spec, out, calibrations=kept / CALIBRATION_FOLDER, owned_dir=tmp,
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


def pack_kept(root: Path, roundings_since: float | None = None) -> bytes | None:
    """The workspace's kept calibrations and node fits (``<root>/calibration``; ``<root>/rounding``: GPTQ roundings and
    bias corrections) as one zip, by paths relative to ``root``; None when it keeps none. ``roundings_since``: only
    the fits written (or reused in this workspace) since then, epoch seconds: a search ships those its trials made,
    not the whole folder."""
    folders = [root / name for name in KEPT_SUFFIXES if (root / name).is_dir()]
    if not folders:
        return None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for folder in folders:
            for f in sorted(folder.glob(f"*{KEPT_SUFFIXES[folder.name]}")):
                if folder.name == ROUNDING_FOLDER and roundings_since is not None and _mtime(f) < roundings_since:
                    continue
                zf.write(f, f"{folder.name}/{f.name}")
    return buf.getvalue()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by a prune
        return float("-inf")


def _kept_entries(zf: zipfile.ZipFile) -> list[tuple[str, str, str]]:
    """(zip entry, kept folder, file name) of each entry that is a kept calibration or rounding; any other entry
    (another folder, a deeper path, another suffix) is left out."""
    entries = []
    for name in zf.namelist():
        parts = name.split("/")
        if len(parts) == 2 and parts[0] in KEPT_SUFFIXES and parts[1].endswith(KEPT_SUFFIXES[parts[0]]) \
                and parts[1] == Path(parts[1]).name and not parts[1].startswith("."):
            entries.append((name, parts[0], parts[1]))
    return entries


def keep_new_results(blob: bytes, root: Path) -> None:
    """Calibrations and node roundings a node made, added to those of the workspace at ``root`` (a file already
    here is kept)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        for name, folder, file in _kept_entries(zf):
            target = root / folder / file
            if not target.exists():
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))


def _moved(ref: DataRef | None, what: tuple[str, bool] | None, blob: bytes | None, into: Path) -> DataRef | None:
    if ref is None or what is None or blob is None:
        return ref
    return replace(ref, path=_unpack(blob, what[1], what[0], into))
