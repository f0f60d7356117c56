"""Where imported models, artifacts and the run history live on disk (folders 0700: only their owner reads
them)."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from ortlab.runs.history import History
from ortlab.runs.artifact import Artifact
from ortlab.runs.history import BenchmarkRecord, HistoryError
from ortlab.core.errors import ModelLoadError

ENV_VAR = "ORTLAB_HOME"
CACHE_VAR = "ORTLAB_CACHE_DIR"
HOME_CACHE = "netron-viewer"  # under $ORTLAB_HOME: the cache when no cache directory can be written; not workspace
IMPORT_ROOTS_VAR = "ORTLAB_IMPORT_ROOTS"
IMPORT_SUFFIXES = (".onnx", ".zip")
IMPORT_REFUSED = ("That path cannot be imported: it is not an existing .onnx or .zip file inside a folder listed in "
                  f"${IMPORT_ROOTS_VAR} (and outside ortlab's own workspace). Upload the model instead, or add its "
                  "folder to that variable and restart the app.")


def default_root() -> Path:
    """``$ORTLAB_HOME`` when set, else ``~/.ortlab``."""
    env = os.environ.get(ENV_VAR, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".ortlab"


def cache_dirs() -> tuple[Path, Path]:
    """Where ortlab keeps files it can rebuild that belong to no workspace (the Netron viewer's), first choice
    first: ``$ORTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/ortlab``, else ``~/.cache/ortlab``; then
    ``$ORTLAB_HOME/netron-viewer`` (where versions before kept them), for when the first cannot be written."""
    env = os.environ.get(CACHE_VAR, "").strip()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if env:
        first = Path(env).expanduser()
    elif xdg and Path(xdg).is_absolute():  # the XDG spec: a relative value is to be ignored
        first = Path(xdg) / "ortlab"
    else:
        first = Path.home() / ".cache" / "ortlab"
    return first, default_root() / HOME_CACHE


def import_roots() -> list[Path]:
    """The folders a path import may read from: ``$ORTLAB_IMPORT_ROOTS``, separated by ``os.pathsep`` (none when
    unset). Folders that do not exist are left out."""
    out: list[Path] = []
    for part in os.environ.get(IMPORT_ROOTS_VAR, "").split(os.pathsep):
        if not part.strip():
            continue
        try:
            root = Path(part.strip()).expanduser().resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if root.is_dir():
            out.append(root)
    return out


def importable_path(path_text: str, roots=None, home=None) -> Path:
    """The resolved file a path import may copy, or ``ModelLoadError`` with one message (:data:`IMPORT_REFUSED`)
    whatever the reason: missing, not a regular .onnx/.zip file, outside every import root (``roots``, default
    :func:`import_roots`) or inside ortlab's home (``home``, default :func:`default_root`, where every user's
    workspace lives). The same words for all of them, so the answer never tells whether a path exists."""
    allowed = [Path(r).resolve() for r in (import_roots() if roots is None else roots)]
    try:
        own = Path(home if home is not None else default_root()).expanduser().resolve()
        src = Path(str(path_text).strip().strip('"')).expanduser()
        resolved = src.resolve(strict=True) if src.is_absolute() else None
        ok = (resolved is not None and resolved.suffix.lower() in IMPORT_SUFFIXES
              and any(r in resolved.parents for r in allowed)
              and resolved != own and own not in resolved.parents and resolved.is_file())
    except (OSError, RuntimeError, ValueError):
        ok = False
    if not ok:
        raise ModelLoadError(IMPORT_REFUSED)
    assert resolved is not None
    return resolved


def _unusable_workspace(root: Path, folder: Path, exc: OSError) -> str:
    """Why the workspace at ``root`` cannot be used (``folder`` of it met ``exc``), and what to do."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        user = f"uid {getattr(os, 'getuid', lambda: '?')()}"
    where = "" if folder == root else f" ({folder.name}/ in it)"
    if isinstance(exc, PermissionError):
        return (f"The workspace {root} cannot be used: this user ({user}) may not read and write it{where}. Set "
                f"${ENV_VAR} to a folder this user owns, or give this user access to that one.")
    return (f"The workspace {root} cannot be used{where}: {exc.strerror or exc}. Set ${ENV_VAR} to another folder, "
            "or fix that one.")


def _private(folder: Path) -> None:
    """Make a folder of the workspace 0700 (only its owner reads it), when it is ours."""
    try:
        if folder.stat().st_uid == os.getuid():
            os.chmod(folder, 0o700)
    except (OSError, AttributeError):  # no getuid on Windows
        pass


@dataclass(frozen=True)
class DeletedRun:
    """What :meth:`Workspace.delete_run` removed: the run id, the folders deleted (none for a result outside
    the workspace), the benchmarks that timed it and the bytes freed."""

    run_id: int
    removed: list[Path]
    benchmarks: list[int]
    freed_bytes: int
    timed: list[str] = field(default_factory=list)  # per benchmark: "benchmark #4 of 2026-12-03 14:02 (A vs B)"



def bench_text(b: BenchmarkRecord) -> str:
    """A stored benchmark in words: its number, when, and what it timed ("benchmark #4 of 2026-12-03 14:02: original
    · digits_cnn vs #3 int8 static QDQ, batch 1")."""
    names = " vs ".join(v.name or v.id or (f"run #{v.run_id}" if v.run_id is not None else "a model")
                        for v in b.variants)
    sizes = list(b.config.batch_sizes)
    return (f"benchmark #{b.id} of {b.created_at.replace('T', ' ')[:16]}: {names or 'no models'}, "
            f"batch {'size' if len(sizes) == 1 else 'sizes'} {', '.join(str(n) for n in sizes)}")


def folder_bytes(folder: Path, skip: tuple[str, ...] = ()) -> int:
    """Bytes of the files under ``folder``, symbolic links neither followed nor counted beyond their own size;
    the folders named in ``skip`` directly under ``folder`` are left out."""
    total = 0
    for dirpath, dirs, files in os.walk(folder):  # os.walk does not descend into linked folders
        if dirpath == str(folder):
            dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total

class Workspace:
    """A folder holding ``models/``, ``artifacts/`` and ``history.sqlite``.

    Each instance is independent: pass a different ``root`` per user or per test.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = (Path(root).expanduser() if root is not None else default_root()).resolve()
        self.models_dir = self.root / "models"
        self.artifacts_dir = self.root / "artifacts"
        self.db_path = self.root / "history.sqlite"
        for folder in (self.root, self.models_dir, self.artifacts_dir):
            try:
                existed = folder.is_dir()
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
                    raise PermissionError(13, "Permission denied", str(folder))
            except OSError as exc:
                raise HistoryError(_unusable_workspace(self.root, folder, exc)) from None
            if not existed or folder != self.root:  # an existing root chosen with $ORTLAB_HOME is left as it is
                _private(folder)

    def new_artifact_dir(self, prefix: str = "run") -> Path:
        """Create and return a new, empty folder under ``artifacts/`` with a unique, sortable name."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        while True:
            path = self.artifacts_dir / f"{prefix}-{stamp}-{secrets.token_hex(4)}"
            try:
                path.mkdir(mode=0o700, parents=True)
                return path
            except FileExistsError:
                continue

    def history(self):
        """The :class:`ortlab.runs.history.History` stored in this workspace."""

        return History(self.db_path)

    def contains(self, path) -> bool:
        """Whether ``path`` (symbolic links resolved) lies inside this workspace."""
        try:
            resolved = Path(path).expanduser().resolve()
        except (OSError, RuntimeError):
            return False
        return resolved != self.root and self.root in resolved.parents

    def relative(self, path) -> str:
        """``path`` as shown to a person: ``workspace/…`` inside the workspace, else just its file name."""
        p = Path(path)
        try:
            return str(Path("workspace") / p.expanduser().resolve().relative_to(self.root))
        except (ValueError, OSError, RuntimeError):
            return p.name

    def size_bytes(self) -> int:
        """Bytes of every file in the workspace (imports, data, artifacts, history; not the fallback cache)."""
        return folder_bytes(self.root, skip=(HOME_CACHE,))

    def delete_run(self, run_id: int) -> DeletedRun:
        """Delete a run: its History row, the benchmarks that timed it, and its folder when that lies under
        ``artifacts/`` (a result written outside the workspace, e.g. ``ortlab optimize … OUT.onnx``, is only
        forgotten, never deleted). ``HistoryError`` when there is no such run."""
        import shutil

        history = self.history()
        run = next((r for r in history.list() if (r.run_id if isinstance(r, Artifact) else r.id) == int(run_id)),
                   None)
        if run is None:
            raise HistoryError(f"No run with id {run_id} in the history.")
        removed: list[Path] = []
        freed = 0
        if isinstance(run, Artifact):
            folder = Path(run.model_path).parent
            inside = self.contains(folder) and folder.resolve().parent == self.artifacts_dir  # a run folder
            if inside and folder.is_dir():
                freed = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
                shutil.rmtree(folder)
                removed.append(folder)
        records = sorted((b for b in history.list_benchmarks()
                          if isinstance(b, BenchmarkRecord) and b.id is not None
                          and any(v.run_id == int(run_id) for v in b.variants)), key=lambda b: b.id or 0)
        benches = [int(b.id) for b in records if b.id is not None]
        for bench_id in benches:
            history.delete_benchmark(bench_id)
        history.delete(int(run_id))
        return DeletedRun(int(run_id), removed, benches, freed, [bench_text(b) for b in records])

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"
