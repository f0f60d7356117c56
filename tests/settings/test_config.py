"""Recipe validation as tables of (recipe changes → expected finding), and recipe serialisation."""

import dataclasses
import json

import pytest

from ortlab.settings.config import (BenchConfig, CalibrationMethod, Precision, PreprocessConfig, QuantConfig, QuantMode,
                           Recipe, Target, recipe_cli_line, replace)
from ortlab.runs.prepare import require_valid, validate_recipe
from ortlab.core.errors import RecipeError

CPU_ONLY = ("CPUExecutionProvider",)
WITH_TRT = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")

INVALID = [
    ({"precision": "int8", "target": "gpu"}, CPU_ONLY, "target", "Choose fp16 for GPU"),
    ({"precision": "int8", "target": "gpu", "quant.mode": "dynamic"}, WITH_TRT, "target",
     "int8 dynamic quantization has no GPU kernels"),
    ({"precision": "int8", "target": "gpu", "quant.quant_format": "QOperator"}, WITH_TRT, "quant.quant_format",
     "run only on the CPU"),
    ({"precision": "int8", "quant.activation_type": "int8", "quant.weight_type": "uint8"}, CPU_ONLY,
     "quant.weight_type", "S8U8"),
    ({"precision": "int8", "quant.calibration_samples": 0}, CPU_ONLY, "quant.calibration_samples",
     "must be between 1 and 10000; got 0"),
    ({"precision": "int8", "quant.calibration_method": "Percentile", "quant.percentile": 120.0}, CPU_ONLY,
     "quant.percentile", "Percentile (quant.percentile) must be between 90.0 and 100.0; got 120.0."),
    ({"precision": "int8", "quant.calibration_method": "Entropy", "quant.num_bins": 128,
      "quant.num_quantized_bins": 256}, CPU_ONLY, "quant.num_quantized_bins", "fewer than histogram bins"),
    ({"precision": "int8", "quant.moving_average": True, "quant.averaging_constant": 1.0}, CPU_ONLY,
     "quant.averaging_constant", "(0, 1)"),
    ({"precision": "int8", "quant.op_types": ("Conv",), "quant.op_types_to_exclude": ("Conv",)}, CPU_ONLY,
     "quant.op_types_to_exclude", "both included and excluded: Conv"),
]

WARNINGS_AND_NOTES = [
    ({"precision": "int8", "quant.mode": "dynamic", "quant.op_types": ("Conv", "MatMul")}, "warning",
     "quant.op_types", "ConvInteger"),
    ({"precision": "fp16", "target": "cpu"}, "note", "precision", "gains no speed"),
    ({"opt_level": "all"}, "note", "opt_level", "'extended' is the portable choice"),
    ({"precision": "fp16", "target": "gpu"}, "warning", "target", "No working GPU provider"),
    ({"precision": "int8", "quant.preprocess": False}, "warning", "quant.preprocess", "BatchNormalization"),
    ({"precision": "int8", "allow_random_data": True}, "warning", "allow_random_data", "flagged"),
    ({"precision": "int8", "quant.calibration_samples": 5}, "warning", "quant.calibration_samples", "100 or more"),
]


def _apply(changes):
    """A Recipe from flat changes such as {"precision": "int8", "quant.mode": "dynamic"}."""
    data = {k: v for k, v in changes.items() if "." not in k}
    quant = {k.split(".", 1)[1]: list(v) if isinstance(v, tuple) else v
             for k, v in changes.items() if k.startswith("quant.")}
    if quant:
        data["quant"] = quant
    return Recipe.from_dict(data)


@pytest.mark.parametrize("changes,providers,field,message", INVALID)
def test_invalid_combinations_are_explained_before_any_work(changes, providers, field, message):
    recipe = _apply(changes)
    errors = [f for f in validate_recipe(recipe, providers) if f.level == "error"]
    assert [f.field for f in errors] == [field]
    assert message in errors[0].message
    with pytest.raises(RecipeError, match=r"^validate: ") as info:
        require_valid(recipe, providers)
    assert message in str(info.value)


@pytest.mark.parametrize("changes,level,field,message", WARNINGS_AND_NOTES)
def test_warnings_and_notes(changes, level, field, message):
    findings = validate_recipe(_apply(changes), CPU_ONLY)
    matching = [f for f in findings if f.field == field and f.level == level]
    assert matching and message in matching[0].message
    assert not [f for f in findings if f.level == "error"]


def test_int8_static_qdq_on_gpu_is_allowed_only_with_tensorrt():
    recipe = _apply({"precision": "int8", "target": "gpu"})
    assert not [f for f in validate_recipe(recipe, WITH_TRT) if f.level == "error"]
    assert [f for f in validate_recipe(recipe, CPU_ONLY) if f.level == "error"]


def test_default_recipe_is_valid_and_dynamic_defaults_to_matmul_gemm():
    assert not [f for f in validate_recipe(Recipe(), CPU_ONLY) if f.level == "error"]
    assert QuantConfig(mode=QuantMode.DYNAMIC).effective_op_types() == ("MatMul", "Gemm")
    assert QuantConfig().effective_op_types() == ()


def test_recipe_json_round_trip_and_bad_json_messages():
    recipe = replace(Recipe(), precision=Precision.INT8, **{"quant.calibration_method": CalibrationMethod.ENTROPY,
                                                            "quant.nodes_to_exclude": ("a", "b")})
    again = Recipe.from_json(recipe.to_json())
    assert again == recipe and again.quant.nodes_to_exclude == ("a", "b")
    assert json.loads(recipe.to_json())["quant"]["calibration_method"] == "Entropy"
    with pytest.raises(RecipeError, match="not valid JSON"):
        Recipe.from_json("{precision: int8")
    with pytest.raises(RecipeError, match="nested too deeply"):  # was an unexpected RecursionError
        Recipe.from_json('{"quant": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(RecipeError, match="precision must be one of fp32, fp16, int8; got 'int4'"):
        Recipe.from_dict({"precision": "int4"})
    with pytest.raises(RecipeError, match="Unknown setting"):
        Recipe.from_dict({"precison": "int8"})
    with pytest.raises(RecipeError, match="quant.per_channel must be true or false"):
        Recipe.from_dict({"quant": {"per_channel": "yes"}})


def test_cli_line_names_the_non_default_flags():
    recipe = replace(Recipe(), precision=Precision.INT8, target=Target.CPU,
                     **{"quant.per_channel": False, "quant.calibration_method": CalibrationMethod.PERCENTILE})
    line = recipe_cli_line(recipe, "m.onnx", "o.onnx", calibration="data dir")
    assert line.startswith("ortlab optimize m.onnx o.onnx --precision int8")
    assert "--no-per-channel" in line and "--calibration-method Percentile" in line
    assert "--calibration 'data dir'" in line


def test_every_setting_has_help_text():
    for cls in (Recipe, QuantConfig, PreprocessConfig, BenchConfig):
        assert all(f.metadata.get("help") for f in dataclasses.fields(cls)), cls


def test_preprocess_problems():
    assert PreprocessConfig().problems() == []
    problems = PreprocessConfig(channels=3, mean=(0.5, 0.5), std=(0.0,)).problems()
    assert "mean needs 1 or 3 values, got 2." in problems and "std must not contain 0." in problems


def test_distribution_needs_enough_bins():
    recipe = Recipe.from_dict({"precision": "int8", "quant": {"calibration_method": "Distribution", "num_bins": 128}})
    errors = [f for f in validate_recipe(recipe, CPU_ONLY) if f.level == "error"]
    assert [f.field for f in errors] == ["quant.num_bins"] and "at least 512" in errors[0].message


def test_s8s8_on_x86_cpu_gets_a_note_and_u8s8_is_the_default(monkeypatch):
    import ortlab.runs.prepare as prepare

    assert QuantConfig().activation_type.value == "uint8"
    recipe = Recipe.from_dict({"precision": "int8", "quant": {"activation_type": "int8"}})
    monkeypatch.setattr(prepare, "_is_x86", lambda: True)
    notes = [f for f in validate_recipe(recipe, CPU_ONLY) if f.field == "quant.activation_type"]
    assert notes and notes[0].level == "note" and "U8S8" in notes[0].message
    monkeypatch.setattr(prepare, "_is_x86", lambda: False)
    assert not [f for f in validate_recipe(recipe, CPU_ONLY) if f.field == "quant.activation_type"]
