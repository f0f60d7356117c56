"""The ``ortlab`` command line: inspect, optimize, bench, compare, run and samples.

Exit status: 0 success, 1 the work failed (bad model file, data that does not fit, ORT failure),
2 bad usage (unknown flags, missing files, a recipe that cannot work). Errors print one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from . import __version__
from .config import (BenchConfig, CalibrationMethod, ChannelOrder, Layout, OptLevel, PixelScale, Precision,
                     PreprocessConfig, QuantConfig, QuantFormat, QuantMode, QuantType, Recipe, ResizeMode, Target,
                     field_help)
from .errors import OrtlabError, RecipeError
from .progress import ProgressEvent

PROG = "ortlab"

_RECIPE_HELP = field_help(Recipe)
_QUANT_HELP = field_help(QuantConfig)
_PRE_HELP = field_help(PreprocessConfig)
_BENCH_HELP = field_help(BenchConfig)

# flag dest → QuantConfig field, for the flags ``config.recipe_cli_args`` writes
_QUANT_DESTS = {
    "quant_mode": "mode", "quant_format": "quant_format", "activation_type": "activation_type",
    "weight_type": "weight_type", "per_channel": "per_channel", "reduce_range": "reduce_range",
    "calibration_method": "calibration_method", "percentile": "percentile", "num_bins": "num_bins",
    "num_quantized_bins": "num_quantized_bins", "moving_average": "moving_average",
    "averaging_constant": "averaging_constant", "symmetric_activation": "symmetric_activation",
    "symmetric_weight": "symmetric_weight", "op_types": "op_types", "exclude_op_types": "op_types_to_exclude",
    "exclude_nodes": "nodes_to_exclude", "quant_preprocess": "preprocess",
    "calibration_samples": "calibration_samples", "seed": "seed",
}
_PRE_DESTS = ("size", "mean", "std", "scale", "layout", "channels", "channel_order", "resize_mode")


class UsageError(Exception):
    """Bad command-line usage (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def _values(enum_cls) -> list[str]:
    return [m.value for m in enum_cls]


def _csv(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _help(text: str, default: Any = None) -> str:
    text = text.replace("%", "%%")
    return f"{text} (default: {default})" if default is not None else text


# -- parser ------------------------------------------------------------------------------------------------


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ortlab optimize`` that describe a Recipe (the ones ``config.recipe_cli_args`` writes)."""
    r, q = Recipe(), QuantConfig()
    g = p.add_argument_group("recipe")
    g.add_argument("--precision", choices=_values(Precision), default=r.precision.value,
                   help=_help(_RECIPE_HELP["precision"], r.precision.value))
    g.add_argument("--target", choices=_values(Target), default=r.target.value,
                   help=_help(_RECIPE_HELP["target"], r.target.value))
    g.add_argument("--opt-level", choices=_values(OptLevel), default=r.opt_level.value,
                   help=_help(_RECIPE_HELP["opt_level"], r.opt_level.value))
    g.add_argument("--no-keep-io-types", dest="keep_io_types", action="store_false", default=True,
                   help=_help(_RECIPE_HELP["keep_io_types"]) + " This flag turns it off.")
    g.add_argument("--allow-random-data", action="store_true", help=_help(_RECIPE_HELP["allow_random_data"]))
    g.add_argument("--name", default="", help=_help(_RECIPE_HELP["name"]))

    g = p.add_argument_group("int8 quantization (with --precision int8)")
    g.add_argument("--quant-mode", choices=_values(QuantMode), help=_help(_QUANT_HELP["mode"], q.mode.value))
    g.add_argument("--quant-format", choices=_values(QuantFormat),
                   help=_help(_QUANT_HELP["quant_format"], q.quant_format.value))
    g.add_argument("--activation-type", choices=_values(QuantType),
                   help=_help(_QUANT_HELP["activation_type"], q.activation_type.value))
    g.add_argument("--weight-type", choices=_values(QuantType),
                   help=_help(_QUANT_HELP["weight_type"], q.weight_type.value))
    pc = g.add_mutually_exclusive_group()
    pc.add_argument("--per-channel", dest="per_channel", action="store_true", default=None,
                    help=_help(_QUANT_HELP["per_channel"], "on"))
    pc.add_argument("--no-per-channel", dest="per_channel", action="store_false", default=None,
                    help="One scale per weight tensor.")
    g.add_argument("--reduce-range", action="store_true", default=None, help=_help(_QUANT_HELP["reduce_range"]))
    g.add_argument("--calibration-method", choices=_values(CalibrationMethod),
                   help=_help(_QUANT_HELP["calibration_method"], q.calibration_method.value))
    g.add_argument("--percentile", type=float, help=_help(_QUANT_HELP["percentile"], q.percentile))
    g.add_argument("--num-bins", type=int, help=_help(_QUANT_HELP["num_bins"], q.num_bins))
    g.add_argument("--num-quantized-bins", type=int,
                   help=_help(_QUANT_HELP["num_quantized_bins"], q.num_quantized_bins))
    g.add_argument("--moving-average", action="store_true", default=None, help=_help(_QUANT_HELP["moving_average"]))
    g.add_argument("--averaging-constant", type=float,
                   help=_help(_QUANT_HELP["averaging_constant"], q.averaging_constant))
    g.add_argument("--symmetric-activation", action="store_true", default=None,
                   help=_help(_QUANT_HELP["symmetric_activation"]))
    g.add_argument("--no-symmetric-weight", dest="symmetric_weight", action="store_false", default=None,
                   help=_help(_QUANT_HELP["symmetric_weight"]) + " This flag turns it off.")
    g.add_argument("--op-types", type=_csv, metavar="OP[,OP…]", help=_help(_QUANT_HELP["op_types"]))
    g.add_argument("--exclude-op-types", type=_csv, metavar="OP[,OP…]",
                   help=_help(_QUANT_HELP["op_types_to_exclude"]))
    g.add_argument("--exclude-nodes", type=_csv, metavar="NODE[,NODE…]", help=_help(_QUANT_HELP["nodes_to_exclude"]))
    g.add_argument("--no-preprocess", dest="quant_preprocess", action="store_false", default=None,
                   help=_help(_QUANT_HELP["preprocess"]) + " This flag turns it off.")
    g.add_argument("--calibration-samples", type=int,
                   help=_help(_QUANT_HELP["calibration_samples"], q.calibration_samples))
    g.add_argument("--seed", type=int, help=_help(_QUANT_HELP["seed"], q.seed))


def add_preprocess_arguments(p: argparse.ArgumentParser) -> None:
    """Image preprocessing flags; unset ones come from the sample manifest or the model input."""
    g = p.add_argument_group("image preprocessing (default: the sample's manifest, else detected from the model)")
    g.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), help=_help(_PRE_HELP["size"]))
    g.add_argument("--mean", type=float, nargs="+", help=_help(_PRE_HELP["mean"]))
    g.add_argument("--std", type=float, nargs="+", help=_help(_PRE_HELP["std"]))
    g.add_argument("--scale", choices=_values(PixelScale), help=_help(_PRE_HELP["scale"]))
    g.add_argument("--layout", choices=_values(Layout), help=_help(_PRE_HELP["layout"]))
    g.add_argument("--channels", type=int, choices=(1, 3), help=_help(_PRE_HELP["channels"]))
    g.add_argument("--channel-order", choices=_values(ChannelOrder), help=_help(_PRE_HELP["channel_order"]))
    g.add_argument("--resize-mode", choices=_values(ResizeMode), help=_help(_PRE_HELP["resize_mode"]))


def build_parser() -> argparse.ArgumentParser:
    """The ``ortlab`` argument parser (sub-commands inspect, optimize, bench, compare, run, samples)."""
    parser = _Parser(prog=PROG, description="Quantize and graph-optimize ONNX models with ONNX Runtime, "
                                            "and show why the result is safe to ship.",
                     epilog="Exit status: 0 ok, 1 the work failed, 2 bad usage.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    p = sub.add_parser("inspect", help="Show a model's inputs, outputs, opsets, ops and size.")
    p.add_argument("model", metavar="MODEL", help="An .onnx file.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("optimize", help="Apply a recipe (precision, target, optimization level, quantization).")
    p.add_argument("model", metavar="MODEL", help="The source .onnx file (never modified).")
    p.add_argument("out", metavar="OUT", help="The result: a .onnx file, or a folder that receives model.onnx, "
                                              "recipe.json and artifact.json.")
    add_recipe_arguments(p)
    g = p.add_argument_group("data")
    g.add_argument("--calibration", metavar="DIR", help="Calibration data: a folder of images (class sub-folders "
                                                        "are labels), a .zip of images, or a .npy/.npz tensor file.")
    g.add_argument("--eval", metavar="DIR", dest="eval_data",
                   help="Data to verify the result against the source (default: the calibration data).")
    g.add_argument("--verify-samples", type=int, default=32, help="Samples compared with the source (default: 32).")
    add_preprocess_arguments(p)
    _add_output_flags(p)
    p.set_defaults(func=cmd_optimize)

    b = BenchConfig()
    p = sub.add_parser("bench", help="Time one or more models (latency percentiles, throughput, memory).")
    p.add_argument("models", metavar="MODEL", nargs="+", help="One or more .onnx files.")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=list(b.batch_sizes),
                   help=_help(_BENCH_HELP["batch_sizes"], " ".join(map(str, b.batch_sizes))))
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--runs", type=int, default=b.runs, help=_help(_BENCH_HELP["runs"], b.runs))
    mode.add_argument("--duration", type=float, default=0.0, metavar="S", help=_help(_BENCH_HELP["duration_s"]))
    p.add_argument("--warmup", type=int, default=b.warmup, help=_help(_BENCH_HELP["warmup"], b.warmup))
    p.add_argument("--threads", type=int, default=0, help=_help(_BENCH_HELP["intra_op_threads"], 0))
    p.add_argument("--target", choices=_values(Target), default=b.target.value,
                   help=_help(_BENCH_HELP["target"], b.target.value))
    p.add_argument("--session-opt-level", choices=_values(OptLevel), default=b.session_opt_level.value,
                   help=_help(_BENCH_HELP["session_opt_level"], b.session_opt_level.value))
    p.add_argument("--memory", action="store_true", help="Also measure peak memory (a child process per model).")
    p.add_argument("--profile", metavar="DIR", help="Write ORT's profiling JSON for each run into DIR.")
    _add_output_flags(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("compare", help="Compare a candidate model's outputs and accuracy with a reference.")
    p.add_argument("reference", metavar="REF", help="The reference .onnx (usually the fp32 source).")
    p.add_argument("candidate", metavar="CANDIDATE", help="The optimized .onnx.")
    p.add_argument("--data", metavar="DIR", required=True,
                   help="Images folder (class sub-folders are labels), .zip of images, or .npy/.npz tensors.")
    p.add_argument("--n", type=int, help="Use at most N samples (stratified by class).")
    p.add_argument("--target", choices=_values(Target), default=Target.CPU.value, help="Run on cpu or gpu.")
    add_preprocess_arguments(p)
    _add_output_flags(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("run", help="Apply a saved recipe (JSON from the app or Recipe.to_json()).")
    p.add_argument("recipe", metavar="RECIPE.json")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--data", metavar="DIR", help="Calibration and verification data.")
    p.add_argument("--out", metavar="DIR", help="Artifact folder (default: a new folder in the workspace, "
                                                "$ORTLAB_HOME or ~/.ortlab, recorded in its history).")
    p.add_argument("--verify-samples", type=int, default=32, help="Samples compared with the source (default: 32).")
    add_preprocess_arguments(p)
    _add_output_flags(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("history", help="List the runs and benchmarks recorded in the workspace (app and CLI).")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="Show the newest N of each (default: all).")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("samples", help="List the bundled sample models.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_samples)
    return parser


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.add_argument("-v", "--verbose", action="store_true", help="Print progress on stderr.")


# -- arguments → engine objects ---------------------------------------------------------------------------


def recipe_from_args(ns: argparse.Namespace) -> Recipe:
    """The Recipe that the parsed ``optimize`` flags describe."""
    quant = {field: getattr(ns, dest) for dest, field in _QUANT_DESTS.items() if getattr(ns, dest, None) is not None}
    if quant and ns.precision != Precision.INT8.value:
        flags = ", ".join("--" + d.replace("_", "-") for d in _QUANT_DESTS if getattr(ns, d, None) is not None)
        raise UsageError(f"{flags.replace('--quant-preprocess', '--no-preprocess')} only apply with --precision int8.")
    if ns.averaging_constant is not None and not ns.moving_average:
        raise UsageError("--averaging-constant needs --moving-average.")
    data: dict[str, Any] = {"precision": ns.precision, "target": ns.target, "opt_level": ns.opt_level,
                            "keep_io_types": ns.keep_io_types, "allow_random_data": ns.allow_random_data,
                            "name": ns.name}
    if quant:
        data["quant"] = {k: list(v) if isinstance(v, tuple) else v for k, v in quant.items()}
    return Recipe.from_dict(data)


def _existing(path: str, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{what} not found: {path}")
    return p


def _existing_file(path: str, what: str) -> Path:
    p = _existing(path, what)
    if p.is_dir():
        raise UsageError(f"{what} is a folder, not a file: {path}")
    return p


def load_dataset(path: str, class_names: Sequence[str] | None = None):
    """A dataset from a folder of images, a .zip of images, or a .npy/.npz tensor file."""
    from . import data

    p = _existing(path, "Data")
    if not p.is_dir() and p.suffix.lower() not in (".zip", ".npy", ".npz"):
        raise UsageError(f"Data must be a folder of images, a .zip or a .npy/.npz file: {path}")
    return data.load_path(p, class_names)


def _data_ref(path: str | None, **subset: Any):
    """A reference to the data at ``path`` for the run service (checked to exist, not loaded here)."""
    from .service import DataRef

    if path is None:
        return None
    p = _existing(path, "Data")
    if not p.is_dir() and p.suffix.lower() not in (".zip", ".npy", ".npz"):
        raise UsageError(f"Data must be a folder of images, a .zip or a .npy/.npz file: {path}")
    return DataRef(path=str(p.resolve()), **subset)


def find_sample(model_path: Path):
    """The bundled sample whose model is ``model_path`` (same file or same bytes), or None."""
    from . import samples

    return samples.find_for_model(model_path)


def preprocess_from_args(ns: argparse.Namespace, model_path: Path, sample=None) -> PreprocessConfig | None:
    """Preprocessing: the sample manifest's, else detected from the model's first input; flags override
    (``data.resolve_preprocess``). None for models whose input is not an image and no flags were given."""
    from . import data
    from .errors import DataError
    from .model import inspect_model

    overrides = {d: getattr(ns, d) for d in _PRE_DESTS if getattr(ns, d, None) is not None}
    try:
        return data.resolve_preprocess(inspect_model(model_path), sample, overrides=overrides)
    except DataError as exc:
        raise UsageError(exc.message) from None


def _reporter(ns: argparse.Namespace):
    if not getattr(ns, "verbose", False):
        from .progress import null_reporter

        return null_reporter
    last: list[str] = [""]

    def report(event: ProgressEvent) -> None:
        done = event.total is not None and event.done >= event.total
        if event.stage != last[0] or done:
            count = f" {event.done}/{event.total}" if event.total and event.total > 1 else ""
            state = "done" if done else "…"
            print(f"{PROG}: {event.stage}{count} {state} {event.message}".rstrip(), file=sys.stderr, flush=True)
            last[0] = event.stage

    return report


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, default=_json_default, allow_nan=False))


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _finite(obj: Any) -> Any:
    """JSON has no Infinity/NaN: write them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


# -- commands ----------------------------------------------------------------------------------------------


def cmd_inspect(ns: argparse.Namespace) -> int:
    """`ortlab inspect`: print what a model holds."""
    from .model import inspect_model, op_key

    info = inspect_model(_existing_file(ns.model, "Model"))
    if ns.json:
        _print_json(info.to_dict())
        return 0
    shape = lambda t: "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(info.opsets.items()))
    print(f"{info.path}\n  size      {_mb(info.total_bytes)}{' (with external data)' if info.has_external_data else ''}"
          f"\n  sha256    {info.sha256}\n  ir        {info.ir_version}   opsets: {opsets}"
          f"\n  producer  {info.producer} {info.producer_version}".rstrip()
          + f"\n  params    {info.param_count:,}   nodes: {info.node_count}")
    for kind, tensors in (("input", info.inputs), ("output", info.outputs)):
        for t in tensors:
            print(f"  {kind:<9} {t.name}  {t.dtype}  {shape(t)}")
    ops = sorted(info.op_counts.items(), key=lambda kv: (-kv[1], op_key(*kv[0])))
    print("  ops       " + ", ".join(f"{op_key(*k)}×{n}" for k, n in ops))
    for w in info.warnings:
        print(f"  warning   {w}")
    return 0


def _artifact_text(artifact, out_path: Path) -> str:
    lines = [f"wrote {out_path}  ({_mb(artifact.size_bytes)}, source {_mb(artifact.source_size_bytes)}, "
             f"{artifact.size_bytes / max(1, artifact.source_size_bytes):.0%})",
             f"  recipe     {artifact.recipe.label()}",
             f"  sha256     {artifact.sha256}",
             f"  providers  {', '.join(artifact.providers)}",
             "  timings    " + ", ".join(f"{k} {v:.2f}s" for k, v in artifact.timings.items())]
    ev = artifact.evaluation
    if ev:
        parts = [f"n={ev.get('n_samples')}"]
        for key, label in (("top1_accuracy_ref", "top-1 source"), ("top1_accuracy_cand", "top-1 result"),
                           ("top1_agreement", "top-1 agreement")):
            if ev.get(key) is not None:
                parts.append(f"{label} {ev[key]:.2%}")
        for o in ev.get("outputs", []):
            sqnr = o.get("sqnr_db")
            sqnr_text = "identical" if sqnr is None or sqnr == float("inf") else f"SQNR {float(sqnr):.1f} dB"
            max_abs = o.get("max_abs")
            parts.append(f"{o['name']}: max|Δ| {'?' if max_abs is None else format(max_abs, '.3g')}, {sqnr_text}")
        lines.append("  verify     " + "; ".join(parts))
    if artifact.random_data:
        lines.append("  RANDOM DATA was used: accuracy figures are meaningless.")
    lines += [f"  warning    {w}" for w in artifact.warnings]
    lines += [f"  note       {n}" for n in getattr(artifact, "notes", [])]
    return "\n".join(lines)


def _run_spec(src: Path, recipe: Recipe, ns: argparse.Namespace, calibration: str | None,
              evaluation: str | None):
    """The RunSpec of a CLI run: data references (checked to exist) and the preprocessing policy."""
    from .service import RunSpec

    sample = find_sample(src)
    cal = _data_ref(calibration)
    ev = _data_ref(evaluation, count=ns.verify_samples, seed=recipe.quant.seed)
    pre = preprocess_from_args(ns, src, sample) if (cal or ev) is not None else None
    if pre is not None and all(ref is None or ref.path is None or Path(ref.path).suffix.lower() in (".npy", ".npz")
                               for ref in (cal, ev)):
        pre = None  # tensors need no image preprocessing
    return RunSpec(str(src.resolve()), recipe, sample.name if sample is not None else None, cal, ev, pre,
                   ns.verify_samples)


def cmd_optimize(ns: argparse.Namespace) -> int:
    """`ortlab optimize`: apply a recipe to one model in a child process, write the result, record it."""
    from . import config, providers, service
    from .artifact import ARTIFACT_FILE

    recipe = recipe_from_args(ns)
    src = _existing_file(ns.model, "Model")
    out = Path(ns.out).expanduser()
    if out.resolve() == src.resolve():
        raise UsageError("OUT must differ from MODEL: the source model is never overwritten.")
    config.require_valid(recipe, providers.working_providers())  # fail before loading any data
    spec = _run_spec(src, recipe, ns, ns.calibration, ns.eval_data)
    as_dir = out.is_dir() or out.suffix.lower() != ".onnx"
    artifact = service.start_recipe(spec, out, origin="cli").follow(_reporter(ns))
    if ns.json:
        _print_json(_finite(artifact.to_dict()))
    else:
        print(_artifact_text(artifact, artifact.model_path))
        if as_dir:
            print(f"  files      {out / ARTIFACT_FILE}, recipe.json")
        print(f"  history    run {artifact.run_id}")
    return 0


def cmd_run(ns: argparse.Namespace) -> int:
    """`ortlab run`: apply a saved recipe JSON to a model (in a child process), recorded in the workspace."""
    from . import service
    from .workspace import Workspace

    recipe_path = _existing_file(ns.recipe, "Recipe")
    try:
        text = recipe_path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"{ns.recipe} is not a text file; give the recipe JSON.") from None
    recipe = Recipe.from_json(text)
    src = _existing_file(ns.model, "Model")
    spec = _run_spec(src, recipe, ns, ns.data, None)
    workspace = Workspace()
    out = Path(ns.out).expanduser() if ns.out else None
    artifact = service.start_recipe(spec, out, workspace=workspace, origin="cli").follow(_reporter(ns))
    if ns.json:
        _print_json(_finite(artifact.to_dict()))
    else:
        print(_artifact_text(artifact, artifact.model_path))
        print(f"  history    run {artifact.run_id} in {workspace.db_path}")
    return 0


def _variant_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(Path(p.parent.name) / p.name) if names.count(p.name) > 1 else p.name for p in paths]


def cmd_bench(ns: argparse.Namespace) -> int:
    """`ortlab bench`: time models side by side at each batch size."""

    paths = [_existing_file(m, "Model") for m in ns.models]
    if any(b < 1 for b in ns.batch_sizes):
        raise UsageError("--batch-sizes must be positive.")
    if ns.runs < 1 or ns.duration < 0 or ns.warmup < 0 or ns.threads < 0:
        raise UsageError("--runs must be at least 1; --duration, --warmup and --threads must not be negative.")
    cfg = BenchConfig(batch_sizes=tuple(ns.batch_sizes), warmup=ns.warmup, runs=ns.runs, duration_s=ns.duration,
                      session_opt_level=OptLevel(ns.session_opt_level),
                      intra_op_threads=ns.threads, target=Target(ns.target), profile=bool(ns.profile))
    from . import service
    from .workspace import Workspace

    workspace = Workspace()
    run_ids = {Path(r["model_path"]).resolve(): r["id"] for r in reversed(workspace.history().list())}
    variants = [service.BenchVariant(name, name, str(path), run_ids.get(path.resolve()))
                for path, name in zip(paths, _variant_names(paths))]
    handle = service.start_benchmark(variants, cfg, measure_memory=ns.memory, workspace=workspace, origin="cli",
                                     profile_dir=ns.profile)
    summaries = handle.follow(_reporter(ns))
    baseline = handle.baseline_rss_mb
    if ns.json:
        _print_json({"config": cfg.to_dict(), "baseline_rss_mb": baseline,
                     "results": [_finite(s.to_dict()) for s in summaries]})
        return 0
    header = ["model", "batch", "runs", "p50 ms", "p90 ms", "p99 ms", "mean ms", "items/s", "providers"]
    if ns.memory:
        header.append("peak MB")
    rows = []
    for s in summaries:
        row = [s.variant, str(s.batch_size), str(s.n), f"{s.p50:.3f}", f"{s.p90:.3f}", f"{s.p99:.3f}",
               f"{s.mean:.3f}", f"{s.throughput_per_s:,.1f}", ",".join(p.replace("ExecutionProvider", "")
                                                                       for p in s.providers)]
        if ns.memory:
            row.append(f"{s.peak_rss_mb:.1f}")
        rows.append(row)
    print(_table(rows, header))
    print(f"history    benchmark {handle.bench_id}")
    if ns.memory:
        print(f"peak MB is the whole process; an interpreter with ONNX Runtime and no model peaks at "
              f"{baseline:.1f} MB.")
    for s in summaries:
        if s.profile_path:
            print(f"profile {s.variant} b{s.batch_size}: {s.profile_path}")
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    """`ortlab compare`: output error and accuracy of a candidate against a reference on the same data."""
    from .data import stratified_sample
    from .evaluate import evaluate

    ref = _existing_file(ns.reference, "Reference model")
    cand = _existing_file(ns.candidate, "Candidate model")
    if ns.n is not None and ns.n < 1:
        raise UsageError("--n must be at least 1.")
    sample = find_sample(ref)
    dataset = load_dataset(ns.data, sample.labels if sample is not None and sample.labels else None)
    if ns.n is not None and ns.n < len(dataset):
        dataset = stratified_sample(dataset, ns.n)
    pre = preprocess_from_args(ns, ref, sample) if dataset.kind == "images" else None
    report = evaluate(ref, cand, dataset, pre, target=Target(ns.target), reporter=_reporter(ns))
    d = report.to_dict()
    if ns.json:
        _print_json(_finite(d))
        return 0
    print(f"{cand.name} vs {ref.name} on {report.n_samples} samples"
          + (" (RANDOM DATA: accuracy is meaningless)" if report.random_data else ""))
    rows = [[o.name, f"{o.max_abs:.4g}", f"{o.mean_abs:.4g}", f"{o.cosine:.6f}", f"{o.sqnr_db:.1f}"]
            for o in report.outputs]
    print(_table(rows, ["output", "max |Δ|", "mean |Δ|", "cosine", "SQNR dB"]))
    for key, label in (("top1_accuracy_ref", "top-1 accuracy (reference)"),
                       ("top1_accuracy_cand", "top-1 accuracy (candidate)"),
                       ("top5_accuracy_ref", "top-5 accuracy (reference)"),
                       ("top5_accuracy_cand", "top-5 accuracy (candidate)"),
                       ("top1_agreement", "top-1 agreement"), ("top5_containment", "top-5 containment")):
        value = getattr(report, key)
        if value is not None:
            print(f"{label:<28} {value:.2%}")
    return 0


def cmd_history(ns: argparse.Namespace) -> int:
    """`ortlab history`: the runs and benchmarks recorded in the workspace, from the app and the CLI."""
    from .workspace import Workspace

    if ns.limit is not None and ns.limit < 1:
        raise UsageError("--limit must be at least 1.")
    ws = Workspace()
    h = ws.history()
    runs = [_history_run(r) for r in h.list(ns.limit)]
    benches = [{"id": b["id"], "created_at": b["created_at"], "origin": b.get("origin") or "",
                "variants": b["variants"], "config": b["config"],
                "results": [{k: s.get(k) for k in ("variant", "batch_size", "n", "p50", "p90", "p99", "mean",
                                                    "throughput_per_s", "peak_rss_mb")} for s in b["summary"]]}
               for b in h.list_benchmarks(ns.limit)]
    if ns.json:
        _print_json(_finite({"workspace": str(ws.root), "runs": runs, "benchmarks": benches}))
        return 0
    print(f"workspace {ws.root}")
    if runs:
        print(_table([[str(r["id"]), r["created_at"].replace("T", " ")[:19], r["origin"], r["recipe"],
                       r["source_name"], r["sha256"][:12], _mb(r["size_bytes"])] for r in runs],
                     ["run", "created", "from", "recipe", "source", "sha256", "size"]))
    else:
        print("No runs yet.")
    for b in benches:
        names = ", ".join(str(v.get("name") or v.get("id") or v.get("run_id")) for v in b["variants"])
        best = ", ".join(f"{s['variant']}@{s['batch_size']} p50 {s['p50']:.3f} ms" for s in b["results"])
        print(f"benchmark {b['id']}  {b['created_at'].replace('T', ' ')[:19]}  {b['origin'] or '?'}  {names}: {best}")
    return 0


def _history_run(r: dict) -> dict:
    try:
        label = Recipe.from_dict(r["recipe"]).label()
    except OrtlabError:
        label = str(r.get("kind", ""))
    return {"id": r["id"], "created_at": r["created_at"], "origin": r.get("origin") or "", "recipe": label,
            "kind": r["kind"], "source_name": r["source_name"], "source_path": r["source_path"],
            "source_sha256": r["source_sha256"], "sha256": r["sha256"], "size_bytes": r["size_bytes"],
            "model_path": r["model_path"], "random_data": r.get("random_data", False)}


def cmd_samples(ns: argparse.Namespace) -> int:
    """`ortlab samples`: list the bundled sample models."""
    from .samples import list_samples

    found = list_samples(skip_broken=True)
    if ns.json:
        _print_json([{"name": s.name, "title": s.title, "model_path": str(s.model_path), "labels": s.labels,
                      "calibration_dir": str(s.calibration_dir) if s.calibration_dir else None,
                      "evaluation_dir": str(s.evaluation_dir) if s.evaluation_dir else None,
                      "preprocess": s.preprocess.to_dict(), "reference": s.reference, "license": s.license}
                     for s in found])
        return 0
    if not found:
        print("No bundled sample models.")
        return 0
    for s in found:
        print(f"{s.name:<16} {s.title}\n{'':<16} {s.model_path}")
    return 0


# -- entry point -------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 usage)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
        return int(ns.func(ns) or 0)
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except (UsageError, RecipeError) as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{PROG}: error: file not found: {exc.filename or _one_line(exc)}", file=sys.stderr)
        return 2
    except OrtlabError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("ORTLAB_DEBUG"):
            raise
        print(f"{PROG}: error: unexpected {type(exc).__name__}: {_one_line(exc)} "
              f"(set ORTLAB_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
