"""Speed-up stability: the same pair of models timed by ``ortlab bench``'s service as separate blocks (each
variant × batch size in one go, one after the other) and interleaved (all children warmed up, then alternating
rounds of short blocks), ``--repeats`` times each, alternating the two modes. Prints, per mode, the speed-up
(first model's p50 ÷ second's; interleaved: the median of the rounds' ratios) of every repeat, their median and
their spread (max − min, and the interquartile range), and how often the reported 95 % interval held the
median of all repeats.

Pairs: digits_cnn against a byte-identical copy of itself (the true ratio is 1.00) and digits_cnn against
digits_attention.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_interleaved.py [--repeats 6] [--duration 1] [--batch 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from ortlab.data import samples  # noqa: E402
from ortlab.runs.history import BenchVariant  # noqa: E402
from ortlab.runs import bench_service  # noqa: E402
from ortlab.runs.workspace import Workspace  # noqa: E402
from ortlab.settings.config import BenchConfig  # noqa: E402
from ortlab.timing.compare import compare_benchmarks  # noqa: E402


def measure(a: Path, b: Path, cfg: BenchConfig, ws: Workspace, interleave: bool) -> tuple[float, float, float]:
    variants = [BenchVariant("a", "a", str(a)), BenchVariant("b", "b", str(b))]
    summaries = bench_service.start_benchmark(variants, cfg, workspace=ws, origin="bench", interleave=interleave).follow()
    row = compare_benchmarks(summaries, baseline="a").rows[-1]
    assert row.speedup is not None
    return row.speedup, row.low or float("nan"), row.high or float("nan")


def describe(name: str, got: list[tuple[float, float, float]]) -> str:
    ratios = sorted(r for r, _, _ in got)
    med = statistics.median(ratios)
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    held = sum(1 for _, lo, hi in got if lo <= med <= hi)
    return (f"  {name:12s} ratios {' '.join(f'{r:.3f}' for r in ratios)} | median {med:.3f} | "
            f"range {ratios[-1] - ratios[0]:.3f} ({(ratios[-1] - ratios[0]) / med:.0%}) | IQR {q[2] - q[0]:.3f} | "
            f"interval held the median {held}/{len(got)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per variant per benchmark")
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    cnn = samples.get_sample("digits_cnn").model_path
    att = samples.get_sample("digits_attention").model_path
    cfg = BenchConfig(batch_sizes=(args.batch,), warmup=5, duration_s=args.duration)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "ws")
        copy = Path(tmp) / "copy" / "model.onnx"
        copy.parent.mkdir()
        shutil.copy(cnn, copy)
        print(f"batch {args.batch}, {args.duration:g} s per variant, {args.repeats} repeats per mode, "
              f"{os.cpu_count()} CPUs")
        for title, a, b in (("digits_cnn vs its copy (truth 1.00)", cnn, copy),
                            ("digits_cnn vs digits_attention", cnn, att)):
            got: dict[bool, list] = {False: [], True: []}
            for _ in range(args.repeats):
                for mode in (False, True):  # alternate the modes, so load changes hit both
                    got[mode].append(measure(Path(a), Path(b), cfg, ws, mode))
            print(title)
            print(describe("separate", got[False]))
            print(describe("interleaved", got[True]))


if __name__ == "__main__":
    main()
