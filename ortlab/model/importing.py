"""Importing a model into the workspace: an uploaded file or a path, or a .zip with its external data, each
into its own folder, validated and never modifying the original."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from collections.abc import Callable, Iterator
from typing import Any


from ortlab.core.errors import ModelLoadError
from ortlab.core import zipsafe
from ortlab.core.text import one_line
from ortlab.model.inspect import external_data_files, load_model, sha256_file


MAX_STORED_NAME = 120  # characters of a stored model's file name (a longer upload name is shortened)


def _safe_filename(name: str) -> str:
    base = PurePosixPath(str(name).replace("\\", "/")).name
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._") or "model"
    if not base.lower().endswith(".onnx"):
        base = base.rsplit(".", 1)[0] if base.lower().endswith(".zip") else base
        base += ".onnx"
    if len(base) > MAX_STORED_NAME:  # file systems refuse names over 255 bytes: keep the start and the .onnx
        base = base[: MAX_STORED_NAME - 5].rstrip("._") + ".onnx"
    return base


def _is_zip(source) -> bool:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:4]) == b"PK\x03\x04"
    with open(source, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _is_junk(name: str) -> bool:
    parts = name.split("/")
    return parts[0] == "__MACOSX" or parts[-1].startswith("._")


def _extract_zip(zf: zipfile.ZipFile, dest: Path, member: str | None) -> Path:
    members = [("/".join(parts), info) for parts, info in zipsafe.safe_members(zf, ModelLoadError)]
    members = [(rel, info) for rel, info in members if not _is_junk(rel)]
    onnx_members = [rel for rel, _ in members if rel.lower().endswith(".onnx")]
    if member is not None:
        wanted = member.replace("\\", "/").strip("/")
        if wanted not in onnx_members:
            raise ModelLoadError(f"The zip has no .onnx member '{member}'. It contains: {', '.join(onnx_members) or 'none'}.")
        chosen = wanted
    elif not onnx_members:
        raise ModelLoadError("The zip contains no .onnx file. Put the model (.onnx) and its weight files in the zip.")
    elif len(onnx_members) > 1:
        raise ModelLoadError(f"The zip contains {len(onnx_members)} .onnx files ({', '.join(sorted(onnx_members)[:5])}); "
                             "pick one: upload a zip with a single model, or name the member to import.")
    else:
        chosen = onnx_members[0]
    for rel, info in members:
        zipsafe.extract_member(zf, info, dest / rel, ModelLoadError)
    return dest / chosen


UPLOAD_CHUNK = 8 << 20  # bytes copied at a time from an upload to the workspace


@contextlib.contextmanager
def saved_upload(fileobj, folder, filename: str = "model.onnx", *, on_saved=None) -> Iterator[tuple[Path, str]]:
    """Write an uploaded file object (a Streamlit ``UploadedFile``, any binary stream) to a temp file in ``folder``
    ``UPLOAD_CHUNK`` at a time, hashing it on the way, and yield (its path, its sha256); the temp file is removed
    afterwards. ``on_saved()`` is called once the bytes are on disk: the caller can drop its copy there."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if getattr(fileobj, "seekable", lambda: False)():
        fileobj.seek(0)
    with tempfile.TemporaryDirectory(prefix=f".upload-{os.getpid()}-", dir=folder) as tmp:
        path = Path(tmp) / _safe_filename(filename)
        h = hashlib.sha256()
        with open(path, "wb") as out:
            while chunk := fileobj.read(UPLOAD_CHUNK):
                h.update(chunk)
                out.write(chunk)
                del chunk
        if on_saved is not None:
            on_saved()
            release_memory()
        yield path, h.hexdigest()


def import_upload(fileobj, workspace_models_dir, filename: str = "model.onnx", *, member: str | None = None,
                  on_saved=None) -> Path:
    """:func:`import_model` for an uploaded file object, streamed to the workspace first (:func:`saved_upload`),
    so this process never holds another copy of the upload. (The app imports in a child process instead:
    ``isolated.import_upload``.)"""
    with saved_upload(fileobj, workspace_models_dir, filename, on_saved=on_saved) as (path, digest):
        result = import_model(path, workspace_models_dir, filename=filename or "model.onnx", member=member,
                              sha256=digest)
    release_memory()
    return result


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the system (glibc ``malloc_trim``), so that a big
    import or inspection leaves no resident memory behind in a long-lived server."""
    import ctypes
    import gc
    import sys

    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


def _unzip(file: Any, dest: Path, member: str | None) -> Path:
    """The model .onnx of zip ``file`` (a path or a file object), extracted safely into ``dest``."""
    try:
        zf = zipfile.ZipFile(file)
    except zipfile.BadZipFile:
        raise ModelLoadError("The file looks like a zip but cannot be read (truncated or corrupt). "
                             "Upload the complete .zip again.") from None
    with zf:
        try:
            return _extract_zip(zf, dest, member)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
            raise ModelLoadError(f"The zip cannot be extracted ({one_line(exc)}); upload it again.") from None


def _with_external_data(digest: str, files: dict[str, Path]) -> str:
    """The model's ``digest`` extended with its external data files' (location and content), when it has any."""
    if not files:
        return digest
    h = hashlib.sha256(digest.encode())
    for loc in sorted(files):
        h.update(loc.encode() + b"\0" + sha256_file(files[loc]).encode())
    return h.hexdigest()


def _stored_copy(final_path: Path, model_sha: str) -> Path | None:
    """The model already stored: at ``final_path``, or the same content under another name in its folder."""
    if final_path.is_file():
        return final_path
    final_dir = final_path.parent
    for existing in sorted(final_dir.glob("*.onnx")) if final_dir.is_dir() else []:
        if sha256_file(existing) == model_sha:  # the same content under another name: stored once
            return existing
    return None


def import_model(source, workspace_models_dir, filename: str = "model.onnx", *, member: str | None = None,
                 sha256: str | None = None, check: Callable[[Path], object] | None = None) -> Path:
    """Copy an uploaded .onnx (bytes or path) or a .zip (model + external data) into a new folder
    ``workspace_models_dir/<sha256 prefix>/``, validate it, and return the stored .onnx path.

    Zips with absolute paths, ``..``, symlinks, encrypted members or bomb-like sizes are refused;
    a zip with several .onnx files needs ``member``. The source is never modified. ``sha256``: the source
    file's digest when the caller already computed it (a plain .onnx path is then not read again to hash it).
    Files are copied (``shutil.copyfile``: a kernel-side copy, never held in this process), not hard-linked:
    a link would share the inode, so re-exporting the model in place would change the stored copy too.
    ``check(path)``: called on the staged copy (its external data beside it) before it is moved into the models
    folder; when it raises (a model this ONNX Runtime cannot read, say), the error goes to the caller and nothing
    is left in the models folder. It is not called when the same model is already stored.
    """
    models_dir = Path(workspace_models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    is_bytes = isinstance(source, (bytes, bytearray, memoryview))
    if not is_bytes and not Path(source).is_file():
        raise ModelLoadError(f"'{source}' does not exist or is not a file.")
    name = _safe_filename(filename if (is_bytes or filename != "model.onnx") else Path(source).name)
    with tempfile.TemporaryDirectory(prefix=f".import-{os.getpid()}-", dir=models_dir) as tmp_name:
        tmp = Path(tmp_name)
        if _is_zip(source):
            onnx_path = _unzip(io.BytesIO(bytes(source)) if is_bytes else source, tmp / "zip", member)
            src_dir = onnx_path.parent
            if filename == "model.onnx":
                name = _safe_filename(onnx_path.name)
        elif is_bytes:
            onnx_path = tmp / "upload.onnx"
            onnx_path.write_bytes(bytes(source))
            src_dir = None
        else:
            onnx_path = Path(source)
            src_dir = onnx_path.parent
        if src_dir is None:  # bare bytes have no folder, so external-data references cannot be satisfied
            model = load_model(onnx_path.read_bytes(), check=True, load_external=False)
        else:
            model = load_model(onnx_path, check=True, load_external=False, weights=False)
        files = external_data_files(model, src_dir) if src_dir is not None else {}
        digest = model_sha = sha256 if (sha256 and not is_bytes and onnx_path == Path(source)) else sha256_file(onnx_path)
        final_dir = models_dir / _with_external_data(digest, files)[:16]
        final_path = final_dir / name
        stored = _stored_copy(final_path, model_sha)
        if stored is not None:
            return stored
        stage = tmp / "stage"
        stage.mkdir()
        shutil.copyfile(onnx_path, stage / name)
        for loc, p in files.items():
            out = stage / loc.replace("\\", "/")
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out)
        if check is not None:  # refused: the temporary folder goes, and the models folder never saw the model
            check(stage / name)
        if final_dir.exists():  # same content stored under another file name
            for item in stage.iterdir():
                if not (final_dir / item.name).exists():
                    shutil.move(str(item), final_dir / item.name)
        else:
            os.replace(stage, final_dir)
    return final_path
