"""One pair, five ways: does every speed figure ortlab shows come from the one clock and agree (issue 25)?

Makes the int8 static run of a bundled sample (``ortlab optimize``), then times that pair — the sample's fp32 model
against its int8 — at batch 1 through each path a user meets, one after the other:

- Compare: the engine call its speed cards make (``start_pair_timing``: interleaved until the 95% interval is within
  ±10% or 20 s);
- Benchmark: a benchmark of the two (``start_benchmark``, the Benchmark page's and ``ortlab bench``'s call);
- Tune: a trial's re-timing as a finalist (``Tuner._time`` at twice the trial's seconds);
- CLI: ``ortlab compare --speed-cap 20 --json`` and ``ortlab bench --json`` in their own processes.

Prints each speed-up with its 95% interval and rounds, the machine and its load before and after each path, and
whether every two intervals overlap. The paths run minutes apart on a shared machine: a change of load between them
is in no interval, so a non-overlap under a moving load says "the machine changed", not "the clocks differ".

    python bench/speed_agreement.py [--sample digits_cnn|efficientnet_lite0] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ortlab.cli import main as cli  # noqa: E402
from ortlab.runs import bench_service  # noqa: E402
from ortlab.runs.history import BenchVariant  # noqa: E402
from ortlab.runs.runspec import DataRef  # noqa: E402
from ortlab.runs.tune import TuneSettings, Tuner  # noqa: E402
from ortlab.runs.tune_policy import Trial  # noqa: E402
from ortlab.runs.workspace import Workspace  # noqa: E402
from ortlab.runtime.machine import this_machine  # noqa: E402
from ortlab.data.samples import get_sample  # noqa: E402
from ortlab.settings.config import BenchConfig, Recipe  # noqa: E402
from ortlab.timing.compare import compare_benchmarks  # noqa: E402


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default="digits_cnn")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds of Benchmark's and Tune's timings (each side)")
    args = ap.parse_args()
    s = get_sample(args.sample)
    rows: list[tuple[str, float, float, float, int, str, str]] = []  # path, speed-up, low, high, rounds, how, load
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        os.environ["ORTLAB_HOME"] = str(home)
        out = Path(tmp) / "int8"
        if cli.main(["optimize", str(s.model_path), str(out), "--precision", "int8"]) != 0:
            raise SystemExit("quantization failed")
        ref, cand = s.model_path, out / "model.onnx"
        ws = Workspace(home)
        pair = (BenchVariant("fp32", "fp32", str(ref)), BenchVariant("int8", "int8", str(cand)))
        print(f"pair: {args.sample} fp32 vs its int8 static run, batch 1; machine: {this_machine().summary()}",
              flush=True)

        before = load()
        h = bench_service.start_pair_timing(*pair, workspace=ws, origin="agreement")
        h.follow()
        st = h.settled()
        assert st is not None, h.error
        lo, hi = st.speed.speedup_range
        rows.append(("Compare (start_pair_timing)", st.speed.speedup, lo, hi, st.speed.rounds,
                     f"{st.verdict}, {st.stop} after {st.seconds:.1f} s", f"{before} → {load()}"))
        print(rows[-1], flush=True)

        before = load()
        summaries = bench_service.start_benchmark(list(pair), BenchConfig(batch_sizes=(1,), duration_s=args.seconds),
                                                  workspace=ws, origin="agreement").follow()
        sp = compare_benchmarks(summaries, baseline="fp32").rows[1].speed
        assert sp is not None
        lo, hi = sp.speedup_range
        rows.append(("Benchmark (start_benchmark)", sp.speedup, lo, hi, sp.rounds, f"{args.seconds:g} s each",
                     f"{before} → {load()}"))
        print(rows[-1], flush=True)

        before = load()
        tuner = Tuner(ref, None, DataRef(random=4), workspace=ws, settings=TuneSettings(bench_s=args.seconds / 2))
        trial = Trial(1, "int8", "search", Recipe(), model_path=str(cand))
        try:
            tuner._time(trial, args.seconds)  # a finalist's re-timing: twice a trial's seconds
        finally:
            tuner.release_timing()
        (sp,) = trial.speed
        lo, hi = sp.speedup_range
        rows.append(("Tune (finalist re-time)", sp.speedup, lo, hi, sp.rounds, f"{args.seconds:g} s each",
                     f"{before} → {load()}"))
        print(rows[-1], flush=True)

        env = {**os.environ, "PYTHONPATH": str(REPO), "ORTLAB_SPEED_CHECK_S": ""}
        before = load()
        got = subprocess.run([sys.executable, "-m", "ortlab", "compare", str(ref), str(cand), "--n", "8",
                              "--speed-cap", "20", "--json"], env=env, capture_output=True, text=True, check=False)
        speed = json.loads(got.stdout)["speed"]
        spd = speed["speed"]
        rows.append(("CLI ortlab compare", 1 / spd["ratio"], 1 / spd["high"], 1 / spd["low"], spd["rounds"],
                     f"{speed['verdict']}, {speed['stop']} after {speed['seconds']:.1f} s", f"{before} → {load()}"))
        print(rows[-1], flush=True)

        before = load()
        got = subprocess.run([sys.executable, "-m", "ortlab", "bench", str(ref), str(cand), "--batch-sizes", "1",
                              "--duration", f"{args.seconds:g}", "--json"], env=env, capture_output=True, text=True,
                             check=False)
        plain = json.loads(got.stdout)
        row = plain["speedups"][1]
        rounds = len(plain["results"][1].get("round_p50s") or [])
        rows.append(("CLI ortlab bench", row["speedup"], row["low"], row["high"], rounds, f"{args.seconds:g} s each",
                     f"{before} → {load()}"))
        print(rows[-1], flush=True)

    print(f"\nmachine: {this_machine().summary()}; load average (1/5/15 min) now {load()}")
    print(f"{'path':30} {'speed-up':>9} {'95% interval':>14} {'rounds':>6}  {'how':34} load before → after")
    for name, x, lo, hi, rounds, note, ld in rows:
        print(f"{name:30} {x:8.2f}× {f'{lo:.2f}–{hi:.2f}×':>14} {rounds:>6}  {note:34} {ld}")
    print("\noverlap of the 95% intervals (✓ overlap, ✗ apart):")
    for a in rows:
        marks = ["✓" if a[2] <= b[3] and b[2] <= a[3] else "✗" for b in rows]
        print(f"  {a[0]:30} " + " ".join(marks))
    apart = [(a[0], b[0]) for i, a in enumerate(rows) for b in rows[i + 1:] if not (a[2] <= b[3] and b[2] <= a[3])]
    print("all intervals overlap" if not apart else f"{len(apart)} pairs apart: " + "; ".join(f"{a} / {b}"
                                                                                             for a, b in apart))


if __name__ == "__main__":
    main()
