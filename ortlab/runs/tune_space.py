"""The recipes a tune search tries, most promising first for this CPU, without two that do the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ortlab.settings.config import (
    CalibrationMethod, OptLevel, Precision, QuantConfig, QuantFormat, QuantMode, QuantType, Recipe,
    Target, replace,
)
from ortlab.runtime.hardware import advise, detect


# -- the search space ------------------------------------------------------------------------------------------


def _effective(cfg: Any) -> Any:
    """``cfg`` (a QuantConfig) with every field that does not matter under its other fields (its ``when`` metadata
    is not met, e.g. calibration settings of a dynamic recipe) put back to its default, and op types made explicit."""
    import dataclasses

    changes: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        when = f.metadata.get("when") or {}
        if any(str(getattr(getattr(cfg, k), "value", getattr(cfg, k))) not in [str(v) for v in allowed]
               for k, allowed in when.items()):
            changes[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
    out = replace(cfg, **changes) if changes else cfg
    return replace(out, op_types=tuple(sorted(out.effective_op_types())))


def effective_recipe(r: Recipe) -> Recipe:
    """What ``r`` really does: no name, and quantization settings that cannot matter reset (fp32/fp16 recipes ignore
    the whole QuantConfig). Two recipes with equal effective recipes produce the same model."""
    q = _effective(r.quant) if r.precision == Precision.INT8 else QuantConfig()
    return replace(r, name="", quant=q)


def dedupe(recipes: Sequence[Recipe]) -> tuple[list[Recipe], list[str]]:
    """``recipes`` without those whose :func:`effective_recipe` equals an earlier one's, and a note per dropped one."""
    seen: dict[Recipe, str] = {}
    out: list[Recipe] = []
    notes: list[str] = []
    for r in recipes:
        key = effective_recipe(r)
        if key in seen:
            notes.append(f"Skipped {r.name or r.label()}: the same recipe as {seen[key]}.")
            continue
        seen[key] = r.name or r.label()
        out.append(r)
    return out, notes


def search_space(target: Target = Target.CPU, features: Any = None, opt_level: OptLevel = OptLevel.EXTENDED,
                 model_ops: Sequence[str] = (), objective: str = "latency") -> list[Recipe]:
    """The recipes to try, most promising first for this CPU (``features``: :func:`ortlab.runtime.hardware.detect`),
    without duplicates (:func:`dedupe`). Static trials include range-split off and bias correction off (both are
    on by default); with the ``size`` objective and a model with Gather (embedding tables), weight-only int8 of
    Gather comes first."""

    f = features if features is not None else detect()
    adv = advise(f, target)
    if Target(target) == Target.GPU:
        s8 = QuantConfig(activation_type=QuantType.INT8, weight_type=QuantType.INT8, symmetric_activation=True)
        return [Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=True),
                Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=False),
                Recipe(precision=Precision.INT8, target=Target.GPU, opt_level=opt_level, quant=s8),
                Recipe(precision=Precision.INT8, target=Target.GPU, opt_level=opt_level,
                       quant=replace(s8, per_channel=False))]
    base = QuantConfig(activation_type=adv.activation_type, weight_type=adv.weight_type, reduce_range=adv.reduce_range)
    other_act = QuantType.INT8 if adv.activation_type == QuantType.UINT8 else QuantType.UINT8
    pct = CalibrationMethod.PERCENTILE
    quants: list[tuple[str, QuantConfig]] = [
        ("static", base),
        ("percentile 99.999", replace(base, calibration_method=pct, percentile=99.999)),
        ("no bias correction", replace(base, bias_correction=False)),  # on by default: +5 dB on EfficientNet-Lite0
        ("no range-split", replace(base, range_split=False)),
        ("Conv/MatMul/Gemm only", replace(base, op_types=("Conv", "MatMul", "Gemm"))),
        ("dynamic", QuantConfig(mode=QuantMode.DYNAMIC, reduce_range=adv.reduce_range)),
        ("percentile 99.99", replace(base, calibration_method=pct, percentile=99.99)),
        ("symmetric activations", replace(base, symmetric_activation=True)),
        ("QOperator", replace(base, quant_format=QuantFormat.QOPERATOR)),
        ("reduce-range" if not adv.reduce_range else "full range", replace(base, reduce_range=not adv.reduce_range)),
        ("per-tensor", replace(base, per_channel=False)),
        (f"{other_act.value} activations", replace(base, activation_type=other_act)),
        ("MinMax moving average", replace(base, moving_average=True, averaging_constant=0.01)),
        ("percentile 99.9", replace(base, calibration_method=pct, percentile=99.9)),
        ("U8U8", replace(base, activation_type=QuantType.UINT8, weight_type=QuantType.UINT8)),
        ("dynamic per-channel", QuantConfig(mode=QuantMode.DYNAMIC, per_channel=True, reduce_range=adv.reduce_range)),
        # histogram methods calibrate far slower (minutes on an ImageNet CNN): last
        ("entropy", replace(base, calibration_method=CalibrationMethod.ENTROPY)),
        ("distribution", replace(base, calibration_method=CalibrationMethod.DISTRIBUTION)),
        ("entropy 512 bins", replace(base, calibration_method=CalibrationMethod.ENTROPY, num_bins=512,
                                     num_quantized_bins=128)),
    ]
    ops = set(model_ops)
    if objective == "size" and "Gather" in ops:  # embedding tables are most of a transformer's bytes
        quants.insert(0, ("dynamic + Gather", QuantConfig(mode=QuantMode.DYNAMIC, reduce_range=adv.reduce_range,
                                                          op_types=("MatMul", "Gemm", "Gather"))))
    out = []
    for name, q in quants:
        if q.mode == QuantMode.DYNAMIC and ops and not ops & {"MatMul", "Gemm", "Attention", "LSTM", "GRU"}:
            continue
        out.append(Recipe(precision=Precision.INT8, target=Target.CPU, opt_level=opt_level, quant=q, name=""))
        out[-1] = replace(out[-1], name=f"int8 {name}")
    out.insert(min(3, len(out)), replace(out[0], opt_level=OptLevel.ALL, name="int8 static, opt all"))
    out.append(Recipe(precision=Precision.FP32, target=Target.CPU, opt_level=OptLevel.ALL, name="fp32 opt all"))
    return dedupe(out)[0]
