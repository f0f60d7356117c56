"""Where a run's result goes, written safely; and the leftovers of runs that were killed.

A result never replaces the source model or a file the source needs (its external data), whatever path,
``OUT/model.onnx``, hard link or symbolic link names it (:func:`check_targets`). It is written under a
temporary name in OUT's folder and renamed into place only when the run succeeded (:func:`install_model`), so
a failed run leaves every existing file as it was. Its external data is named after OUT (``OUT.onnx.data``,
:func:`data_name`) and the model records that name, so two results in one folder never share a weight file.

Temporary folders carry the pid of the process that made them (``.ortlab-work-<pid>-…`` next to a result,
``.ortlab-run-<pid>-…`` for a run into a file, ``ortlab-run-<pid>-…`` in the system temp folder for the
scratch files of a run's child). :func:`clean_stale` removes those whose process is gone, once they are a few
minutes old, and the run folders of the workspace that a killed run left without a result.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ortlab.core.errors import ModelLoadError, OrtlabError, OutputError  # noqa: F401 (OutputError: raised here, defined with the others)
from ortlab.core.layout import ARTIFACT_FILE, MODEL_FILE, QDQ_FILE, RECIPE_FILE, qdq_path
from ortlab.model.inspect import external_data_files

WORK_PREFIX = ".ortlab-work-"    # a run's stages, inside the folder that receives the result
RUN_PREFIX = ".ortlab-run-"      # the artifact folder of a run whose result goes to a single OUT.onnx
TEMP_PREFIX = "ortlab-run-"      # a run child's private temp folder (quantization scratch copies) in /tmp
OWNER_FILE = ".ortlab-owner"     # in a workspace run folder while its run is going: the owning pid
RUNNING_FILE = ".ortlab-running.json"  # in a workspace run folder while its run is going: the spec, to run again
RECORDED_FILE = ".ortlab-recorded"  # in a run folder once its run is in the history: the run id
STALE_AFTER_S = 300.0            # leftovers younger than this are never removed (their owner may be starting)

_PID_NAME = re.compile(r"^(?:\.ortlab-work-|\.ortlab-run-|ortlab-run-|\.import-|\.upload-)(\d+)-")


def data_name(model_path) -> str:
    """The external-data file name of a result written to ``model_path``: ``<file name>.data``."""
    return Path(model_path).name + ".data"


def result_files(out, *, as_file: bool) -> list[Path]:
    """The files a run writes for ``out``: ``OUT.onnx`` and its data (and a static int8 run's QDQ graph
    ``OUT.qdq.onnx`` with its data), or a folder's model, data, recipe.json, artifact.json and QDQ graph."""

    out = Path(out).expanduser()
    if as_file:
        qdq = qdq_path(out)
        return [out, out.with_name(data_name(out)), qdq, qdq.with_name(data_name(qdq))]
    return [out / MODEL_FILE, out / data_name(MODEL_FILE), out / RECIPE_FILE, out / ARTIFACT_FILE, out / QDQ_FILE]


def needed_files(source) -> list[Path]:
    """The source model and every external-data file it references (as far as they can be read)."""
    source = Path(source).expanduser()
    files = [source]
    if source.is_file():
        try:

            files += list(external_data_files(source).values())
        except (ModelLoadError, OSError):  # an unreadable source fails later, with its own message
            pass
    return files


def same_file(a, b) -> bool:
    """Whether ``a`` and ``b`` name the same file: the same absolute or resolved path (symbolic links
    followed), or the same device and inode (hard links)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):
        pass
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_targets(source, targets: Iterable) -> None:
    """Raise :class:`OutputError` when a file in ``targets`` is the source model or one of its external-data
    files (by path, resolved path or inode)."""
    needed = needed_files(source)
    for target in targets:
        for keep in needed:
            if same_file(target, keep):
                what = "the source model" if keep == needed[0] else f"the source's external data '{Path(keep).name}'"
                raise OutputError(f"The result would overwrite {what} ({Path(target).name}); choose another OUT: "
                                  "the source model and its files are never overwritten.")


def make_temp_dir(prefix: str, parent) -> Path:
    """A new folder ``<prefix><pid>-…`` in ``parent`` (for :func:`clean_stale` to recognise)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def install_model(src, target) -> Path:
    """Move the model at ``src`` (with its external data) to ``target``, atomically per file.

    The model goes through a temporary name in ``target``'s folder and is renamed only when complete. External
    data, when the model has any, is written once as ``<target name>.data`` (:func:`data_name`) and the model
    records that location. ``src``'s files are consumed. Returns ``target``.
    """
    import onnx

    src, target = Path(src), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    external = external_data_files(src)
    stage = make_temp_dir(WORK_PREFIX, target.parent)
    try:
        staged = stage / target.name
        if external:
            location = data_name(target)
            model = onnx.load_model(str(src), load_external_data=True)
            onnx.save_model(model, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=location, size_threshold=1024)
            del model
            if (stage / location).is_file():
                os.replace(stage / location, target.with_name(location))
        else:
            shutil.move(str(src), str(staged))
        os.replace(staged, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # left only when the write failed: replaced away otherwise
    return path


# -- leftovers of killed runs ----------------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _old(path: Path, older_than_s: float, now: float) -> bool:
    try:
        return now - path.lstat().st_mtime >= older_than_s
    except OSError:
        return False


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return True
    except OSError:
        return False


def _stale_named(folder: Path, older_than_s: float, now: float) -> list[Path]:
    """Entries of ``folder`` named by :data:`_PID_NAME` whose pid is gone and that are old enough."""
    out: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return out
    for p in entries:
        m = _PID_NAME.match(p.name)
        if m and not pid_alive(int(m.group(1))) and _old(p, older_than_s, now):
            out.append(p)
    return out


def owner_alive(run_dir) -> bool:
    """Whether the process named in ``run_dir``'s owner file (the run's child, or the server before it starts)
    still runs."""
    return _owner_alive(Path(run_dir))


def _owner_alive(run_dir: Path) -> bool:
    try:
        return pid_alive(int((run_dir / OWNER_FILE).read_text().strip() or 0))
    except (OSError, ValueError):
        return False


def clean_stale(workspace=None, folders: Iterable = (), *, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove what killed runs left behind; returns what was removed.

    Looks in the system temp folder, in ``folders`` and, with a ``workspace``, in its models, data and
    artifacts folders and inside each run folder; a run folder without ``artifact.json`` whose owner is gone
    (a killed or failed run) goes too, unless it holds its spec (:data:`RUNNING_FILE`: a run the server's end
    interrupted, listed by ``run_recovery.interrupted_runs`` until the person runs it again or dismisses it). Only
    entries older than ``older_than_s`` seconds whose owning process no longer runs are touched.
    """

    now = time.time()
    places = [Path(tempfile.gettempdir()), *(Path(f) for f in folders)]
    runs_dir: Path | None = None
    if workspace is not None:
        runs_dir = Path(workspace.artifacts_dir)
        places += [Path(workspace.models_dir), Path(workspace.root) / "data", runs_dir]
    removed: list[Path] = []
    for place in places:
        removed += [p for p in _stale_named(place, older_than_s, now) if _remove(p)]
    if runs_dir is not None and runs_dir.is_dir():
        for run in runs_dir.iterdir():
            if not run.is_dir() or run.is_symlink() or _PID_NAME.match(run.name):
                continue
            old = _old(run, older_than_s, now)  # before removing what is inside changes its time
            removed += [p for p in _stale_named(run, older_than_s, now) if _remove(p)]
            if (run / ARTIFACT_FILE).exists() or (run / RUNNING_FILE).exists() or _owner_alive(run) or not old:
                # a folder with its spec is an interrupted run: listed on History to run again, not removed here
                continue
            if not any(_PID_NAME.match(p.name) for p in run.iterdir()) and _remove(run):
                removed.append(run)
    return removed
