"""Image preprocessing (one exact recipe shared with the sample builder), what a model's image input asks
for, and the one policy that decides which preprocessing a run uses (:func:`resolve_preprocess`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

import numpy as np
from PIL import Image

from ortlab.settings.config import ChannelOrder, Layout, PixelScale, PreprocessConfig, ResizeMode
from ortlab.core.errors import DataError
from ortlab.core import dtypes

if TYPE_CHECKING:  # TensorInfo is only used for its .name / .dtype / .shape
    from ortlab.model.inspect import TensorInfo

from ortlab.data.dataset import Dataset

DEFAULT_DYNAMIC_SIZE = 224


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
    size = (_static(hw[0]) or DEFAULT_DYNAMIC_SIZE, _static(hw[1]) or DEFAULT_DYNAMIC_SIZE)
    byte = model_input.dtype == "uint8"
    return PreprocessConfig(
        size=size, layout=layout, channels=channels,
        scale=PixelScale.BYTE if byte else PixelScale.UNIT,
        mean=(0.0,) * channels, std=(1.0,) * channels, dtype=model_input.dtype,
    )


def _resize(img: Image.Image, cfg: PreprocessConfig) -> Image.Image:
    h, w = cfg.size
    if cfg.resize_mode == ResizeMode.STRETCH:
        return img if img.size == (w, h) else img.resize((w, h), Image.Resampling.BILINEAR)
    iw, ih = img.size
    if cfg.resize_mode == ResizeMode.CENTER_CROP:
        short = round(min(h, w) * 256 / 224)
        s = short / min(iw, ih)
        nw, nh = max(w, round(iw * s)), max(h, round(ih * s))
        img = img.resize((nw, nh), Image.Resampling.BILINEAR)
        left, top = (nw - w) // 2, (nh - h) // 2
        return img.crop((left, top, left + w, top + h))
    scale = min(w / iw, h / ih)  # letterbox: fit inside, pad with zeros
    nw, nh = max(1, round(iw * scale)), max(1, round(ih * scale))
    canvas = Image.new(img.mode, (w, h))
    canvas.paste(img.resize((nw, nh), Image.Resampling.BILINEAR), ((w - nw) // 2, (h - nh) // 2))
    return canvas


def preprocess_image(img: Image.Image, cfg: PreprocessConfig) -> np.ndarray:
    """One image → (C, H, W) or (H, W, C) array (no batch axis), following ``cfg`` exactly."""
    problems = cfg.problems()
    if problems:
        raise DataError("Preprocessing settings are invalid: " + " ".join(problems))
    img = img.convert("L" if cfg.channels == 1 else "RGB")
    x: np.ndarray = np.asarray(_resize(img, cfg), dtype=np.float32)
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
