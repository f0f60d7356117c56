"""``ortlab optimize`` and ``ortlab run``: a recipe applied to a model in a run-service child."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ortlab.api import ModelInfo
from ortlab.api import PreprocessConfig, Recipe
from ortlab.core.errors import RecipeError
from ortlab.api import UsageError
from ortlab.api import VerdictPolicy
from ortlab.cli.inputs import (
    add_input_arguments, add_input_value_argument, check_input_names, parse_input_values, parse_shapes,
)
from ortlab.cli.live import reporter
from ortlab.cli.common import (
    new_folder_note, say, DATA_SUFFIXES, PROG, add_data_arguments, add_output_flags, add_preprocess_arguments,
    add_recipe_arguments, add_verdict_arguments, checked_policy, data_ref, existing_file, exit_for, find_sample,
    model_file, preprocess_from_flags, TextFlags,
)
from ortlab.cli.out_path import check_out_path
from ortlab.cli.render import artifact_text, print_json
from ortlab.api import RunSpec
from ortlab.api import DataRef
from ortlab import api
from ortlab.cli.inputs import read_model
from ortlab.core.layout import ARTIFACT_FILE, qdq_path


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("optimize", help="Apply a recipe (precision, target, optimization level, quantization).")
    p.add_argument("model", metavar="MODEL", help="The source .onnx file (never modified).")
    p.add_argument("out", metavar="OUT", help="The result: a .onnx file, or a folder that receives model.onnx, "
                                              "recipe.json and artifact.json.")
    add_recipe_arguments(p)
    add_data_arguments(p)
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_verdict_arguments(p)
    add_timing_arguments(p)
    add_output_flags(p)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("run", help="Apply a saved recipe (JSON from the app or Recipe.to_json()).")
    p.add_argument("recipe", metavar="RECIPE.json")
    p.add_argument("model", metavar="MODEL", help="An .onnx file or a bundled sample's name.")
    add_data_arguments(p)
    p.add_argument("--out", metavar="DIR", help="Artifact folder (default: a new folder in the workspace, "
                                                "$ORTLAB_HOME or ~/.ortlab, recorded in its history).")
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_verdict_arguments(p)
    add_timing_arguments(p)
    add_output_flags(p)
    p.set_defaults(func=cmd_run)


def add_timing_arguments(p: argparse.ArgumentParser) -> None:
    """``--no-timing`` and ``--timing-s``: the result timed against its source after the verdict."""
    g = p.add_argument_group("speed against the source (after the verdict)")
    g.add_argument("--no-timing", action="store_true",
                   help="Do not time the result against its source. By default both are timed interleaved at batch "
                        "1 after the verdict, and a result slower than its source is named so.")
    g.add_argument("--timing-s", type=float, default=None, metavar="SECONDS",
                   help="Seconds of that timing in all, shared by the two models (default: $ORTLAB_SPEED_CHECK_S, "
                        "else 3).")
    add_input_value_argument(g)


def recipe_from_args(ns: argparse.Namespace) -> Recipe:
    """The Recipe that the parsed ``optimize`` flags describe; for int8 the settings not given follow this CPU's
    advice (``api.recipes.int8_advice``: reduce-range on x86 without VNNI; the run's notes say so), as in the app."""
    recipe = api.recipes.config_from_args(Recipe, ns)
    if recipe.precision != api.Precision.INT8:
        return recipe
    return recipe.with_int8_flavour(api.recipes.int8_advice(), api.recipes.given_values(Recipe, ns))


def speed_check_from_args(ns: argparse.Namespace) -> api.SpeedCheck:
    """The speed check ``--no-timing``/``--timing-s``/``--input-value`` ask for (else the default)."""
    values = tuple(parse_input_values(ns.input_value).items())
    if ns.no_timing:
        return api.SpeedCheck(enabled=False)
    if ns.timing_s is None:
        return replace(api.benchmarks.default_speed_check(), values=values)
    if not ns.timing_s > 0:
        raise UsageError(f"--timing-s must be a positive number of seconds, not {ns.timing_s:g} (or give --no-timing).")
    return api.SpeedCheck(seconds=float(ns.timing_s), values=values)


def run_spec(src: Path, recipe: Recipe, ns: argparse.Namespace, calibration: str | None,
             evaluation: str | None, info: ModelInfo | None = None):
    """The RunSpec of a CLI run: data references (checked to exist) and the preprocessing policy (``info``: the
    model's facts, when already read)."""
    sample = find_sample(src, info)
    for names, flag in ((recipe.quant.nodes_to_exclude, "--exclude-nodes"),
                        (recipe.quant.int16_weight_nodes, "--int16-weight-nodes")):
        for warning in api.models.check_node_names(src, names, flag):
            print(f"{PROG}: warning: {warning}", file=sys.stderr)
    shapes, values = parse_shapes(ns.shape), parse_input_values(ns.input_value)
    check_input_names([src], {}, values)
    text = TextFlags(ns.tokenizer, ns.seq_len)
    cal = data_ref(calibration, text, sample_set="calibration")
    ev = data_ref(evaluation, text, count=ns.verify_samples, seed=recipe.quant.seed)
    if cal is None and ev is None and sample is not None and sample.calibration_dir is not None:
        cal = DataRef(sample=sample.name, set="calibration")
        if sample.evaluation_dir is not None:
            ev = DataRef(sample=sample.name, set="evaluation", count=ns.verify_samples, seed=recipe.quant.seed)
        print(f"{PROG}: using sample {sample.name}'s calibration"
              + (" and evaluation" if ev is not None else "") + " images (give --calibration/--eval for others)",
              file=sys.stderr)
    # tensors and text need no image preprocessing
    images = any(ref is not None and (ref.sample is not None or (
        ref.path is not None and Path(ref.path).suffix.lower() not in DATA_SUFFIXES[1:])) for ref in (cal, ev))
    pre = (preprocess_from_flags(src, sample, api.recipes.given_values(PreprocessConfig, ns), shapes, ns.preset, info=info)
           if images else None)
    policy = checked_policy(api.recipes.config_from_args(VerdictPolicy, ns))
    return RunSpec(str(src.resolve()), recipe, sample.name if sample is not None else None, cal, ev, pre,
                   ns.verify_samples, None if policy == VerdictPolicy() else policy, shapes=shapes, values=values)


def cmd_optimize(ns: argparse.Namespace) -> int:
    """`ortlab optimize`: apply a recipe to one model in a child process, write the result, record it."""

    recipe = recipe_from_args(ns)
    src = model_file(ns.model)
    out = Path(ns.out).expanduser()
    check_out_path(ns.out)  # before any work
    info = read_model(src)  # the one read of the model for this run (its sha256 hashes the whole file)
    spec = run_spec(src, recipe, ns, ns.calibration, ns.eval_data, info)
    as_dir = out.is_dir() or out.suffix.lower() != ".onnx"
    replaced = out.exists()
    created = new_folder_note(out, as_dir)
    handle = api.recipes.start_recipe(spec, out, origin="cli", info=info, speed_check=speed_check_from_args(ns))
    say(created)  # the recipe is valid and the run started
    artifact = handle.follow(reporter(ns))
    if replaced:
        print(f"{PROG}: Replaced the earlier result at {out}", file=sys.stderr)
    if ns.json:
        print_json(artifact.to_dict())
    else:
        print(artifact_text(artifact, artifact.model_path))
        qdq = qdq_path(artifact.model_path)
        if as_dir:
            print(f"  files      {out / ARTIFACT_FILE}, recipe.json" + (f", {qdq.name}" if qdq.is_file() else ""))
        elif qdq.is_file():
            print(f"  files      {out}, {out.parent / qdq.name} (the QDQ graph, for ortlab analyze)")
        print(f"  history    run {artifact.run_id}" if artifact.run_id is not None else
              "  history    not recorded yet (see the note above)")
    return exit_for(artifact.verdict, ns.fail_on)


def cmd_run(ns: argparse.Namespace) -> int:
    """`ortlab run`: apply a saved recipe JSON to a model (in a child process), recorded in the workspace."""

    recipe_path = existing_file(ns.recipe, "Recipe")
    try:
        text = recipe_path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"{ns.recipe} is not a text file; give the recipe JSON.") from None
    recipe = Recipe.from_json(text)
    src = model_file(ns.model)
    if ns.out:
        check_out_path(ns.out, flag="--out")  # before any work
    info = read_model(src)
    spec = run_spec(src, recipe, ns, ns.calibration, ns.eval_data, info)
    workspace = api.workspaces.open_workspace()
    out = Path(ns.out).expanduser() if ns.out else None
    created = new_folder_note(out, out.is_dir() or out.suffix.lower() != ".onnx") if out is not None else ""
    handle = api.recipes.start_recipe(spec, out, workspace=workspace, origin="cli", info=info,
                                      speed_check=speed_check_from_args(ns))
    say(created)  # the recipe is valid and the run started
    artifact = handle.follow(reporter(ns))
    if ns.json:
        print_json(artifact.to_dict())
    else:
        print(artifact_text(artifact, artifact.model_path))
        print(f"  history    run {artifact.run_id} in {workspace.db_path}" if artifact.run_id is not None else
              "  history    not recorded yet (see the note above)")
    return exit_for(artifact.verdict, ns.fail_on)
