"""What the workspace stores besides runs: imported models (``models/<digest>/``) and uploaded data sets
(``data/<digest>/``), with the space each takes and the runs made from it; deleting one deletes those runs too.

Only a folder directly under the workspace's ``models/`` or ``data/`` can be deleted: never a symbolic link,
never a path outside the workspace, never a bundled sample."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ortlab.core.errors import OrtlabError
from ortlab.data.samples import samples_root
from ortlab.data.store import read_about
from ortlab.runs.artifact import Artifact
from ortlab.runs.runspec import DataRef
from ortlab.runs.workspace import Workspace, folder_bytes

DATA_DIR = "data"  # uploaded data sets: ``<workspace>/data/<digest>/{calibration,evaluation}``
MODEL = "model"
DATA = "data set"


class StoredItemError(OrtlabError):
    """A model or data set that cannot be deleted (outside the workspace, a link, a bundled sample, missing)."""


@dataclass(frozen=True)
class StoredItem:
    """One imported model or uploaded data set: ``kind`` (:data:`MODEL` or :data:`DATA`), its folder, a name
    to show (the model's file name(s); what a data set holds), the bytes its files take and the History runs
    made from it."""

    kind: str
    folder: Path
    name: str
    size_bytes: int
    run_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DeletedItem:
    """What deleting a :class:`StoredItem` removed: its folder, the runs deleted with it and the bytes freed
    (the folder's files and the runs' folders)."""

    kind: str
    folder: Path
    name: str
    run_ids: list[int]
    freed_bytes: int


def _children(parent: Path) -> list[Path]:
    """The real folders directly in ``parent`` (hidden temporary folders and links left out), sorted."""
    if not parent.is_dir() or parent.is_symlink():
        return []
    return sorted(p for p in parent.iterdir() if not p.name.startswith(".") and not p.is_symlink() and p.is_dir())


def _within(path, folder: Path) -> bool:
    """Whether ``path`` lies in ``folder`` (compared as written and with links resolved)."""
    p = Path(path).expanduser()
    if folder == p or folder in p.parents:
        return True
    try:
        r = p.resolve()
    except (OSError, RuntimeError):
        return False
    return folder == r or folder in r.parents


def _model_runs(folder: Path, runs: list[Artifact]) -> list[int]:
    """Runs whose source model is a file of the imported model ``folder`` (also when the workspace was moved:
    a source in a folder of the same digest name whose content hash starts with that digest)."""
    out = []
    for r in runs:
        src = Path(r.source_path)
        moved = src.parent.name == folder.name and r.source_sha256[:len(folder.name)] == folder.name
        if r.run_id is not None and (_within(src, folder) or moved):
            out.append(r.run_id)
    return out


def _refs(r: Artifact) -> list[DataRef]:
    spec = r.spec
    return [d for d in ((spec.calibration, spec.evaluation) if spec is not None else ()) if d is not None]


def _data_runs(folder: Path, runs: list[Artifact]) -> list[int]:
    """Runs that calibrated or evaluated on the data set in ``folder``."""
    return [r.run_id for r in runs if r.run_id is not None
            and any(d.path is not None and _within(d.path, folder) for d in _refs(r))]


def _data_name(folder: Path) -> str:
    """What a data set folder holds, in words: what the Data page called it when it was stored (its label, e.g.
    "photos.zip (40 images)"), its kind and the samples of each part; for a folder stored before labels were
    kept, its kind and the number of samples where it is cheap to tell. The digest folder name comes last."""
    about = read_about(folder)
    if about is not None:
        parts = about.get("parts")
        parts = parts if isinstance(parts, dict) else {}
        split = ", ".join(f"{n} to {'calibrate' if p == 'calibration' else 'evaluate'}" for p, n in parts.items())
        kind = {"images": "images", "tensors": "tensors", "text": "text lines"}.get(str(about.get("kind")), "samples")
        return f"{about['label']} · {about.get('samples', '?')} {kind}" + (f" ({split})" if split else "") \
            + f" · data/{folder.name}"
    parts = []
    for part in ("calibration", "evaluation"):
        sub = folder / part
        if (sub / "images").is_dir():
            n = sum(len(files) for _d, _s, files in os.walk(sub / "images"))
            parts.append(f"{part}: {n} image{'s' if n != 1 else ''}")
        elif sub.is_dir():
            files = sorted(p.name for p in sub.iterdir() if p.is_file() and p.name != "tokenizer.json")
            parts.append(f"{part}: {', '.join(files) or 'empty'}")
    return f"{'; '.join(parts) or 'empty'} · data/{folder.name}"


def _artifacts(ws: Workspace) -> list[Artifact]:
    return [r for r in ws.history().list() if isinstance(r, Artifact)]


def stored_items(ws: Workspace) -> list[StoredItem]:
    """Every imported model, then every uploaded data set, of the workspace ``ws`` with its size and runs."""
    runs = _artifacts(ws)
    items = []
    for folder in _children(ws.models_dir):
        names = sorted(p.name for p in folder.glob("*.onnx"))
        items.append(StoredItem(MODEL, folder, ", ".join(names) or folder.name, folder_bytes(folder),
                                _model_runs(folder, runs)))
    for folder in _children(ws.root / DATA_DIR):
        items.append(StoredItem(DATA, folder, _data_name(folder), folder_bytes(folder), _data_runs(folder, runs)))
    return items


def _checked(ws: Workspace, folder, parent: Path, what: str) -> Path:
    """``folder`` when it is a real folder directly in ``parent`` (of the workspace), else
    :class:`StoredItemError` saying why."""
    path = Path(folder).expanduser()
    if not path.is_absolute():
        path = parent / path
    try:
        samples = samples_root().resolve()
        if _within(path, samples):
            raise StoredItemError(f"{path.name} is a bundled sample: samples are part of ortlab and are never "
                                  "deleted.")
    except (OSError, RuntimeError):
        pass
    if path.is_symlink():
        raise StoredItemError(f"{path.name} is a link, not a {what} stored in the workspace: nothing was deleted.")
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise StoredItemError(f"There is no {what} {path.name} in the workspace (already deleted?).") from None
    if resolved.parent != parent.resolve() or not ws.contains(resolved) or not resolved.is_dir() \
            or resolved.name.startswith("."):
        raise StoredItemError(f"{path.name} is not a {what} stored in the workspace's {parent.name}/ folder: "
                              "only those can be deleted here; nothing was deleted.")
    return resolved


def _delete(ws: Workspace, kind: str, folder: Path, run_ids: list[int], name: str) -> DeletedItem:
    freed = 0
    for run_id in run_ids:
        freed += ws.delete_run(run_id).freed_bytes
    freed += folder_bytes(folder)
    shutil.rmtree(folder)  # removes links inside as links, never what they point to
    return DeletedItem(kind, folder, name, run_ids, freed)


def delete_model(ws: Workspace, folder) -> DeletedItem:
    """Delete the imported model in ``folder`` (``models/<digest>/``) and every run made from it (rows, run
    folders, the benchmarks that timed them); returns what was freed. :class:`StoredItemError` for anything else
    (a path outside the workspace, a link, a bundled sample, a missing folder): then nothing is deleted."""
    path = _checked(ws, folder, ws.models_dir, MODEL)
    item = next(i for i in stored_items(ws) if i.kind == MODEL and i.folder.resolve() == path)
    return _delete(ws, MODEL, path, item.run_ids, item.name)


def delete_dataset(ws: Workspace, folder) -> DeletedItem:
    """Delete the uploaded data set in ``folder`` (``data/<digest>/``) and every run that calibrated or evaluated
    on it; as :func:`delete_model`."""
    path = _checked(ws, folder, ws.root / DATA_DIR, DATA)
    item = next(i for i in stored_items(ws) if i.kind == DATA and i.folder.resolve() == path)
    return _delete(ws, DATA, path, item.run_ids, item.name)
