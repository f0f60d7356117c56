"""CLI flags generated from the config metadata: every field round-trips, `when` rules are usage errors,
numbers outside their bounds fail validation, and --help shows every flag with its help text."""

from __future__ import annotations

import dataclasses
import enum
import re
import shlex
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ortlab.cli import bench as cli_bench, main as cli, optimize as cli_optimize
from ortlab.settings.flags import UsageError, flag_specs
from ortlab.settings.config import (BenchConfig, PreprocessConfig, Recipe, errors_of, preprocess_cli_args, recipe_cli_line,
                           replace)
from ortlab.runs.prepare import require_valid, validate_recipe
from ortlab.core.errors import RecipeError

from tests.support.cli_flags import preprocess_of
from tests.support.models import conv_bn_model

CPU_ONLY = ("CPUExecutionProvider",)


def field_paths(cls: type, prefix: str = "") -> list[str]:
    """Dotted paths of every leaf field of ``cls`` (nested configs expanded)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += field_paths(hints[f.name], prefix + f.name + ".")
        else:
            out.append(prefix + f.name)
    return out


def _field(cls: type, path: str) -> tuple[dataclasses.Field, Any, list[tuple[str, dataclasses.Field, Any]]]:
    """The field at ``path``, its type, and (prefix, field, type) for each field on the way (outermost first)."""
    chain = []
    prefix = ""
    for part in path.split("."):
        f = next(x for x in dataclasses.fields(cls) if x.name == part)
        tp = typing.get_type_hints(cls)[part]
        chain.append((prefix, f, cls))
        cls, prefix = tp, prefix + part + "."
    return chain[-1][1], cls, chain


def _typed(owner: type, name: str, value: Any) -> Any:
    tp = typing.get_type_hints(owner)[name]
    return tp(value) if isinstance(tp, type) and issubclass(tp, enum.Enum) else value


def rules_met(cls: type, path: str) -> dict[str, Any]:
    """Sibling changes that make every ``when`` rule on the way to ``path`` hold (the first allowed value)."""
    changes: dict[str, Any] = {}
    for prefix, f, owner in _field(cls, path)[2]:
        for sibling, allowed in (f.metadata.get("when") or {}).items():
            changes.update(rules_met(cls, prefix + sibling))
            changes[prefix + sibling] = _typed(owner, sibling, allowed[0])
    return changes


def non_default(f: dataclasses.Field, tp: Any, default: Any) -> Any:
    """A valid value other than the default, from the field's type and metadata."""
    meta = f.metadata
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(m for m in tp if m != default)
    if tp is bool:
        return not default
    if tp in (int, float):
        step = meta.get("step", 1)
        value = default + step
        return value if value <= meta.get("max", value) else default - step
    if tp is str:
        return next((c for c in meta.get("choices", ()) if c != default), "a name with spaces")
    inner = typing.get_args(tp)[0]
    if inner is str:
        return ("Conv", "MatMul")
    return tuple(v + (1 if inner is int else 0.5) for v in default)


def example(cls: type, path: str, fixups: dict[str, dict[str, Any]] | None = None) -> Any:
    """A ``cls`` whose field ``path`` has a non-default value and matters (its ``when`` rules hold)."""
    f, tp, _ = _field(cls, path)
    default = cls()
    for part in path.split("."):
        default = getattr(default, part)
    changes = {**rules_met(cls, path), path: non_default(f, tp, default), **(fixups or {}).get(path, {})}
    return replace(cls(), **changes)


# -- every field round-trips through the real parser ------------------------------------------------------


@pytest.mark.parametrize("path", field_paths(Recipe))
def test_every_recipe_field_round_trips_through_the_cli(path):
    recipe = example(Recipe, path)
    assert not errors_of(validate_recipe(recipe, CPU_ONLY)), path
    argv = shlex.split(recipe_cli_line(recipe, "in model.onnx", "out.onnx"))
    ns = cli.build_parser().parse_args(argv[1:])
    assert cli_optimize.recipe_from_args(ns) == recipe
    assert ns.model == "in model.onnx"


def test_cli_line_names_the_main_choices_even_at_their_defaults():
    assert recipe_cli_line(Recipe()) == "ortlab optimize MODEL.onnx OUT.onnx --precision fp32 --target cpu " \
                                        "--opt-level extended"
    int8 = recipe_cli_line(Recipe.from_dict({"precision": "int8"}))
    # reduce-range too: the CLI's default for it follows the CPU (on without VNNI), so a line must say it
    assert int8.endswith("--precision int8 --target cpu --opt-level extended --quant-mode static --no-reduce-range")


# channels=1 needs one mean/std value (PreprocessConfig.problems)
PRE_FIXUPS = {"channels": {"mean": (0.5,), "std": (0.25,)}}
OTHER_BASE = PreprocessConfig(size=(28, 28), channels=1, mean=(0.1,), std=(0.3,), dtype="uint8")


@pytest.mark.parametrize("path", field_paths(PreprocessConfig))
def test_every_preprocess_field_round_trips_through_the_cli(path):
    cfg = example(PreprocessConfig, path, PRE_FIXUPS)
    assert cfg.problems() == []
    ns = cli.build_parser().parse_args(["compare", "a.onnx", "b.onnx", "--data", "d", *preprocess_cli_args(cfg)])
    # every field is written, so the sample's (different) preprocessing does not leak through
    assert preprocess_of(ns, Path("unused.onnx"), SimpleNamespace(preprocess=OTHER_BASE)) == cfg


@pytest.mark.parametrize("path", [fl.path for fl in flag_specs(BenchConfig, cli_bench.BENCH_FLAGS_EXCLUDED)])
def test_every_bench_flag_round_trips(path):
    from ortlab.settings.flags import config_cli_args

    cfg = example(BenchConfig, path)
    args = config_cli_args(cfg, exclude=cli_bench.BENCH_FLAGS_EXCLUDED)
    assert args
    ns = cli.build_parser().parse_args(["bench", "m.onnx", *args])
    assert cli_bench.bench_from_args(ns) == cfg


def test_unchanged_fields_keep_the_base():
    ns = cli.build_parser().parse_args(["compare", "a", "b", "--data", "d", "--mean", "0.5"])
    pre = preprocess_of(ns, Path("unused.onnx"), SimpleNamespace(preprocess=OTHER_BASE))
    assert pre == replace(OTHER_BASE, mean=(0.5,))


# -- `when` rules: a flag that does not matter is a usage error -----------------------------------------------


WHEN_VIOLATIONS = [
    (["--precision", "fp16", "--quant-mode", "dynamic", "--percentile", "99.9"],
     "--quant-mode, --percentile only apply with --precision int8."),
    (["--reduce-range"], "--reduce-range only applies with --precision int8."),
    (["--precision", "int8", "--averaging-constant", "0.1"], "--averaging-constant only applies with --moving-average."),
    (["--precision", "int8", "--percentile", "99.9"], "--percentile only applies with --calibration-method Percentile."),
    (["--precision", "int8", "--num-bins", "1024"],
     "--num-bins only applies with --calibration-method Entropy, Percentile or Distribution."),
    (["--precision", "int8", "--quant-mode", "dynamic", "--calibration-method", "Entropy", "--no-preprocess"],
     "--calibration-method, --no-preprocess only apply with --quant-mode static."),
    (["--precision", "int8", "--calibration-method", "Entropy", "--moving-average"],
     "--moving-average only applies with --calibration-method MinMax."),
    (["--no-keep-io-types"], "--no-keep-io-types only applies with --precision fp16."),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("cli_args") / "conv.onnx")


@pytest.mark.parametrize("flags,message", WHEN_VIOLATIONS, ids=lambda x: x if isinstance(x, str) else None)
def test_flag_outside_its_when_rule_is_a_usage_error(model, tmp_path, capsys, flags, message):
    code = cli.main(["optimize", str(model), str(tmp_path / "o.onnx"), *flags])
    out, err = capsys.readouterr()
    assert (code, out, err) == (2, "", f"ortlab: error: {message}\n")
    assert not list(tmp_path.iterdir())


def test_bench_runs_with_a_duration_is_a_usage_error(model, capsys):
    code = cli.main(["bench", str(model), "--runs", "5", "--duration", "1"])
    assert (code, capsys.readouterr().err) == (2, "ortlab: error: --runs only applies with --duration 0.0.\n")


def test_flags_inside_their_when_rules_are_accepted():
    ns = cli.build_parser().parse_args(["optimize", "m", "o", "--precision", "int8", "--moving-average",
                                        "--averaging-constant", "0.1", "--quant-format", "QOperator"])
    recipe = cli_optimize.recipe_from_args(ns)
    assert recipe.quant.averaging_constant == 0.1 and recipe.quant.quant_format.value == "QOperator"


def test_a_choice_is_taken_in_any_case_and_a_wrong_one_lists_the_choices():
    ns = cli.build_parser().parse_args(["optimize", "m", "o", "--precision", "INT8", "--quant-format", "qoperator",
                                        "--calibration-method", "entropy", "--activation-type", "UInt8"])
    quant = cli_optimize.recipe_from_args(ns).quant
    assert (quant.quant_format.value, quant.calibration_method.value, quant.activation_type.value) == (
        "QOperator", "Entropy", "uint8")
    with pytest.raises(UsageError, match=r"invalid choice: 'qdqx' \(choose from 'QDQ', 'QOperator'\)"):
        cli.build_parser().parse_args(["optimize", "m", "o", "--quant-format", "qdqx"])


# -- bounds from the min/max metadata ---------------------------------------------------------------------


RECIPE_BOUNDS = [
    ({"quant": {"percentile": 50}}, "Percentile (quant.percentile) must be between 90.0 and 100.0; got 50.0."),
    ({"precision": "int8", "quant": {"percentile": 100.5, "calibration_method": "Percentile"}},
     "Percentile (quant.percentile) must be between 90.0 and 100.0; got 100.5."),
    ({"precision": "int8", "quant": {"num_bins": 64}},
     "Histogram bins (quant.num_bins) must be between 128 and 65536; got 64."),
    ({"precision": "int8", "quant": {"num_quantized_bins": 4096}},
     "Quantized bins (quant.num_quantized_bins) must be between 16 and 2048; got 4096."),
    ({"precision": "int8", "quant": {"averaging_constant": 0.0}},
     "Averaging constant (quant.averaging_constant) must be between 0.0001 and 1.0; got 0.0."),
    ({"precision": "int8", "quant": {"calibration_samples": 20000}},
     "Calibration samples (quant.calibration_samples) must be between 1 and 10000; got 20000."),
    ({"precision": "int8", "quant": {"seed": -1}}, "Seed (quant.seed) must be between 0 and 2147483647; got -1."),
]


@pytest.mark.parametrize("data,message", RECIPE_BOUNDS)
def test_recipe_numbers_outside_their_bounds_are_errors(data, message):
    recipe = Recipe.from_dict(data)
    field = message.split("(")[1].split(")")[0]
    assert [(f.field, f.message) for f in errors_of(validate_recipe(recipe, CPU_ONLY))] == [(field, message)]
    with pytest.raises(RecipeError, match=r"^validate: ") as info:
        require_valid(recipe, CPU_ONLY)
    assert message in str(info.value)


CONFIG_BOUNDS = [
    (BenchConfig(runs=0), "Runs (runs) must be between 1 and 100000; got 0."),
    (BenchConfig(warmup=-1), "Warm-up runs (warmup) must be between 0 and 1000; got -1."),
    (BenchConfig(duration_s=601.0), "Duration (s) (duration_s) must be between 0.0 and 600.0; got 601.0."),
    (BenchConfig(batch_sizes=(1, 0)), "Batch sizes (batch_sizes) must each be at least 1; got 0."),
    (BenchConfig(batch_sizes=()), "Give at least one batch size."),
    (PreprocessConfig(size=(0, 32)), "Size (H, W) (size) must each be at least 1; got 0."),
    (PreprocessConfig(channels=4, mean=(0.0,), std=(1.0,)), "Channels (channels) must be between 1 and 3; got 4."),
    (PreprocessConfig(channels=2, mean=(0.0,), std=(1.0,)), "Channels must be 1 or 3, got 2."),
]


@pytest.mark.parametrize("cfg,message", CONFIG_BOUNDS)
def test_bench_and_preprocess_numbers_outside_their_bounds(cfg, message):
    assert cfg.problems() == [message]


def test_recipe_json_out_of_bounds_fails_validation_and_the_cli_exits_2(model, tmp_path, capsys):
    text = '{"precision": "int8", "quant": {"percentile": 50}}'
    recipe = Recipe.from_json(text)
    with pytest.raises(RecipeError, match=r"quant\.percentile\) must be between 90\.0 and 100\.0; got 50\.0"):
        require_valid(recipe)
    (tmp_path / "r.json").write_text(text)
    code = cli.main(["run", str(tmp_path / "r.json"), str(model), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "got 50.0" in err and err.count("\n") == 1


def test_bench_flags_out_of_bounds_exit_2(model, capsys):
    code = cli.main(["bench", str(model), "--warmup", "-1"])
    assert (code, capsys.readouterr().err) == (2, "ortlab: error: Warm-up runs (warmup) must be between 0 and 1000; "
                                                   "got -1.\n")


# -- help ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command,specs", [
    ("optimize", flag_specs(Recipe) + flag_specs(PreprocessConfig)),
    ("bench", flag_specs(BenchConfig, cli_bench.BENCH_FLAGS_EXCLUDED)),
    ("compare", flag_specs(PreprocessConfig)),
])
def test_help_lists_every_flag_with_its_help_text(command, specs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")  # no wrapping, so each help text appears whole
    assert cli.main([command, "--help"]) == 0
    entries = [" ".join(e.split()) for e in re.split(r"\n(?=  -)", capsys.readouterr().out)]
    for fl in specs:
        entry = next((e for e in entries if e.startswith((fl.options[0] + " ", fl.options[0] + ","))), None)
        assert entry is not None, fl.name
        assert all(option in entry for option in fl.options) and fl.help in entry, (fl.name, entry)


def test_todays_flag_names_are_kept():
    names = {option for cls in (Recipe, PreprocessConfig) for fl in flag_specs(cls) for option in fl.options}
    assert {"--precision", "--target", "--opt-level", "--no-keep-io-types", "--allow-random-data", "--name",
            "--quant-mode", "--quant-format", "--activation-type", "--weight-type", "--per-channel",
            "--no-per-channel", "--reduce-range", "--no-reduce-range", "--calibration-method", "--percentile",
            "--num-bins", "--num-quantized-bins", "--moving-average", "--averaging-constant", "--symmetric-activation",
            "--no-symmetric-weight", "--op-types", "--exclude-op-types", "--exclude-nodes", "--int16-weight-nodes",
            "--no-weight-rounding", "--no-bias-correction", "--no-preprocess",
            "--no-range-split", "--range-split-factor", "--no-silu-range", "--no-score-range", "--no-known-patterns",
            "--calibration-samples", "--seed", "--size", "--mean", "--std", "--scale", "--layout", "--channels",
            "--channel-order", "--resize-mode", "--dtype"} == names
    bench = {fl.name for fl in flag_specs(BenchConfig, cli_bench.BENCH_FLAGS_EXCLUDED)}
    assert {"--batch-sizes", "--runs", "--duration", "--warmup", "--threads", "--target",
            "--session-opt-level"} <= bench


@pytest.mark.parametrize("command", [["optimize", "m.onnx", "out.onnx"], ["run", "recipe.json", "m.onnx"],
                                     ["tune", "m.onnx", "--out", "o"]])
def test_calibration_data_is_given_the_same_way_to_every_command_that_calibrates(command):
    """``--calibration DIR`` and ``--data DIR`` both name the calibration data of optimize, run and tune (a user
    who learned one command's flag is not told "unrecognized arguments" by the next)."""
    parser = cli.build_parser()
    dest = "data" if command[0] == "tune" else "calibration"
    for flag in ("--calibration", "--data"):
        assert getattr(parser.parse_args(command + [flag, "photos"]), dest) == "photos"
