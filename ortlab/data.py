"""Calibration and evaluation data: image folders, zips and uploads, tensor files, random inputs.

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

from .config import ChannelOrder, Layout, PixelScale, PreprocessConfig, ResizeMode
from .errors import DataError
from . import dtypes, limits, zipsafe
from .text import one_line

if TYPE_CHECKING:  # TensorInfo is only used for its .name / .dtype / .shape
    from .model import TensorInfo

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})
DEFAULT_DYNAMIC_SIZE = 224
RANDOM_DYNAMIC_DIM = 8  # size used for unknown non-batch dims of random inputs



@dataclass(frozen=True)
class Sample:
    """One item of a dataset. ``source`` is a file path, ``zip:member``, ``upload:name``, ``tensors:i`` or
    ``random``; ``index`` is the row of a tensor or random sample."""

    name: str
    label: int | None
    source: str
    index: int | None = None


@dataclass
class Dataset:
    """Samples of one kind ("images", "tensors" or "random"); labels index ``class_names``."""

    kind: str
    samples: list[Sample]
    class_names: list[str] = field(default_factory=list)
    is_random: bool = False
    seed: int = 0
    _blobs: dict[str, bytes] = field(default_factory=dict, repr=False)  # in-memory image bytes by source
    _tensors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # key "" = the single .npy

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

    def inputs(self, i: int, preprocess: PreprocessConfig | None, model_inputs: Sequence[TensorInfo]) -> dict[str, np.ndarray]:
        """The model feed for sample ``i`` as a batch of one."""
        return batch_inputs(self, [i], preprocess, model_inputs)


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
    Unsafe members and archives over the limits of :mod:`ortlab.zipsafe` are refused."""
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
    samples = [Sample(f"sample_{i}", label_list[i], f"tensors:{i}", i) for i in range(n)]
    return Dataset("tensors", samples, class_names, False, _tensors=arrays)


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


def check_tensor_inputs(ds: Dataset, model_inputs: Sequence[TensorInfo]) -> None:
    """Raise DataError unless the dataset's arrays match the model inputs' names, ranks and static dims."""
    expected = ", ".join(f"{t.name} {_shape_str(t.shape)}" for t in model_inputs)
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
        model_rest = tuple(info.shape)[1:]
        if len(per_sample) != len(model_rest) or any(
            _static(m) is not None and m != a for m, a in zip(model_rest, per_sample)
        ):
            raise DataError(f"{what} has samples of shape {_shape_str(per_sample)} but model input '{info.name}' "
                            f"expects {_shape_str(info.shape)} (first axis = samples); expected: {expected}.")
        _cast_like(arr[:0], info, what)


def _random_dims(info: TensorInfo, batch: int, cfg: PreprocessConfig | None) -> list[int]:
    shape = list(info.shape)
    fill: dict[int, int] = {}
    if cfg is not None and len(shape) == 4:
        if cfg.layout == Layout.NCHW:
            fill = {1: cfg.channels, 2: cfg.size[0], 3: cfg.size[1]}
        else:
            fill = {1: cfg.size[0], 2: cfg.size[1], 3: cfg.channels}
    return [batch if i == 0 else (_static(d) or fill.get(i, RANDOM_DYNAMIC_DIM)) for i, d in enumerate(shape)]


def _random_array(info: TensorInfo, rng: np.random.Generator, batch: int, cfg: PreprocessConfig | None) -> np.ndarray:
    dims = _random_dims(info, batch, cfg)
    dtype = dtypes.to_numpy(info.dtype)
    if dtype is None:
        raise DataError(f"Cannot make random data for input '{info.name}' of type {info.dtype}.")
    limits.check_generated_size({info.name: (dims, dtype)}, batch)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(dims).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=dims).astype(bool)
    return rng.integers(0, 100, size=dims).astype(dtype)


def batch_inputs(ds: Dataset, indices: Sequence[int], cfg: PreprocessConfig | None,
                 model_inputs: Sequence[TensorInfo]) -> dict[str, np.ndarray]:
    """Model feed for the samples at ``indices`` stacked on a new first axis."""
    if not indices:
        raise DataError("No samples selected.")
    for t in model_inputs:
        b = _static(tuple(t.shape)[0]) if len(t.shape) else None
        if b is not None and b != len(indices):
            raise DataError(f"Model input '{t.name}' has a fixed batch size of {b}; cannot feed {len(indices)} samples.")
    if ds.kind == "images":
        if cfg is None:
            cfg = detect_preprocess(model_inputs[0]) if len(model_inputs) == 1 else None
            if cfg is None:
                raise DataError("Images need preprocessing settings for a model with several inputs.")
        info = check_image_input(cfg, model_inputs)
        return {info.name: np.stack([preprocess_image(ds.load_image(i), cfg) for i in indices])}
    if ds.kind == "tensors":
        check_tensor_inputs(ds, model_inputs)
        rows = [ds.samples[i].index for i in indices]
        if "" in ds._tensors:
            info = model_inputs[0]
            return {info.name: _cast_like(ds._tensors[""][rows], info, "The .npy array")}
        return {t.name: _cast_like(ds._tensors[t.name][rows], t, f"Array '{t.name}'") for t in model_inputs}
    if ds.kind == "random":
        if len(model_inputs) == 1 and len(model_inputs[0].shape) == 4:
            if cfg is None:
                try:
                    cfg = detect_preprocess(model_inputs[0])
                except DataError:
                    pass  # not image-shaped: plain random tensors
            else:
                check_image_input(cfg, model_inputs)
        one = cfg if len(model_inputs) == 1 else None
        limits.check_generated_size({t.name: (_random_dims(t, len(indices), one), dtypes.to_numpy(t.dtype) or np.uint8)
                              for t in model_inputs}, len(indices))
        out: dict[str, list[np.ndarray]] = {t.name: [] for t in model_inputs}
        for i in indices:
            rng = np.random.default_rng([ds.seed, int(ds.samples[i].index or 0)])
            for t in model_inputs:
                out[t.name].append(_random_array(t, rng, 1, cfg if len(model_inputs) == 1 else None))
        return {k: np.concatenate(v) for k, v in out.items()}
    raise DataError(f"Unknown dataset kind {ds.kind!r}.")


def check_fits(ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo]) -> None:
    """Cheap up-front check (no decoding) that ``ds`` with ``cfg`` can feed the model; raises DataError."""
    if len(ds) == 0:
        raise DataError("The dataset is empty.")
    if ds.kind == "images":
        if cfg is None and len(model_inputs) == 1:
            cfg = detect_preprocess(model_inputs[0])
        if cfg is None:
            raise DataError("Images need preprocessing settings for a model with several inputs.")
        check_image_input(cfg, model_inputs)
    elif ds.kind == "tensors":
        check_tensor_inputs(ds, model_inputs)


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
    for s in ds.samples:
        h.update(f"|{s.name}|{s.label}|{s.index}".encode())
        if ds.kind == "images":
            h.update(ds._blobs[s.source] if s.source in ds._blobs else Path(s.source).read_bytes())
    return h.hexdigest()


def write_dataset(ds: Dataset, folder) -> Path:
    """Write ``ds`` under ``folder`` so it loads again elsewhere: images as files (class sub-folders kept),
    tensors as ``data.npy``/``data.npz`` (with ``labels``). Returns the path to load (folder or file).
    Random datasets have nothing to write (DataError)."""
    import os
    import shutil
    import tempfile

    folder = Path(folder)
    if ds.kind == "random":
        raise DataError("Random data is regenerated from its count and seed; there is nothing to write.")
    if ds.kind == "tensors":
        name = "data.npy" if "" in ds._tensors else "data.npz"
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


def load_path(path, class_names: Sequence[str] | None = None) -> Dataset:
    """A dataset from a folder of images, a .zip of images, or a .npy/.npz tensor file."""
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
    raise DataError(f"Data must be a folder of images, a .zip or a .npy/.npz file: {path}")


def pick_subset(ds: Dataset, n: int | None, stratify: bool = True, seed: int = 0) -> Dataset:
    """``n`` samples of ``ds`` (all when ``n`` is None, 0 or at least its size): stratified by class, or drawn
    uniformly with ``seed``. The one rule the app's evaluation subset and the CLI's ``--verify-samples`` use."""
    if not n or n >= len(ds):
        return ds
    if stratify:
        return stratified_sample(ds, n, seed)
    rng = np.random.default_rng(seed)
    return ds.subset(sorted(int(i) for i in rng.choice(len(ds), size=n, replace=False)))
