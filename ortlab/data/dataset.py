"""Calibration and evaluation data: image folders, zips and uploads, tensor files, text files, random inputs.

Also the image preprocessing (one exact recipe shared with the sample builder) and the one policy that
decides which preprocessing a run uses (:func:`resolve_preprocess`).
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from ortlab.settings.config import ChannelOrder, Layout, PixelScale, PreprocessConfig, ResizeMode
from ortlab.core.errors import DataError
from ortlab.core import dtypes, limits, zipsafe
from ortlab.core.text import one_line

if TYPE_CHECKING:  # TensorInfo is only used for its .name / .dtype / .shape
    from ortlab.data.inputs import InputSpec
    from ortlab.model.inspect import TensorInfo

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})
DEFAULT_DYNAMIC_SIZE = 224
TEXT_EXTENSIONS = frozenset({".txt", ".text"})
TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class Sample:
    """One item of a dataset. ``source`` is a file path, ``zip:member``, ``upload:name``, ``tensors:FILE``,
    ``text:FILE`` or ``random``; ``index`` is the row of a tensor, text or random sample (source and index
    together tell two files' samples apart, e.g. calibration from evaluation)."""

    name: str
    label: int | None
    source: str
    index: int | None = None


@dataclass
class Dataset:
    """Samples of one kind ("images", "tensors", "text" or "random"); labels index ``class_names``. Text
    datasets hold one line per sample, the tokenizer (``tokenizer.json`` text) and the sequence length
    (None: the model's fixed length, else :data:`ortlab.data.inputs.DEFAULT_SEQ_LEN`)."""

    kind: str
    samples: list[Sample]
    class_names: list[str] = field(default_factory=list)
    is_random: bool = False
    seed: int = 0
    _blobs: dict[str, bytes] = field(default_factory=dict, repr=False)  # in-memory image bytes by source
    _tensors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # key "" = the single .npy
    seq_len: int | None = None
    _texts: list[str] = field(default_factory=list, repr=False)
    _tokenizer_json: str = field(default="", repr=False)
    _encoded: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def labeled(self) -> bool:
        """True when every sample has a label."""
        return bool(self.samples) and all(s.label is not None for s in self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def subset(self, indices: Sequence[int]) -> Dataset:
        """A dataset with the samples at ``indices`` (sharing the loaded bytes/tensors)."""
        return replace(self, samples=[self.samples[i] for i in indices])

    def load_image(self, i: int, max_side: int | None = None) -> Image.Image:
        """Open sample ``i`` as a PIL image (images only). Its size is checked from the header before it is
        decoded (``limits.IMAGE_MAX_PIXELS``). With ``max_side`` the image is decoded reduced (JPEG draft
        mode) and shrunk to fit ``max_side`` × ``max_side``: a preview never holds the full image."""
        if self.kind != "images":
            raise DataError(f"Sample {i} is {self.kind}, not an image.")
        s = self.samples[i]
        try:
            if s.source in self._blobs:
                img = Image.open(io.BytesIO(self._blobs[s.source]))
            else:
                img = Image.open(s.source)
            check_image_pixels(img.size, s.name)
            if max_side is not None:
                img.draft("RGB" if img.mode not in ("L", "1") else "L", (max_side, max_side))
                img.thumbnail((max_side, max_side))
            img.load()
        except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as exc:
            raise DataError(f"Cannot read image {s.name}: {one_line(exc)}.") from None
        return img

    def load_preview(self, i: int, max_side: int | None = None) -> Image.Image:
        """Sample ``i`` reduced to at most ``max_side`` (default ``limits.PREVIEW_MAX_SIDE``) on its longest
        side, decoded reduced where the format allows it."""
        return self.load_image(i, max_side=int(max_side or limits.limit("PREVIEW_MAX_SIDE")))

    def inputs(self, i: int, preprocess: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
               specs: Sequence[InputSpec] | None = None) -> dict[str, np.ndarray]:
        """The model feed for sample ``i`` as a batch of one."""
        return batch_inputs(self, [i], preprocess, model_inputs, specs)

    def encoded(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids, attention_mask, token_type_ids) of every line, padded/truncated to ``length`` (int64)."""
        if self.kind != "text":
            raise DataError(f"This dataset holds {self.kind}, not text.")
        if length not in self._encoded:
            self._encoded[length] = _tokenize(self._tokenizer_json, self._texts, length)
        return self._encoded[length]


# -- loading ------------------------------------------------------------------------------------------


def _is_image_name(name: str) -> bool:
    return posixpath.splitext(name.lower())[1] in IMAGE_EXTENSIONS


def _is_hidden(parts: Sequence[str]) -> bool:
    return any(p.startswith(".") or p == "__MACOSX" for p in parts)


def check_image_pixels(size: tuple[int, int], name: str) -> None:
    """Raise DataError when an image of ``size`` (width, height, from its header) has more pixels than
    ``limits.IMAGE_MAX_PIXELS``: such an image is refused before it is decoded."""
    cap = int(limits.limit("IMAGE_MAX_PIXELS"))
    w, h = size
    if w * h > cap:
        raise DataError(f"Image {name} is {w}×{h} ({w * h / 1e6:.0f} megapixels, about "
                        f"{limits.gb(w * h * 3)} decoded); at most {cap / 1e6:g} megapixels are accepted "
                        f"(image pixel limit, {limits.env_name('IMAGE_MAX_PIXELS')}). Resize the images "
                        f"(the model sees them at a few hundred pixels anyway) and load them again.")


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
    entries = []
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
    entries, blobs = [], {}
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
    except Exception as exc:
        raise DataError(f"{label} is not a .npy or .npz file ({one_line(exc)}).") from None
    if isinstance(loaded, np.ndarray):
        arrays = {"": loaded}
    else:
        with loaded:
            arrays = {k: loaded[k] for k in loaded.files}
    labels = arrays.pop("labels", None) if len(arrays) > 1 else None
    if not arrays:
        raise DataError(f"{label} contains no arrays.")
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
    class_names: list[str] = []
    label_list: list[int | None] = [None] * n
    if labels is not None:
        if labels.ndim != 1 or labels.shape[0] != n or labels.dtype.kind not in "iu" or (labels < 0).any():
            raise DataError(f"'labels' in {label} must be {n} non-negative integers.")
        label_list = [int(v) for v in labels]
        class_names = [str(c) for c in range(int(labels.max()) + 1)]
    samples = [Sample(f"sample_{i}", label_list[i], f"tensors:{label}", i) for i in range(n)]
    return Dataset("tensors", samples, class_names, False, _tensors=arrays)


def _read_source(path_or_bytes, what: str) -> tuple[bytes, str]:
    if isinstance(path_or_bytes, (bytes, bytearray)):
        return bytes(path_or_bytes), what
    p = Path(path_or_bytes)
    if not p.is_file():
        raise DataError(f"{what[:1].upper() + what[1:]} {p} does not exist.")
    return p.read_bytes(), str(p)


def _load_tokenizer(text: str, label: str):
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a dependency in requirements.txt
        raise DataError("Text data needs the 'tokenizers' package (pip install tokenizers).") from None
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:
        raise DataError(f"{label} is not a Hugging Face tokenizer.json ({one_line(exc)}).") from None


def _tokenize(tokenizer_json: str, texts: Sequence[str], length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, attention mask and token-type ids of ``texts`` padded/truncated to ``length``."""
    tok = _load_tokenizer(tokenizer_json, "The tokenizer")
    pad = tok.padding or {}
    pad_id, pad_token = pad.get("pad_id"), pad.get("pad_token")
    if pad_id is None or pad_token is None:
        for cand in ("[PAD]", "<pad>", "<|pad|>", "<PAD>", "[pad]"):
            if tok.token_to_id(cand) is not None:
                pad_id, pad_token = tok.token_to_id(cand), cand
                break
        else:
            pad_id, pad_token = 0, tok.id_to_token(0) or "[PAD]"
    tok.enable_truncation(max_length=int(length))
    tok.enable_padding(length=int(length), pad_id=int(pad_id), pad_token=str(pad_token))
    enc = tok.encode_batch(list(texts))
    ids = np.asarray([e.ids for e in enc], dtype=np.int64).reshape(len(enc), int(length))
    mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64).reshape(len(enc), int(length))
    types = np.asarray([e.type_ids for e in enc], dtype=np.int64).reshape(len(enc), int(length))
    return ids, mask, types


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
    _load_tokenizer(tok_text, tok_label)  # fail now, not in the middle of a run
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
    except Exception as exc:
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
        else:
            if isinstance(src, io.BytesIO):
                src.seek(0)
                _, nbytes = _npy_header(src, "The array", label)
            else:
                with open(src, "rb") as fh:
                    _, nbytes = _npy_header(fh, "The array", label)
            if nbytes > cap:
                raise _tensor_cap_error(label, nbytes, cap)
    except DataError:
        raise
    except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as exc:
        raise DataError(f"{label} is not a readable .npy or .npz file ({one_line(exc)}).") from None
    finally:
        if isinstance(src, io.BytesIO):
            src.seek(0)


def random_dataset(n: int, seed: int = 0) -> Dataset:
    """``n`` random samples shaped after the model's inputs; flagged ``is_random`` (results are meaningless)."""
    if n < 1:
        raise DataError(f"A random dataset needs at least 1 sample, got {n}.")
    return Dataset("random", [Sample(f"random_{i}", None, "random", i) for i in range(n)], [], True, seed)


EVAL_SHARE = 3  # split_dataset: every third sample (of each class) is held out for evaluation


def split_dataset(ds: Dataset) -> tuple[Dataset, Dataset]:
    """Disjoint (calibration, evaluation) parts of ``ds``: every third sample of each class (of all samples when
    unlabeled), in order, is held out for evaluation, so evaluation never sees a calibration sample. A dataset of
    fewer than 3 samples cannot be split: both parts are all of it (the verdict then says it was evaluated on
    calibration samples)."""
    if len(ds) < EVAL_SHARE:
        return ds, ds
    seen: dict[Any, int] = {}
    cal, ev = [], []
    for i, s in enumerate(ds.samples):
        k = seen.get(s.label, 0)
        seen[s.label] = k + 1
        (ev if k % EVAL_SHARE == EVAL_SHARE - 1 else cal).append(i)
    if not ev:
        return ds, ds
    return ds.subset(cal), ds.subset(ev)


def stratified_sample(ds: Dataset, n: int, seed: int = 0) -> Dataset:
    """Deterministically pick ``n`` samples, keeping the class balance when labeled (original order kept)."""
    if n < 1:
        raise DataError(f"Cannot sample {n} items; ask for at least 1.")
    if n >= len(ds):
        return ds.subset(range(len(ds)))
    rng = np.random.default_rng(seed)
    if not ds.labeled():
        return ds.subset(sorted(int(i) for i in rng.choice(len(ds), size=n, replace=False)))
    by_class: dict[int, list[int]] = {}
    for i, s in enumerate(ds.samples):
        by_class.setdefault(int(s.label), []).append(i)
    classes = sorted(by_class)
    quota = {c: n * len(by_class[c]) / len(ds) for c in classes}
    take = {c: int(quota[c]) for c in classes}
    leftover = n - sum(take.values())
    for c in sorted(classes, key=lambda c: (-(quota[c] - take[c]), c))[:leftover]:
        take[c] += 1
    chosen: list[int] = []
    for c in classes:
        members = by_class[c]
        chosen += [members[int(j)] for j in rng.permutation(len(members))[: take[c]]]
    return ds.subset(sorted(chosen))


# -- preprocessing ------------------------------------------------------------------------------------


def _shape_str(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _static(d: Any) -> int | None:
    return d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else None


def detect_preprocess(model_input: TensorInfo) -> PreprocessConfig:
    """Layout (which axis is 1 or 3), size (static dims, else 224), channels and dtype from an image input."""
    shape = tuple(model_input.shape)
    if len(shape) != 4:
        raise DataError(f"Model input '{model_input.name}' has shape {_shape_str(shape)}, not an image "
                        f"([N, C, H, W] or [N, H, W, C]); use .npy/.npz tensors instead of images.")
    c1, c3 = _static(shape[1]), _static(shape[3])
    if c1 in (1, 3):
        layout, channels, hw = Layout.NCHW, c1, shape[2:4]
    elif c3 in (1, 3):
        layout, channels, hw = Layout.NHWC, c3, shape[1:3]
    elif c1 is None and c3 is None:
        layout, channels, hw = Layout.NCHW, 3, shape[2:4]
    else:
        raise DataError(f"Model input '{model_input.name}' has shape {_shape_str(shape)}: no axis with 1 or 3 "
                        f"channels, so it does not take images; use .npy/.npz tensors.")
    if model_input.dtype not in ("float32", "float16", "uint8"):
        raise DataError(f"Model input '{model_input.name}' is {model_input.dtype}; images can feed float32, "
                        f"float16 or uint8 inputs only. Use .npy/.npz tensors.")
    size = tuple(_static(d) or DEFAULT_DYNAMIC_SIZE for d in hw)
    byte = model_input.dtype == "uint8"
    return PreprocessConfig(
        size=size, layout=layout, channels=channels,
        scale=PixelScale.BYTE if byte else PixelScale.UNIT,
        mean=(0.0,) * channels, std=(1.0,) * channels, dtype=model_input.dtype,
    )


def _resize(img: Image.Image, cfg: PreprocessConfig) -> Image.Image:
    h, w = cfg.size
    if cfg.resize_mode == ResizeMode.STRETCH:
        return img if img.size == (w, h) else img.resize((w, h), Image.BILINEAR)
    iw, ih = img.size
    if cfg.resize_mode == ResizeMode.CENTER_CROP:
        short = round(min(h, w) * 256 / 224)
        s = short / min(iw, ih)
        nw, nh = max(w, round(iw * s)), max(h, round(ih * s))
        img = img.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - w) // 2, (nh - h) // 2
        return img.crop((left, top, left + w, top + h))
    scale = min(w / iw, h / ih)  # letterbox: fit inside, pad with zeros
    nw, nh = max(1, round(iw * scale)), max(1, round(ih * scale))
    canvas = Image.new(img.mode, (w, h))
    canvas.paste(img.resize((nw, nh), Image.BILINEAR), ((w - nw) // 2, (h - nh) // 2))
    return canvas


def preprocess_image(img: Image.Image, cfg: PreprocessConfig) -> np.ndarray:
    """One image → (C, H, W) or (H, W, C) array (no batch axis), following ``cfg`` exactly."""
    problems = cfg.problems()
    if problems:
        raise DataError("Preprocessing settings are invalid: " + " ".join(problems))
    img = img.convert("L" if cfg.channels == 1 else "RGB")
    x = np.asarray(_resize(img, cfg), dtype=np.float32)
    if x.ndim == 2:
        x = x[:, :, None]
    if cfg.channel_order == ChannelOrder.BGR and cfg.channels == 3:
        x = x[:, :, ::-1]  # before mean/std, so both are given in the model's channel order
    if cfg.scale == PixelScale.UNIT:
        x = x / 255.0
    x = (x - np.asarray(cfg.mean, dtype=np.float32)) / np.asarray(cfg.std, dtype=np.float32)
    if cfg.layout == Layout.NCHW:
        x = x.transpose(2, 0, 1)
    if cfg.dtype == "uint8":
        x = np.clip(np.rint(x), 0, 255)
    return np.ascontiguousarray(x.astype(dtypes.to_numpy(cfg.dtype)))


def tensor_preview(x: np.ndarray, cfg: PreprocessConfig) -> np.ndarray:
    """One preprocessed sample (no batch axis) as a uint8 image to look at: HWC (or HW for grayscale) in RGB
    order, stretched to the full 0–255 range."""
    x = np.asarray(x, dtype=np.float32)
    if cfg.layout == Layout.NCHW:
        x = x.transpose(1, 2, 0)
    x = (x - x.min()) / (x.max() - x.min() + 1e-12)
    if x.shape[2] == 1:
        x = x[:, :, 0]
    elif cfg.channel_order == ChannelOrder.BGR:
        x = x[:, :, ::-1]
    return (x * 255).round().astype(np.uint8)


# -- model feeds ----------------------------------------------------------------------------------------


def check_image_input(cfg: PreprocessConfig, model_inputs: Sequence[TensorInfo]) -> TensorInfo:
    """The single image input of the model, after checking ``cfg`` produces what it expects."""
    if len(model_inputs) != 1:
        names = ", ".join(t.name for t in model_inputs)
        raise DataError(f"Images can feed a model with one input; this model has {len(model_inputs)} ({names}). "
                        f"Use an .npz file with one array per input.")
    info = model_inputs[0]
    expected = detect_preprocess(info)  # raises when the input is not image-shaped
    shape = tuple(info.shape)
    c_axis, hw = (1, shape[2:4]) if cfg.layout == Layout.NCHW else (3, shape[1:3])
    want = f"the model expects {_shape_str(shape)} ({expected.layout.value}, {expected.channels} channel(s))"
    if _static(shape[c_axis]) not in (None, cfg.channels):
        raise DataError(f"Preprocessing makes {cfg.channels}-channel {cfg.layout.value} images but {want}; "
                        f"set channels to {expected.channels} and layout to {expected.layout.value}.")
    for got, dim in zip(cfg.size, hw):
        if _static(dim) is not None and dim != got:
            raise DataError(f"Preprocessing resizes to {cfg.size[0]}×{cfg.size[1]} but {want}; "
                            f"set size to {expected.size[0]}×{expected.size[1]}.")
    if cfg.dtype != info.dtype:
        raise DataError(f"Preprocessing produces {cfg.dtype} but model input '{info.name}' is {info.dtype}; "
                        f"set dtype to {info.dtype}.")
    return info


def _cast_like(arr: np.ndarray, info: TensorInfo, what: str) -> np.ndarray:
    target = dtypes.to_numpy(info.dtype)
    if target is None:
        raise DataError(f"Model input '{info.name}' has type {info.dtype}, which ortlab cannot feed.")
    kind_ok = (arr.dtype.kind == "f") == (np.dtype(target).kind == "f") or arr.dtype.kind == "b"
    if not kind_ok:
        raise DataError(f"{what} is {arr.dtype} but model input '{info.name}' is {info.dtype}; "
                        f"save the array as {info.dtype}.")
    return arr.astype(target, copy=False)


def _per_sample(info: TensorInfo, spec: InputSpec | None) -> tuple[tuple[Any, ...], str]:
    """The model's dims of one sample (the batch axis left out) and a word on where the batch axis is."""
    shape = tuple(info.shape)
    axis = spec.batch_axis if spec is not None else (0 if shape else None)
    if axis is None:
        return shape, "no batch axis: each sample is the whole input"
    rest = shape[:axis] + shape[axis + 1:]
    return rest, "first axis = samples" if axis == 0 else f"first axis = samples, fed on the model's axis {axis}"


def check_tensor_inputs(ds: Dataset, model_inputs: Sequence[TensorInfo],
                        specs: Sequence[InputSpec] | None = None) -> None:
    """Raise DataError unless the dataset's arrays match the model inputs' names, ranks and static dims
    (the sample axis of an array is the first; the model's batch axis may be another, see ``specs``)."""
    expected = ", ".join(f"{t.name} {_shape_str(t.shape)}" for t in model_inputs)
    by_name = {s.name: s for s in specs or ()}
    arrays = ds._tensors
    if "" in arrays:
        if len(model_inputs) != 1:
            raise DataError(f"A .npy file feeds one input, but the model has {len(model_inputs)} ({expected}); "
                            f"use an .npz with one array per input name.")
        pairs = [(model_inputs[0], arrays[""], "The .npy array")]
    else:
        names = [t.name for t in model_inputs]
        missing = [n for n in names if n not in arrays]
        extra = [k for k in arrays if k not in names]
        if missing or extra:
            raise DataError(f"The .npz keys ({', '.join(arrays) or 'none'}) must be the model's input names "
                            f"({', '.join(names)}).")
        pairs = [(t, arrays[t.name], f"Array '{t.name}'") for t in model_inputs]
    for info, arr, what in pairs:
        per_sample = arr.shape[1:]
        model_rest, where = _per_sample(info, by_name.get(info.name))
        if len(per_sample) != len(model_rest) or any(
            _static(m) is not None and m != a for m, a in zip(model_rest, per_sample)
        ):
            raise DataError(f"{what} has samples of shape {_shape_str(per_sample)} but model input '{info.name}' "
                            f"expects {_shape_str(info.shape)} ({where}); expected: {expected}.")
        _cast_like(arr[:0], info, what)


def _specs(ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
           specs: Sequence[InputSpec] | None) -> list[InputSpec]:
    from ortlab.data.inputs import infer_specs

    return list(specs) if specs is not None else infer_specs(model_inputs, cfg, ds)


def _text_feed(ds: Dataset, indices: Sequence[int], specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """input_ids / attention_mask / token_type_ids (whichever the model takes) at the specs' sequence length;
    states get zeros."""
    from ortlab.data.inputs import random_array

    n = len(indices)
    text_specs = [s for s in specs if s.role in ("token_ids", "mask")]
    if not any(s.role == "token_ids" for s in specs):
        names = ", ".join(f"{s.name} ({s.role})" for s in specs)
        raise DataError(f"Text data feeds token ids, but no model input looks like one ({names}); name it "
                        f"input_ids, or use an .npz file with one array per input.")
    others = [s for s in specs if s.role not in ("token_ids", "mask", "state")]
    if others:
        raise DataError(f"Text data gives input_ids, attention_mask and token_type_ids; model input "
                        f"'{others[0].name}' ({others[0].role}) needs other data: use an .npz with one array per input.")
    rows = [ds.samples[i].index for i in indices]
    feed: dict[str, np.ndarray] = {}
    for s in text_specs:
        shape = s.at_batch(n)
        seq_axes = [i for i in range(len(shape)) if i != s.batch_axis]
        if len(seq_axes) != 1:
            raise DataError(f"Model input '{s.name}' has shape {list(shape)}; text feeds [batch, sequence] inputs.")
        length = shape[seq_axes[0]]
        ids, mask, types = ds.encoded(length)
        low = s.name.lower()
        src = ids if s.role == "token_ids" else (types if ("type" in low or "segment" in low) else mask)
        arr = src[rows]
        if s.batch_axis is None:
            if n != 1:
                raise DataError(f"Model input '{s.name}' has no batch axis; feed one sample at a time.")
            arr = arr[0]
        elif s.batch_axis != 0:
            arr = arr.T
        info_dtype = dtypes.to_numpy(s.dtype)
        feed[s.name] = arr.astype(info_dtype if info_dtype is not None else np.int64)
    rng = np.random.default_rng(0)
    for s in specs:
        if s.role == "state":
            feed[s.name] = random_array(s, rng, n)
    return feed


def batch_inputs(ds: Dataset, indices: Sequence[int], cfg: PreprocessConfig | None,
                 model_inputs: Sequence[TensorInfo], specs: Sequence[InputSpec] | None = None) -> dict[str, np.ndarray]:
    """Model feed for the samples at ``indices``, stacked on each input's batch axis (``specs``: the inputs'
    resolved shapes, :func:`ortlab.data.inputs.infer_specs`; inferred from the model, ``cfg`` and ``ds`` when None)."""
    from ortlab.data.inputs import random_array, stack

    if not indices:
        raise DataError("No samples selected.")
    if ds.kind == "images":
        if cfg is None:
            cfg = detect_preprocess(model_inputs[0]) if len(model_inputs) == 1 else None
            if cfg is None:
                raise DataError("Images need preprocessing settings for a model with several inputs.")
        info = check_image_input(cfg, model_inputs)
        for s in _specs(ds, cfg, model_inputs, specs):
            s.at_batch(len(indices))
        return {info.name: np.stack([preprocess_image(ds.load_image(i), cfg) for i in indices])}
    specs = _specs(ds, cfg, model_inputs, specs)
    for s in specs:
        s.at_batch(len(indices))  # a fixed batch of another size raises here
    if ds.kind == "tensors":
        check_tensor_inputs(ds, model_inputs, specs)
        rows = [ds.samples[i].index for i in indices]
        infos = {t.name: t for t in model_inputs}
        out = {}
        for s in specs:
            key = "" if "" in ds._tensors else s.name
            what = "The .npy array" if key == "" else f"Array '{s.name}'"
            arr = _cast_like(ds._tensors[key][rows], infos[s.name], what)
            if s.batch_axis is None:
                if len(rows) != 1:
                    raise DataError(f"Model input '{s.name}' has no batch axis; feed one sample at a time.")
                arr = arr[0]
            elif s.batch_axis != 0:
                arr = np.moveaxis(arr, 0, s.batch_axis)
            out[s.name] = np.ascontiguousarray(arr) if arr.ndim else np.asarray(arr)  # ascontiguousarray makes 0-d 1-d
        return out
    if ds.kind == "text":
        return _text_feed(ds, indices, specs)
    if ds.kind == "random":
        n = len(indices)
        limits.check_generated_size({s.name: (list(s.at_batch(n)), dtypes.to_numpy(s.dtype) or np.uint8)
                                     for s in specs}, n)
        feeds = []
        for i in indices:
            rng = np.random.default_rng([ds.seed, int(ds.samples[i].index or 0)])
            feeds.append({s.name: random_array(s, rng, 1) for s in specs})
        return stack(specs, feeds)
    raise DataError(f"Unknown dataset kind {ds.kind!r}.")


def control_values(ds: Dataset | None, model_inputs: Sequence[TensorInfo]) -> dict[str, float]:
    """The value each control input (``inputs.is_control_input``, e.g. a sample rate) has in the first sample of a
    tensor dataset: what a benchmark feeds instead of making one up. Empty for other data."""
    from ortlab.data.inputs import infer_specs, is_control_input

    if ds is None or ds.kind != "tensors" or not len(ds):
        return {}
    specs = infer_specs(model_inputs, None, ds, strict=False)
    out: dict[str, float] = {}
    for s in specs:
        arr = ds._tensors.get(s.name)
        if is_control_input(s) and arr is not None and arr.size:
            value = arr[ds.samples[0].index or 0].reshape(-1)[0].item()
            out[s.name] = value
    return out


def check_fits(ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
               specs: Sequence[InputSpec] | None = None) -> None:
    """Cheap up-front check (no decoding) that ``ds`` with ``cfg`` can feed the model; raises DataError
    (also when an input's shape cannot be resolved)."""
    if len(ds) == 0:
        raise DataError("The dataset is empty.")
    if ds.kind == "images":
        if cfg is None and len(model_inputs) == 1:
            cfg = detect_preprocess(model_inputs[0])
        if cfg is None:
            raise DataError("Images need preprocessing settings for a model with several inputs.")
        check_image_input(cfg, model_inputs)
        return
    specs = _specs(ds, cfg, model_inputs, specs)
    if ds.kind == "tensors":
        check_tensor_inputs(ds, model_inputs, specs)
    elif ds.kind == "text":
        _text_feed(ds, [0], specs)

# -- the preprocessing policy ---------------------------------------------------------------------------


def resolve_preprocess(model_inputs: Sequence[TensorInfo] | Any, sample: Any = None, dataset: Dataset | None = None,
                       overrides: dict[str, Any] | None = None) -> PreprocessConfig | None:
    """The preprocessing a run uses: the sample manifest's (``sample`` is a ``SampleModel`` or a
    ``PreprocessConfig``), else detected from the model's image input, else None; ``overrides`` (field →
    value, e.g. from CLI flags) are applied on top. ``model_inputs`` may be a ``ModelInfo`` (its ``inputs``).

    None when ``dataset`` holds no images (tensors and random data need no preprocessing), or when the model
    input is not an image and nothing was overridden. Raises DataError for overrides that cannot work.
    """
    inputs = list(getattr(model_inputs, "inputs", model_inputs) or ())
    overrides = {k: list(v) if isinstance(v, tuple) else v for k, v in (overrides or {}).items() if v is not None}
    if dataset is not None and dataset.kind != "images" and not overrides:
        return None
    base: PreprocessConfig | None = getattr(sample, "preprocess", sample) if sample is not None else None
    if base is None and len(inputs) == 1:
        try:
            base = detect_preprocess(inputs[0])
        except DataError:
            base = None
    if not overrides:
        return base
    merged = {**(base or PreprocessConfig()).to_dict(), **{k: list(v) if isinstance(v, (list, tuple)) else v
                                                             for k, v in overrides.items()}}
    cfg = PreprocessConfig.from_dict(merged)
    if cfg.problems():
        raise DataError(" ".join(cfg.problems()))
    return cfg


# -- writing a dataset to disk (so another process can load it again) -----------------------------------


def dataset_digest(ds: Dataset) -> str:
    """sha256 of a dataset's content (sample names, labels, image bytes or arrays)."""
    import hashlib

    h = hashlib.sha256(f"{ds.kind}|{ds.is_random}|{ds.seed}|{','.join(ds.class_names)}".encode())
    if ds.kind == "tensors":
        for key in sorted(ds._tensors):
            arr = np.ascontiguousarray(ds._tensors[key])
            h.update(f"|{key}|{arr.dtype.str}|{arr.shape}".encode())
            h.update(arr.tobytes())
    if ds.kind == "text":
        h.update(f"|{ds.seq_len}|".encode())
        h.update(ds._tokenizer_json.encode())
        for line in ds._texts:
            h.update(line.encode() + b"\n")
    for s in ds.samples:
        h.update(f"|{s.name}|{s.label}|{s.index}".encode())
        if ds.kind == "images":
            h.update(ds._blobs[s.source] if s.source in ds._blobs else Path(s.source).read_bytes())
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
        name = "data.npy" if "" in ds._tensors else "data.npz"
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
            rows = [s.index for s in ds.samples]
            if "" in ds._tensors:
                np.save(tmp / name, ds._tensors[""][rows], allow_pickle=False)
            else:
                arrays = {k: v[rows] for k, v in ds._tensors.items()}
                if ds.labeled():
                    arrays["labels"] = np.asarray([s.label for s in ds.samples], dtype=np.int64)
                np.savez(tmp / name, **arrays)  # type: ignore[arg-type]
        elif ds.kind == "text":
            (tmp / name).write_text("".join(ds._texts[s.index or 0] + "\n" for s in ds.samples), encoding="utf-8")
            (folder / TOKENIZER_FILE).write_text(ds._tokenizer_json, encoding="utf-8")
        else:
            root = tmp / name
            for s in ds.samples:
                dest = root.joinpath(*s.name.split("/"))
                dest.parent.mkdir(parents=True, exist_ok=True)
                if s.source in ds._blobs:
                    dest.write_bytes(ds._blobs[s.source])
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


def pick_subset(ds: Dataset, n: int | None, stratify: bool = True, seed: int = 0) -> Dataset:
    """``n`` samples of ``ds`` (all when ``n`` is None, 0 or at least its size): stratified by class, or drawn
    uniformly with ``seed``. The one rule the app's evaluation subset and the CLI's ``--verify-samples`` use."""
    if not n or n >= len(ds):
        return ds
    if stratify:
        return stratified_sample(ds, n, seed)
    rng = np.random.default_rng(seed)
    return ds.subset(sorted(int(i) for i in rng.choice(len(ds), size=n, replace=False)))
