"""Image preprocessing (one exact recipe shared with the sample builder), what a model's image input asks
for, and the one policy that decides which preprocessing a run uses (:func:`resolve_preprocess`)."""

from __future__ import annotations

import math
import re

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

import numpy as np
from PIL import Image

from ortlab.settings.config import ChannelOrder, Layout, PixelScale, PreprocessConfig, ResizeMode
from ortlab.core.errors import DataError, OrtlabError
from ortlab.core import dtypes

if TYPE_CHECKING:  # TensorInfo is only used for its .name / .dtype / .shape
    from ortlab.model.inspect import TensorInfo

from ortlab.data.dataset import Dataset

DEFAULT_DYNAMIC_SIZE = 224


def shape_text(shape: Sequence[Any]) -> str:
    """``[1, 3, ?, ?]``: a shape with its open dims as ``?`` (a dim named by a long expression too)."""
    return "[" + ", ".join("?" if d is None or (isinstance(d, str) and len(d) > 24) else str(d) for d in shape) + "]"


def static_dim(d: Any) -> int | None:
    """A dim's size when it is a fixed positive int; None for a symbolic or open dim."""
    return d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else None


def detect_preprocess(model_input: TensorInfo) -> PreprocessConfig:
    """Layout (which axis is 1 or 3), size (static dims, else 224), channels and dtype from an image input."""
    shape = tuple(model_input.shape)
    if len(shape) != 4:
        raise DataError(f"Model input '{model_input.name}' has shape {shape_text(shape)}, not an image "
                        f"([N, C, H, W] or [N, H, W, C]); use .npy/.npz tensors instead of images.")
    c1, c3 = static_dim(shape[1]), static_dim(shape[3])
    if c1 in (1, 3):
        layout, channels, hw = Layout.NCHW, c1, shape[2:4]
    elif c3 in (1, 3):
        layout, channels, hw = Layout.NHWC, c3, shape[1:3]
    elif c1 is None and c3 is None:
        layout, channels, hw = Layout.NCHW, 3, shape[2:4]
    else:
        raise DataError(f"Model input '{model_input.name}' has shape {shape_text(shape)}: no axis with 1 or 3 "
                        f"channels, so it does not take images; use .npy/.npz tensors.")
    if model_input.dtype not in ("float32", "float16", "uint8"):
        raise DataError(f"Model input '{model_input.name}' is {model_input.dtype}; images can feed float32, "
                        f"float16 or uint8 inputs only. Use .npy/.npz tensors.")
    size = (static_dim(hw[0]) or DEFAULT_DYNAMIC_SIZE, static_dim(hw[1]) or DEFAULT_DYNAMIC_SIZE)
    byte = model_input.dtype == "uint8"
    return PreprocessConfig(
        size=size, layout=layout, channels=channels,
        scale=PixelScale.BYTE if byte else PixelScale.UNIT,
        mean=(0.0,) * channels, std=(1.0,) * channels, dtype=model_input.dtype,
    )


LETTERBOX_PAD = 114  # the grey Ultralytics' LetterBox pads with (0..255, before scaling)


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
    scale = min(w / iw, h / ih)  # letterbox: fit inside, pad with grey 114 as YOLO exporters' letterbox does
    nw, nh = max(1, round(iw * scale)), max(1, round(ih * scale))
    canvas = Image.new(img.mode, (w, h), LETTERBOX_PAD if img.mode == "L" else (LETTERBOX_PAD,) * 3)
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


# where each preprocessing value came from (ResolvedPreprocess.sources)
MANIFEST = "manifest"
FIXED_SHAPE = "detected from a fixed input shape"
DETECTED = "detected from the model input"
FLAGS = "you (flags)"
DEFAULT = "default"
FIELDS = ("size", "resize_mode", "layout", "channels", "channel_order", "scale", "mean", "std", "dtype")


@dataclass(frozen=True)
class Preset:
    """A known preprocessing convention, offered by name and never applied unless chosen. ``height``: the
    height the convention fixes (Paddle's recognizer and classifier: 48), else the model's; ``widths``: the widths
    its models take, said when the model leaves the width open."""

    name: str
    label: str
    source: str
    values: dict[str, Any] = field(default_factory=dict)
    height: int | None = None
    widths: str = ""


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("yolo", "YOLO (Ultralytics)", "Ultralytics YOLO exports: RGB, 0–1, no mean/std, letterbox at the model's "
           "size", {"channel_order": ChannelOrder.RGB, "scale": PixelScale.UNIT, "resize_mode": ResizeMode.LETTERBOX,
                    "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}),
    Preset("imagenet", "ImageNet mean/std", "torchvision/timm ImageNet classifiers: RGB, 0–1, mean (0.485, 0.456, "
           "0.406), std (0.229, 0.224, 0.225), centre crop", {"channel_order": ChannelOrder.RGB,
                                                               "scale": PixelScale.UNIT,
                                                               "resize_mode": ResizeMode.CENTER_CROP,
                                                               "mean": IMAGENET_MEAN, "std": IMAGENET_STD}),
    Preset("paddle_det", "PaddleOCR text detector", "PaddleOCR det (DB): BGR, 0–1, ImageNet mean/std in BGR order "
           "as PaddleOCR applies them", {"channel_order": ChannelOrder.BGR, "scale": PixelScale.UNIT,
                                         "resize_mode": ResizeMode.STRETCH, "mean": IMAGENET_MEAN,
                                         "std": IMAGENET_STD}),
    Preset("paddle_cls", "PaddleClas classifier", "PaddleClas classifiers (PP-LCNet orientation models too): BGR, "
           "0–1, ImageNet mean/std in BGR order, centre crop", {
               "channel_order": ChannelOrder.BGR, "scale": PixelScale.UNIT, "resize_mode": ResizeMode.CENTER_CROP,
               "mean": IMAGENET_MEAN, "std": IMAGENET_STD}),
    Preset("paddle_rec", "PaddleOCR recognizer / classifier", "PaddleOCR rec and cls: BGR, (x/255 − 0.5)/0.5, "
           "height 48 (width: the model's, or --size)", {"channel_order": ChannelOrder.BGR, "scale": PixelScale.UNIT,
                                                          "resize_mode": ResizeMode.STRETCH, "mean": (0.5, 0.5, 0.5),
                                                          "std": (0.5, 0.5, 0.5)}, height=48,
           widths="PaddleOCR's recognizers take 320, its text-line direction classifier 192"),
)}


def yolo_size(anchors: int) -> int | None:
    """The square input size whose stride 8/16/32 grids hold ``anchors`` cells (8400 → 640, 2100 → 320: S²·21/1024),
    when it is a multiple of 32; else None."""
    side = math.isqrt(anchors * 1024 // 21) if anchors > 0 else 0
    return side if side and side % 32 == 0 and side * side * 21 == anchors * 1024 else None


def _yolo_output(outputs: Sequence[TensorInfo]) -> tuple[TensorInfo, int] | None:
    """The output of anchors × (4 box + class) channels ([1, 84, 8400], [1, 8400, 8]) and its anchor count; 0 when
    the anchors are open, as a dynamic export leaves them ([batch, 22, anchors]: the channels first)."""
    for out in outputs:
        dims = [static_dim(d) for d in tuple(out.shape)[1:]]
        if len(dims) == 2 and dims[1] is None and dims[0] is not None and 5 <= dims[0] <= 400:
            return out, 0
        if len(dims) == 2 and None not in dims:
            small, big = sorted(d for d in dims if d is not None)
            if 5 <= small <= 400 and big >= 1000:
                return out, big
    return None


# Paddle2ONNX's names: outputs "fetch_name_0", "save_infer_model/scale_0.tmp_1", "sigmoid_0.tmp_0"; open dims
# "p2o.DynamicDimension.0", "DynamicDimension.1"
_PADDLE_OUTPUT = re.compile(r"^(fetch_name_\d+|save_infer_model/.+|[a-z]+(_[a-z]+)*_\d+\.tmp_\d+)$")
_PADDLE_DIM = re.compile(r"^(p2o\.)?DynamicDimension\.\d+$")


def _paddle_export(producer: str, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]) -> str | None:
    """What shows a model was exported from PaddlePaddle (its producer, an output's name, an open dim's name), or
    None."""
    if producer.lower().startswith("paddle"):
        return f"producer '{producer}'"
    if named := next((o.name for o in outputs if _PADDLE_OUTPUT.match(o.name)), None):
        return f"output '{named}'"
    dims = [d for t in (*inputs, *outputs) for d in t.shape if isinstance(d, str) and _PADDLE_DIM.match(d)]
    return f"open dim '{dims[0]}'" if dims else None


def _paddle_preset(producer: str, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]
                   ) -> tuple[str, str] | None:
    """A PaddleOCR detector (one map of the input's open size), recognizer (height 48, [N, T, classes]), text-line
    direction classifier (open size, [N, 2]) or a PaddleClas classifier (a fixed square input, [N, classes]), when
    the model is a Paddle export."""
    sign = _paddle_export(producer, inputs, outputs)
    if sign is None or len(outputs) != 1:
        return None
    h, w = (static_dim(d) for d in tuple(inputs[0].shape)[2:])
    out = tuple(outputs[0].shape)
    where = f"the model is a PaddlePaddle export ({sign})"
    if len(out) == 4 and h is None and w is None and static_dim(out[1]) in (1, None):
        return "paddle_det", f"{where} whose open-sized input gives one map, as PaddleOCR's text detectors do"
    if len(out) == 3 and h == 48:
        return "paddle_rec", f"{where} with a 48-pixel-high input and a class per time step, as PaddleOCR's " \
                             "recognizers have"
    if len(out) == 2 and h is None and w is None and static_dim(out[1]) == 2:
        return "paddle_rec", f"{where} whose open-sized input gives two class scores, as PaddleOCR's text-line " \
                             "direction classifier (0° or 180°) does: 48 pixels high, 192 wide"
    if len(out) == 2 and h is not None and h == w and h >= 160:
        return "paddle_cls", f"{where} with a {h}×{w} input and class scores out, as PaddleClas's classifiers have"
    return None


def suggest_preset(model_inputs: Sequence[TensorInfo] | Any, model_outputs: Sequence[TensorInfo] = ()
                   ) -> tuple[str, str] | None:
    """The preset a model's shapes point to, with why, or None: a 3-channel image input, square of a fixed size
    that is a multiple of 32 (1×3×640×640, 320) or with its height and width open, and a rank-3 output of anchors ×
    (4 box + class) channels ([1, 84, 8400], [1, 8400, 8]) are an Ultralytics YOLO detector's (an open input only
    when the anchors fit the stride 8/16/32 grids of one size: 2100 → 320); a PaddlePaddle export's shapes point to
    PaddleOCR's or PaddleClas's conventions (:func:`_paddle_preset`). Only offered, never applied."""
    inputs = list(getattr(model_inputs, "inputs", model_inputs) or ())
    outputs = list(getattr(model_inputs, "outputs", model_outputs) or ())
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        return None
    shape = tuple(inputs[0].shape)
    c, h, w = (static_dim(d) for d in shape[1:])
    found = _yolo_output(outputs)
    if c != 3:
        return None
    if found is None:
        return _paddle_preset(str(getattr(model_inputs, "producer", "") or ""), inputs, outputs)
    out, anchors = found
    if h is None and w is None:
        size = yolo_size(anchors)
        if size is None and anchors:  # a fixed count that is not the grids of one size
            return None
        return "yolo", (f"input '{inputs[0].name}' {shape_text(shape)} and output '{out.name}' "
                        f"{shape_text(tuple(out.shape))} (anchors × 4 box + class channels) look like an Ultralytics "
                        "YOLO detector" + (f"; its {anchors} anchors are the grids of a {size}×{size} input" if size
                                           else "") + _yolox_caveat(out, anchors))
    if h is None or h != w or h % 32:
        return None
    return "yolo", (f"input '{inputs[0].name}' {shape_text(shape)} and output '{out.name}' "
                    f"{shape_text(tuple(out.shape))} (anchors × 4 box + class channels) look like an "
                    "Ultralytics YOLO detector" + _yolox_caveat(out, anchors))


YOLOX_CAVEAT = ("; rows of one anchor per grid cell are also how YOLOX exports its detections (ddddocr's "
                "common_det.onnx), which take 0–255 BGR pixels instead: --scale 0-255 --channel-order BGR")


def _yolox_caveat(out: TensorInfo, anchors: int) -> str:
    """:data:`YOLOX_CAVEAT` when ``out`` holds one row per anchor ([1, 3549, 6]) and the anchors are one per cell
    of the stride 8/16/32 grids (YOLOv5 and v7 have three per cell; Ultralytics' v8 and later put channels first)."""
    dims = [static_dim(d) for d in tuple(out.shape)[1:]]
    rows_first = len(dims) == 2 and None not in dims and dims[0] == anchors
    return YOLOX_CAVEAT if rows_first and yolo_size(anchors) is not None else ""


@dataclass
class ResolvedPreprocess:
    """The preprocessing a run uses and where each value came from (``sources``: field → manifest, detected
    from a fixed input shape, detected from the model input, preset NAME, you (flags), default). ``open_size``:
    the model leaves height/width open and nobody gave a size, so :attr:`config`'s size is only a placeholder
    (a run must ask for it, never guess). ``manifest``: a bundled sample's own preprocessing, the one its model was
    made with, when the values started from it."""

    config: PreprocessConfig
    sources: dict[str, str]
    open_size: bool = False
    input_name: str = ""
    input_shape: tuple[Any, ...] = ()
    manifest: PreprocessConfig | None = None

    def rows(self) -> list[tuple[str, str]]:
        """(setting, where it came from) per field: ("size 640×640", "detected from a fixed input shape")."""
        shown = _shown(self.config)
        return [(f"{_NAMES.get(k, k)} {shown[k]}", self.sources.get(k, DEFAULT)) for k in FIELDS]

    def lines(self) -> list[str]:
        """One text per field: "size 640×640 (detected from a fixed input shape)"."""
        return [f"{setting} ({source})" for setting, source in self.rows()]

    def manifest_changes(self) -> list[str]:
        """The values that differ from :attr:`manifest`'s, each as "mean 127, 127, 127 → 0.485, 0.456, 0.406 (preset
        imagenet)"; empty without a manifest."""
        if self.manifest is None:
            return []
        was, now = _shown(self.manifest), _shown(self.config)
        return [f"{_NAMES.get(k, k)} {was[k]} → {now[k]} ({self.sources.get(k, DEFAULT)})" for k in FIELDS
                if was[k] != now[k]]

    def manifest_warning(self, sample: str) -> str:
        """What a person is told when the values differ from the manifest of the bundled sample named ``sample`` (""
        when they do not)."""
        changed = self.manifest_changes()
        if not changed:
            return ""
        who = f"the bundled sample {sample}" if sample else "a bundled sample"
        return (f"This is {who}, whose manifest gives the preprocessing its model was made with, "
                f"and these values differ from it: {'; '.join(changed)}. Inputs prepared otherwise are not what the "
                "model was made for: its accuracy drops, and an int8 model calibrated on other inputs compares worse "
                "than it is. Use the manifest's values unless you know the model wants these.")

    def open_height(self) -> tuple[int, str, str] | None:
        """When :attr:`open_size` leaves the width alone open: (the height, who set it — the model or a preset — and
        the widths the preset's models take, or ""); None when the height is open too."""
        preset = next((p for p in PRESETS.values() if p.height is not None
                       and self.sources.get("size", "").startswith(_height_source(p))), None)
        if preset is not None and preset.height is not None:
            return preset.height, f"preset {preset.name} sets the height, {preset.height}", preset.widths
        hw = self.input_shape[1:3] if self.config.layout == Layout.NHWC else self.input_shape[2:4]
        height = static_dim(hw[0]) if len(hw) == 2 and static_dim(hw[1]) is None else None
        return (height, f"its height is {height}", "") if height is not None else None

    def open_size_message(self) -> str:
        """What to do when :attr:`open_size`: the one-line request for a size, or for the width alone when the
        model fixes the height or a preset set it."""
        c, nhwc = self.config.channels, self.config.layout == Layout.NHWC
        fixed = self.open_height()
        if fixed is not None:
            h, who, widths = fixed
            dims = f"1,{h},W,{c}" if nhwc else f"1,{c},{h},W"
            return (f"Model input '{self.input_name}' {shape_text(self.input_shape)} leaves its width open, and "
                    f"ortlab never guesses it: {who}; give the width too, --size {h} W"
                    + (f" ({widths})" if widths else "") + f", or --shape {self.input_name}={dims}.")
        dims = f"1,H,W,{c}" if nhwc else f"1,{c},H,W"
        return (f"Model input '{self.input_name}' {shape_text(self.input_shape)} leaves its height and width open, "
                f"and ortlab never guesses them: give the size its images must have, --size H W (e.g. --size 640 "
                f"640), or --shape {self.input_name}={dims}.")


_NAMES = {"resize_mode": "resize", "channel_order": "channel order"}


def _shown(c: PreprocessConfig) -> dict[str, str]:
    """Each field of ``c`` as a person reads it."""
    return {"size": f"{c.size[0]}×{c.size[1]}", "resize_mode": c.resize_mode.value, "layout": c.layout.value,
            "channels": str(c.channels), "channel_order": c.channel_order.value, "scale": c.scale.value,
            "mean": ", ".join(f"{v:g}" for v in c.mean), "std": ", ".join(f"{v:g}" for v in c.std), "dtype": c.dtype}


def _detected_sources(base: PreprocessConfig, shape: tuple[Any, ...]) -> tuple[dict[str, str], bool]:
    """The source of each field of ``base``, detected from an image input of ``shape``, and whether that
    input leaves its height and width open."""
    c1, c3 = static_dim(shape[1]), static_dim(shape[3])
    hw = shape[2:4] if base.layout == Layout.NCHW else shape[1:3]
    fixed_hw = all(static_dim(d) is not None for d in hw)
    sources = dict.fromkeys(FIELDS, DEFAULT)
    sources["size"] = FIXED_SHAPE if fixed_hw else DEFAULT
    channel_known = c1 in (1, 3) or c3 in (1, 3)
    sources["layout"] = sources["channels"] = DETECTED if channel_known else DEFAULT
    sources["dtype"] = DETECTED
    if base.scale == PixelScale.BYTE:
        sources["scale"] = DETECTED
    return sources, not fixed_hw


def _height_source(p: Preset) -> str:
    """The size's source when preset ``p`` set its height (read back by :meth:`ResolvedPreprocess.open_height`)."""
    return f"preset {p.name}: the height"


def _apply_preset(p: Preset, merged: dict[str, Any], sources: dict[str, str], open_size: bool,
                  outputs: Sequence[TensorInfo] = ()) -> bool:
    """Sets ``p``'s values (and height) in ``merged``, each with its source; the YOLO preset on an open input sets
    the size its output's anchors fit. Returns whether the size is still open."""
    for k, v in p.values.items():
        merged[k] = list(v) if isinstance(v, tuple) else v
        sources[k] = f"preset {p.name}"
    if p.height is not None:
        merged["size"] = [p.height, merged["size"][1]]
        sources["size"] = _height_source(p) + ("" if not open_size else "; the width is open")
    found = _yolo_output(outputs) if p.name == "yolo" and open_size else None
    size = yolo_size(found[1]) if found is not None else None
    if found is not None and size is not None:
        merged["size"] = [size, size]
        sources["size"] = f"preset {p.name}: the {found[1]} anchors of '{found[0].name}'"
        return False
    return open_size


def explain_preprocess(model_inputs: Sequence[TensorInfo] | Any, sample: Any = None,
                       overrides: dict[str, Any] | None = None, preset: str | None = None) -> ResolvedPreprocess | None:
    """The preprocessing of an image run with the source of every value: the sample manifest's (``sample`` is a
    ``SampleModel`` or a ``PreprocessConfig``), else detected from the model's image input; then the ``preset``
    (a name of :data:`PRESETS`) when one is chosen; then ``overrides`` (field → value, e.g. CLI flags). None when
    the model input is not an image and nothing was given. Raises DataError for values that cannot work."""
    inputs = list(getattr(model_inputs, "inputs", model_inputs) or ())
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if preset is not None and preset not in PRESETS:
        raise DataError(f"Unknown preprocessing preset {preset!r}; known: {', '.join(PRESETS)}.")
    base: PreprocessConfig | None = getattr(sample, "preprocess", sample) if sample is not None else None
    manifest = base
    sources: dict[str, str] = {}
    open_size = False
    name: str = ""
    shape: tuple[Any, ...] = ()
    if len(inputs) == 1:
        name, shape = inputs[0].name, tuple(inputs[0].shape)
    if base is not None:
        sources = dict.fromkeys(FIELDS, MANIFEST)
    elif len(inputs) == 1:
        try:
            base = detect_preprocess(inputs[0])
        except DataError:
            base = None
        if base is not None:
            sources, open_size = _detected_sources(base, shape)
    if base is None and preset is None and not overrides:
        return None
    merged = (base or PreprocessConfig()).to_dict()
    if base is None:
        sources = dict.fromkeys(FIELDS, DEFAULT)
    if preset is not None:
        open_size = _apply_preset(PRESETS[preset], merged, sources, open_size,
                                  list(getattr(model_inputs, "outputs", ()) or ()))
    for k, v in overrides.items():
        merged[k] = list(v) if isinstance(v, (list, tuple)) else v
        sources[k] = FLAGS
        if k == "size":
            open_size = False
    return ResolvedPreprocess(_checked_config(merged, sources), sources, open_size, name, shape, manifest)


def _checked_config(merged: dict[str, Any], sources: dict[str, str]) -> PreprocessConfig:
    """``merged`` read as a config (a preset's 3-channel mean/std cut to one value for a 1-channel model);
    DataError when it cannot work."""
    channels = int(merged.get("channels", 3))
    for k in ("mean", "std"):  # a 3-channel preset on a 1-channel model: one value
        if len(merged[k]) not in (1, channels) and sources.get(k, "").startswith("preset"):
            merged[k] = merged[k][:1]
    try:
        cfg = PreprocessConfig.from_dict(merged)
    except (OrtlabError, ValueError, TypeError) as exc:  # a from_plain error names the field
        raise DataError(str(exc)) from None
    if cfg.problems():
        raise DataError(" ".join(cfg.problems()))
    return cfg


def resolve_preprocess(model_inputs: Sequence[TensorInfo] | Any, sample: Any = None, dataset: Dataset | None = None,
                       overrides: dict[str, Any] | None = None) -> PreprocessConfig | None:
    """The preprocessing a run uses (:func:`explain_preprocess`'s config, without the sources): the sample
    manifest's (``sample`` is a ``SampleModel`` or a ``PreprocessConfig``), else detected from the model's image
    input, else None; ``overrides`` (field → value, e.g. from CLI flags) are applied on top. ``model_inputs`` may
    be a ``ModelInfo`` (its ``inputs``).

    None when ``dataset`` holds no images (tensors and random data need no preprocessing), or when the model
    input is not an image and nothing was overridden. Raises DataError for overrides that cannot work.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if dataset is not None and dataset.kind != "images" and not overrides:
        return None
    resolved = explain_preprocess(model_inputs, sample, overrides)
    return resolved.config if resolved is not None else None
