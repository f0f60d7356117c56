"""The ``ortlab`` command line: inspect, optimize, bench, compare, run and samples.

Exit status: 0 success, 1 the work failed (bad model file, data that does not fit, ORT failure),
2 bad usage (unknown flags, missing files, a recipe that cannot work), 3 the result's verdict is at or worse
than ``--fail-on`` (optimize, compare, run). Errors print one line on stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from ortlab import __version__
from ortlab.settings.flags import UsageError, add_config_arguments, config_from_args, given_values
from ortlab.settings.config import DEFAULT_BENCH_DURATION_S, BenchConfig, PreprocessConfig, Recipe, Target
from ortlab.core.errors import OrtlabError, RecipeError
from ortlab.core.errors import OutputError
from ortlab.core.progress import ProgressEvent
from ortlab.core.text import format_bytes, one_line
from ortlab.checks.verdict import Level, VerdictPolicy, worse_or_equal
from ortlab.timing.bench import config_problems

PROG = "ortlab"
BENCH_FLAGS_EXCLUDED = ("profile",)  # bench's --profile DIR both names the folder and turns profiling on


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def _values(enum_cls) -> list[str]:
    return [m.value for m in enum_cls]


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ortlab optimize`` that describe a Recipe (the ones ``config.recipe_cli_args`` writes)."""
    add_config_arguments(p, Recipe, title="recipe")


def add_preprocess_arguments(p: argparse.ArgumentParser) -> None:
    """Image preprocessing flags; unset ones come from the sample manifest or the model input."""
    add_config_arguments(p, PreprocessConfig, show_defaults=False,
                         title="image preprocessing (default: the sample's manifest, else detected from the model)")


def add_verdict_arguments(p: argparse.ArgumentParser) -> None:
    """The verdict policy's flags (``verdict.VerdictPolicy``) and ``--fail-on``."""
    add_config_arguments(p, VerdictPolicy, title="verdict policy (ok / degraded / broken)")
    p.add_argument("--fail-on", choices=[Level.DEGRADED.value, Level.BROKEN.value], default=None,
                   help="Exit with status 3 when the verdict is this level or worse (unknown counts as worse "
                        "than ok, better than degraded).")


def policy_from_args(ns: argparse.Namespace) -> VerdictPolicy:
    """The VerdictPolicy the parsed flags describe."""
    policy = config_from_args(VerdictPolicy, ns)
    if policy.problems():
        raise UsageError(" ".join(policy.problems()))
    return policy


def _exit_for(verdict, ns: argparse.Namespace) -> int:
    """3 when ``--fail-on`` is given and the verdict is at or worse than it, else 0."""
    fail_on = getattr(ns, "fail_on", None)
    if fail_on and verdict is not None and worse_or_equal(verdict.level, Level(fail_on)):
        return 3
    return 0


def verdict_line(verdict) -> str:
    """The first line of a result's text output: ``verdict   BROKEN  reason; reason``."""
    if verdict is None:
        return "verdict    UNKNOWN  not judged"
    return f"verdict    {verdict.level.value.upper()}  " + "; ".join(verdict.reasons)


def build_parser() -> argparse.ArgumentParser:
    """The ``ortlab`` argument parser (sub-commands inspect, optimize, bench, compare, run, samples)."""
    parser = _Parser(prog=PROG, description="Quantize and graph-optimize ONNX models with ONNX Runtime, "
                                            "and show why the result is safe to ship.",
                     epilog="Exit status: 0 ok, 1 the work failed, 2 bad usage, 3 the verdict is at or worse "
                            "than --fail-on.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                        help="A custom-op shared library (.so/.dll/.dylib) registered in every ONNX Runtime session "
                             "(repeatable; give it before the command).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    p = sub.add_parser("inspect", help="Show a model's inputs, outputs, opsets, ops and size.")
    p.add_argument("model", metavar="MODEL", help="An .onnx file or a bundled sample's name.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("optimize", help="Apply a recipe (precision, target, optimization level, quantization).")
    p.add_argument("model", metavar="MODEL", help="The source .onnx file (never modified).")
    p.add_argument("out", metavar="OUT", help="The result: a .onnx file, or a folder that receives model.onnx, "
                                              "recipe.json and artifact.json.")
    add_recipe_arguments(p)
    _add_data_arguments(p)
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_verdict_arguments(p)
    _add_output_flags(p)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("bench", help="Time one or more models (latency percentiles, throughput, memory).")
    p.add_argument("models", metavar="MODEL", nargs="+", help="One or more .onnx files or bundled samples' names.")
    add_config_arguments(p, BenchConfig, title="timing", exclude=BENCH_FLAGS_EXCLUDED)
    _set_default_help(p, "duration_s", f"{DEFAULT_BENCH_DURATION_S:g}")
    _set_default_help(p, "runs", f"not used, the run is timed; --runs N alone times exactly N runs, and with "
                                 f"--duration 0 it is {BenchConfig().runs}")
    p.add_argument("--memory", action="store_true", help="Also measure peak memory (a child process per model).")
    p.add_argument("--profile", metavar="DIR", help="Write ORT's profiling JSON for each run into DIR.")
    add_input_arguments(p, text=False)
    p.add_argument("--input-value", action="append", default=[], metavar="NAME=VALUE",
                   help="The value of a control input (an integer scalar such as a sample rate), which random data "
                        "never makes up; repeatable.")
    _add_output_flags(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("compare", help="Compare a candidate model's outputs and accuracy with a reference.")
    p.add_argument("reference", metavar="REF", help="The reference .onnx (usually the fp32 source).")
    p.add_argument("candidate", metavar="CANDIDATE", help="The optimized .onnx.")
    p.add_argument("--data", metavar="DIR", required=True,
                   help="Images folder (class sub-folders are labels), .zip of images, .npy/.npz tensors, or a .txt "
                        "file (one example per line; with --tokenizer).")
    p.add_argument("--n", type=int, help="Use at most N samples (stratified by class).")
    p.add_argument("--target", choices=_values(Target), default=Target.CPU.value, help="Run on cpu or gpu.")
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_verdict_arguments(p)
    _add_output_flags(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("run", help="Apply a saved recipe (JSON from the app or Recipe.to_json()).")
    p.add_argument("recipe", metavar="RECIPE.json")
    p.add_argument("model", metavar="MODEL", help="An .onnx file or a bundled sample's name.")
    _add_data_arguments(p)
    p.add_argument("--out", metavar="DIR", help="Artifact folder (default: a new folder in the workspace, "
                                                "$ORTLAB_HOME or ~/.ortlab, recorded in its history).")
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_verdict_arguments(p)
    _add_output_flags(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("history", help="List the runs and benchmarks recorded in the workspace (app and CLI).")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="Show the newest N of each (default: all).")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("samples", help="List the bundled sample models.")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.set_defaults(func=cmd_samples)

    from ortlab.cli.tune import add_commands as add_tune_commands

    add_tune_commands(sub)  # analyze, tune
    return parser


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    """``--calibration``/``--data``, ``--eval`` and ``--verify-samples`` of ``optimize`` and ``run``."""
    g = p.add_argument_group("data (default for a bundled sample: its calibration and evaluation images)")
    g.add_argument("--calibration", "--data", metavar="DIR", dest="calibration",
                   help="Calibration data: a folder of images (class sub-folders are labels), a .zip of images, a "
                        ".npy/.npz tensor file, or a .txt file (one example per line; with --tokenizer).")
    g.add_argument("--eval", metavar="DIR", dest="eval_data",
                   help="Data to verify the result against the source (default: the calibration data).")
    g.add_argument("--verify-samples", type=int, default=32, help="Samples compared with the source (default: 32).")


def _set_default_help(p: argparse.ArgumentParser, dest: str, default: str) -> None:
    """Say ``default`` as the default in the help of ``p``'s flag that stores into ``dest``, where the CLI's
    default is not the config field's (bench times 3 s, not a run count)."""
    action = next(a for a in p._actions if a.dest == dest)
    text = re.sub(r"\s*\(default: [^()]*\)$", "", action.help or "")
    action.help = f"{text} (default: {default})"  # the field's help is already %-escaped; ``default`` has no %


def add_input_arguments(p: argparse.ArgumentParser, text: bool = True) -> None:
    """``--shape NAME=D0,D1,…`` (repeatable) and, for commands that read data, ``--tokenizer`` and ``--seq-len``."""
    g = p.add_argument_group("model inputs")
    g.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,…",
                   help="The full shape of input NAME, for dims the model leaves open (e.g. images=1,3,640,640 or "
                        "input_ids=1,128); repeat for each input. The batch axis follows the batch size.")
    if text:
        g.add_argument("--tokenizer", metavar="TOKENIZER.json",
                       help="Hugging Face tokenizer.json for .txt data (default: tokenizer.json beside the .txt).")
        g.add_argument("--seq-len", type=int, metavar="N",
                       help="Sequence length of text data, padded or truncated (default: the model's fixed length, "
                            "else 128).")


def shapes_from_args(ns: argparse.Namespace) -> dict[str, list[int]]:
    """``{input name: shape}`` of the ``--shape`` flags (UsageError when one is malformed or repeated)."""
    from ortlab.core.errors import DataError
    from ortlab.data.inputs import parse_shape

    out: dict[str, list[int]] = {}
    for text in getattr(ns, "shape", None) or []:
        try:
            name, shape = parse_shape(text)
        except DataError as exc:
            raise UsageError(exc.message) from None
        if name in out:
            raise UsageError(f"--shape {name} is given twice.")
        out[name] = shape
    return out


def values_from_args(ns: argparse.Namespace) -> dict[str, float]:
    """``{input name: number}`` of the ``--input-value NAME=VALUE`` flags (UsageError when one is malformed)."""
    out: dict[str, float] = {}
    for text in getattr(ns, "input_value", None) or []:
        name, sep, value = str(text).rpartition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not name or not math.isfinite(number):
            raise UsageError(f"--input-value takes NAME=NUMBER (e.g. sr=16000), got {text!r}.")
        if name in out:
            raise UsageError(f"--input-value {name} is given twice.")
        out[name] = int(number) if number.is_integer() else number
    return out


def _text_options(ns: argparse.Namespace, path: Path) -> dict[str, Any]:
    """tokenizer/seq_len of a .txt data path (UsageError without a tokenizer); {} for other data."""
    from ortlab.data.loaders import TEXT_EXTENSIONS, TOKENIZER_FILE

    seq_len = getattr(ns, "seq_len", None)
    if seq_len is not None and seq_len < 1:
        raise UsageError("--seq-len must be at least 1.")
    if path.is_dir() or path.suffix.lower() not in TEXT_EXTENSIONS:
        return {}
    given = getattr(ns, "tokenizer", None)
    tok = Path(given).expanduser() if given else path.parent / TOKENIZER_FILE
    if not tok.is_file():
        raise UsageError(f"Text data {path} needs a tokenizer: give --tokenizer TOKENIZER.json"
                         + (f" ({given} not found)." if given else "."))
    return {"tokenizer": str(tok.resolve()), "seq_len": seq_len}


def _shapes_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} [{', '.join(str(d) for d in v)}]" for k, v in shapes.items())


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.add_argument("-v", "--verbose", action="store_true", help="Print progress on stderr.")


# -- arguments → engine objects ---------------------------------------------------------------------------


def recipe_from_args(ns: argparse.Namespace) -> Recipe:
    """The Recipe that the parsed ``optimize`` flags describe."""
    return config_from_args(Recipe, ns)


def bench_from_args(ns: argparse.Namespace) -> BenchConfig:
    """The BenchConfig that the parsed ``bench`` flags describe (profiling on when ``--profile DIR`` is given)."""
    given = given_values(BenchConfig, ns, BENCH_FLAGS_EXCLUDED)
    # a few seconds per variant by default; --runs N alone means N runs
    base = BenchConfig(profile=bool(ns.profile),
                       duration_s=0.0 if "runs" in given and "duration_s" not in given else DEFAULT_BENCH_DURATION_S)
    cfg = config_from_args(BenchConfig, ns, base, exclude=BENCH_FLAGS_EXCLUDED)
    problems = config_problems(cfg)
    if problems:
        raise UsageError(" ".join(problems))
    return cfg


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


def model_file(text: str, what: str = "Model") -> Path:
    """A MODEL argument: a path to an .onnx file (relative to the current folder, or absolute), or a bundled
    sample's name (``digits_cnn``; ``ortlab samples`` lists them). A path such as ``sample_models/digits_cnn/model.onnx``
    that is not there from the current folder is also looked up where the bundled samples live, so the README's
    lines work from any folder."""
    from ortlab.data.samples import list_samples, samples_root

    path = Path(text).expanduser()
    if path.exists():
        return _existing_file(text, what)
    found = list_samples(skip_broken=True)
    sample = next((s for s in found if s.name == text), None)
    if sample is not None:
        return Path(sample.model_path)
    root = samples_root()
    if not path.is_absolute() and path.parts[:1] == (root.name,) and (root.parent / path).is_file():
        return root.parent / path
    names = ", ".join(s.name for s in found)
    looks_like_a_name = len(path.parts) == 1 and not path.suffix
    raise UsageError(f"{what} not found: {text}" + (f" (no file, nor a bundled sample: {names})"
                                                    if looks_like_a_name and names else ""))


def _display_path(path: Path) -> str:
    """``path`` relative to the current folder when it is under it, else as given (absolute)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


DATA_SUFFIXES = (".zip", ".npy", ".npz", ".txt", ".text")
DATA_KINDS = "a folder of images, a .zip, a .npy/.npz file or a .txt file (with --tokenizer)"


def load_dataset(path: str, class_names: Sequence[str] | None = None, ns: argparse.Namespace | None = None):
    """A dataset from a folder of images, a .zip of images, a .npy/.npz tensor file or a .txt file (``ns`` gives
    --tokenizer and --seq-len)."""
    from ortlab.data.loaders import load_path

    p = _existing(path, "Data")
    if not p.is_dir() and p.suffix.lower() not in DATA_SUFFIXES:
        raise UsageError(f"Data must be {DATA_KINDS}: {path}")
    text = _text_options(ns, p) if ns is not None else {}
    return load_path(p, class_names, **text)


def _data_ref(path: str | None, ns: argparse.Namespace | None = None, **subset: Any):
    """A reference to the data at ``path`` for the run service (checked to exist, not loaded here)."""
    from ortlab.runs.runspec import DataRef

    if path is None:
        return None
    p = _existing(path, "Data")
    if not p.is_dir() and p.suffix.lower() not in DATA_SUFFIXES:
        raise UsageError(f"Data must be {DATA_KINDS}: {path}")
    text = _text_options(ns, p) if ns is not None else {}
    return DataRef(path=str(p.resolve()), **subset, **text)


def find_sample(model_path: Path):
    """The bundled sample whose model is ``model_path`` (same file or same bytes), or None."""
    from ortlab.data import samples

    return samples.find_for_model(model_path)


def preprocess_from_args(ns: argparse.Namespace, model_path: Path, sample=None) -> PreprocessConfig | None:
    """Preprocessing: the sample manifest's, else detected from the model's first input; flags override
    (``resolve_preprocess``). None for models whose input is not an image and no flags were given."""
    from ortlab.data.preprocess import resolve_preprocess
    from ortlab.core.errors import DataError
    from ortlab.model.inspect import inspect_model

    overrides = given_values(PreprocessConfig, ns)
    try:
        inputs = inspect_model(model_path).inputs if sample is None else ()
        return resolve_preprocess(inputs, sample, overrides=overrides)
    except DataError as exc:
        raise UsageError(exc.message) from None


def _reporter(ns: argparse.Namespace):
    if not getattr(ns, "verbose", False):
        from ortlab.core.progress import null_reporter

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
    """``serial.to_plain`` of ``obj`` as JSON on stdout (non-finite numbers as "inf"/"-inf"/"nan")."""
    from ortlab.core.serial import dumps

    print(dumps(obj, indent=2))


def _table(rows: list[list[str]], header: list[str], right: Sequence[int] | None = None) -> str:
    """A text table; the columns ``right`` (default: all but the first) are right-aligned, header included."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    right_cols = set(range(1, len(header)) if right is None else right)

    def fmt(row: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right_cols else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


# -- commands ----------------------------------------------------------------------------------------------


def cmd_inspect(ns: argparse.Namespace) -> int:
    """`ortlab inspect`: print what a model holds."""
    from ortlab.model.inspect import inspect_model, op_key

    info = inspect_model(model_file(ns.model))
    if ns.json:
        _print_json(info.to_dict())
        return 0
    shape = lambda t: "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(info.opsets.items()))
    print(f"{info.path}\n  size      {format_bytes(info.total_bytes)}{' (with external data)' if info.has_external_data else ''}"
          f"\n  sha256    {info.sha256}\n  ir        {info.ir_version}   opsets: {opsets}"
          f"\n  producer  {info.producer} {info.producer_version}".rstrip()
          + f"\n  params    {info.param_count:,}"
          + (f" ({info.constant_params:,} in Constant nodes)" if info.constant_params else "")
          + f"   nodes: {info.node_count}"
          + (f" ({info.subgraph_node_count} in subgraphs)" if info.subgraph_node_count else ""))
    for kind, tensors in (("input", info.inputs), ("output", info.outputs)):
        for t in tensors:
            print(f"  {kind:<9} {t.name}  {t.dtype}  {shape(t)}")
    ops = sorted(info.op_counts.items(), key=lambda kv: (-kv[1], op_key(*kv[0])))
    print("  ops       " + ", ".join(f"{op_key(*k)}×{n}" for k, n in ops))
    from ortlab.runtime.hardware import advise, detect

    cpu = detect()
    print(f"  cpu       {cpu.summary()}")
    for note in advise(cpu, model_bytes=info.total_bytes).notes:
        print(f"  int8      {note}")
    for w in info.warnings:
        print(f"  warning   {w}")
    return 0


def _artifact_text(artifact, out_path: Path) -> str:
    lines = [verdict_line(artifact.verdict),
             f"wrote {out_path}  ({format_bytes(artifact.size_bytes)}, source {format_bytes(artifact.source_size_bytes)}, "
             f"{artifact.size_bytes / max(1, artifact.source_size_bytes):.0%})",
             f"  recipe     {artifact.recipe.label()}",
             f"  sha256     {artifact.sha256}",
             f"  providers  {', '.join(artifact.providers)}",
             "  timings    " + ", ".join(f"{k} {v:.2f}s" for k, v in artifact.timings.items())]
    if artifact.input_shapes:
        lines.append(f"  inputs     {_shapes_text(artifact.input_shapes)}")
    ev = artifact.evaluation
    if ev is not None:
        parts = [f"n={ev.n_samples}"]
        if ev.task is not None:
            parts.append(f"task {ev.task.task.value}")
        for value, label in ((ev.top1_accuracy_ref, "top-1 source"), (ev.top1_accuracy_cand, "top-1 result"),
                             (ev.top1_agreement, "top-1 agreement")):
            if value is not None:
                parts.append(f"{label} {value:.2%}")
        parts += task_lines(ev)
        for o in ev.outputs:
            sqnr_text = "identical" if o.identical else f"SQNR {o.sqnr_db:.1f} dB"
            parts.append(f"{o.name}: max|Δ| {o.max_abs:.3g}, {sqnr_text}")
        lines.append("  verify     " + "; ".join(parts))
    coverage = getattr(artifact, "coverage", None)
    if coverage is not None:
        lines.append(f"  quantized  {coverage.summary()}")
    if artifact.random_data:
        lines.append("  RANDOM DATA was used: accuracy figures are meaningless.")
    lines += [f"  warning    {w}" for w in artifact.warnings]
    lines += [f"  note       {n}" for n in artifact.notes]
    return "\n".join(lines)


def task_lines(ev) -> list[str]:
    """Short texts of the task metrics of an evaluation (flips, threshold crossings, neighbours, exact)."""
    tm = ev.task
    if tm is None:
        return []
    out = []
    c = tm.classification
    if c is not None:
        out.append(f"flips {c.confident_flips()} confident / {c.near_tie_flips()} near-tie (margin < {c.margin:g})")
    out += [f"{d.output}: {d.crossing_fraction:.2%} cross {d.threshold:g}" for d in tm.dense_maps]
    out += [f"{b.output}: {b.changed_fraction:.2%} detections changed" for b in tm.boxes]
    out += [f"{e.output}: cosine min {e.min_cosine:.3f}, NN agreement "
            + (f"{e.nn_agreement:.0%}" if e.nn_agreement is not None else "–") for e in tm.embeddings]
    out += [f"{x.output} ({x.dtype}): {x.n_different} of {x.n_elements} differ" for x in tm.exact]
    return out


def _run_spec(src: Path, recipe: Recipe, ns: argparse.Namespace, calibration: str | None,
              evaluation: str | None):
    """The RunSpec of a CLI run: data references (checked to exist) and the preprocessing policy."""
    from ortlab.runs.runspec import RunSpec

    from ortlab.runs.runspec import DataRef

    sample = find_sample(src)
    shapes = shapes_from_args(ns)
    cal = _data_ref(calibration, ns)
    ev = _data_ref(evaluation, ns, count=ns.verify_samples, seed=recipe.quant.seed)
    if cal is None and ev is None and sample is not None and sample.calibration_dir is not None:
        cal = DataRef(sample=sample.name, set="calibration")
        if sample.evaluation_dir is not None:
            ev = DataRef(sample=sample.name, set="evaluation", count=ns.verify_samples, seed=recipe.quant.seed)
        print(f"{PROG}: using sample {sample.name}'s calibration"
              + (" and evaluation" if ev is not None else "") + " images (give --calibration/--eval for others)",
              file=sys.stderr)
    pre = preprocess_from_args(ns, src, sample) if (cal or ev) is not None else None
    if pre is not None and all(ref is None or (ref.path is None and ref.sample is None)
                               or (ref.path is not None and Path(ref.path).suffix.lower() in DATA_SUFFIXES[1:])
                               for ref in (cal, ev)):
        pre = None  # tensors and text need no image preprocessing
    policy = policy_from_args(ns)
    return RunSpec(str(src.resolve()), recipe, sample.name if sample is not None else None, cal, ev, pre,
                   ns.verify_samples, None if policy == VerdictPolicy() else policy, shapes=shapes)


def cmd_optimize(ns: argparse.Namespace) -> int:
    """`ortlab optimize`: apply a recipe to one model in a child process, write the result, record it."""
    from ortlab.settings import config
    from ortlab.runtime import providers
    from ortlab.runs import service
    from ortlab.core.layout import ARTIFACT_FILE

    recipe = recipe_from_args(ns)
    src = model_file(ns.model)
    out = Path(ns.out).expanduser()
    config.require_valid(recipe, providers.working_providers())  # fail before loading any data
    spec = _run_spec(src, recipe, ns, ns.calibration, ns.eval_data)
    as_dir = out.is_dir() or out.suffix.lower() != ".onnx"
    artifact = service.start_recipe(spec, out, origin="cli").follow(_reporter(ns))
    if ns.json:
        _print_json(artifact.to_dict())
    else:
        print(_artifact_text(artifact, artifact.model_path))
        if as_dir:
            print(f"  files      {out / ARTIFACT_FILE}, recipe.json")
        print(f"  history    run {artifact.run_id}")
    return _exit_for(artifact.verdict, ns)


def cmd_run(ns: argparse.Namespace) -> int:
    """`ortlab run`: apply a saved recipe JSON to a model (in a child process), recorded in the workspace."""
    from ortlab.runs import service
    from ortlab.runs.workspace import Workspace

    recipe_path = _existing_file(ns.recipe, "Recipe")
    try:
        text = recipe_path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"{ns.recipe} is not a text file; give the recipe JSON.") from None
    recipe = Recipe.from_json(text)
    src = model_file(ns.model)
    spec = _run_spec(src, recipe, ns, ns.calibration, ns.eval_data)
    workspace = Workspace()
    out = Path(ns.out).expanduser() if ns.out else None
    artifact = service.start_recipe(spec, out, workspace=workspace, origin="cli").follow(_reporter(ns))
    if ns.json:
        _print_json(artifact.to_dict())
    else:
        print(_artifact_text(artifact, artifact.model_path))
        print(f"  history    run {artifact.run_id} in {workspace.db_path}")
    return _exit_for(artifact.verdict, ns)


def _variant_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(Path(p.parent.name) / p.name) if names.count(p.name) > 1 else p.name for p in paths]


def cmd_bench(ns: argparse.Namespace) -> int:
    """`ortlab bench`: time models side by side at each batch size."""

    paths = [model_file(m) for m in ns.models]
    cfg = bench_from_args(ns)
    from ortlab.runs import service
    from ortlab.runs.artifact import Artifact
    from ortlab.runs.history import BenchVariant
    from ortlab.runs.workspace import Workspace

    shapes, values = shapes_from_args(ns), values_from_args(ns)
    if shapes or values:
        from ortlab.model.inspect import inspect_model

        taken = {t.name for p in paths for t in inspect_model(p).inputs}
        for flag, given in (("--shape", shapes), ("--input-value", values)):
            unknown = [k for k in given if k not in taken]
            if unknown:
                raise UsageError(f"{flag} names {', '.join(unknown)}, which none of the models takes "
                                 f"(inputs: {', '.join(sorted(taken))}).")
    workspace = Workspace()
    run_ids = {Path(r.model_path).resolve(): r.run_id for r in reversed(workspace.history().list())
               if isinstance(r, Artifact)}
    variants = [BenchVariant(name, name, str(path), run_ids.get(path.resolve()))
                for path, name in zip(paths, _variant_names(paths))]
    handle = service.start_benchmark(variants, cfg, measure_memory=ns.memory, workspace=workspace, origin="cli",
                                     profile_dir=ns.profile, shapes=shapes, values=values)
    summaries = handle.follow(_reporter(ns))
    baseline = handle.baseline_rss_mb
    if ns.json:
        _print_json({"config": cfg, "baseline_rss_mb": baseline, "results": summaries})
        return 0
    header = ["model", "batch", "runs", "p50 ms", "p90 ms", "p99 ms", "mean ms", "items/s (batch÷p50)", "providers"]
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
    for s in summaries:
        if s.input_shapes:
            print(f"inputs {s.variant} b{s.batch_size}: {_shapes_text(s.input_shapes)}")
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
    from ortlab.data.dataset import stratified_sample
    from ortlab.checks.evaluate import evaluate
    from ortlab.core.serial import to_plain
    from ortlab.checks.verdict import judge

    policy = policy_from_args(ns)
    ref = model_file(ns.reference, "Reference model")
    cand = model_file(ns.candidate, "Candidate model")
    if ns.n is not None and ns.n < 1:
        raise UsageError("--n must be at least 1.")
    sample = find_sample(ref)
    shapes = shapes_from_args(ns)
    dataset = load_dataset(ns.data, sample.labels if sample is not None and sample.labels else None, ns)
    if ns.n is not None and ns.n < len(dataset):
        dataset = stratified_sample(dataset, ns.n)
    pre = preprocess_from_args(ns, ref, sample) if dataset.kind == "images" else None
    specs = None
    if shapes or dataset.kind != "images":
        from ortlab.data.inputs import resolve_feed
        from ortlab.model.inspect import inspect_model

        pre, specs = resolve_feed(inspect_model(ref).inputs, pre, dataset, shapes, manifest=sample)
    report = evaluate(ref, cand, dataset, pre, target=Target(ns.target), reporter=_reporter(ns), policy=policy,
                      specs=specs)
    verdict = judge(report, policy)
    if ns.json:
        _print_json({"verdict": verdict, **to_plain(report)})
        return _exit_for(verdict, ns)
    print(verdict_line(verdict))
    print(f"{cand.name} vs {ref.name} on {report.n_samples} samples"
          + (" (RANDOM DATA: accuracy is meaningless)" if report.random_data else ""))
    rows = [[o.name, f"{o.max_abs:.4g}", f"{o.mean_abs:.4g}", f"{o.cosine:.6f}", f"{o.sqnr_db:.1f}"]
            for o in report.outputs]
    print(_table(rows, ["output", "max |Δ|", "mean |Δ|", "cosine", "SQNR dB"]))
    if report.input_shapes:
        print(f"inputs: {_shapes_text(report.input_shapes)}")
    for key, label in (("top1_accuracy_ref", "top-1 accuracy (reference)"),
                       ("top1_accuracy_cand", "top-1 accuracy (candidate)"),
                       ("top5_accuracy_ref", "top-5 accuracy (reference)"),
                       ("top5_accuracy_cand", "top-5 accuracy (candidate)"),
                       ("top1_agreement", "top-1 agreement"), ("top5_containment", "top-5 containment")):
        value = getattr(report, key)
        if value is not None:
            print(f"{label:<28} {value:.2%}")
    if report.task is not None:
        print(f"{'task':<28} {report.task.task.value} ({'inferred: ' + report.task.why if report.task.inferred else 'given'})")
        for text in task_lines(report):
            print(f"  {text}")
    return _exit_for(verdict, ns)


def cmd_history(ns: argparse.Namespace) -> int:
    """`ortlab history`: the runs and benchmarks recorded in the workspace, from the app and the CLI."""
    from ortlab.runs.artifact import Artifact
    from ortlab.runs.history import BenchmarkRecord
    from ortlab.runs.workspace import Workspace

    if ns.limit is not None and ns.limit < 1:
        raise UsageError("--limit must be at least 1.")
    ws = Workspace()
    h = ws.history()
    runs, benches = h.list(ns.limit), h.list_benchmarks(ns.limit)
    if ns.json:
        _print_json({"workspace": str(ws.root), "runs": runs, "benchmarks": benches})
        return 0
    print(f"workspace {ws.root}")
    from ortlab.checks.verdict import judge

    rows = [[str(r.run_id), r.created_at.replace("T", " ")[:19], r.origin or "?",
             (r.verdict if r.verdict is not None else judge(r.evaluation, coverage=r.coverage)).level.value,
             r.recipe.label(), _source_label(r), format_bytes(r.size_bytes), r.sha256[:12]]
            for r in runs if isinstance(r, Artifact)]
    if rows:
        print(_table(rows, ["run", "created", "from", "verdict", "recipe", "source model", "result size",
                            "result sha256"], right=(0, 6)))
        print("result size and sha256 describe the optimized model file each run wrote "
              f"({PROG} history --json has the paths).")
    else:
        print("No runs yet.")
    for r in runs:
        if not isinstance(r, Artifact):
            print(f"run {r.id}  {r.created_at.replace('T', ' ')[:19]}  unreadable: {r.reason}")
    for b in benches:
        when = b.created_at.replace("T", " ")[:19]
        if not isinstance(b, BenchmarkRecord):
            print(f"benchmark {b.id}  {when}  unreadable: {b.reason}")
            continue
        names = b.names()
        timed = ", ".join(f"{names.get(s.variant, s.variant)}@{s.batch_size} p50 {s.p50:.3f} ms" for s in b.summaries)
        print(f"benchmark {b.id}  {when}  {b.origin or '?'}  {timed}")
    return 0


def _source_label(artifact) -> str:
    """How ``history`` names a run's source model: the bundled sample's name, else the file's name (with its
    folder's when the file is a generic ``model.onnx``)."""
    spec = getattr(artifact, "spec", None)
    if spec is not None and spec.sample:
        return spec.sample
    path = Path(artifact.source_path)
    return f"{path.parent.name}/{path.name}" if path.name == "model.onnx" and path.parent.name else path.name


def cmd_samples(ns: argparse.Namespace) -> int:
    """`ortlab samples`: list the bundled sample models."""
    from ortlab.data.samples import list_samples

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
        print(f"{s.name:<18} {s.title}\n{'':<18} {_display_path(s.model_path)}")
    example = next((s.name for s in found if s.name == "digits_cnn"), found[0].name)
    print(f"\nGive a sample's name wherever a model is asked for, from any folder (e.g. {PROG} inspect {example}); "
          "its calibration and evaluation images are then the default data.")
    return 0


# -- entry point -------------------------------------------------------------------------------------------


def _start_service() -> None:
    """Before a command that uses the workspace: remove what killed runs left, and say once on stderr when
    the history database had to be rebuilt."""
    from ortlab.runs import service

    for notice in service.startup():
        print(f"{PROG}: warning: {one_line(notice)}", file=sys.stderr)


def _pipe_closed() -> int:
    """The reader of stdout went away (``ortlab history | head -2``): stop quietly with status 0, as the reader got
    all it asked for (141, "killed by SIGPIPE", would fail a ``set -o pipefail`` script for no fault). Stdout is
    pointed at /dev/null so that Python's flush at exit does not print "Exception ignored … BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # an in-process caller's stdout without a file descriptor
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 usage)."""
    from ortlab.runtime import providers

    parser = build_parser()
    os.umask(0o077)  # the workspace and every result ortlab writes are private to the user (0700/0600)
    saved_libraries = os.environ.get(providers.CUSTOM_OPS_ENV)
    try:
        ns = parser.parse_args(argv)
        if ns.custom_op_library:
            providers.set_custom_op_libraries([_existing_file(p, "Custom-op library") for p in ns.custom_op_library])
        if ns.command in ("optimize", "run", "bench", "history"):
            _start_service()
        code = int(ns.func(ns) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except (UsageError, RecipeError, OutputError) as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{PROG}: error: file not found: {exc.filename or one_line(exc)}", file=sys.stderr)
        return 2
    except OrtlabError as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("ORTLAB_DEBUG"):
            raise
        print(f"{PROG}: error: unexpected {type(exc).__name__}: {one_line(exc)} "
              f"(set ORTLAB_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    finally:  # in-process callers (tests, notebooks) get their environment back
        if saved_libraries is None:
            os.environ.pop(providers.CUSTOM_OPS_ENV, None)
        else:
            os.environ[providers.CUSTOM_OPS_ENV] = saved_libraries


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
