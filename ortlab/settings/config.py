"""Recipe, quantization, preprocessing and benchmark settings as frozen dataclasses.

Every field carries a ``help`` text in its metadata; the CLI and the Streamlit widgets both show it.
Optional metadata: ``label`` (short UI name), ``min``/``max``/``step`` for numbers (for tuples: each element),
and ``when`` (a mapping of sibling field → allowed values) that says when the field matters. The CLI flags come
from the same fields (``ortlab.settings.flags``), which also reads ``flag`` (when the flag is not ``--field-name``),
``negatable`` (a bool gets both ``--x`` and ``--no-x``), ``explicit`` (written in CLI lines even at its
default), ``metavar`` and ``choices``. ``search`` (a tuple of :class:`Try`) lists the values ``ortlab tune`` tries
for the field (``ortlab.runs.tune_space``); a field without it is never varied by the search.
Each settings class answers which of its numbers are out of bounds (:meth:`Bounded.out_of_bounds`); whether a
recipe can run on a machine (its providers, its CPU) is decided where a run is prepared
(:func:`ortlab.runs.prepare.validate_recipe`), which returns :class:`Finding` records.

Size: the settings dataclasses are the schema both the CLI and the app are generated from; they are kept in one
file so a field, its help and its bounds are read together.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Collection, Iterable

from ortlab.settings.flags import config_cli_args, replace_path
from ortlab.core.errors import RecipeError
from ortlab.core.serial import from_plain, to_plain


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"


class Target(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class OptLevel(StrEnum):
    DISABLED = "disabled"
    BASIC = "basic"
    EXTENDED = "extended"
    ALL = "all"


class QuantMode(StrEnum):
    STATIC = "static"
    DYNAMIC = "dynamic"


class RecipeKind(StrEnum):
    """What a recipe makes of a model (:attr:`Recipe.kind`): fp32, fp16, static int8 (calibrated) or dynamic int8
    (activations quantized at run time)."""

    FP32 = "fp32"
    FP16 = "fp16"
    STATIC = "static"
    DYNAMIC = "dynamic"


class QuantFormat(StrEnum):
    QDQ = "QDQ"
    QOPERATOR = "QOperator"


class QuantType(StrEnum):
    INT8 = "int8"
    UINT8 = "uint8"


class CalibrationMethod(StrEnum):
    MINMAX = "MinMax"
    ENTROPY = "Entropy"
    PERCENTILE = "Percentile"
    DISTRIBUTION = "Distribution"


class ResizeMode(StrEnum):
    STRETCH = "stretch"
    CENTER_CROP = "center_crop"
    LETTERBOX = "letterbox"


class Layout(StrEnum):
    NCHW = "NCHW"
    NHWC = "NHWC"


class ChannelOrder(StrEnum):
    RGB = "RGB"
    BGR = "BGR"


class PixelScale(StrEnum):
    UNIT = "0-1"
    BYTE = "0-255"


class ExecutionMode(StrEnum):
    SEQUENTIAL = "sequential"
    PARALLEL = "parallel"


def setting(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field with a default (copied when mutable) and help text for CLI and UI."""
    meta["help"] = help
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


class Bounded:
    """A settings dataclass whose numbers carry ``min``/``max`` metadata (for tuples: each element)."""

    def out_of_bounds(self, prefix: str = "") -> list[tuple[str, str]]:
        """(dotted field path, message) for each number (nested settings and tuple elements included) outside its
        field's ``min``/``max``."""
        out: list[tuple[str, str]] = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value, path = getattr(self, f.name), prefix + f.name
            if isinstance(value, Bounded):
                out += value.out_of_bounds(path + ".")
                continue
            lo, hi = f.metadata.get("min"), f.metadata.get("max")
            if lo is None and hi is None:
                continue
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                if (lo is not None and v < lo) or (hi is not None and v > hi):
                    bounds = (f"between {lo} and {hi}" if lo is not None and hi is not None
                              else f"at least {lo}" if lo is not None else f"at most {hi}")
                    each = "each " if isinstance(value, tuple) else ""
                    out.append((path, f"{f.metadata.get('label', f.name)} ({path}) must {each}be {bounds}; got {v}."))
                    break
        return out


class Int8Flavour(Protocol):
    """An int8 flavour: the activation and weight types, and whether weights are reduced to 7 bits
    (``ortlab.runtime.hardware.HardwareAdvice`` is one)."""

    @property
    def activation_type(self) -> QuantType: ...

    @property
    def weight_type(self) -> QuantType: ...

    @property
    def reduce_range(self) -> bool: ...


@dataclass(frozen=True)
class Try:
    """One value that tune's search tries for a setting (an entry of the field's ``search`` metadata, as Olive's
    ``search_defaults``): the trial is tune's starting recipe with the field set to ``value`` and the sibling fields in
    ``also`` set too, named ``<precision> <name>`` (no name: its label). ``order`` places it among all trials (the
    starting recipe is 0; lower first). It is tried where the field's ``when`` holds, on ``target``, for
    ``objective`` (None: any) and, when ``ops`` is given, only on models with one of those op types."""

    value: Any
    name: str = ""
    order: int = 0
    also: dict[str, Any] = field(default_factory=dict, hash=False)
    target: str = "cpu"
    objective: str | None = None
    ops: tuple[str, ...] = ()


DYNAMIC_DEFAULT_OP_TYPES = ("MatMul", "Gemm")
DISTRIBUTION_MIN_BINS = 512  # ORT's DistributionCalibrater refuses fewer
PREPROCESS_DTYPES = ("float32", "float16", "uint8")


@dataclass(frozen=True)
class QuantConfig(Bounded):
    """How to quantize to int8 (used only when the recipe's precision is int8)."""

    mode: QuantMode = setting(
        QuantMode.STATIC,
        "static: weights and activations quantized ahead of time from calibration data (fast CPU path). "
        "dynamic: weights only; activations are quantized at run time (no data needed; best for MatMul-heavy models).",
        label="Quantization mode", flag="--quant-mode", explicit=True,
        search=(Try(QuantMode.DYNAMIC, "dynamic", order=60),),
    )
    quant_format: QuantFormat = setting(
        QuantFormat.QDQ,
        "QDQ inserts QuantizeLinear/DequantizeLinear pairs that ORT fuses (portable, TensorRT-readable). "
        "QOperator writes QLinearConv/QLinearMatMul directly (CPU only).",
        label="Format", when={"mode": ["static"]}, search=(Try(QuantFormat.QOPERATOR, "QOperator", order=90),),
    )
    activation_type: QuantType = setting(
        QuantType.UINT8, "Integer type of activations. uint8 (U8S8 with int8 weights) is the fast x86 CPU path; "
        "int8 (S8S8) suits ARM and TensorRT and ran slower than fp32 on x86 here.",
        label="Activation type", when={"mode": ["static"]},
        search=(Try(QuantType.INT8, "int8 activations", order=120), Try(QuantType.UINT8, "uint8 activations", order=120)),
    )
    weight_type: QuantType = setting(
        QuantType.INT8, "Integer type of weights.", label="Weight type",
        search=(Try(QuantType.UINT8, "U8U8", order=150, also={"activation_type": QuantType.UINT8}),),
    )
    per_channel: bool = setting(
        True, "One scale per output channel of each weight instead of one per tensor: usually more accurate.",
        label="Per-channel", negatable=True, search=(Try(False, "per-tensor", order=110),),
    )
    reduce_range: bool = setting(
        False, "Quantize weights to 7 bits; avoids overflow on x86 CPUs without VNNI at a small accuracy cost. The CLI "
        "and the app turn it on by default on such a CPU (U8S8 weights).",
        label="Reduce range", negatable=True, explicit=True,  # the CLI's default follows the CPU: always written
        search=(Try(True, "reduce-range", order=100), Try(False, "full range", order=100)),
    )
    calibration_method: CalibrationMethod = setting(
        CalibrationMethod.MINMAX,
        "How activation ranges are chosen from calibration data: MinMax (observed range), Entropy (KL divergence), "
        "Percentile (clip outliers), Distribution (histogram fit).",
        label="Calibration method", when={"mode": ["static"]},
        # histogram methods calibrate far slower (minutes on an ImageNet CNN): last
        search=(Try(CalibrationMethod.ENTROPY, "entropy", order=160),
                Try(CalibrationMethod.DISTRIBUTION, "distribution", order=170)),
    )
    percentile: float = setting(
        99.999, "Percentile of |activation| kept by the Percentile method.",
        label="Percentile", min=90.0, max=100.0, step=0.001,
        when={"mode": ["static"], "calibration_method": ["Percentile"]},
        search=tuple(Try(p, f"percentile {p}", order=o, also={"calibration_method": CalibrationMethod.PERCENTILE})
                     for p, o in ((99.999, 10), (99.99, 70), (99.9, 140))),
    )
    num_bins: int = setting(
        2048, "Histogram bins collected for Entropy, Percentile and Distribution.",
        label="Histogram bins", min=128, max=65536, step=128,
        when={"mode": ["static"], "calibration_method": ["Entropy", "Percentile", "Distribution"]},
        search=(Try(512, "entropy 512 bins", order=180, also={"calibration_method": CalibrationMethod.ENTROPY}),),
    )
    num_quantized_bins: int = setting(
        128, "Target bins the Entropy method searches over.",
        label="Quantized bins", min=16, max=2048, step=16,
        when={"mode": ["static"], "calibration_method": ["Entropy"]},
    )
    moving_average: bool = setting(
        False, "MinMax: average ranges over batches instead of taking the overall min/max.",
        label="Moving average", when={"mode": ["static"], "calibration_method": ["MinMax"]},
        search=(Try(True, "MinMax moving average", order=130),),
    )
    averaging_constant: float = setting(
        0.01, "MinMax moving-average constant.", label="Averaging constant", min=0.0001, max=1.0, step=0.001,
        when={"mode": ["static"], "calibration_method": ["MinMax"], "moving_average": [True]},
    )
    symmetric_activation: bool = setting(
        False, "Force activation ranges symmetric around zero.", label="Symmetric activations",
        when={"mode": ["static"]}, search=(Try(True, "symmetric activations", order=80),),
    )
    symmetric_weight: bool = setting(True, "Force weight ranges symmetric around zero.", label="Symmetric weights")
    op_types: tuple[str, ...] = setting(
        (), "Op types to quantize. Empty: MatMul/Gemm for dynamic, every supported op for static.",
        label="Op types to quantize", metavar="OP[,OP…]",
        search=(Try(("Conv", "MatMul", "Gemm"), "Conv/MatMul/Gemm only", order=50),
                # embedding tables are most of a transformer's bytes: first when optimizing for size
                Try(("MatMul", "Gemm", "Gather"), "dynamic + Gather", order=-10, also={"mode": QuantMode.DYNAMIC},
                    objective="size", ops=("Gather",)),
                # static int8 has no LSTM kernel: an LSTM's weights (most of a wake-word or VAD model's) shrink only
                # in dynamic int8, which may run slower than float at batch 1 on a small LSTM (0.79x, hey_mycroft)
                Try(("MatMul", "Gemm", "LSTM"), "dynamic + LSTM", order=-10, also={"mode": QuantMode.DYNAMIC},
                    objective="size", ops=("LSTM",)),
                Try(("MatMul", "Gemm", "LSTM"), "dynamic + LSTM", order=65, also={"mode": QuantMode.DYNAMIC},
                    objective="latency", ops=("LSTM",))),
    )
    op_types_to_exclude: tuple[str, ...] = setting((), "Op types left in float.", label="Op types to exclude",
                                                   flag="--exclude-op-types", metavar="OP[,OP…]")
    nodes_to_exclude: tuple[str, ...] = setting((), "Node names left in float.", label="Nodes to exclude",
                                                flag="--exclude-nodes", metavar="NODE[,NODE…]")
    int16_weight_nodes: tuple[str, ...] = setting(
        (), "Nodes (Conv, Gemm, MatMul) whose weights are quantized to int16 instead of int8 (ONNX Runtime's "
        "TensorQuantOverrides), while their activations stay 8-bit: more accurate, but ORT's CPU runs those nodes in "
        "float (no fused int8 kernel), so each costs speed.", label="16-bit weight nodes",
        flag="--int16-weight-nodes", metavar="NODE[,NODE…]", when={"mode": ["static"], "quant_format": ["QDQ"]},
    )
    range_split: bool = setting(
        True, "Keep in float the Concat/Add/Sub/Sum/Max/Min nodes whose inputs' calibrated ranges differ more than "
        "the range-split factor (e.g. a detector's box pixels 0..640 joined with its scores 0..1, which one int8 "
        "scale would crush), and the nodes that only move their output; each one is named in a note.",
        label="Range-split", when={"mode": ["static"]}, search=(Try(False, "no range-split", order=40),),
    )
    range_split_factor: float = setting(
        100.0, "Range-split: how many times wider one input's range must be than another's.",
        label="Range-split factor", min=2.0, max=1e6, step=10.0, when={"mode": ["static"], "range_split": [True]},
    )
    silu_range: bool = setting(
        True, "Quantize each SiLU's input (x · sigmoid(x), YOLOv5/v8's activation) on the part of its calibrated range "
        "the SiLU can tell apart: below about −6 it is flat within half its output's int8 step, so the range's low end "
        "is cut there and the int8 step of the rest gets finer (the principle of fused activations, Jacob et al. "
        "2018). Only scales and zero points change: same graph, same speed. The note says how many were cut.",
        label="SiLU-aware ranges", when={"mode": ["static"]},
    )
    score_range: bool = setting(
        True, "Quantize a YOLO detector's class-score logits up to a score of 0.99 (logit 4.6) even where calibration "
        "saw lower ones: a calibrated range that ends below logit 0 caps every score of an output at 0.5, and a "
        "0.5 threshold then loses its detections. Only scales and zero points change: same graph, same speed. The "
        "note says which outputs.",
        label="Score-aware ranges", when={"mode": ["static"]},
    )
    known_patterns: bool = setting(
        True, "Keep in float the known patterns found in the graph: a YOLO-style detection head's post-processing "
        "(DFL, box decode, score Sigmoid, the final box+score Concat, as Ultralytics' int8 export does), transformer "
        "attention (Softmax between activation × activation MatMuls, LayerNorms) and a CTC text recognizer's final "
        "per-step Softmax with its class projection; each pattern and its nodes are listed in a note (add nodes "
        "with --exclude-nodes).",
        label="Known patterns", when={"mode": ["static"]},
    )
    weight_rounding: bool = setting(
        True, "After static QDQ quantization, re-round each Conv/Gemm/MatMul's int8 weights with GPTQ (Frantar et "
        "al. 2023): the same per-channel scales, but each weight is rounded up or down so that the layer's output on "
        "the calibration data moves least, instead of each to its nearest value. Only int8 weight values change: "
        "same graph, same speed. Checked on data it was not fitted on: a quarter of the calibration samples is held "
        "back; a node keeps GPTQ's rounding only if it lowers that node's output error there, and the whole step is "
        "dropped if a model output (a detector's box and score channels apart) is then further from the float "
        "model's beyond doubt (95% interval). On a YOLOv8n it cut the error the weights add 3× (the score logits' "
        "error near the threshold on 400 unseen photos 0.21 → 0.18); it costs one pass of the quantized model over "
        "the calibration data (about 20 s for a YOLOv8n at 320×320 on 100 samples). Skipped, with a note, for "
        "QOperator, on random calibration data and with fewer than 8 calibration samples.",
        label="GPTQ weight rounding", when={"mode": ["static"], "quant_format": ["QDQ"]},
    )
    bias_correction: bool = setting(
        True, "After static QDQ quantization, shift each Conv/Gemm's int32 bias so that its output's per-channel mean "
        "on the calibration data matches the float model's (empirical bias correction, Nagel et al. 2019), node by "
        "node in graph order. Only bias values change: same graph, same speed. Checked on data it was not fitted "
        "on: every 4th calibration sample is held back, and a node keeps its correction only if it lowers that "
        "node's output error there; if the model's outputs (a detector's box and score channels apart) are then "
        "further from the float model's on the held-back samples, the whole step is dropped. The note says how many "
        "nodes were corrected. On by default: gained up to +5.6 dB (EfficientNet-Lite0); it costs about two extra "
        "passes of the quantized model over the calibration data (about 10 s on EfficientNet-Lite0). Skipped, with a "
        "note, for QOperator, on random calibration data and with fewer than 8 calibration samples.",
        label="Bias correction", when={"mode": ["static"], "quant_format": ["QDQ"]},
        search=(Try(False, "no bias correction", order=20),),  # on by default: +5 dB on EfficientNet-Lite0
    )
    preprocess: bool = setting(
        True, "Run ORT's quant_pre_process first (shape inference, BatchNorm folding). Recommended.",
        label="Pre-process", when={"mode": ["static"]},
    )
    calibration_samples: int = setting(
        100, "How many calibration samples to draw (stratified by class when labels exist).",
        label="Calibration samples", min=1, max=10000, step=1, when={"mode": ["static"]},
    )
    seed: int = setting(0, "Seed for sampling calibration data.", label="Seed", min=0, max=2**31 - 1, step=1)

    def effective_op_types(self) -> tuple[str, ...]:
        """Op types that will be quantized ("()" = all supported)."""
        if self.op_types:
            return self.op_types
        return DYNAMIC_DEFAULT_OP_TYPES if self.is_dynamic else ()

    @property
    def is_dynamic(self) -> bool:
        """Dynamic quantization (activations quantized at run time, nothing calibrated): the one place the mode is
        read; a recipe's :attr:`Recipe.kind` builds on it."""
        return self.mode == QuantMode.DYNAMIC

    @property
    def is_u8s8(self) -> bool:
        """uint8 activations (always, when dynamic) with int8 weights: the flavour that saturates ONNX Runtime's
        16-bit sums on x86 without VNNI."""
        return self.weight_type == QuantType.INT8 and (self.is_dynamic or self.activation_type == QuantType.UINT8)

    def with_int8_flavour(self, flavour: Int8Flavour, chosen: Collection[str] = ()) -> QuantConfig:
        """This config with ``flavour``'s int8 types in the fields not named in ``chosen`` (the settings a person
        chose): the activation type (static only) and the weight type, then reduce-range where the result is U8S8,
        the flavour reduce-range is about (U8U8 and S8S8 keep this config's)."""
        out = self
        if "activation_type" not in chosen and not self.is_dynamic:
            out = dataclasses.replace(out, activation_type=flavour.activation_type)
        if "weight_type" not in chosen:
            out = dataclasses.replace(out, weight_type=flavour.weight_type)
        if "reduce_range" not in chosen and out.is_u8s8:
            out = dataclasses.replace(out, reduce_range=flavour.reduce_range)
        return out


# int8 on GPU runs through TensorRT, which takes symmetric int8 (S8S8) QDQ models: what tune tries there
TENSORRT_INT8 = QuantConfig(activation_type=QuantType.INT8, weight_type=QuantType.INT8, symmetric_activation=True)


@dataclass(frozen=True)
class Recipe(Bounded):
    """What to do to a model: precision, target, graph-optimization level and quantization knobs."""

    precision: Precision = setting(
        Precision.FP32, "fp32 keeps weights as they are; fp16 halves them (GPU); int8 quantizes (CPU).",
        label="Precision", explicit=True,
        search=(Try(Precision.INT8, order=20, target="gpu", also={"quant": TENSORRT_INT8}),
                Try(Precision.INT8, order=30, target="gpu",
                    also={"quant": dataclasses.replace(TENSORRT_INT8, per_channel=False)}),
                Try(Precision.FP32, "opt all", order=1000, also={"opt_level": OptLevel.ALL})),
    )
    target: Target = setting(
        Target.CPU, "Where the model will run. gpu uses TensorRT > CUDA > CPU; cpu uses the CPU provider.",
        label="Target", explicit=True,
    )
    opt_level: OptLevel = setting(
        OptLevel.EXTENDED,
        "ORT graph optimization: disabled, basic (constant folding, redundant nodes), extended (fusions such as "
        "Conv+BN+Relu, attention), all (adds hardware-specific layouts; the saved model only suits this machine).",
        label="Graph optimization", explicit=True, search=(Try(OptLevel.ALL, "static, opt all", order=30),),
    )
    quant: QuantConfig = setting(QuantConfig(), "Quantization settings (int8 only).", label="int8 quantization",
                                 when={"precision": ["int8"]})
    keep_io_types: bool = setting(
        True, "fp16: keep float32 inputs and outputs so callers need no change.", label="Keep I/O types",
        when={"precision": ["fp16"]}, search=(Try(False, order=10, target="gpu"),),
    )
    allow_random_data: bool = setting(
        False, "Calibrate with random inputs when no data is given. Results are flagged; accuracy is meaningless.",
        label="Allow random data",
    )
    name: str = setting("", "A short name for this recipe.", label="Name")

    # -- what the recipe does (each decided here, once) ---------------------------------------------------
    @property
    def kind(self) -> RecipeKind:
        """fp32, fp16, static int8 or dynamic int8 (the quantization mode counts for int8 only)."""
        if self.precision == Precision.INT8:
            return RecipeKind.DYNAMIC if self.quant.is_dynamic else RecipeKind.STATIC
        return RecipeKind(self.precision.value)

    @property
    def is_static(self) -> bool:
        """Static int8: quantized with activation ranges calibrated on data."""
        return self.kind == RecipeKind.STATIC

    @property
    def is_dynamic(self) -> bool:
        """Dynamic int8: weights quantized ahead, activations at run time."""
        return self.kind == RecipeKind.DYNAMIC

    def with_int8_flavour(self, flavour: Int8Flavour, chosen: Collection[str] = ()) -> Recipe:
        """This recipe with ``flavour`` (a CPU's int8 advice: ``ortlab.runtime.hardware.advise``) in its quantization
        settings, except the dotted paths in ``chosen`` (``quant.reduce_range``: the settings a person chose). A
        recipe for a GPU target is returned unchanged (tune searches TensorRT's flavour there)."""
        if Target(self.target) != Target.CPU:
            return self
        keep = {p.removeprefix("quant.") for p in chosen if p.startswith("quant.")}
        return dataclasses.replace(self, quant=self.quant.with_int8_flavour(flavour, keep))

    @property
    def rounds_weights(self) -> bool:
        """Whether a run has a weight-rounding stage (static QDQ int8 with ``quant.weight_rounding`` on)."""
        return self.is_static and self.quant.weight_rounding and self.quant.quant_format == QuantFormat.QDQ

    @property
    def corrects_biases(self) -> bool:
        """Whether a run has a bias-correction stage (static QDQ int8 with ``quant.bias_correction`` on)."""
        return self.is_static and self.quant.bias_correction and self.quant.quant_format == QuantFormat.QDQ

    # -- serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        return _from_plain(cls, data)

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecipeError(f"The recipe is not valid JSON ({exc.msg} at line {exc.lineno}).") from None
        except RecursionError:
            raise RecipeError("The recipe is not a recipe: its JSON is nested too deeply to read.") from None
        if not isinstance(data, dict):
            raise RecipeError("The recipe must be a JSON object.")
        return cls.from_dict(data)

    def label(self) -> str:
        """A short human name such as ``int8 static QDQ · cpu · extended``."""
        if self.name:
            return self.name
        parts = [self.precision.value]
        if self.precision == Precision.INT8:
            parts.append(self.quant.mode.value)
            if self.is_static:
                parts.append(self.quant.quant_format.value)
        return " ".join(parts) + f" · {self.target.value} · {self.opt_level.value}"


@dataclass(frozen=True)
class PreprocessConfig(Bounded):
    """How an image becomes a model input tensor."""

    size: tuple[int, int] = setting((224, 224), "Height and width the model expects.", label="Size (H, W)",
                                    min=1, metavar=("H", "W"))
    resize_mode: ResizeMode = setting(
        ResizeMode.STRETCH,
        "stretch: resize to size; center_crop: resize the short side to size×256/224 then crop the centre; "
        "letterbox: fit inside and pad with grey (114, as YOLO exporters do).", label="Resize mode",
    )
    layout: Layout = setting(Layout.NCHW, "Tensor layout (detected from the model input).", label="Layout")
    channels: int = setting(3, "1 = grayscale, 3 = colour.", label="Channels", min=1, max=3, step=2)
    channel_order: ChannelOrder = setting(ChannelOrder.RGB, "Channel order of colour images.", label="Channel order")
    scale: PixelScale = setting(PixelScale.UNIT, "Pixel range before mean/std: 0-1 or 0-255.", label="Scale")
    mean: tuple[float, ...] = setting((0.0, 0.0, 0.0), "Per-channel mean subtracted after scaling, in the model's "
                                      "channel order (BGR models take BGR means).", label="Mean")
    std: tuple[float, ...] = setting((1.0, 1.0, 1.0), "Per-channel std divided after subtracting the mean.", label="Std")
    dtype: str = setting("float32", "Element type of the tensor: float32, float16 or uint8.", label="dtype",
                         choices=PREPROCESS_DTYPES)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreprocessConfig:
        return _from_plain(cls, data)

    def problems(self) -> list[str]:
        """Messages for settings that cannot work; empty when the config is usable."""
        out = [message for _, message in self.out_of_bounds()]
        if self.channels == 2:
            out.append(f"Channels must be 1 or 3, got {self.channels}.")
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, self.channels):
                out.append(f"{name} needs 1 or {self.channels} values, got {len(values)}.")
        if any(s == 0 for s in self.std):
            out.append("std must not contain 0.")
        if self.dtype not in PREPROCESS_DTYPES:
            out.append(f"dtype must be {', '.join(PREPROCESS_DTYPES[:-1])} or {PREPROCESS_DTYPES[-1]}, "
                       f"got {self.dtype!r}.")
        return out


# What the Benchmark page and `ortlab bench` time by default: a few seconds per variant and batch size, long
# enough to watch the live chart grow (BenchConfig() itself keeps a run count, so BenchConfig(runs=N) is N runs).
DEFAULT_BENCH_DURATION_S = 3.0


@dataclass(frozen=True)
class BenchConfig(Bounded):
    """How to time a model."""

    batch_sizes: tuple[int, ...] = setting((1,), "Batch sizes to time.", label="Batch sizes", min=1)
    warmup: int = setting(10, "Untimed runs before measuring.", label="Warm-up runs", min=0, max=1000, step=1)
    duration_s: float = setting(0.0, "Time each batch size for this many seconds instead of a run count (0 = use "
                                "the run count). The app and `ortlab bench` start at 3 s, long enough to watch the "
                                "live chart grow.",
                                label="Duration (s)", min=0.0, max=600.0, step=0.5, flag="--duration", metavar="S",
                                explicit=True)  # always written: the CLI's default (3 s) is not this one
    runs: int = setting(100, "Timed runs per batch size (ignored when a duration is set).", label="Runs",
                        min=1, max=100000, step=1, when={"duration_s": [0.0]})
    intra_op_threads: int = setting(0, "Threads inside one operator (0 = ORT default).", label="Intra-op threads",
                                    min=0, max=256, step=1, flag="--threads")
    inter_op_threads: int = setting(0, "Threads across operators in parallel mode (0 = ORT default).",
                                    label="Inter-op threads", min=0, max=256, step=1)
    execution_mode: ExecutionMode = setting(ExecutionMode.SEQUENTIAL, "Run operators one at a time or in parallel.",
                                            label="Execution mode")
    enable_mem_pattern: bool = setting(True, "Pre-plan memory from the first run's allocation pattern.",
                                       label="Memory pattern", flag="--mem-pattern")
    enable_cpu_mem_arena: bool = setting(True, "Use ORT's CPU memory arena.", label="CPU memory arena",
                                         flag="--cpu-mem-arena")
    profile: bool = setting(False, "Write ORT's profiling JSON for each variant.", label="ORT profiling")
    target: Target = setting(Target.CPU, "Run on cpu or gpu (TensorRT > CUDA > CPU).", label="Target")
    openvino: bool = setting(False, "Also time every model under OpenVINO's CPU runtime, beside ONNX Runtime (an int8 "
                             "static run from its portable QDQ file). Needs the extra: pip install \"ortlab[openvino]\".",
                             label="Also time under OpenVINO", flag="--openvino")
    session_opt_level: OptLevel = setting(
        OptLevel.ALL, "Graph optimization ORT applies when it loads each model for timing. 'all' is how ORT runs "
        "models by default, so a model saved at a lower level is optimized at load and times alike; choose "
        "'disabled' to time each saved graph exactly as it is.", label="Optimization at load")
    seed: int = setting(0, "Seed of the random inputs used for timing.", label="Seed", min=0, max=2**31 - 1, step=1)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        return _from_plain(cls, data)

    def problems(self) -> list[str]:
        """Messages for settings that cannot work; empty when the config is usable (whether OpenVINO is installed is
        the runtime's question: :func:`ortlab.timing.bench.config_problems`)."""
        out = [message for _, message in self.out_of_bounds()]
        if not self.batch_sizes:
            out.append("Give at least one batch size.")
        return out


# -- validation ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One result of validating a recipe. ``level`` is "error" (cannot run), "warning" or "note"."""

    level: str
    field: str
    message: str


@dataclass(frozen=True)
class CpuInt8:
    """What the CPU that runs a recipe means for its int8 flavour (``ortlab.runtime.hardware.cpu_int8`` reads it):
    whether uint8×int8 (U8S8) products saturate ONNX Runtime's 16-bit sums there (x86 without VNNI), the CPU's name,
    and the advice's reason."""

    saturates_u8s8: bool = False
    name: str = "this CPU"
    why: str = ""


# -- plain-data conversion (ortlab.core.serial, with RecipeError for bad settings) ---------------------------


def _to_plain(obj: Any) -> Any:
    return to_plain(obj)


def _from_plain(cls: type, data: dict[str, Any], where: str = "") -> Any:
    return from_plain(cls, data, error=RecipeError, where=where)


def replace(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that also accepts dotted names for nested configs (``quant.mode``)."""
    return replace_path(obj, changes)


def recipe_cli_args(recipe: Recipe) -> list[str]:
    """The ``ortlab optimize`` flags equivalent to a recipe (defaults and settings that do not apply omitted)."""
    return config_cli_args(recipe)


def preprocess_cli_args(cfg: PreprocessConfig) -> list[str]:
    """The preprocessing flags that reproduce ``cfg``. Every field is written: the CLI starts from the sample's
    manifest or the model's input, not from ``PreprocessConfig()``."""
    return config_cli_args(cfg, complete=True)


def recipe_cli_line(recipe: Recipe, model: str = "MODEL.onnx", out: str = "OUT.onnx",
                    calibration: str | None = None) -> str:
    """The shell line that reproduces a recipe with the ``ortlab`` CLI."""
    parts = ["ortlab", "optimize", model, out, *recipe_cli_args(recipe)]
    if calibration and recipe.is_static:
        parts += ["--calibration", calibration]
    return " ".join(shlex.quote(p) for p in parts)


def errors_of(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that block a run (level "error")."""
    return [f for f in findings if f.level == "error"]
