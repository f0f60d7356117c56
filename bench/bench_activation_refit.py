"""Can fitting each Conv's weights to its int8 inputs lift the YOLOv8n detector's F1 (issue 36)? A measurement, not a
feature: activation-aware weight refitting in the spirit of AdaQuant (Hubara, Nahshan, Hanani, Banner, Soudry,
"Accurate Post Training Quantization With Small Calibration Sets", ICML 2021), which fits each layer's weights so
that the layer, fed the *quantized* network's input, reproduces the float network's output, with its integer
constraint relaxed to a closed-form ridge regression, then rounded to the int8 grid ORT chose.

For each Conv of ortlab's default int8 QDQ graph, in graph order (each layer after the ones before it were refit):

1. the float source runs on the calibration crops with that Conv's float input exposed (``X``), the current QDQ
   graph (optimizations off: the values as written) with the Conv's dequantized input exposed (``X̂``);
2. both are unfolded into patches at the same positions (up to ``--rows`` of them), and
   ``[W' b'] = argmin ‖[X̂ 1]·[W' b']ᵀ − (X·Wᵀ + b)‖² + λ‖[W' b'] − [W b]‖²`` (λ: ``--ridge`` times the mean diagonal
   of the Gram matrix), W and b the float source's;
3. ``W'`` is rounded with the weight's own per-channel scales (clipped to int8) and ``b'`` with the bias's int32
   scale; the refit is kept only if it lowers the layer's output error on a quarter of the crops held back.

Then the default and the refit model are scored against fp32 on the unseen crops (detection F1, paired bootstrap
over photos) and timed against each other.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_activation_refit.py --models DIR --data DIR

Measured 2026-12-05 on main at 7945954 (+ this script), AMD EPYC (Zen 4) VM, 2 CPUs, AVX-512 with VNNI and BF16, load
average 1.5–3.5; nudenet 3.4.2's ``320n.onnx`` (YOLOv8n, 320×320), the default from 100 calibration crops, 400
unseen crops (298 reference detections). Detection F1 vs fp32 (95%) · paired − default (95%) · speed vs default:

* default: 0.963 (0.935–0.979); its QDQ graph run the same way: 0.963, +0.000
* refit, 32 crops, ridge 1e-3: 23 of 60 Convs kept (median layer gain 0.12 dB), 106 s · 0.935 (0.899–0.958) ·
  −0.029 (−0.050 to −0.007) · 0.97× (0.92–0.99×)
* refit, 64 crops, ridge 1e-2: 43 of 60 kept (0.16 dB), 240 s · 0.941 (0.907–0.963) · −0.022 (−0.042 to −0.004) · 1.01×
* refit, 64 crops, ridge 1e-1: 49 of 60 kept (0.15 dB), 247 s · 0.954 (0.923–0.972) · −0.010 (−0.026 to +0.007) · 1.00×

What it shows: each layer's own output error falls a little (0.1–0.2 dB where kept), and the detector's F1 falls
with it; the more the fit is held to the float weights (larger ridge), the nearer it stays to the default. Fitting
weights to int8 inputs layer by layer does not lift this model's F1 above the default's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import bench_third_party as third_party  # noqa: E402
from bench_detector_scope import MODEL, Variant, make  # noqa: E402
from bench_tune_unseen import CASES, machine, preprocess_of, split_folder  # noqa: E402
from ortlab.checks import evaluate as evaluation  # noqa: E402
from ortlab.data.feeds import batch_inputs  # noqa: E402
from ortlab.model.inspect import inspect_model  # noqa: E402
from ortlab.runs.runspec import DataRef  # noqa: E402
from ortlab.runs.tune_evidence import evidence_of  # noqa: E402
from ortlab.runs.tune_recommend import interval, paired_difference  # noqa: E402
from ortlab.settings.config import BenchConfig, OptLevel  # noqa: E402
from ortlab.timing.child_runs import PairTimer  # noqa: E402


def session(model: onnx.ModelProto | Path, outputs: list[str], optimized: bool = False) -> ort.InferenceSession:
    """A CPU session of ``model`` with ``outputs`` exposed (no graph optimization unless ``optimized``)."""
    m = onnx.load(str(model)) if isinstance(model, Path) else model
    m = onnx.ModelProto.FromString(m.SerializeToString())
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs if n not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(sess: ort.InferenceSession, x: np.ndarray, name: str) -> np.ndarray:
    inp = sess.get_inputs()[0].name
    return np.concatenate([sess.run([name], {inp: x[i:i + 1]})[0] for i in range(len(x))])


def patches(x: np.ndarray, k: tuple[int, int], stride: tuple[int, int], pads: list[int], where: np.ndarray) -> np.ndarray:
    """Rows ``C·kh·kw`` of ``x`` [N, C, H, W] at the output positions ``where`` [m, 3] (n, i, j)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(2, 3))  # N, C, H', W', kh, kw
    n, i, j = where[:, 0], where[:, 1] * stride[0], where[:, 2] * stride[1]
    return win[n, :, i, j].reshape(len(where), -1).astype(np.float64)


def dq_source(by_output: dict[str, onnx.NodeProto], name: str) -> onnx.NodeProto | None:
    node = by_output.get(name)
    return node if node is not None and node.op_type == "DequantizeLinear" else None


def refit(src: Path, qdq_path: Path, crops: np.ndarray, out: Path, rows: int, ridge: float) -> str:
    """Refit every int8 Conv of ``qdq_path`` in turn (module docstring); writes ``out``; a one-line account."""
    fp = onnx.load(str(src))
    fp_inits = {i.name: numpy_helper.to_array(i) for i in fp.graph.initializer}
    fp_tensors = {o for n in fp.graph.node for o in n.output} | {i.name for i in fp.graph.input}
    q = onnx.load(str(qdq_path))
    inits = {i.name: i for i in q.graph.initializer}
    by_output = {o: n for n in q.graph.node for o in n.output}
    rng = np.random.default_rng(0)
    held = np.arange(len(crops)) % 4 == 3
    kept = tried = 0
    gains: list[float] = []
    t0 = time.monotonic()
    for node in [n for n in q.graph.node if n.op_type == "Conv"]:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        if a.get("group", 1) != 1 or any(d != 1 for d in a.get("dilations", [1, 1])) or len(node.input) < 3:
            continue
        xdq, wdq, bdq = (dq_source(by_output, node.input[i]) for i in range(3))
        if xdq is None or wdq is None or bdq is None:
            continue
        xq_node = by_output.get(xdq.input[0])
        wname, bname = wdq.input[0], bdq.input[0]
        float_x = xq_node.input[0] if xq_node is not None and xq_node.op_type == "QuantizeLinear" else None
        w_float, b_float = wname.removesuffix("_quantized"), bname.removesuffix("_quantized")
        if float_x not in fp_tensors or w_float not in fp_inits or b_float not in fp_inits or wname not in inits:
            continue
        tried += 1
        W = fp_inits[w_float].astype(np.float64)
        b = fp_inits[b_float].astype(np.float64)
        cout = W.shape[0]
        k = tuple(W.shape[2:])
        stride = tuple(a.get("strides", [1, 1]))
        pads = list(a.get("pads", [0, 0, 0, 0]))
        X = run(session(fp, [float_x]), crops, float_x)
        Xh = run(session(q, [node.input[0]]), crops, node.input[0])
        ho = (X.shape[2] + pads[0] + pads[2] - k[0]) // stride[0] + 1
        wo = (X.shape[3] + pads[1] + pads[3] - k[1]) // stride[1] + 1
        grid = np.array([(n, i, j) for n in range(len(crops)) for i in range(ho) for j in range(wo)])
        fit_rows, held_rows = grid[~held[grid[:, 0]]], grid[held[grid[:, 0]]]
        fit_rows = fit_rows[rng.choice(len(fit_rows), min(rows, len(fit_rows)), replace=False)]
        held_rows = held_rows[rng.choice(len(held_rows), min(rows // 3, len(held_rows)), replace=False)]
        Wm = W.reshape(cout, -1)
        A, Ah = patches(X, k, stride, pads, fit_rows), patches(Xh, k, stride, pads, fit_rows)
        Y = A @ Wm.T + b
        A1 = np.hstack([Ah, np.ones((len(Ah), 1))])
        G = A1.T @ A1
        lam = ridge * float(np.mean(np.diag(G)))
        theta0 = np.hstack([Wm, b[:, None]]).T
        theta = np.linalg.solve(G + lam * np.eye(len(G)), A1.T @ Y + lam * theta0)
        w_scale = numpy_helper.to_array(inits[wdq.input[1]]).astype(np.float64)
        b_scale = numpy_helper.to_array(inits[bdq.input[1]]).astype(np.float64)
        ws = w_scale.reshape(-1, *([1] * (W.ndim - 1))) if w_scale.ndim else w_scale
        w_old = numpy_helper.to_array(inits[wname])
        b_old = numpy_helper.to_array(inits[bname])
        lo, hi = (-128, 127) if w_old.dtype == np.int8 else (0, 255)
        w_new = np.clip(np.round(theta[:-1].T.reshape(W.shape) / ws), lo, hi).astype(w_old.dtype)
        b_new = np.clip(np.round(theta[-1] / b_scale), -2**31, 2**31 - 1).astype(np.int32)
        # held-back check: the layer's output error with the old and the new integer weights
        B, Bh = patches(X, k, stride, pads, held_rows), patches(Xh, k, stride, pads, held_rows)
        target = B @ Wm.T + b
        old = Bh @ (w_old.astype(np.float64) * ws).reshape(cout, -1).T + b_old * b_scale
        new = Bh @ (w_new.astype(np.float64) * ws).reshape(cout, -1).T + b_new * b_scale
        e_old, e_new = float(np.mean((old - target) ** 2)), float(np.mean((new - target) ** 2))
        if e_new < e_old:
            inits[wname].CopyFrom(numpy_helper.from_array(w_new, wname))
            inits[bname].CopyFrom(numpy_helper.from_array(b_new, bname))
            kept += 1
            gains.append(10 * np.log10(e_old / e_new))
    onnx.save_model(q, str(out))
    med = f"{np.median(gains):.2f} dB" if gains else "-"
    return (f"refit {kept} of {tried} Convs (held-back layer error lower), median gain {med}, "
            f"{time.monotonic() - t0:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="folder with nudenet's 320n.onnx")
    ap.add_argument("--data", type=Path, required=True, help="folder with photos/calibration, photos/evaluation")
    ap.add_argument("--seen-share", type=float, default=300 / 700)
    ap.add_argument("--crops", type=int, default=32, help="calibration crops the refit uses")
    ap.add_argument("--rows", type=int, default=20000, help="patches per layer fitted on")
    ap.add_argument("--ridge", type=float, default=1e-3)
    ap.add_argument("--timing-s", type=float, default=10.0)
    ap.add_argument("--keep", type=Path, help="keep the work folder here")
    args = ap.parse_args(argv)
    src = args.models / MODEL
    work = args.keep or Path(tempfile.mkdtemp(prefix="ortlab-refit-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if not (work / "unseen").is_dir():
            split_folder(args.data / "photos" / "evaluation", work / "seen", work / "unseen", args.seen_share)
        unseen = DataRef(path=str(work / "unseen")).load(None)
        pre = preprocess_of(src, CASES["yolov8n"])
        print(f"{MODEL}: {len(unseen)} unseen photos; {machine()}", flush=True)
        default = work / "default.onnx"
        if not default.is_file():
            make(Variant("default"), src, args.data / "photos" / "calibration", work / "unseen", default)
        calibration = DataRef(path=str(args.data / "photos" / "calibration")).load(None)
        n = min(args.crops, len(calibration))
        feed = batch_inputs(calibration, list(range(n)), pre, inspect_model(src).inputs)
        x = next(iter(feed.values())).astype(np.float32)
        refit_path = work / "refit.qdq.onnx"
        print("  " + refit(src, default.with_name("default.qdq.onnx"), x, refit_path, args.rows, args.ridge),
              flush=True)
        base = None
        for label, path in (("default", default), ("default QDQ", default.with_name("default.qdq.onnx")),
                            ("refit", refit_path)):
            e = evidence_of(evaluation.evaluate(src, path, unseen, pre))
            if e is None or (iv := interval(e)) is None:
                continue
            base = e if base is None else base
            d = paired_difference(e, base) if label != "default" else None
            print(f"  {label:<12} {e.measure} {iv.value:.3f} ({iv.low:.3f}–{iv.high:.3f}), {e.text()}; vs default "
                  f"{d.text(signed=True) if d else '-'}", flush=True)
        cfg = BenchConfig(warmup=3, duration_s=args.timing_s, session_opt_level=OptLevel.ALL)
        with PairTimer(default, shapes=dict(CASES["yolov8n"].shapes)) as vs_default:
            print(f"  refit vs default speed {third_party.speed(vs_default, refit_path, None, cfg.duration_s)}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
