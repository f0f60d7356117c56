"""The ``ortlab analyze`` and ``ortlab tune`` commands (registered by :mod:`ortlab.cli.main`)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ortlab.api import UsageError
from ortlab.api import Target
from ortlab.cli.inputs import add_input_arguments, check_input_names, parse_input_values, parse_shapes, shapes_text
from ortlab.cli.live import reporter
from ortlab.cli.common import (
    add_output_flags, add_preprocess_arguments, data_ref, evaluation_data, find_sample, load_dataset, model_file,
    model_sample, preprocess_from_flags, new_folder_note, say, TextFlags,
)
from ortlab.cli.out_path import check_out_path
from ortlab.cli.render import print_json, table
from ortlab import api
from ortlab.cli.inputs import read_model
from ortlab.api import DataRef
from ortlab.api import TuneSettings
from ortlab.api import PreprocessConfig, VerdictPolicy


def add_command(sub) -> None:
    """Add ``analyze`` and ``tune`` to the ``ortlab`` sub-command parsers."""

    p = sub.add_parser("analyze", help="Per-node error of a quantized model against its fp32 reference "
                                       "(worst nodes first).")
    p.add_argument("reference", metavar="REF", help="The fp32 reference .onnx, or a bundled sample's name.")
    p.add_argument("candidate", metavar="CANDIDATE", help="The quantized model: an artifact folder (its "
                   "model.qdq.onnx is used), a model.onnx beside a model.qdq.onnx, or any .onnx.")
    p.add_argument("--data", metavar="DIR", help="Evaluation data: images folder, .zip, .npy/.npz, a .txt file (one "
                   "example per line; with --tokenizer), or a bundled sample's name (default: the evaluation images "
                   "of the sample REF is, or was made from).")
    p.add_argument("--n", type=int, default=32, help="Samples to run (default: 32).")
    p.add_argument("--top", type=int, default=15, help="How many nodes to print (default: 15).")
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_output_flags(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("tune", help="Search recipes within a time budget; recommend the fastest (or smallest) "
                                    "one the accuracy policy accepts.",
                       epilog=TUNE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="The source .onnx (never modified), a bundled sample's name, or a "
                                                  "folder that ortlab optimize wrote.")
    p.add_argument("--calibration", "--data", metavar="DIR", dest="data",
                   help="Calibration data, as for optimize (default: a bundled sample's "
                   "calibration set). Without --eval a third of it is held out for evaluation.")
    p.add_argument("--eval", metavar="DIR", dest="eval_data", help="Evaluation data, never used to calibrate "
                                                                  "(default: the sample's evaluation set).")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1], metavar="N",
                   help="Batch sizes each trial is timed at (default: 1).")
    p.add_argument("--budget", default=None, metavar="SECONDS[cpu]",
                   help="When the search stops starting trials: seconds of wall time (600, or 600s), or seconds of "
                        "CPU time used by tune and every process it starts (300cpu: the same work on a busy machine "
                        "as on a quiet one; no wall-time limit then). --max-trials caps the trials too; the first "
                        f"limit reached ends the search (default: {api.tuning.DEFAULT_CPU_BUDGET_S:g}cpu, at most "
                        f"{api.tuning.DEFAULT_WALL_CAP_S:g} s of wall time; with --ray, "
                        f"{api.tuning.DEFAULT_CPU_BUDGET_S:g} s of wall time).")
    p.add_argument("--objective", choices=("latency", "size"), default="latency",
                   help="Recommend the fastest accepted recipe, or the smallest (default: latency).")
    p.add_argument("--target", choices=("cpu", "gpu"), default="cpu",
                   help="Tune for cpu or gpu (default: cpu).")
    p.add_argument("--min-sqnr-db", type=float, default=None,
                   help="This search's SQNR bar, on top of verdict ok. Default: 20 dB for a model whose outputs have "
                        "no task measure of ours (plain tensors); a model with one (detections, classes, strings, "
                        "embeddings) is held to its task measure instead (--min-task). Given, it holds for every "
                        "model: the task's SQNR (a detector's score channels, else the worst output). It never "
                        "changes a verdict: a trial under the bar is 'ok, below this search's bar'.")
    p.add_argument("--min-task", type=float, default=None, metavar="SHARE",
                   help="The task's own measure a trial must reach, as a share: detection F1 vs fp32, strings kept, "
                        "no confident flip, nearest-neighbour agreement (e.g. 0.97). Default: the verdict's own "
                        "bars (ok).")
    p.add_argument("--margin", type=float, default=0.1, help="Classifiers: a top-1 flip where the fp32 softmax "
                   "margin is at least this counts against a recipe (default: 0.1).")
    p.add_argument("--exclusion-steps", type=int, default=6,
                   help="Keep-in-float trials at most per stage (the screened accuracy-controlled stage; the greedy "
                        "one of a dynamic trial) (default: 6).")
    p.add_argument("--bench-seconds", type=float, default=1.0, help="Timing per trial and batch size (default: 1).")
    p.add_argument("--max-trials", type=int, default=None, metavar="N", help="Stop after this many trials.")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="Run the trials on a Ray cluster: its head's HOST:PORT, or 'auto' (needs ortlab[ray]).")
    p.add_argument("--timing-resource", metavar="NAME", default=None,
                   help="With --ray: time only on a node carrying this custom Ray resource (the target machine).")
    p.add_argument("--verify-samples", type=int, default=None,
                   help="Evaluation samples per trial (default: all the evaluation data given; the search decides "
                        "on two thirds of their evidence and states its pick's measure on the third it did not choose "
                        "on, or on 100 reference detections where the data holds 200 to 300).")
    p.add_argument("--input-value", action="append", default=[], metavar="NAME=VALUE",
                   help="The value of a control input (an integer scalar such as a VAD's sample rate sr=16000) for "
                        "timing each trial, which random data never makes up; repeatable (as for bench).")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="Receives the recommended model.onnx and its recipe.json (or closest/model.onnx when no "
                        "trial meets the bar), trials.json and each trial's folder.")
    add_input_arguments(p)
    add_preprocess_arguments(p)
    add_output_flags(p)
    p.set_defaults(func=cmd_tune)


EXIT_NO_RECOMMENDATION = 4
TUNE_EPILOG = f"""Exit status: 0 a recipe meets the verdict (ok) and the bar: OUT/model.onnx is the recommendation;
{EXIT_NO_RECOMMENDATION} no trial meets them: the closest trial the verdict does not call broken is written as
OUT/closest/model.onnx (nothing is written when every trial is broken); 1 no trial finished; 2 bad usage.
Speed-ups are the median of per-round latency ratios, timed interleaved with the fp32 source, with a 95% interval;
"faster" only when that interval lies above 1."""


def parse_budget(text: str) -> tuple[float, float | None]:
    """``--budget``: (wall seconds, CPU seconds or None) from ``600``, ``600s`` (wall time) or ``300cpu`` (CPU time,
    no wall-time limit); UsageError for anything else."""
    raw = str(text).strip().lower().replace(" ", "")
    cpu = raw.endswith("cpu")
    number = raw[:-3] if cpu else raw[:-1] if raw.endswith("s") else raw
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if math.isnan(value) or math.isinf(value):
        raise UsageError(f"--budget must be a number of seconds: 600 (or 600s) of wall time, or 300cpu of CPU time; "
                         f"not {text!r}.")
    if value <= 0:
        raise UsageError("--budget must be positive.")
    return (math.inf, value) if cpu else (value, None)


def batch_sizes(values) -> tuple[int, ...]:
    """The distinct ``--batch-sizes`` in order (UsageError for one below 1)."""
    if any(v < 1 for v in values):
        raise UsageError("--batch-sizes must be at least 1.")
    return tuple(dict.fromkeys(values)) or (1,)


def speed_cell(t) -> str:
    """A trial's speed-up with its 95% interval (``1.84× (1.71–1.95)``; at several batch sizes their geometric mean,
    the intervals in the summary's speed line), ``noisy`` when it is, or "-" when not timed."""
    if not t.speedup:
        return "-"
    if len(t.speed) != 1 or not t.speed[0].paired:
        return f"{t.speedup:.2f}× (mean of b{'/'.join(str(sp.batch_size) for sp in t.speed)})" if t.speed else "-"
    sp = t.speed[0]
    lo, hi = sp.speedup_range
    return f"{sp.speedup:.2f}× ({lo:.2f}–{hi:.2f})" + (" noisy" if sp.noisy else "")


def trial_line(t) -> str:
    """One row of the trials' table: the trial, its verdict, quality (the task measure with its 95% interval and the
    evidence it rests on: the samples the search chooses on, fewer than the verdict's), speed-up with its interval
    (↻: re-timed at the end as a finalist), size and Pareto star."""
    q = t.quality()
    task = f"{q.measure} {q.value:.0%}" if q.value is not None else ""
    if q.value is not None and t.task_low is not None and t.task_high is not None:  # with its 95% interval
        task = f"{q.measure} {q.value:.3f} ({t.task_low:.3f}–{t.task_high:.3f})"
        if t.evidence:  # "40 strings in 40 samples" → "on 40 strings"
            task += f" on {t.evidence.split(' in ')[0]}"
    speed = speed_cell(t) + (" ↻" if t.retimed else "")
    return (f"#{t.index:<3} {t.label:<34} {(t.level or 'failed'):<8} {'bar ' if t.accepted else '    '}"
            f"{q.sqnr_what} {_fmt(q.sqnr_db):>5} dB  {task:<22} {speed:>20}  {(t.size_bytes or 0) / 1e6:6.2f} MB"
            f"  {'*' if t.pareto else ' '} {t.note or ('' if t.status == 'done' else t.verdict)}")


def _fmt(x: float | None, spec: str = ".1f") -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else format(x, spec)


def cmd_analyze(ns: argparse.Namespace) -> int:
    """`ortlab analyze`: rank a quantized model's nodes by the error they add."""

    ref = model_file(ns.reference, "Reference model")
    cand = model_file(ns.candidate, "Candidate model")
    if ns.n < 1:
        raise UsageError("--n must be at least 1.")
    sample = model_sample(ref) or model_sample(cand)
    dataset = evaluation_data(ns.data, TextFlags(ns.tokenizer, ns.seq_len), sample, "analyze")
    shapes = parse_shapes(ns.shape)
    pre = (preprocess_from_flags(ref, sample, api.recipes.given_values(PreprocessConfig, ns), shapes, ns.preset)
           if dataset.kind == "images" else None)
    result = api.checks.analyze(ref, cand, dataset, pre, n=ns.n, reporter=reporter(ns), shapes=shapes)
    if ns.json:
        print_json(result)
        return 0
    print(f"{result.candidate} vs {ref.name}: {len(result.nodes)} quantized nodes on {result.n_samples} samples "
          f"in {result.seconds:.1f} s" + ("" if result.qdq else " (no QDQ nodes: accumulated error only)"))
    print(f"inputs: {shapes_text(result.input_shapes)}")
    for output, groups in result.groups.items():
        print(f"output groups of {output}: {groups}; nodes with that layout rank by their worst group")
    shown = result.worst(ns.top)
    grouped = bool(result.groups) and any(e.group for e in shown)  # no column of dashes when no row has a group
    rows = [[str(e.rank), e.name, e.op_type, _fmt(e.local_sqnr_db), _fmt(e.sqnr_db), _fmt(e.cosine, ".4f"),
             _fmt(e.max_abs, ".3g")] + ([f"{e.group} {_fmt(e.score_db)}" if e.group else "-"] if grouped else [])
            for e in shown]
    print(table(rows, ["#", "node", "op", "local dB", "accum. dB", "cosine", "max |Δ|"]
                 + (["worst group dB"] if grouped else [])))
    if result.groups and not grouped:
        print("worst group dB: none of these nodes has the layout of the output's groups (only such nodes get one).")
    print("local: the node's quantized form on fp32 inputs; accum.: the candidate's tensor vs fp32.")
    for e in result.worst(ns.top):
        if (note := result.unnamed_note(e)) is not None:
            print(note)
    if result.unmatched:
        print(f"not in the reference: {', '.join(result.unmatched[:8])}" + (" …" if len(result.unmatched) > 8 else ""))
    return 0


def _split(path: str, out: Path, labels, text: TextFlags) -> tuple[str, str]:
    """Calibration and evaluation folders written under ``out/data`` (``data.split_dataset``)."""

    ds = load_dataset(path, labels, text, sample_set="calibration")
    cal, ev = api.data.split_dataset(ds)
    if ev is cal:
        raise UsageError("--data needs at least 3 samples to hold some out for evaluation; or give --eval.")
    return (str(api.data.write_dataset(cal, out / "data" / "calibration")),
            str(api.data.write_dataset(ev, out / "data" / "evaluation")))


def search_policy(ns: argparse.Namespace):
    """The search's accuracy policy: optimize's verdict (with ``--margin``) plus this search's bar, which never
    relabels the verdict; UsageError for a ``--min-task`` that is not a share."""
    if ns.min_task is not None and not 0.0 < ns.min_task <= 1.0:
        raise UsageError(f"--min-task is a share between 0 and 1 (e.g. 0.97 for an F1 of 97%), not {ns.min_task:g}.")
    return api.tuning.verdict_policy(VerdictPolicy(margin=ns.margin), ns.min_sqnr_db, ns.min_task)


def cmd_tune(ns: argparse.Namespace) -> int:
    """`ortlab tune`: search recipes in child processes, print each trial, recommend one."""

    src = model_file(ns.model)
    check_out_path(ns.out, as_file=False, flag="--out")  # before any work
    out = Path(ns.out).expanduser().resolve()
    budget_s, budget_cpu_s = api.tuning.default_budget(bool(ns.ray)) if ns.budget is None else parse_budget(ns.budget)
    if ns.max_trials is not None and ns.max_trials < 1:
        raise UsageError("--max-trials must be at least 1.")
    if ns.timing_resource and not ns.ray:
        raise UsageError("--timing-resource names a node of a Ray cluster: give --ray ADDRESS too.")
    if ns.ray and budget_cpu_s is not None:
        raise UsageError("A CPU budget counts this machine's processes, not a cluster's: with --ray give --budget "
                         "in seconds.")
    created = new_folder_note(Path(ns.out).expanduser(), True)
    sample = find_sample(src)
    labels = sample.labels if sample is not None and sample.labels else None
    cal_path, ev_path = ns.data, ns.eval_data
    text = TextFlags(ns.tokenizer, ns.seq_len)
    if cal_path is not None and ev_path is None and (sample is None or sample.evaluation_dir is None):
        cal_path, ev_path = _split(cal_path, out, labels, text)
    cal: DataRef | None
    if cal_path is not None:
        cal = data_ref(cal_path, text, sample_set="calibration")
    elif sample is not None and sample.calibration_dir is not None:
        cal = DataRef(sample=sample.name, set="calibration")
    else:
        cal = None
    if ev_path is not None:
        ev = data_ref(ev_path, text, count=ns.verify_samples)
    elif sample is not None and sample.evaluation_dir is not None:
        ev = DataRef(sample=sample.name, set="evaluation", count=ns.verify_samples)
    else:
        raise UsageError("Give --data (and ideally --eval): tuning needs data to judge each recipe.")
    shapes, values = parse_shapes(ns.shape), parse_input_values(ns.input_value)
    pre = None
    if ns.data is not None or ns.eval_data is not None:
        pre = preprocess_from_flags(src, sample, api.recipes.given_values(PreprocessConfig, ns), shapes, ns.preset)
    check_input_names([Path(src)], {}, values)
    if ev.path is not None and ev.tokenizer is not None:  # text: each trial is timed at the data's sequence length
        _, specs = api.data.resolve_feed(read_model(src).inputs, None, load_dataset(ev.path, None, text), shapes)
        shapes = {s.name: [d.value for d in s.dims if d.value is not None] for s in specs if s.resolved} | shapes
    settings = TuneSettings(budget_s=budget_s, budget_cpu_s=budget_cpu_s, objective=ns.objective, target=Target(ns.target),
                            batch_sizes=batch_sizes(ns.batch_sizes), bench_s=ns.bench_seconds,
                            exclusion_steps=max(0, ns.exclusion_steps), verify_samples=ns.verify_samples or 0,
                            max_trials=ns.max_trials, shapes=shapes, ray=ns.ray, timing_resource=ns.timing_resource,
                            values=values)
    policy = search_policy(ns)
    job = api.tuning.start_tune(src, cal, ev, settings, policy, preprocess=pre, sample=sample.name if sample is not None else None,
                                workspace=api.workspaces.open_workspace(), out_dir=out, background=False)
    say(created)  # the search is set up
    trials = job.follow()
    try:
        for t in trials:
            if not ns.json:
                print(trial_line(t), flush=True)
    except KeyboardInterrupt:
        job.cancel()
        trials.close()
        print("ortlab: interrupted; the result covers the finished trials.", file=sys.stderr)
    r = job.result
    assert r is not None
    code = 0 if r.accepted else (1 if not any(t.status == "done" for t in r.trials) else EXIT_NO_RECOMMENDATION)
    if ns.json:
        print_json(r)
        return code
    _print_result(r, budget_cpu_s if budget_cpu_s is not None else budget_s, out, cpu=budget_cpu_s is not None)
    return code


def _print_result(r, budget_s: float, out: Path, cpu: bool = False) -> None:
    """The search's outcome under the trials' table: the recommendation, its speed and verdict (or the budget to
    give when this one was too short), the policy, the hardware, the files and the notes."""
    retimed = [t for t in r.trials if t.retimed]
    if retimed:  # the rows above were printed as the trials finished, before the finalists' longer timing
        print("\nre-timed at the end (↻, twice as long, interleaved with the source); these figures replace the rows "
              "above and are the ones the recommendation and trials.json use:")
        for t in retimed:
            print(trial_line(t))
    print(f"\n{r.sentence}\n  {r.cli_line}" if r.cli_line else f"\n{r.sentence}")
    if r.best is not None and r.best.speed:
        print(f"  speed      {r.best.speed_text()} (median of the rounds' ratios, timed interleaved with the source"
              + (", re-timed at the end)" if r.best.retimed else ")"))
    if r.budget_hint_s is not None:
        unit = "cpu" if cpu else ""
        print(f"  budget     {budget_s:g} {'CPU ' if cpu else ''}s was too short for a usable trial: give --budget "
              f"{r.budget_hint_s:g}{unit} or more" + ("" if cpu else f" (or --budget {r.budget_hint_s:g}cpu: CPU "
                                                     "seconds, which other processes on a busy machine do not use up)"))
    elif r.best is None:
        done = [t for t in r.trials if t.status == "done"]
        print("  verdict    " + ("no trial finished" if not done else "every finished trial is broken"
                                 if all(t.broken for t in done) else "nothing recommended (see the sentence above)"))
    else:
        print(f"  verdict    {r.best.verdict}")
        if r.best.edge and not r.claim_settle:  # the verdict's own interval, and the samples that would settle it
            print(f"  edge       {r.best.edge}")
    if r.best is not None and r.best.evidence:
        print(f"  evidence   {r.best.task_text()} (chosen on these)" + (f"; {r.chosen_on}" if r.chosen_on else ""))
    if r.best is not None and r.best.vs_default:
        print(f"  vs default {r.best.vs_default}")
    print(f"  bought     {r.bought()} (budget: {budget_s:g} {'CPU ' if cpu else ''}s)")
    print(f"  policy     {r.policy}")
    print(f"  hardware   {r.hardware}\n  files      "
          + (f"{r.written}, its recipe.json, " if r.written else "no model written, ")
          + f"{out / 'trials.json'} (* = on the Pareto front)")
    for note in r.notes:
        print(f"  note       {note}")
