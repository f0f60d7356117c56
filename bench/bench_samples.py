"""Latency of each bundled sample under the standard recipes, measured side by side in one run.

For every sample: fp32 with graph optimization disabled (the baseline), fp32 at level all, int8 static
QDQ (MinMax, per-channel, extended), int8 dynamic (MatMul/Gemm, the default) and int8 dynamic with Conv
included (ConvInteger, expected to be slow on CPU). Each variant is built with ``ortlab.runs.in_process.run_recipe``
and timed at batch 1 and 32 with ``ortlab.timing.bench.latency_samples``; rounds interleave the variants so machine
load hits them alike. Prints p50 per variant and its speed ratio against the baseline (> 1 = faster).

    python bench/bench_samples.py [--rounds 3] [--runs 20] [--samples digits_cnn,efficientnet_lite0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ortlab.timing import bench  # noqa: E402
from ortlab.data import samples  # noqa: E402
from ortlab.settings.config import BenchConfig, OptLevel, Precision, QuantConfig, QuantMode, Recipe  # noqa: E402
from ortlab.runs.in_process import run_recipe  # noqa: E402

VARIANTS = {
    "fp32 disabled": Recipe(opt_level=OptLevel.DISABLED),
    "fp32 all": Recipe(opt_level=OptLevel.ALL),
    "int8 static QDQ": Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=100)),
    "int8 dynamic": Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC)),
    "int8 dynamic +Conv": Recipe(precision=Precision.INT8,
                                 quant=QuantConfig(mode=QuantMode.DYNAMIC, op_types=("Conv", "MatMul", "Gemm"))),
}
BASELINE = "fp32 disabled"


def build(sample, out: Path) -> dict[str, dict]:
    """Run every recipe on ``sample``; name → {path, size, agreement}."""
    built = {}
    for name, recipe in VARIANTS.items():
        art = run_recipe(sample.model_path, recipe, out / name.replace(" ", "_"), dataset=sample.calibration_data(),
                         preprocess=sample.preprocess, verify_dataset=sample.evaluation_data(), verify_samples=64)
        ev = art.evaluation
        built[name] = {"path": art.model_path, "size": art.size_bytes,
                       "agreement": ev.top1_agreement if ev else None, "top1": ev.top1_accuracy_cand if ev else None}
    return built


def time_variants(built: dict[str, dict], batch: int, rounds: int, runs: int, session_opt_level: str) -> dict[str, float]:
    """Median over rounds of each variant's p50 (ms); variants interleaved within every round."""
    cfg = BenchConfig(warmup=3, runs=runs, session_opt_level=OptLevel(session_opt_level))
    p50s: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(rounds):
        for name, b in built.items():
            run = bench.latency_samples(b["path"], cfg, batch, variant=name)
            p50s[name].append(bench.summarize(list(run)).p50)
    return {name: statistics.median(v) for name, v in p50s.items()}


def main() -> int:
    """Run every sample × recipe × batch size and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--samples", default="", help="comma-separated sample names (default: all)")
    parser.add_argument("--session-opt-level", default="all", choices=[level.value for level in OptLevel],
                        help="optimization ORT applies at load: 'all' is how models usually run; 'disabled' times "
                             "each saved graph as it is")
    args = parser.parse_args()
    wanted = {s for s in args.samples.split(",") if s}
    batches = [int(b) for b in args.batches.split(",")]

    rows = []
    with tempfile.TemporaryDirectory(prefix="ortlab-bench-") as tmp:
        for sample in samples.list_samples():
            if wanted and sample.name not in wanted:
                continue
            built = build(sample, Path(tmp) / sample.name)
            for batch in batches:
                p50 = time_variants(built, batch, args.rounds, args.runs, args.session_opt_level)
                for name, b in built.items():
                    rows.append((sample.name, name, b["size"], b["top1"], b["agreement"], batch, p50[name],
                                 p50[BASELINE] / p50[name]))
            print(f"done: {sample.name}", file=sys.stderr, flush=True)

    print(f"ORT optimization at load: {args.session_opt_level}; median of {args.rounds} interleaved rounds × "
          f"{args.runs} runs")
    print(f"{'sample':<20}{'variant':<21}{'size KB':>9}{'top1':>7}{'agree':>7}{'batch':>6}{'p50 ms':>10}"
          f"{'speed vs fp32 disabled':>24}")
    for sample, name, size, top1, agree, batch, ms, ratio in rows:
        pct = lambda v: f"{100 * v:6.1f}" if v is not None else "     -"
        print(f"{sample:<20}{name:<21}{size / 1024:9.1f}{pct(top1):>7}{pct(agree):>7}{batch:6d}{ms:10.3f}"
              f"{ratio:23.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
