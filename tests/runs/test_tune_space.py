"""Tune's search space comes from the settings' ``search`` metadata: the same trials, in the same order, as the list
tune used to write by hand; a new ``search`` entry joins the space without a change to ``ortlab.runs.tune_space``."""

from __future__ import annotations

import dataclasses
from enum import Enum
from types import MappingProxyType
from typing import Any

import pytest

from ortlab.runs.prepare import validate_recipe
from ortlab.runs.tune_space import dedupe, search_space, searched_fields
from ortlab.runtime.hardware import advise, parse_cpuinfo
from ortlab.settings.config import (
    CalibrationMethod, OptLevel, Precision, QuantConfig, QuantFormat, QuantMode, QuantType, Recipe, Target, Try,
    replace,
)

CPUS = {"x86 VNNI": "flags : sse2 avx2 avx512_vnni", "x86 no VNNI": "flags : sse2 avx avx2",
        "arm": "Features : fp asimd asimddp\nCPU architecture: 8"}
MODEL_OPS = {  # the op types of the sample and fixture models of each kind
    "image classifier (digits_cnn)": ("Add", "BatchNormalization", "Conv", "Flatten", "Gemm", "GlobalAveragePool",
                                      "Relu"),
    "text encoder": ("Add", "Cast", "Concat", "Div", "Erf", "Gather", "MatMul", "Mul", "ReduceMean", "Reshape",
                     "Softmax", "Sqrt", "Sub", "Transpose"),
    "detector (yolov8)": ("Add", "Concat", "Conv", "Mul", "Relu", "Reshape", "Sigmoid", "Split", "Sub"),
    "wake word (openWakeWord's hey_mycroft, LSTM)": ("Add", "Cast", "Concat", "Expand", "Gather", "LSTM", "MatMul",
                                                     "Shape", "Sigmoid", "Slice", "Squeeze", "Transpose", "Unsqueeze"),
    "unknown": (),
}


def hand_written_space(target: Target, features: Any, opt_level: OptLevel = OptLevel.EXTENDED,
                       model_ops: tuple[str, ...] = (), objective: str = "latency") -> list[Recipe]:
    """The list tune wrote by hand before the metadata, kept here as the reference. One fix: with the size
    objective its "int8 static, opt all" was the first recipe (dynamic + Gather) at opt level all, under the static
    name, third; here it is the static recipe, as named, after the static recipe's first two variants as elsewhere."""
    if target == Target.GPU:
        s8 = QuantConfig(activation_type=QuantType.INT8, weight_type=QuantType.INT8, symmetric_activation=True)
        return [Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=True),
                Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=False),
                Recipe(precision=Precision.INT8, target=Target.GPU, opt_level=opt_level, quant=s8),
                Recipe(precision=Precision.INT8, target=Target.GPU, opt_level=opt_level,
                       quant=replace(s8, per_channel=False))]
    adv = advise(features, target)
    base = QuantConfig(activation_type=adv.activation_type, weight_type=adv.weight_type, reduce_range=adv.reduce_range)
    other_act = QuantType.INT8 if adv.activation_type == QuantType.UINT8 else QuantType.UINT8
    pct = CalibrationMethod.PERCENTILE
    quants = [
        ("static", base),
        ("percentile 99.999", replace(base, calibration_method=pct, percentile=99.999)),
        ("no bias correction", replace(base, bias_correction=False)),
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
        ("entropy", replace(base, calibration_method=CalibrationMethod.ENTROPY)),
        ("distribution", replace(base, calibration_method=CalibrationMethod.DISTRIBUTION)),
        ("entropy 512 bins", replace(base, calibration_method=CalibrationMethod.ENTROPY, num_bins=512,
                                     num_quantized_bins=128)),
    ]
    ops = set(model_ops)
    if objective == "size" and "Gather" in ops:
        quants.insert(0, ("dynamic + Gather", QuantConfig(mode=QuantMode.DYNAMIC, reduce_range=adv.reduce_range,
                                                          op_types=("MatMul", "Gemm", "Gather"))))
    if "LSTM" in ops:  # static int8 has no LSTM kernel: first for size, after plain dynamic for speed
        lstm = ("dynamic + LSTM", QuantConfig(mode=QuantMode.DYNAMIC, reduce_range=adv.reduce_range,
                                              op_types=("MatMul", "Gemm", "LSTM")))
        names = [name for name, _ in quants]
        quants.insert(names.index("static") if objective == "size" else names.index("dynamic") + 1, lstm)
    out = [Recipe(precision=Precision.INT8, target=Target.CPU, opt_level=opt_level, quant=q, name=f"int8 {name}")
           for name, q in quants
           if not (q.mode == QuantMode.DYNAMIC and ops and not ops & {"MatMul", "Gemm", "Attention", "LSTM", "GRU"})]
    static, at = next(r for r in out if r.name == "int8 static"), [r.name for r in out].index("int8 static") + 3
    out.insert(at, replace(static, opt_level=OptLevel.ALL, name="int8 static, opt all"))
    out.append(Recipe(precision=Precision.FP32, target=Target.CPU, opt_level=OptLevel.ALL, name="fp32 opt all"))
    return dedupe(out)[0]


@pytest.mark.parametrize("objective", ["latency", "size"])
@pytest.mark.parametrize("kind", list(MODEL_OPS))
@pytest.mark.parametrize("cpu", list(CPUS))
def test_space_from_metadata_is_the_hand_written_one(cpu, kind, objective):
    features = parse_cpuinfo(CPUS[cpu])
    for opt_level in (OptLevel.EXTENDED, OptLevel.BASIC):
        got = search_space(Target.CPU, features, opt_level, MODEL_OPS[kind], objective)
        want = hand_written_space(Target.CPU, features, opt_level, MODEL_OPS[kind], objective)
        assert [r.name for r in got] == [r.name for r in want]
        assert got == want  # every setting of every trial, not only the names
        assert not [r for r in got if any(f.level == "error" for f in validate_recipe(r))]


def test_gpu_space_from_metadata_is_the_hand_written_one():
    for opt_level in (OptLevel.EXTENDED, OptLevel.ALL):
        assert search_space(Target.GPU, None, opt_level) == hand_written_space(Target.GPU, None, opt_level)


def test_pinned_trials_for_an_image_classifier_a_text_encoder_and_a_detector():
    vnni = parse_cpuinfo(CPUS["x86 VNNI"])

    def names(kind: str, objective: str = "latency") -> list[str]:
        space = search_space(Target.CPU, vnni, model_ops=MODEL_OPS[kind], objective=objective)
        return [r.name.removeprefix("int8 ") for r in space]

    static = ["static", "percentile 99.999", "no bias correction", "static, opt all", "no range-split",
              "Conv/MatMul/Gemm only", "dynamic", "percentile 99.99", "symmetric activations", "QOperator",
              "reduce-range", "per-tensor", "int8 activations", "MinMax moving average", "percentile 99.9", "U8U8",
              "entropy", "distribution", "entropy 512 bins", "fp32 opt all"]
    assert names("image classifier (digits_cnn)") == static  # Gemm: dynamic int8 applies
    assert names("text encoder") == static
    assert names("text encoder", "size") == ["dynamic + Gather", *static]
    assert names("detector (yolov8)") == [n for n in static if n != "dynamic"]  # no MatMul/Gemm: no dynamic trial


def test_fields_that_carry_search():
    paths = [p for p, _ in searched_fields()]
    assert sorted(set(paths)) == sorted([
        "precision", "opt_level", "keep_io_types", "quant.mode", "quant.quant_format", "quant.activation_type",
        "quant.weight_type", "quant.per_channel", "quant.reduce_range", "quant.calibration_method",
        "quant.percentile", "quant.num_bins", "quant.moving_average", "quant.symmetric_activation", "quant.op_types",
        "quant.range_split", "quant.bias_correction"])


def test_search_values_fit_their_fields():
    """Each tried value (and each value set beside it) has its field's type; ``also`` names sibling fields."""

    def field_of(path: str) -> dataclasses.Field[Any]:
        obj: Any = Recipe()
        *parents, name = path.split(".")
        for p in parents:
            obj = getattr(obj, p)
        return next(f for f in dataclasses.fields(obj) if f.name == name)

    def fits(f: dataclasses.Field[Any], value: Any) -> bool:
        default = f.default
        if isinstance(default, Enum):
            return isinstance(value, type(default))
        return isinstance(value, type(default)) and (isinstance(value, bool) == isinstance(default, bool))

    for path, t in searched_fields():
        assert fits(field_of(path), t.value), (path, t)
        parent = path.rpartition(".")[0]
        for k, v in t.also.items():
            assert fits(field_of(f"{parent}.{k}" if parent else k), v), (path, k, v)
        assert t.target in {x.value for x in Target}


def _with_search(monkeypatch, cls: type, name: str, *tries: Try) -> None:
    """Give ``cls.name`` a ``search`` entry in its field metadata (undone after the test)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    monkeypatch.setattr(f, "metadata", MappingProxyType({**f.metadata, "search": tries}))


def test_a_new_search_entry_joins_the_space_without_touching_tune_space(monkeypatch):
    vnni = parse_cpuinfo(CPUS["x86 VNNI"])
    before = search_space(Target.CPU, vnni, model_ops=("Conv", "Gemm"))
    assert not [r for r in before if not r.quant.symmetric_weight]
    _with_search(monkeypatch, QuantConfig, "symmetric_weight", Try(False, "asymmetric weights", order=85))
    # a field whose `when` does not hold in the starting recipe (Entropy only) is not tried
    _with_search(monkeypatch, QuantConfig, "num_quantized_bins", Try(256, "256 quantized bins", order=5))
    _with_search(monkeypatch, QuantConfig, "range_split_factor",
                 Try(10.0, "range-split at 10x", order=5), Try(1000.0, "only for size", order=6, objective="size"))
    after = search_space(Target.CPU, vnni, model_ops=("Conv", "Gemm"))
    names = [r.name for r in after]
    assert [r.name for r in before][8:10] == ["int8 symmetric activations", "int8 QOperator"]
    assert names == [*names[:1], "int8 range-split at 10x", *[r.name for r in before][1:9],
                     "int8 asymmetric weights", *[r.name for r in before][9:]]
    new = after[names.index("int8 asymmetric weights")]
    assert new == replace(before[0], quant=replace(before[0].quant, symmetric_weight=False), name=new.name)
    assert after[1].quant.range_split_factor == 10.0 and after[1].quant.range_split


def test_a_setting_without_search_is_never_varied():
    """Each trial differs from the starting recipe only in searched fields, the fields set beside them, and fields
    put back to their default because they no longer matter."""
    varied = set()
    for p, t in searched_fields():
        if t.target == Target.CPU:
            parent = p.rpartition(".")[0]
            varied |= {p} | {f"{parent}.{k}" if parent else k for k in t.also}
    assert "quant" not in varied and "quant.seed" not in varied
    space = search_space(Target.CPU, parse_cpuinfo(CPUS["arm"]), model_ops=MODEL_OPS["text encoder"], objective="size")
    start = next(r for r in space if r.name == "int8 static")

    def leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            out |= leaves(value, prefix + f.name + ".") if dataclasses.is_dataclass(value) else {prefix + f.name: (
                value, f.default)}
        return out

    for r in space:
        for path, (value, default) in leaves(r).items():
            if path == "name" or path in varied:
                continue
            assert value == leaves(start)[path][0] or value == default, (r.name, path)


def test_the_readmes_account_of_what_tune_tries_holds():
    from pathlib import Path

    text = " ".join(Path(__file__).resolve().parents[2].joinpath("README.md").read_text().split())
    said = text[text.index("`ortlab tune MODEL` tries recipes ("):][:520]
    for axis in ("static/dynamic", "QDQ/QOperator", "U8S8/S8S8/U8U8", "per-channel", "MinMax/Percentile/ Entropy/"
                 "Distribution", "reduce-range", "range-split on/off", "bias correction on/off", "op types",
                 "optimization level", "weight-only int8 of Gather", "fp16 with and without kept I/O types"):
        assert axis in said, axis
    space = search_space(Target.CPU, parse_cpuinfo(CPUS["x86 VNNI"]), model_ops=MODEL_OPS["text encoder"],
                         objective="size")
    q = [r.quant for r in space if r.precision == Precision.INT8]
    static = [x for x in q if x.mode == QuantMode.STATIC]
    assert {x.mode for x in q} == set(QuantMode) and {x.quant_format for x in static} == set(QuantFormat)
    assert {(x.activation_type, x.weight_type) for x in static} == {
        (QuantType.UINT8, QuantType.INT8), (QuantType.INT8, QuantType.INT8), (QuantType.UINT8, QuantType.UINT8)}
    assert {x.calibration_method for x in static} == set(CalibrationMethod)
    for setting in ("per_channel", "reduce_range", "range_split", "bias_correction"):
        assert {getattr(x, setting) for x in static} == {True, False}, setting
    assert {x.op_types for x in q} >= {(), ("Conv", "MatMul", "Gemm"), ("MatMul", "Gemm", "Gather")}
    assert {r.opt_level for r in space} == {OptLevel.EXTENDED, OptLevel.ALL}
    assert {r.keep_io_types for r in search_space(Target.GPU) if r.precision == Precision.FP16} == {True, False}


def test_a_detector_tries_percentile_calibration_last_and_a_classifier_keeps_its_order():
    """Percentile calibration clipped a YOLOv8n's box and score ranges in every search (F1 vs fp32 0.55–0.85 where
    MinMax gave 0.96): for a detector it runs after every other trial, so after the keep-in-float stage too."""
    no_vnni = parse_cpuinfo(CPUS["x86 no VNNI"])
    ops = MODEL_OPS["detector (yolov8)"]

    def names(detector: bool) -> list[str]:
        return [r.name for r in search_space(Target.CPU, no_vnni, model_ops=ops, detector=detector)]

    detector, classifier = names(True), names(False)
    percentile = [n for n in classifier if "percentile" in n]
    assert len(percentile) == 3 and len(detector) > 6
    assert detector[-3:] == percentile  # last, in their own order
    assert detector[:2] == ["int8 static", "int8 full range"]  # its start and full-range twin: then keep-in-float
    assert classifier.index("int8 percentile 99.999") == 1  # a classifier's order is unchanged: second
    assert names(False) == [r.name for r in search_space(Target.CPU, no_vnni, model_ops=ops)]
