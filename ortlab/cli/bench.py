"""``ortlab bench``: time one or more models (latency percentiles, throughput, memory)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ortlab.api import UsageError
from ortlab.api import BenchConfig
from ortlab.cli.inputs import add_input_arguments, check_input_names, parse_input_values, parse_shapes, shapes_text
from ortlab.cli.live import reporter
from ortlab.cli.common import add_output_flags, model_file, model_sample, set_default_help
from ortlab.cli.render import print_json, table
from ortlab import api
from ortlab.api import Artifact
from ortlab.api import BenchVariant


BENCH_FLAGS_EXCLUDED = ("profile",)  # bench's --profile DIR both names the folder and turns profiling on


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("bench", help="Time one or more models (latency percentiles, throughput, memory).")
    p.add_argument("models", metavar="MODEL", nargs="+", help="One or more .onnx files, bundled samples' names, "
                                                                 "or folders that ortlab optimize wrote.")
    api.recipes.add_config_arguments(p, BenchConfig, title="timing", exclude=BENCH_FLAGS_EXCLUDED)
    set_default_help(p, "duration_s", f"{api.benchmarks.DEFAULT_BENCH_DURATION_S:g}")
    set_default_help(p, "runs", f"not used, the run is timed; --runs N alone times exactly N runs, and with "
                                 f"--duration 0 it is {BenchConfig().runs}")
    p.add_argument("--memory", action="store_true", help="Also measure peak memory (a child process per model).")
    p.add_argument("--profile", metavar="DIR", help="Write ORT's profiling JSON for each run into DIR.")
    add_input_arguments(p, text=False)
    p.add_argument("--input-value", action="append", default=[], metavar="NAME=VALUE",
                   help="The value of a control input (an integer scalar such as a sample rate), which random data "
                        "never makes up; repeatable.")
    p.add_argument("--judge-samples", type=int, default=64, metavar="N",
                   help="With --openvino and a bundled sample (or a run made from one) first: judge each OpenVINO row "
                        "against ONNX Runtime fp32 on N of its evaluation images with the verdict's task metric "
                        "(default: 64). 0: do not judge.")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="Time every variant on each kind of node of this Ray cluster (host:port of its head, or "
                        "auto), one row per variant and machine; needs pip install 'ortlab[ray]'.")
    p.add_argument("--nodes", metavar="RES1,RES2", default="",
                   help="With --ray: time only on nodes that carry these custom resources (one kind each), "
                        "instead of on every kind of node.")
    add_output_flags(p)
    p.set_defaults(func=cmd_bench)


def bench_from_args(ns: argparse.Namespace) -> BenchConfig:
    """The BenchConfig that the parsed ``bench`` flags describe (profiling on when ``--profile DIR`` is given)."""
    given = api.recipes.given_values(BenchConfig, ns, BENCH_FLAGS_EXCLUDED)
    # a few seconds per variant by default; --runs N alone means N runs
    base = BenchConfig(profile=bool(ns.profile),
                       duration_s=0.0 if "runs" in given and "duration_s" not in given else api.benchmarks.DEFAULT_BENCH_DURATION_S)
    cfg = api.recipes.config_from_args(BenchConfig, ns, base, exclude=BENCH_FLAGS_EXCLUDED)
    problems = api.benchmarks.bench_config_problems(cfg)
    if problems:
        raise UsageError(" ".join(problems))
    return cfg


def judge_openvino_rows(ns: argparse.Namespace, paths: list[Path], variants) -> tuple[dict, str]:
    """The OpenVINO rows judged against ORT fp32 on the first model's sample's evaluation images
    (``api.benchmarks.judge_runtime_rows``), by variant id, and a note when they were not judged."""
    if not getattr(ns, "openvino", False) or ns.judge_samples <= 0 or not paths:
        return {}, ""
    sample = model_sample(paths[0])
    if sample is None or sample.evaluation_dir is None:
        return {}, ("OpenVINO rows not judged on a task metric: the first model is not a bundled sample nor made "
                    "from one (ortlab compare judges any pair on your data).")
    timed = api.benchmarks.timed_variants(variants, api.BenchConfig(openvino=True))
    got = api.benchmarks.judge_runtime_rows(timed, sample.evaluation_data(), sample.preprocess, n=ns.judge_samples)
    return {j.variant: j for j in got}, ""


def variant_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(Path(p.parent.name) / p.name) if names.count(p.name) > 1 else p.name for p in paths]


def interval_text(low: float | None, high: float | None) -> str:
    """"1.234–1.456" (ms), or "–" when the benchmark did not record it."""
    return "–" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def result_table(comparison, first: str, memory: bool, judged: dict) -> tuple[list[list[str]], list[str]]:
    """(rows, header) of the benchmark's table: each variant × batch size with its speed-up and, for an OpenVINO
    row, its judgement against the baseline under ORT (``judged``, by variant id)."""
    header = ["model", "batch", "runs", "p50 ms", "p50 95% interval", "IQR ms (p25–p75)", "p90 ms", "p99 ms",
              "items/s (batch÷p50)", f"speed-up vs {first}", "providers"]
    if memory:
        header.append("peak MB")
    if judged:
        header.append(f"vs {first} under ORT (task metric)")
    rows = []
    for r in comparison.rows:
        s = r.summary
        row = [s.variant, str(s.batch_size), str(s.n), f"{s.p50:.3f}", interval_text(s.p50_low, s.p50_high),
               interval_text(s.p25, s.p75), f"{s.p90:.3f}", f"{s.p99:.3f}", f"{s.throughput_per_s:,.1f}",
               r.speedup_text(is_baseline=s.variant == comparison.baseline),
               ",".join(p.replace("ExecutionProvider", "") for p in s.providers)]
        if memory:
            row.append(f"{s.peak_rss_mb:.1f}")
        if judged:
            j = judged.get(s.variant)
            row.append(j.cell() if j is not None else "")
        rows.append(row)
    return rows, header
def cluster_nodes(ns: argparse.Namespace) -> list[str]:
    """The resources ``--nodes`` names; UsageError for --nodes without --ray, or an empty --ray."""
    nodes = [n.strip() for n in (ns.nodes or "").split(",") if n.strip()]
    if nodes and not ns.ray:
        raise UsageError("--nodes names the cluster's nodes to time on: give the cluster with --ray ADDRESS.")
    if ns.ray is not None and not ns.ray.strip():
        raise UsageError("--ray needs the address of the cluster's head (host:port) or auto.")
    return nodes


def cmd_bench(ns: argparse.Namespace) -> int:
    """`ortlab bench`: time models side by side at each batch size."""

    paths = [model_file(m) for m in ns.models]
    cfg = bench_from_args(ns)
    nodes = cluster_nodes(ns)

    shapes, values = parse_shapes(ns.shape), parse_input_values(ns.input_value)
    check_input_names(paths, shapes, values)
    workspace = api.workspaces.open_workspace()
    run_ids = {Path(r.model_path).resolve(): r.run_id for r in reversed(workspace.history().list())
               if isinstance(r, Artifact)}
    variants = [BenchVariant(name, name, str(path), run_ids.get(path.resolve()))
                for path, name in zip(paths, variant_names(paths))]
    handle = api.benchmarks.start_benchmark(variants, cfg, measure_memory=ns.memory, workspace=workspace, origin="cli",
                                            profile_dir=ns.profile, shapes=shapes, values=values, cluster=ns.ray, nodes=nodes)
    if ns.ray:
        return print_cluster(handle.follow(reporter(ns)), ns)
    summaries = handle.follow(reporter(ns))
    judged, judge_note = judge_openvino_rows(ns, paths, variants)
    baseline = handle.baseline_rss_mb
    comparison = api.benchmarks.compare_benchmarks(summaries, baseline=variants[0].id if variants else None)
    if ns.json:
        speedups = [{"variant": r.summary.variant, "batch_size": r.summary.batch_size, "speedup": r.speedup,
                     "low": r.low, "high": r.high, "interleaved": r.paired, "clear_difference": r.clear}
                    for r in comparison.rows]
        print_json({"config": cfg, "baseline_rss_mb": baseline, "results": summaries, "speedups": speedups,
                    "warnings": comparison.warnings, "judged": list(judged.values())})
        return 0
    first = variants[0].name if variants else ""
    print(table(*result_table(comparison, first, ns.memory, judged)))
    if len(variants) > 1:
        print(f"speed-up   {first} p50 ÷ this p50, the median over rounds in which the models ran in turn (interleaved), "
              "with its 95% interval; an interval that holds 1 is no clear difference.")
    if judged:
        print(f"judged     each OpenVINO row's outputs against {first} under ONNX Runtime on the same images, with the "
              "verdict's task metric (top-1 flips, F1 or SQNR), in the precision OpenVINO compiled it in")
    if judge_note:
        print(f"note       {judge_note}")
    for w in comparison.warnings:
        print(f"warning    {w}")
    for s in summaries:
        if s.input_shapes:
            print(f"inputs {s.variant} b{s.batch_size}: {shapes_text(s.input_shapes)}")
    print(f"history    benchmark {handle.bench_id}" if handle.bench_id is not None else
          f"history    not recorded: {getattr(handle, 'not_recorded', None) or 'the history could not be written'}")
    if ns.memory:
        print(f"peak MB is the whole process; an interpreter with ONNX Runtime and no model peaks at "
              f"{baseline:.1f} MB.")
    for s in summaries:
        if s.profile_path:
            print(f"profile {s.variant} b{s.batch_size}: {s.profile_path}")
    return 0


def print_cluster(bench: api.ClusterBenchmark, ns: argparse.Namespace) -> int:
    """The table of a benchmark across a cluster: one row per variant × machine, each speed-up taken on its node."""
    rows = bench.rows()
    if ns.json:
        print_json({"config": bench.config, "cluster": bench.address, "seconds": bench.seconds,
                    "rows": [{"variant": r.variant, "kind": r.kind, "machine": r.machine, "summary": r.summary,
                              "speedup": r.comparison.speedup, "low": r.comparison.low, "high": r.comparison.high,
                              "interleaved": r.comparison.paired, "clear_difference": r.comparison.clear}
                             for r in rows],
                    "nodes": [{"kind": k.kind.label, "address": k.kind.address, "node_id": k.kind.node_id,
                               "ran_on": k.ran_on, "machine": k.timing.machine if k.timing else None,
                               "seconds": k.timing.seconds if k.timing else None, "bench_id": k.bench_id,
                               "error": k.error} for k in bench.kinds],
                    "failures": bench.failures})
        return 0 if not bench.failures else 1
    first = bench.variants[0].name if bench.variants else ""
    header = ["model", "node kind", "batch", "runs", "p50 ms", "p50 95% interval", "items/s (batch÷p50)",
              f"speed-up vs {first} (same node)", "machine (CPU · ISA · cores · threads)"]
    table_rows = [[r.name, r.kind, str(r.summary.batch_size), str(r.summary.n), f"{r.summary.p50:.3f}",
                   interval_text(r.summary.p50_low, r.summary.p50_high), f"{r.summary.throughput_per_s:,.1f}",
                   r.comparison.speedup_text(is_baseline=r.is_baseline), r.stamp] for r in rows]
    print(table(table_rows, header))
    if len(bench.variants) > 1:
        print(f"speed-up   {first} p50 ÷ this p50 on the same node, the median over rounds in which the models ran "
              "in turn (interleaved), with its 95% interval; an interval that holds 1 is no clear difference.")
    for k in bench.kinds:
        if k.timing is not None:
            print(f"node       {k.kind.label}: {k.kind.address} · {k.timing.machine.summary()} · "
                  f"{k.timing.seconds:.0f} s · history benchmark {k.bench_id}")
    for k in bench.kinds:
        for w in k.comparison.warnings if k.comparison is not None else []:
            print(f"warning    on {k.kind.label}: {w}")
    for f in bench.failures:
        print(f"failed     {f}")
    return 0 if not bench.failures else 1
