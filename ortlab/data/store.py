"""Writing a dataset to disk so that another process (a run's child) can load it again, and its digest."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ortlab.core.errors import DataError

from ortlab.data.dataset import Dataset
from ortlab.data.loaders import TOKENIZER_FILE


def dataset_digest(ds: Dataset) -> str:
    """sha256 of a dataset's content (sample names, labels, image bytes or arrays)."""
    import hashlib

    h = hashlib.sha256(f"{ds.kind}|{ds.is_random}|{ds.seed}|{','.join(ds.class_names)}".encode())
    if ds.kind == "tensors":
        for key in sorted(ds.tensors):
            arr = np.ascontiguousarray(ds.tensors[key])
            h.update(f"|{key}|{arr.dtype.str}|{arr.shape}".encode())
            h.update(arr.tobytes())
    if ds.kind == "text":
        h.update(f"|{ds.seq_len}|".encode())
        h.update(ds.tokenizer_json.encode())
        for line in ds.texts:
            h.update(line.encode() + b"\n")
    for s in ds.samples:
        h.update(f"|{s.name}|{s.label}|{s.index}".encode())
        if ds.kind == "images":
            blob = ds.blob(s.source)
            h.update(blob if blob is not None else Path(s.source).read_bytes())
    return h.hexdigest()


def write_dataset(ds: Dataset, folder) -> Path:
    """Write ``ds`` under ``folder`` so it loads again elsewhere: images as files (class sub-folders kept),
    tensors as ``data.npy``/``data.npz`` (with ``labels``), text as ``data.txt`` with ``tokenizer.json`` beside it.
    Returns the path to load (folder or file).
    Random datasets have nothing to write (DataError)."""
    import os
    import shutil
    import tempfile

    folder = Path(folder)
    if ds.kind == "random":
        raise DataError("Random data is regenerated from its count and seed; there is nothing to write.")
    if ds.kind == "tensors":
        name = "data.npy" if "" in ds.tensors else "data.npz"
    elif ds.kind == "text":
        name = "data.txt"
    else:
        name = "images"
    target = folder / name
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder))
    try:
        if ds.kind == "tensors":
            rows = [s.row for s in ds.samples]
            if "" in ds.tensors:
                np.save(tmp / name, ds.tensors[""][rows], allow_pickle=False)
            else:
                arrays = {k: v[rows] for k, v in ds.tensors.items()}
                if ds.labeled():
                    arrays["labels"] = np.asarray([s.label for s in ds.samples], dtype=np.int64)
                np.savez(tmp / name, **arrays)  # type: ignore[arg-type]
        elif ds.kind == "text":
            (tmp / name).write_text("".join(ds.texts[s.index or 0] + "\n" for s in ds.samples), encoding="utf-8")
            (folder / TOKENIZER_FILE).write_text(ds.tokenizer_json, encoding="utf-8")
        else:
            root = tmp / name
            for s in ds.samples:
                dest = root.joinpath(*s.name.split("/"))
                dest.parent.mkdir(parents=True, exist_ok=True)
                blob = ds.blob(s.source)
                if blob is not None:
                    dest.write_bytes(blob)
                else:
                    shutil.copyfile(s.source, dest)
        try:
            os.replace(tmp / name, target)
        except OSError:
            if not target.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


ABOUT_FILE = "about.json"  # beside a stored data set's parts: what it was made from, for History's list


def write_about(folder, label: str, ds: Dataset, parts: dict[str, int]) -> None:
    """Write what the data set stored in ``folder`` was made from: the Data page's ``label`` (e.g. "photos.zip (40
    images)"), its kind, sample count, classes and the samples in each part (``{"calibration": 32, ...}``). A folder
    that cannot be written only loses its readable name."""
    import json
    from datetime import UTC, datetime

    about = {"label": label, "kind": ds.kind, "samples": len(ds), "classes": len(ds.class_names),
             "parts": dict(parts), "stored_at": datetime.now(UTC).isoformat(timespec="seconds")}
    path = Path(folder) / ABOUT_FILE
    try:
        if not path.exists():
            path.write_text(json.dumps(about), encoding="utf-8")
    except OSError:
        pass


def read_about(folder) -> dict | None:
    """What :func:`write_about` wrote for the data set in ``folder`` (None when nothing readable was)."""
    import json

    try:
        about = json.loads((Path(folder) / ABOUT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return about if isinstance(about, dict) and isinstance(about.get("label"), str) else None
