"""The tuning targets on EfficientNet-Lite0, measured side by side in one run.

1. The default int8 recipe, with ``--trials DIR/trials.json`` (``ortlab tune --out DIR``) the tune's
   recommendation and its most accurate static recipe, and any ``--recipe`` JSON are built with
   ``ortlab.pipeline.run_recipe`` and timed against fp32 at level all, at batch 1 and 32, in interleaved rounds
   (machine load hits them alike): speed ratio vs fp32.
2. Accuracy on the held-out evaluation photos (never the calibration ones): logits SQNR, top-1 flips, and top-1
   flips where fp32's softmax top-1 vs top-2 margin is at least 0.1.
3. Per-node analysis of the default int8 QDQ model on 32 samples: wall time (target under 10 s).
4. With ``--trials trials.json`` (``ortlab tune``'s output): trials per minute, extrapolated to 10 minutes.

    python bench/bench_tune_targets.py [--recipe DIR/recipe.json] [--trials DIR/trials.json] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from ortlab import bench, samples  # noqa: E402
from ortlab.analyze import analyze  # noqa: E402
from ortlab.config import BenchConfig, OptLevel, Precision, Recipe  # noqa: E402
from ortlab.data import batch_inputs  # noqa: E402
from ortlab.evaluate import session_inputs  # noqa: E402
from ortlab.pipeline import run_recipe  # noqa: E402
from ortlab.providers import create_session  # noqa: E402


def accuracy(ref_path, cand_path, ds, pre, margin: float = 0.1) -> dict:
    ref, _ = create_session(ref_path)
    cand, _ = create_session(cand_path)
    feed = batch_inputs(ds, list(range(len(ds))), pre, session_inputs(ref))
    r = ref.run(None, feed)[0].astype(np.float64)
    c = cand.run(None, feed)[0].astype(np.float64)
    p = np.exp(r - r.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top2 = np.sort(p, 1)[:, -2:]
    confident = (top2[:, 1] - top2[:, 0]) >= margin
    flips = r.argmax(1) != c.argmax(1)
    return {"n": len(ds), "sqnr_db": float(10 * np.log10((r ** 2).sum() / ((r - c) ** 2).sum())),
            "flips": int(flips.sum()), "confident": int(confident.sum()),
            "confident_flips": int((flips & confident).sum())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", help="A tuned recipe JSON to measure too.")
    ap.add_argument("--trials", help="trials.json of an `ortlab tune` run: its recommendation and its most accurate "
                                     "static recipe are measured, and its trials per minute.")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    s = samples.get_sample("efficientnet_lite0")
    cal, ev = s.calibration_data(), s.evaluation_data()
    recipes = {"int8 default": Recipe(precision=Precision.INT8)}
    if args.recipe:
        recipes["tuned"] = Recipe.from_json(Path(args.recipe).read_text())
    trials = json.loads(Path(args.trials).read_text()) if args.trials else None
    if trials is not None:
        from ortlab.serial import from_plain

        if trials.get("best"):
            recipes["recommended"] = from_plain(Recipe, trials["best"]["recipe"])
        static = [t for t in trials["trials"] if t["status"] == "done" and t["recipe"]["precision"] == "int8"
                  and t["recipe"]["quant"]["mode"] == "static" and isinstance(t["sqnr_db"], float)]
        if static:
            recipes["best static"] = from_plain(Recipe, max(static, key=lambda t: t["sqnr_db"])["recipe"])
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        built = {"fp32 all": s.model_path}
        for name, recipe in recipes.items():
            art = run_recipe(s.model_path, recipe, Path(tmp) / name.replace(" ", "_"), cal, s.preprocess,
                             verify_samples=0, verify_dataset=ev)
            built[name] = art.model_path
            print(f"{name}: {recipe.label()}  kept in float: {list(recipe.quant.nodes_to_exclude)}")
        # 3. analysis time
        t = time.perf_counter()
        a = analyze(s.model_path, Path(tmp) / "int8_default", ev, s.preprocess, n=32)
        print(f"analyze: {len(a.nodes)} nodes, 32 samples, {time.perf_counter() - t:.1f} s wall "
              f"(target < 10 s); worst local: {a.nodes[0].name} {a.nodes[0].local_sqnr_db:.1f} dB")
        # 2. accuracy on all held-out photos
        for name in recipes:
            acc = accuracy(s.model_path, built[name], ev, s.preprocess)
            print(f"{name:>12}: logits SQNR {acc['sqnr_db']:.1f} dB, top-1 flips {acc['flips']}/{acc['n']}, "
                  f"confident (margin >= 0.1) flips {acc['confident_flips']}/{acc['confident']}")
        # 1. latency, interleaved
        for batch in (1, 32):
            cfg = BenchConfig(warmup=3, runs=args.runs if batch == 1 else max(5, args.runs // 4),
                              session_opt_level=OptLevel.ALL)
            p50 = {n: [] for n in built}
            for _ in range(args.rounds):
                for n, path in built.items():
                    p50[n].append(bench.summarize(list(bench.latency_samples(path, cfg, batch, variant=n))).p50)
            med = {n: statistics.median(v) for n, v in p50.items()}
            base = med["fp32 all"]
            print(f"batch {batch:>2}: " + ", ".join(f"{n} {m:.2f} ms ({base / m:.2f}×)" for n, m in med.items()))
    if trials is not None:
        data = trials
        n, secs = len(data["trials"]), float(data["seconds"])
        print(f"tune: {n} trials in {secs:.0f} s = {60 * n / secs:.1f} trials/min → {600 * n / secs:.0f} in 10 min; "
              f"recommendation: {data['sentence']}")


if __name__ == "__main__":
    main()
