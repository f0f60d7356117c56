"""``ortlab history``: the runs and benchmarks recorded in the workspace."""

from __future__ import annotations

import argparse
from pathlib import Path

from ortlab.api import UsageError
from ortlab.core.text import format_bytes
from ortlab.cli.common import PROG
from ortlab.cli.render import print_json, table
from ortlab.api import Artifact
from ortlab.api import BenchmarkRecord
from ortlab import api


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("history", help="List the runs and benchmarks recorded in the workspace (app and CLI).")
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="Show the newest N of each (default: all).")
    p.set_defaults(func=cmd_history)


def cmd_history(ns: argparse.Namespace) -> int:
    """`ortlab history`: the runs and benchmarks recorded in the workspace, from the app and the CLI."""

    if ns.limit is not None and ns.limit < 1:
        raise UsageError("--limit must be at least 1.")
    ws = api.workspaces.open_workspace()
    h = ws.history()
    runs, benches = h.list(ns.limit), h.list_benchmarks(ns.limit)
    if ns.json:
        print_json({"workspace": str(ws.root), "runs": runs, "benchmarks": benches})
        return 0
    print(f"workspace {ws.root}")

    rows = [[str(r.run_id), r.created_at.replace("T", " ")[:19], r.origin or "?",
             (r.verdict if r.verdict is not None else api.checks.judge(r.evaluation, coverage=r.coverage)).level.value,
             r.recipe.label(), source_label(r), format_bytes(r.size_bytes), r.sha256[:12]]
            for r in runs if isinstance(r, Artifact)]
    if rows:
        print(table(rows, ["run", "created", "from", "verdict", "recipe", "source model", "result size",
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
        print(f"benchmark {b.id}  {when}  {b.origin or '?'}  {api.benchmarks.machine_text(b.machine)}")
        for line in benchmark_lines(b):
            print(f"  {line}")
    return 0


def benchmark_lines(b: BenchmarkRecord) -> list[str]:
    """Each timed variant × batch size: its p50 with the p50's 95% interval, and its speed-up against the first
    variant at that batch size with the speed-up's interval (or why it has none)."""
    names = b.names()
    first = b.variants[0].id if b.variants else None
    base = {s.batch_size: s for s in b.summaries if s.variant == first}
    out = []
    for s in b.summaries:
        p50 = f"p50 {s.p50:.3f} ms" + (f" (95% {s.p50_low:.3f}–{s.p50_high:.3f})"
                                       if s.p50_low is not None and s.p50_high is not None else " (no interval stored)")
        ref = base.get(s.batch_size)
        sp = api.benchmarks.of_summaries(ref, s) if ref is not None and s.variant != first and ref.p50 > 0 and s.p50 > 0 else None
        vs = f", {sp.speedup:.2f}× vs {names.get(first or '', first)} {api.benchmarks.speed_interval_text(sp)}" if sp else ""
        out.append(f"{names.get(s.variant, s.variant)}@{s.batch_size} {p50}{vs}")
    return out


def source_label(artifact) -> str:
    """How ``history`` names a run's source model: the bundled sample's name, else the file's name (with its
    folder's when the file is a generic ``model.onnx``)."""
    spec = getattr(artifact, "spec", None)
    if spec is not None and spec.sample:
        return spec.sample
    path = Path(artifact.source_path)
    return f"{path.parent.name}/{path.name}" if path.name == "model.onnx" and path.parent.name else path.name
