"""EfficientNet-Lite0 under ONNX Runtime and OpenVINO, side by side in one run (issue 11, "other runtimes").

Quantizes the bundled EfficientNet-Lite0 with ortlab's default int8 static recipe (U8S8 per-channel MinMax QDQ)
into a temp folder, then times, each in its own child process and in interleaved rounds (this machine is shared):
fp32 (ORT, all optimizations), int8 under ORT (its optimized graph), and fp32 and the portable QDQ file under
OpenVINO's CPU runtime. Prints p50 per batch size and every ratio against fp32 under ORT.

    python bench/bench_openvino.py [--batch-sizes 1 32] [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ortlab.cli import main as cli  # noqa: E402
from ortlab.timing.child_runs import latency_samples_isolated  # noqa: E402
from ortlab.settings.config import BenchConfig  # noqa: E402

SAMPLE = REPO / "sample_models" / "efficientnet_lite0"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per variant, batch and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "int8"
        code = cli.main(["optimize", str(SAMPLE / "model.onnx"), str(out), "--precision", "int8",
                         "--calibration", str(SAMPLE / "calibration"), "--eval", str(SAMPLE / "evaluation")])
        if code != 0:
            raise SystemExit("quantization failed")
        variants = [("fp32 · ORT", SAMPLE / "model.onnx", "onnxruntime"),
                    ("int8 · ORT", out / "model.onnx", "onnxruntime"),
                    ("fp32 · OpenVINO", SAMPLE / "model.onnx", "openvino"),
                    ("int8 QDQ · OpenVINO", out / "model.qdq.onnx", "openvino")]
        cfg = BenchConfig(warmup=5, duration_s=args.seconds)
        p50: dict[tuple[str, int], list[float]] = {}
        for r in range(args.rounds):
            for bs in args.batch_sizes:
                for name, path, runtime in variants:
                    run = latency_samples_isolated(path, cfg, bs, name, runtime=runtime)
                    list(run)
                    p50.setdefault((name, bs), []).append(run.summary().p50)
                    print(f"round {r + 1} b{bs} {name}: p50 {run.summary().p50:.2f} ms ({run.providers[0]})",
                          flush=True)
    print()
    print(f"{'variant':22} " + " ".join(f"{'b' + str(bs) + ' p50 ms':>11} {'×fp32 ORT':>9}" for bs in args.batch_sizes))
    for name, _, _ in variants:
        cells = []
        for bs in args.batch_sizes:
            mine = statistics.median(p50[(name, bs)])
            base = statistics.median(p50[("fp32 · ORT", bs)])
            cells.append(f"{mine:11.2f} {base / mine:8.2f}×")
        print(f"{name:22} " + " ".join(cells))
    print("(median of the rounds' p50; ratio = fp32 under ORT ÷ this, higher is faster)")


if __name__ == "__main__":
    main()
