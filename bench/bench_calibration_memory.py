"""Peak memory of Percentile calibration: ORT's ``collect_data`` over the whole reader (every batch's activations
held until the end) against ortlab's ``collect_streaming`` (one batch at a time), each in a fresh child process
(VmHWM), on a fixture with large activations (Conv 3→64→64 at 128×128: ~4 MB per activation tensor per sample).

    ORT_DISABLE_TELEMETRY=1 python bench/bench_calibration_memory.py [--samples 24]
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
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

CHILD = r"""
import json, sys, numpy as np
sys.path.insert(0, sys.argv[4])
from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator
from ortlab.transforms.quantize import collect_streaming
model, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
class Reader:
    def __init__(self): self.k = 0
    def get_next(self):
        if self.k >= n: return None
        self.k += 1
        return {"input": rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}
cal = create_calibrator(model, augmented_model_path=model + f".{mode}.aug.onnx",
                        calibrate_method=CalibrationMethod.Percentile, extra_options={"num_bins": 2048})
if mode == "ort":
    cal.collect_data(Reader())
else:
    collect_streaming(cal, Reader())
ranges = cal.compute_data()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
print(json.dumps({"peak_mb": hwm, "tensors": len(ranges.data)}))
"""


def build(path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.normal(0, 0.2, (64, 3, 3, 3)).astype(np.float32), "w1"),
             nh.from_array(rng.normal(0, 0.05, (64, 64, 3, 3)).astype(np.float32), "w2"),
             nh.from_array(rng.normal(0, 0.1, (64, 10)).astype(np.float32), "w3")]
    nodes = [h.make_node("Conv", ["input", "w1"], ["c1"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c2"], ["r2"]),
             h.make_node("GlobalAveragePool", ["r2"], ["g"]), h.make_node("Flatten", ["g"], ["f"]),
             h.make_node("MatMul", ["f", "w3"], ["logits"])]
    graph = h.make_graph(nodes, "big_activations", [h.make_tensor_value_info("input", T.FLOAT, [1, 3, 128, 128])],
                         [h.make_tensor_value_info("logits", T.FLOAT, [1, 10])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=24)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "m.onnx"
        build(model)
        for mode in ("ort", "streamed"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(model), str(args.samples), mode, str(REPO)],
                                 capture_output=True, text=True, timeout=600)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if not line:
                print(mode, "failed:", out.stderr.strip().splitlines()[-1:])
                continue
            got = json.loads(line[-1])
            print(f"{mode:9s} {args.samples} samples: peak RSS {got['peak_mb']:.0f} MB ({got['tensors']} tensors)")


if __name__ == "__main__":
    main()
