"""What Ray costs and gives on this machine (issue 29), on real local clusters of one-CPU nodes started with
``ray start`` (tests/support/ray_cluster.py):

1. Start-up: a head and a worker node (``ray start`` both, until the worker has joined), then this process's
   driver connecting (``RayCluster.connect``) and listing the nodes with their machines (``nodes()``, one tiny
   task per node).
2. Per-task overhead: an empty task pinned to each node, submitted and waited for one at a time (median and p90
   of ``--tasks`` round trips), and a model shipped through the object store (``put``, then a task that reads
   its bytes on the other node).
3. ``ortlab bench --ray``: the wall time of timing two bundled samples on both node kinds (each kind in turn:
   they share this host), against the same benchmark on this machine alone.
4. Tune: trials per minute of a bundled sample's tune (``ortlab tune SAMPLE --ray ADDRESS --timing-resource
   cpu_lab --max-trials N``) on the two one-CPU nodes vs one one-CPU node (the worker stopped before the tune,
   so the head alone runs its trials), and the same tune without Ray (before any cluster starts), with every core
   and with one thread (``$ORTLAB_THREADS=1``, as a task on a one-CPU node runs): Ray's overhead per trial is
   (one node's seconds − no Ray's seconds at one thread) ÷ trials.

Run it where the cluster tests run, inside a loopback-only network namespace (Ray's driver probes a route to
8.8.8.8:53 otherwise):

    unshare -n sh -c 'ip link set lo up && python bench/bench_ray.py [--sample digits_cnn] [--trials 6]'
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ortlab.cli import main as cli  # noqa: E402
from ortlab.runtime.machine import this_machine  # noqa: E402
from ortlab.runtime.ray_cluster import RayCluster  # noqa: E402
from ortlab.runtime.threads import THREADS_ENV  # noqa: E402
from tests.support.ray_cluster import in_loopback_namespace, local_ray_cluster  # noqa: E402

HEAD = {"cpu_lab": 1}
WORKER = {"cpu_target": 1}


def _empty() -> int:
    return 0


def _length(blob: bytes) -> int:
    return len(blob)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _cli(args: list[str]) -> tuple[int, str, float]:
    out = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = cli.main(args)
    return code, out.getvalue(), time.monotonic() - t0


def startup_and_overhead(cluster_address: str, startup_s: float, tasks: int, model: Path) -> dict:
    t0 = time.monotonic()
    cluster = RayCluster.connect(cluster_address)
    connect_s = time.monotonic() - t0
    t0 = time.monotonic()
    nodes = cluster.nodes()
    nodes_s = time.monotonic() - t0
    trips: dict[str, list[float]] = {}
    for n in nodes:
        for _ in range(tasks):
            t0 = time.monotonic()
            cluster.wait([cluster.submit(_empty, node_id=n.node_id, retries=0, num_cpus=0)])
            trips.setdefault(n.address, []).append((time.monotonic() - t0) * 1000)
    blob = model.read_bytes()
    far = nodes[-1]
    t0 = time.monotonic()
    ref = cluster.put(blob)
    (got,) = cluster.wait([cluster.submit(_length, ref, node_id=far.node_id, retries=0, num_cpus=0)])
    ship_s = time.monotonic() - t0
    assert got == len(blob), got
    cluster.close()
    return {"startup_s": startup_s, "connect_s": connect_s, "nodes_s": nodes_s, "nodes": len(nodes),
            "task_ms": {a: {"median": statistics.median(v), "p90": sorted(v)[int(0.9 * (len(v) - 1))]}
                        for a, v in trips.items()},
            "ship": {"bytes": len(blob), "seconds": ship_s}}


def bench_ray(address: str) -> dict:
    quick = ["--duration", "0", "--runs", "200", "--warmup", "5", "--threads", "1", "--json"]
    code, out, cluster_s = _cli(["bench", "digits_cnn", "digits_attention", "--ray", address, *quick])
    assert code == 0, out
    code, local_out, local_s = _cli(["bench", "digits_cnn", "digits_attention", *quick])
    assert code == 0, local_out
    rows = [(r["variant"], r["kind"], round(r["summary"]["p50"], 3), r["speedup"], r["low"], r["high"])
            for r in json.loads(out)["rows"]]
    return {"cluster_s": cluster_s, "local_s": local_s, "rows": rows}


def tune_rate(address: str | None, sample: str, trials: int, out_dir: Path, independent: bool = False) -> dict:
    """One tune's trials per minute, and each trial's stage, seconds (accuracy work and timing, as the tuner
    waited for them) and nodes. ``independent``: only the search space's recipes (``--exclusion-steps 0``), which
    do not wait on each other's analysis."""
    args = ["tune", sample, "--out", str(out_dir), "--max-trials", str(trials), "--budget", "3600",
            "--bench-seconds", "0.5"]
    if independent:
        args += ["--exclusion-steps", "0"]
    if address:
        args += ["--ray", address, "--timing-resource", "cpu_lab"]
    code, out, seconds = _cli(args)
    assert code == 0, out[-2000:]
    done = json.loads((out_dir / "trials.json").read_text())
    rows = done.get("trials", done) if isinstance(done, dict) else done
    per_trial = [(r.get("stage"), round(r.get("seconds", 0.0), 1), r.get("ran_on", ""), r.get("timed_on", ""))
                 for r in rows]
    return {"trials": len(rows), "seconds": seconds, "per_minute": 60.0 * len(rows) / seconds,
            "per_trial": per_trial}


def _trial_lines(rate: dict) -> None:
    for stage, seconds, ran_on, timed_on in rate["per_trial"]:
        print(f"           {stage:<9} {seconds:6.1f} s  ran on {ran_on or 'here'}, timed on {timed_on or 'here'}")


def _wait_until_nodes(address: str, n: int, limit_s: float = 120.0) -> None:
    """Until the cluster lists ``n`` alive nodes (a killed worker is marked dead after Ray's health checks)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        cluster = RayCluster.connect(address)
        alive = len(cluster.nodes())
        cluster.close()
        if alive == n:
            return
        time.sleep(2)
    raise RuntimeError(f"the cluster did not come down to {n} node(s) within {limit_s:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", default="digits_cnn")
    ap.add_argument("--trials", type=int, default=6, help="Trials per tune (max-trials).")
    ap.add_argument("--tasks", type=int, default=20, help="Empty tasks per node for the round trip.")
    ap.add_argument("--skip-tune", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--independent", action="store_true",
                    help="Tune only the search space's recipes (--exclusion-steps 0): trials that can run at once.")
    args = ap.parse_args()
    if not in_loopback_namespace():
        print("warning: not in a loopback-only network namespace; Ray's driver will probe 8.8.8.8:53", file=sys.stderr)
    m = this_machine()
    print(f"machine    {m.summary()} · load {_load()}")
    report: dict = {"machine": m.summary(), "load_before": _load()}
    model = REPO / "sample_models" / args.sample / "model.onnx"
    with tempfile.TemporaryDirectory(prefix="ortlab-bench-ray-") as tmp:
        os.environ["ORTLAB_HOME"] = str(Path(tmp) / "home")
        if not args.skip_tune:
            here = tune_rate(None, args.sample, args.trials, Path(tmp) / "here", args.independent)
            report["tune_here"] = here
            print(f"tune       no Ray: {here['trials']} trials in {here['seconds']:.0f} s = "
                  f"{here['per_minute']:.2f}/min · load {_load()}")
            _trial_lines(here)
            os.environ[THREADS_ENV] = "1"  # as on a one-CPU node: Ray's overhead is measured against this
            try:
                here1 = tune_rate(None, args.sample, args.trials, Path(tmp) / "here1", args.independent)
            finally:
                del os.environ[THREADS_ENV]
            report["tune_here_1_thread"] = here1
            print(f"tune       no Ray, 1 thread: {here1['trials']} trials in {here1['seconds']:.0f} s = "
                  f"{here1['per_minute']:.2f}/min · load {_load()}")
            _trial_lines(here1)
        with local_ray_cluster(head_resources=HEAD, worker_resources=WORKER) as c:
            r = startup_and_overhead(c.address, c.startup_s, args.tasks, model)
            report["ray"] = r
            print(f"start-up   head + worker {r['startup_s']:.1f} s · driver connect {r['connect_s']:.1f} s · "
                  f"nodes with machines {r['nodes_s']:.1f} s")
            for a, t in r["task_ms"].items():
                print(f"task       empty task pinned to {a}: median {t['median']:.1f} ms, p90 {t['p90']:.1f} ms")
            print(f"ship       {r['ship']['bytes'] / 1e6:.2f} MB put + read on the other node: "
                  f"{r['ship']['seconds'] * 1000:.0f} ms")
            if not args.skip_bench:
                b = bench_ray(c.address)
                report["bench"] = b
                print(f"bench      --ray on 2 node kinds {b['cluster_s']:.1f} s vs this machine {b['local_s']:.1f} s")
                for row in b["rows"]:
                    print(f"           {row}")
            if not args.skip_tune:
                two = tune_rate(c.address, args.sample, args.trials, Path(tmp) / "two", args.independent)
                print(f"tune       2 nodes: {two['trials']} trials in {two['seconds']:.0f} s = "
                      f"{two['per_minute']:.2f}/min · load {_load()}")
                _trial_lines(two)
                c.kill_worker()
                _wait_until_nodes(c.address, 1)
                one = tune_rate(c.address, args.sample, args.trials, Path(tmp) / "one", args.independent)
                print(f"tune       1 node:  {one['trials']} trials in {one['seconds']:.0f} s = "
                      f"{one['per_minute']:.2f}/min · load {_load()}")
                _trial_lines(one)
                here1 = report["tune_here_1_thread"]
                report["tune"] = {"two": two, "one": one, "gain": two["per_minute"] / one["per_minute"],
                                  "overhead_s": (one["seconds"] - here1["seconds"]) / max(1, one["trials"])}
                print(f"gain       {report['tune']['gain']:.2f}× trials per minute on 2 nodes vs 1; Ray's overhead "
                      f"{report['tune']['overhead_s']:+.1f} s per trial (1 node vs no Ray at 1 thread)")
    report["load_after"] = _load()
    print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
