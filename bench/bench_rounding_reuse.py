"""What kept GPTQ node roundings and bias corrections save a tune trial, and whether a reuse gives the integers a
fresh fit gives.

Builds, through the CLI in one temporary ``$ORTLAB_HOME``, the default static int8 of a model, then the same recipe
with the model's decision head kept in float (tune's second trial: ``--exclude-nodes``), which reuses the roundings
of every node the head does not reach; then builds that second recipe again in a fresh home (nothing kept) and
compares the two models' int8 weights and int32 biases. Prints each build's weight-rounding and bias-correction stage
seconds and wall seconds, the nodes reused by each step, and how many of those initializers differ between the
reused and the fresh build.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_rounding_reuse.py MODEL CALIBRATION_DIR [--preset yolo --size 320]
        [--rounds 2]

Measured 2026-12-06 at 2e91444 on an Intel Xeon VM (Sapphire Rapids class: AVX-512 VNNI, BF16, AMX), 2 CPUs,
onnxruntime 1.31.1, nudenet 3.4.2's ``320n.onnx`` (YOLOv8n, 320×320, ``--preset yolo --size 320``) calibrated on the
100 crops of ``bench_tune_unseen.py``'s data, its class-score branch (21 nodes) in float for the second build, two
rounds (each: the default in a new home, the head trial in the same home, the head trial in a fresh home)::

    build            home    weight rounding      wall (the CLI, calibration included)   GPTQ note
    default          new     20.6 s, 20.7 s       28.9 s, 28.9 s                         60 of 60 re-rounded
    head in float    kept     1.3 s,  1.5 s        5.6 s,  6.0 s                         51 of 51, 51 reused
    head in float    fresh   16.2 s, 16.4 s       24.1 s, 24.7 s                         51 of 51, 0 reused
    reused vs fresh: 0 of 102 int8 initializers differ (both rounds)

The head trial's build takes 4.3× less wall time with the default's roundings kept (its calibration is reused in
both: the same model and samples), and its integers are those a fresh fit gives. (Bias correction is skipped on a
YOLO-style detector, so these rows have none.)

With bias corrections kept too (2026-12-06 at 9513681, the same VM), the bundled EfficientNet-Lite0 calibrated on its
64 crops (``sample_models/efficientnet_lite0/model.onnx sample_models/efficientnet_lite0/calibration``), its logits
Gemm in float for the second build, two rounds::

    build            home    weight rounding    bias correction    wall          notes
    default          new     26.2 s, 27.0 s     6.1 s, 6.1 s       38.2, 39.0 s  GPTQ 50, bias 44 of 50 corrected
    head in float    kept     0.6 s,  0.6 s     0.6 s, 0.6 s        5.2,  5.2 s  GPTQ 49 reused, bias 49 reused
    head in float    fresh   25.2 s, 28.0 s     6.0 s, 6.1 s       38.0, 40.1 s  nothing reused
    reused vs fresh: 0 of 196 int8 weights and int32 biases differ (both rounds)

(With the roundings alone kept, the head trial's bias correction took its full 6 s.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from ortlab.model.decision_head import decision_head  # noqa: E402


def build(model: str, data: str, out: Path, home: Path, extra: list[str]) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "ortlab", "optimize", model, str(out), "--precision", "int8", "--calibration", data,
           "--verify-samples", "0", "--no-timing", "--json", *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "ORTLAB_HOME": str(home)})
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):
        raise RuntimeError(done.stderr[-800:])
    return json.loads(done.stdout), wall


def reuse_note(result: dict) -> str:
    """What the GPTQ and bias-correction notes say was fitted and reused."""
    said = []
    for step, start in (("GPTQ", "GPTQ weight rounding"), ("bias", "Bias correction (")):
        for n in result.get("notes", []):
            if n.startswith(start) and ": " in n:
                head = n.split(": ", 1)[1].split(",")[0].split(" (")[0]
                reused = re.search(r"(\d+) node\(s\) reused", n)
                said.append(f"{step} {head}, {reused.group(1) if reused else 0} reused")
    return "; ".join(said) or "-"


def fitted_values(path: Path) -> dict[str, np.ndarray]:
    """The int8 weights and int32 biases of the QDQ model beside ``path``: what GPTQ and bias correction write."""
    qdq = path.parent / "model.qdq.onnx"
    m = onnx.load(str(qdq if qdq.is_file() else path))
    kinds = (onnx.TensorProto.INT8, onnx.TensorProto.INT32)
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer if t.data_type in kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("calibration")
    ap.add_argument("--preset")
    ap.add_argument("--size", type=int)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    head = decision_head(onnx.load(args.model))
    if head is None:
        raise SystemExit("no decision head found: nothing for a second trial to keep in float")
    extra = (["--preset", args.preset] if args.preset else []) + \
        (["--size", str(args.size), str(args.size)] if args.size else [])
    second = [*extra, "--exclude-nodes", ",".join(head.nodes)]
    print(f"{Path(args.model).name}: {head.what}, {len(head.nodes)} nodes; {os.cpu_count()} CPUs")
    print("| round | build | home | weight rounding (s) | bias correction (s) | wall (s) | notes |")
    print("|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-reuse-") as tmpdir:
            tmp = Path(tmpdir)
            rows = [("default", "new", tmp / "home", extra), ("head in float", "kept", tmp / "home", second),
                    ("head in float", "fresh", tmp / "fresh", second)]
            outs = []
            for k, (label, where, home, flags) in enumerate(rows):
                out = tmp / f"out{k}"
                result, wall = build(args.model, args.calibration, out, home, flags)
                outs.append(Path(result.get("model_path", out)))
                timings = result["timings"]
                print(f"| {r + 1} | {label} | {where} | {timings.get('weight_rounding', 0):.1f} | "
                      f"{timings.get('bias_correction', 0):.1f} | {wall:.1f} | {reuse_note(result)} |", flush=True)
            a, b = fitted_values(outs[1]), fitted_values(outs[2])
            differ = [k for k in a if k in b and not np.array_equal(a[k], b[k])]
            print(f"|   | reused vs fresh | | int8 weights and int32 biases differing: {len(differ)} of {len(a)} "
                  f"({sum(int((a[k] != b[k]).sum()) for k in differ)} integers) | | | |", flush=True)


if __name__ == "__main__":
    main()
