"""Reading data a person hands ortlab: image folders, zips and uploads, tensor files (.npy/.npz), text files
with a tokenizer, or any of them by path (:func:`load_path`)."""

from __future__ import annotations

import io
import posixpath
import zipfile
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
from PIL import Image

from ortlab.core.errors import DataError
from ortlab.core import limits, zipsafe
from ortlab.core.text import one_line

from ortlab.data.dataset import Dataset, Sample, load_tokenizer, check_image_pixels

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})
TEXT_EXTENSIONS = frozenset({".txt", ".text"})
TOKENIZER_FILE = "tokenizer.json"


def _is_image_name(name: str) -> bool:
    return posixpath.splitext(name.lower())[1] in IMAGE_EXTENSIONS


def _is_hidden(parts: Sequence[str]) -> bool:
    return any(p.startswith(".") or p == "__MACOSX" for p in parts)

def _check_image(src: Any, name: str) -> None:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the pixel limit below decides
            img = Image.open(src)
        with img:
            size = img.size
            img.verify()
    except Image.DecompressionBombError as exc:  # PIL's own cap (2 × Image.MAX_IMAGE_PIXELS), hit at open
        raise DataError(f"Image {name} is too large to decode ({one_line(exc)}); at most "
                        f"{limits.limit('IMAGE_MAX_PIXELS') / 1e6:g} megapixels are accepted. Resize the images "
                        f"and load them again.") from None
    except Exception as exc:  # PIL raises many types for broken files
        raise DataError(f"{name} has an image extension but cannot be opened as an image ({one_line(exc)}).") from None
    check_image_pixels(size, name)


def _check_image_bytes(data: bytes, name: str) -> None:
    _check_image(io.BytesIO(data), name)


def _check_image_path(path: Path, name: str) -> None:
    _check_image(path, name)


def _build(entries: list[tuple[tuple[str, ...], str]], class_names: Sequence[str] | None, where: str,
           blobs: dict[str, bytes] | None = None) -> Dataset:
    """Turn (relative path parts, source) pairs into a Dataset; class = first folder when present."""
    if not entries:
        raise DataError(f"No images found in {where} (supported: {', '.join(sorted(IMAGE_EXTENSIONS))}).")
    # a single wrapping folder ("digits/0/a.png") is not a class unless it names one of the given classes
    while all(len(p) > 1 for p, _ in entries) and len({p[0] for p, _ in entries}) == 1:
        top = entries[0][0][0]
        if class_names is not None and top in class_names and all(len(p) == 2 for p, _ in entries):
            break
        entries = [(p[1:], s) for p, s in entries]
    depths = {len(p) > 1 for p, _ in entries}
    if depths == {True, False}:
        loose = next("/".join(p) for p, _ in entries if len(p) == 1)
        raise DataError(f"{where} mixes loose images (e.g. {loose}) with class folders; put every image in a "
                        f"class folder, or none.")
    entries = sorted(entries)
    if depths == {False}:
        samples = [Sample("/".join(p), None, s) for p, s in entries]
        return Dataset("images", samples, [], False, _blobs=blobs or {})
    folders = sorted({p[0] for p, _ in entries})
    if class_names is not None:
        names = list(class_names)
        unknown = [f for f in folders if f not in names]
        if unknown:
            shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
            raise DataError(f"Class folder(s) {', '.join(unknown[:5])} in {where} are not among the model's "
                            f"{len(names)} labels ({shown}); rename the folders to match the labels.")
    else:
        names = folders
    index = {n: i for i, n in enumerate(names)}
    samples = [Sample("/".join(p), index[p[0]], s) for p, s in entries]
    samples.sort(key=lambda s: (s.label, s.name))
    return Dataset("images", samples, names, False, _blobs=blobs or {})


def load_image_folder(path, class_names: Sequence[str] | None = None) -> Dataset:
    """Images under ``path``: class sub-folders become labels (ordered like ``class_names`` when given,
    else sorted); a flat folder is unlabeled. Non-image files are skipped."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"Image folder {root} does not exist or is not a folder.")
    entries: list[tuple[tuple[str, ...], str]] = []
    for f in root.rglob("*"):
        rel = f.relative_to(root).parts
        if _is_hidden(rel) or not f.is_file() or not _is_image_name(f.name):
            continue
        name = "/".join(rel)
        _check_image_path(f, name)
        entries.append((rel, str(f)))
    return _build(entries, class_names, f"folder {root}")


def load_image_zip(path_or_bytes, class_names: Sequence[str] | None = None) -> Dataset:
    """Images from a zip (path or bytes), read into memory: same folder rules as :func:`load_image_folder`.
    Unsafe members and archives over the limits of :mod:`ortlab.core.zipsafe` are refused."""
    where = "the zip" if isinstance(path_or_bytes, (bytes, bytearray)) else f"zip {path_or_bytes}"
    try:
        src = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, (bytes, bytearray)) else path_or_bytes
        zf = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{where} is not a readable zip file ({one_line(exc)}).") from None
    title = where[:1].upper() + where[1:]
    with zf:
        entries, blobs = [], {}
        cap = int(limits.limit("IMAGE_ZIP_MAX_BYTES"))
        hint = (f"Images are held in memory, so an image zip may hold at most {limits.gb(cap)} (image zip limit, "
                f"{limits.env_name('IMAGE_ZIP_MAX_BYTES')}); use fewer or smaller images.")
        for parts, info in zipsafe.safe_members(zf, DataError, title, max_total=cap, total_hint=hint):
            if _is_hidden(parts) or not _is_image_name(parts[-1]):
                continue
            try:
                data = zipsafe.read_member(zf, info, DataError, title)
            except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
                raise DataError(f"Cannot read {info.filename} from {where} ({one_line(exc)}).") from None
            name = "/".join(parts)
            _check_image_bytes(data, name)
            source = f"zip:{name}"
            blobs[source] = data
            entries.append((parts, source))
    return _build(entries, class_names, where, blobs)


def load_image_files(files: Sequence[tuple[str, bytes]] | Sequence[Path], class_names: Sequence[str] | None = None) -> Dataset:
    """Uploaded images as (name, bytes) pairs, or file paths. Names like ``cat/1.png`` give labels."""
    entries: list[tuple[tuple[str, ...], str]] = []
    blobs: dict[str, bytes] = {}
    for item in files:
        if isinstance(item, (str, Path)):
            p = Path(item)
            if not _is_image_name(p.name):
                continue
            if not p.is_file():
                raise DataError(f"Image file {p} does not exist.")
            _check_image_path(p, p.name)
            entries.append(((p.name,), str(p)))
            continue
        name, data = item
        parts = zipsafe.member_parts(str(name), DataError, "The upload")
        if not parts or _is_hidden(parts) or not _is_image_name(parts[-1]):
            continue
        rel = "/".join(parts)
        _check_image_bytes(bytes(data), rel)
        source = f"upload:{rel}"
        if source in blobs:
            raise DataError(f"Two uploaded files are both named {rel}; rename one.")
        blobs[source] = bytes(data)
        entries.append((parts, source))
    return _build(entries, class_names, "the uploaded files", blobs)


def load_tensor_file(path_or_bytes, name: str | None = None) -> Dataset:
    """Tensors from ``.npy`` (one input; first axis = samples) or ``.npz`` (one key per model input; an
    optional integer ``labels`` key gives labels). Bytes are accepted too (``name`` for messages)."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        label = name or "the uploaded tensor file"
        src: Any = io.BytesIO(path_or_bytes)
    else:
        label = str(path_or_bytes)
        if not Path(path_or_bytes).is_file():
            raise DataError(f"Tensor file {label} does not exist.")
        src = path_or_bytes
    if isinstance(src, io.BytesIO):
        head = src.getvalue()[:6]
    else:
        with open(src, "rb") as fh:
            head = fh.read(6)
    if not (head.startswith(b"\x93NUMPY") or head.startswith(b"PK")):
        raise DataError(f"{label} is not a .npy or .npz file (NumPy's np.save/np.savez format).")
    check_tensor_file(src, label)
    try:
        loaded = np.load(src, allow_pickle=False)
    except ValueError as exc:
        raise DataError(f"{label} holds Python objects, not plain numeric arrays ({one_line(exc)}).") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{label} is not a .npy or .npz file ({one_line(exc)}).") from None
    if isinstance(loaded, np.ndarray):
        arrays = {"": loaded}
    else:
        with loaded:
            arrays = {k: loaded[k] for k in loaded.files}
    labels = arrays.pop("labels", None) if len(arrays) > 1 else None
    if not arrays:
        raise DataError(f"{label} contains no arrays.")
    n = _sample_count(arrays, label)
    label_list, class_names = _tensor_labels(labels, n, label)
    samples = [Sample(f"sample_{i}", label_list[i], f"tensors:{label}", i) for i in range(n)]
    return Dataset("tensors", samples, class_names, False, _tensors=arrays)


def _sample_count(arrays: dict[str, np.ndarray], label: str) -> int:
    """The samples the arrays of a tensor file hold: numeric arrays with the same first axis, not empty."""
    lengths = {}
    for key, arr in arrays.items():
        if arr.ndim == 0:
            raise DataError(f"Array {key or '(npy)'} in {label} is a scalar; the first axis must count samples.")
        if arr.dtype.kind not in "fiub":
            raise DataError(f"Array {key or '(npy)'} in {label} has dtype {arr.dtype}; numeric arrays only.")
        lengths[key] = arr.shape[0]
    if len(set(lengths.values())) != 1:
        shown = ", ".join(f"{k}: {v}" for k, v in lengths.items())
        raise DataError(f"Arrays in {label} have different sample counts ({shown}); the first axis must match.")
    n = next(iter(lengths.values()))
    if n == 0:
        raise DataError(f"{label} has 0 samples.")
    return n


def _tensor_labels(labels: np.ndarray | None, n: int, label: str) -> tuple[list[int | None], list[str]]:
    """Each sample's label and the class names from a tensor file's ``labels`` array (none: no labels)."""
    if labels is None:
        return [None] * n, []
    if labels.ndim != 1 or labels.shape[0] != n or labels.dtype.kind not in "iu" or (labels < 0).any():
        raise DataError(f"'labels' in {label} must be {n} non-negative integers.")
    return [int(v) for v in labels], [str(c) for c in range(int(labels.max()) + 1)]


def _read_source(path_or_bytes, what: str) -> tuple[bytes, str]:
    if isinstance(path_or_bytes, (bytes, bytearray)):
        return bytes(path_or_bytes), what
    p = Path(path_or_bytes)
    if not p.is_file():
        raise DataError(f"{what[:1].upper() + what[1:]} {p} does not exist.")
    return p.read_bytes(), str(p)

def load_text_file(path_or_bytes, tokenizer, seq_len: int | None = None, name: str | None = None) -> Dataset:
    """Text, one example per line (blank lines skipped), with a Hugging Face ``tokenizer.json`` (path or
    bytes/str). The lines become ``input_ids``/``attention_mask``/``token_type_ids`` at ``seq_len`` (padded or
    truncated; None: the model's fixed length, else 128) when a model is fed."""
    raw, label = _read_source(path_or_bytes, "text file") if not isinstance(path_or_bytes, (bytes, bytearray)) \
        else (bytes(path_or_bytes), name or "the uploaded text file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{label} is not UTF-8 text; save it as UTF-8, one example per line.") from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"{label} has no non-empty lines; put one example per line.")
    if isinstance(tokenizer, str) and not tokenizer.lstrip().startswith("{"):
        tokenizer = Path(tokenizer)
    if isinstance(tokenizer, Path):
        tok_raw, tok_label = _read_source(tokenizer, "tokenizer file")
    else:
        tok_raw = tokenizer.encode() if isinstance(tokenizer, str) else bytes(tokenizer)
        tok_label = "the uploaded tokenizer"
    try:
        tok_text = tok_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{tok_label} is not a tokenizer.json (not UTF-8 text).") from None
    load_tokenizer(tok_text, tok_label)  # fail now, not in the middle of a run
    if seq_len is not None and int(seq_len) < 1:
        raise DataError(f"The sequence length must be at least 1, got {seq_len}.")
    samples = [Sample(f"line {i + 1}", None, f"text:{label}", i) for i in range(len(lines))]
    return Dataset("text", samples, [], False, seq_len=int(seq_len) if seq_len else None, _texts=lines,
                   _tokenizer_json=tok_text)
def _npy_header(fh, what: str, label: str) -> tuple[np.dtype, int]:
    """(dtype, array bytes) that a .npy header declares, read without reading the array."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{what} in {label} is not a readable NumPy array ({one_line(exc)}).") from None
    if dtype.hasobject:
        raise DataError(f"{what} in {label} holds Python objects (dtype {dtype}), not plain numeric arrays; "
                        f"save numeric arrays (np.save/np.savez of float or integer arrays).")
    count = 1
    for d in shape:
        count *= int(d)
    return dtype, count * dtype.itemsize


def _tensor_cap_error(label: str, declared: int, cap: int) -> DataError:
    return DataError(f"{label} holds {limits.gb(declared)} of arrays once loaded; at most {limits.gb(cap)} are "
                     f"accepted (tensor file limit, {limits.env_name('TENSOR_FILE_MAX_BYTES')}). Use fewer "
                     f"samples: calibration needs a few hundred.")


def check_tensor_file(src: Any, label: str) -> None:
    """Check a .npy/.npz (path or BytesIO) from its headers before ``np.load`` expands it: array bytes at most
    ``limits.TENSOR_FILE_MAX_BYTES`` in all, every .npz member at most ``limits.TENSOR_FILE_MAX_RATIO`` times
    its compressed size, no object arrays. Raises DataError naming the limit."""
    cap = int(limits.limit("TENSOR_FILE_MAX_BYTES"))
    ratio = float(limits.limit("TENSOR_FILE_MAX_RATIO"))
    if isinstance(src, io.BytesIO):
        src.seek(0)
    try:
        if zipfile.is_zipfile(src):
            if isinstance(src, io.BytesIO):
                src.seek(0)
            with zipfile.ZipFile(src) as zf:
                _check_npz(zf, label, cap, ratio)
        else:
            _check_npy(src, label, cap)
    except DataError:
        raise
    except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as exc:
        raise DataError(f"{label} is not a readable .npy or .npz file ({one_line(exc)}).") from None
    finally:
        if isinstance(src, io.BytesIO):
            src.seek(0)


def _check_npz(zf: zipfile.ZipFile, label: str, cap: int, ratio: float) -> None:
    """An .npz's members: how many, their declared bytes in all, none encrypted or expanding past ``ratio``."""
    infos = zf.infolist()
    if len(infos) > zipsafe.MAX_MEMBERS:
        raise DataError(f"{label} has {len(infos):,} arrays; at most {zipsafe.MAX_MEMBERS:,} are "
                        f"accepted.")
    declared = sum(i.file_size for i in infos)
    if declared > cap:
        raise _tensor_cap_error(label, declared, cap)
    for info in infos:
        if info.flag_bits & 0x1:
            raise DataError(f"{label}: array {info.filename!r} is encrypted; save it with np.savez.")
        if info.file_size > ratio * max(info.compress_size, 1):
            raise DataError(
                f"{label}: array {info.filename!r} expands {info.file_size // max(info.compress_size, 1)}× "
                f"its compressed size (at most {ratio:g}× is accepted, tensor ratio limit, "
                f"{limits.env_name('TENSOR_FILE_MAX_RATIO')}); refusing it as a possible zip bomb. "
                f"Save real data with np.savez or np.savez_compressed.")
    total = 0
    for info in infos:
        with zf.open(info) as fh:
            _, nbytes = _npy_header(fh, f"Array {info.filename!r}", label)
        total += nbytes
        if total > cap:
            raise _tensor_cap_error(label, total, cap)


def _check_npy(src: Any, label: str, cap: int) -> None:
    """A .npy's declared bytes (path or BytesIO)."""
    if isinstance(src, io.BytesIO):
        src.seek(0)
        _, nbytes = _npy_header(src, "The array", label)
    else:
        with open(src, "rb") as fh:
            _, nbytes = _npy_header(fh, "The array", label)
    if nbytes > cap:
        raise _tensor_cap_error(label, nbytes, cap)


def load_path(path, class_names: Sequence[str] | None = None, tokenizer=None, seq_len: int | None = None) -> Dataset:
    """A dataset from a folder of images, a .zip of images, a .npy/.npz tensor file, or a .txt file (one example
    per line) with ``tokenizer`` (default: a ``tokenizer.json`` beside it) at ``seq_len``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"Data not found: {path}")
    if p.is_dir():
        return load_image_folder(p, class_names=class_names)
    suffix = p.suffix.lower()
    if suffix == ".zip":
        return load_image_zip(p, class_names=class_names)
    if suffix in (".npy", ".npz"):
        return load_tensor_file(p)
    if suffix in TEXT_EXTENSIONS:
        tok = Path(tokenizer).expanduser() if tokenizer else p.parent / TOKENIZER_FILE
        if not tok.is_file():
            raise DataError(f"Text data {path} needs a Hugging Face tokenizer.json: give --tokenizer PATH"
                            + (f" ({tok} does not exist)." if tokenizer else "."))
        return load_text_file(p, tok, seq_len)
    raise DataError(f"Data must be a folder of images, a .zip, a .npy/.npz file or a .txt file: {path}")
