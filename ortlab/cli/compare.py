"""``ortlab compare``: a candidate model's outputs and accuracy against a reference, with its verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

from ortlab.api import UsageError
from ortlab.api import PreprocessConfig, Target, VerdictPolicy
from ortlab.cli.inputs import add_input_arguments, add_input_value_argument, parse_input_values, parse_shapes, shapes_text
from ortlab.cli.live import reporter
from ortlab.cli.common import (
    add_output_flags, add_preprocess_arguments, add_verdict_arguments, evaluation_data, exit_for, model_file,
    checked_policy, model_sample, preprocess_from_flags, values, TextFlags,
)
from ortlab.cli.render import print_json, table, task_lines, verdict_block
from ortlab import api
from ortlab.cli.inputs import read_model
from ortlab.api import Artifact, BenchVariant, SettledSpeed
from ortlab.core.serial import to_plain


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("compare", help="Compare a candidate model's outputs and accuracy with a reference.")
    p.add_argument("reference", metavar="REF", help="The reference .onnx (usually the fp32 source), a bundled "
                                                    "sample's name, or a folder that ortlab optimize wrote.")
    p.add_argument("candidate", metavar="CANDIDATE", help="The optimized .onnx, or the folder ortlab optimize "
                                                          "wrote.")
    p.add_argument("--data", metavar="DIR",
                   help="Images folder (class sub-folders are labels), .zip of images, .npy/.npz tensors, a .txt "
                        "file (one example per line; with --tokenizer), or a bundled sample's name (default: the "
                        "evaluation images of the sample REF is, or was made from).")
    p.add_argument("--n", type=int, help="Use at most N samples, stratified by class (default: all).")
    p.add_argument("--target", choices=values(Target), default=Target.CPU.value, help="Run on cpu or gpu (default: cpu).")
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_verdict_arguments(p)
    p.add_argument("--speed-cap", type=float, metavar="S",
                   help=f"Also time the pair at batch 1, in turn, until the speed-up's 95%% interval is within "
                        f"±{api.benchmarks.SETTLE_TARGET * 100:.0f}%% or S seconds have passed: "
                        f"{api.benchmarks.SETTLE_CAP_S:g} unless given, no timing "
                        f"when $ORTLAB_SPEED_CHECK_S is 0. 0: no timing.")
    add_input_value_argument(p)
    add_output_flags(p)
    p.set_defaults(func=cmd_compare)


def time_pair_settled(ref: Path, cand: Path, ns: argparse.Namespace, shapes, data_values=None) -> SettledSpeed | None:
    """The pair timed until settled (the call Compare's speed cards make), or None when ``--speed-cap`` (or its
    default) says not to time. A control input (a VAD's ``sr``) is timed at ``--input-value``, else at the value
    the data holds (``data_values``)."""
    default_cap = api.benchmarks.SETTLE_CAP_S if api.benchmarks.default_speed_check().enabled else 0.0
    cap = ns.speed_cap if ns.speed_cap is not None else default_cap
    if cap < 0:
        raise UsageError("--speed-cap must be 0 (no timing) or a number of seconds.")
    if cap == 0:
        return None
    workspace = api.workspaces.open_workspace()
    run_ids = {Path(r.model_path).resolve(): r.run_id for r in reversed(workspace.history().list())
               if isinstance(r, Artifact)}
    ref_v, cand_v = (BenchVariant(k, p.name, str(p), run_ids.get(p.resolve())) for k, p in (("reference", ref),
                                                                                            ("candidate", cand)))
    handle = api.benchmarks.start_pair_timing(ref_v, cand_v, workspace=workspace, origin="cli", shapes=shapes, cap_s=cap,
                                              values={**(data_values or {}), **parse_input_values(ns.input_value)} or None)
    handle.follow(reporter(ns))
    return handle.settled()


def cmd_compare(ns: argparse.Namespace) -> int:
    """`ortlab compare`: output error and accuracy of a candidate against a reference on the same data."""

    policy = checked_policy(api.recipes.config_from_args(VerdictPolicy, ns))
    ref = model_file(ns.reference, "Reference model")
    cand = model_file(ns.candidate, "Candidate model")
    if ns.n is not None and ns.n < 1:
        raise UsageError("--n must be at least 1.")
    sample = model_sample(ref) or model_sample(cand)
    shapes = parse_shapes(ns.shape)
    dataset = evaluation_data(ns.data, TextFlags(ns.tokenizer, ns.seq_len), sample, "compare")
    if ns.n is not None and ns.n < len(dataset):
        dataset = api.data.stratified_sample(dataset, ns.n)
    pre = (preprocess_from_flags(ref, sample, api.recipes.given_values(PreprocessConfig, ns), shapes, ns.preset)
           if dataset.kind == "images" else None)
    specs = None
    if shapes or dataset.kind != "images":

        pre, specs = api.data.resolve_feed(read_model(ref).inputs, pre, dataset, shapes, manifest=sample)
    report = api.checks.evaluate(ref, cand, dataset, pre, target=Target(ns.target), reporter=reporter(ns), policy=policy,
                                 specs=specs)
    verdict = api.checks.judge(report, policy)
    # timed with the shapes the evaluation fed (a text's --seq-len, an open-size detector's image size), --shape first
    held = api.data.control_values(dataset, read_model(ref).inputs) if dataset.kind == "tensors" else {}
    speed = time_pair_settled(ref, cand, ns, {**{k: list(v) for k, v in report.input_shapes.items()}, **shapes}, held)
    if ns.json:
        extra = {"speed": {**to_plain(speed), "verdict": speed.verdict, "text": speed.text()}} if speed else {}
        print_json({"verdict": verdict, **to_plain(report), **extra})
        return exit_for(verdict, ns.fail_on)
    print("\n".join(verdict_block(verdict)))
    print(f"{cand.name} vs {ref.name} on {report.n_samples} samples"
          + (" (RANDOM DATA: accuracy is meaningless)" if report.random_data else ""))
    rows = [[o.name, f"{o.max_abs:.4g}", f"{o.mean_abs:.4g}", f"{o.cosine:.6f}", f"{o.sqnr_db:.1f}"]
            for o in report.outputs]
    print(table(rows, ["output", "max |Δ|", "mean |Δ|", "cosine", "SQNR dB"]))
    if report.input_shapes:
        print(f"inputs: {shapes_text(report.input_shapes)}")
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
        for text in task_lines(report, verdict):
            print(f"  {text}")
    if speed is not None:
        print(f"{'speed at batch 1':<28} {speed.text()}; timed in turn, until settled (ortlab bench for more batch "
              "sizes)")
    return exit_for(verdict, ns.fail_on)
