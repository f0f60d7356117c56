"""Does empirical bias correction (``QuantConfig.bias_correction``) help static int8, and what does it cost?

For each case (bundled samples and test fixtures with their own calibration and held-out evaluation data), the
engine's pipeline builds int8 static QDQ (U8S8 per-channel MinMax, opt level extended) twice, without and with bias
correction, and verifies each against fp32 on every evaluation sample (never a calibration sample). Prints per case:
worst-output SQNR vs fp32, classification flips split by fp32 confidence (softmax margin ≥ 0.1 = confident), and
the time the correction stage took. With ``--latency``, the fp32 source and both int8 results are timed interleaved
in one process (batch 1, ORT defaults): per round each model runs ``--iters`` times, and the p50 ratio fp32/int8 of
each round is collected; the median and the min–max across rounds are printed.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_bias_correction.py [--cases digits_cnn efficientnet_lite0 ...]
        [--latency] [--rounds 7] [--iters 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from ortlab.data.loaders import load_image_folder, load_tensor_file, load_text_file  # noqa: E402
from ortlab.data.samples import load_manifest  # noqa: E402
from ortlab.runs.in_process import run_recipe  # noqa: E402
from ortlab.settings.config import Precision, QuantConfig, Recipe  # noqa: E402

FIX = REPO / "tests" / "fixtures"
SAMPLES = REPO / "sample_models"
PHOTOS = SAMPLES / "efficientnet_lite0"


def case(name: str):
    """(model path, calibration Dataset, evaluation Dataset, preprocess or None)."""
    if (SAMPLES / name / "manifest.json").is_file():
        s = load_manifest(SAMPLES / name / "manifest.json")
        return s.model_path, s.calibration_data(), s.evaluation_data(), s.preprocess
    if name == "vad_rnn":
        return FIX / "vad_rnn.onnx", load_tensor_file(FIX / "vad_calibration.npz"), \
            load_tensor_file(FIX / "vad_evaluation.npz"), None
    if name == "text_encoder":
        tok = (FIX / "text_tokenizer.json").read_text()
        return FIX / "text_encoder.onnx", load_text_file(FIX / "text_calibration.txt", tok, 32), \
            load_text_file(FIX / "text_evaluation.txt", tok, 32), None
    # image fixtures (detectors, fp16_net) read the photos of the EfficientNet sample
    return FIX / f"{name}.onnx", load_image_folder(PHOTOS / "calibration"), load_image_folder(PHOTOS / "evaluation"), None


def build(name: str, out: Path, bc: bool):
    model, cal, ev, pre = case(name)
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(bias_correction=bc))
    art = run_recipe(model, recipe, out, dataset=cal, verify_dataset=ev, preprocess=pre, verify_samples=len(ev))
    return model, art


def summary(art) -> dict:
    ev = art.evaluation
    finite = [o.sqnr_db for o in ev.outputs if np.isfinite(o.sqnr_db)]
    cls = ev.task.classification if ev.task is not None else None
    return {"sqnr": min(finite) if finite else float("inf"), "n": ev.n_samples,
            "confident": cls.confident_flips(0.1) if cls else None, "near_tie": cls.near_tie_flips(0.1) if cls else None,
            "bc_s": art.timings.get("bias_correction"), "verdict": art.verdict.level if art.verdict else None}


def feed_for(sess: ort.InferenceSession) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def latency(paths: dict[str, Path], rounds: int, iters: int) -> dict[str, tuple[float, float, float]]:
    """fp32 p50 / variant p50 per round, interleaved: (median, min, max) per variant."""
    sessions = {k: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for k, p in paths.items()}
    feed = feed_for(sessions["fp32"])
    for s in sessions.values():
        for _ in range(5):
            s.run(None, feed)
    ratios: dict[str, list[float]] = {k: [] for k in paths if k != "fp32"}
    for _ in range(rounds):
        p50 = {}
        for k, s in sessions.items():
            t = []
            for _ in range(iters):
                t0 = time.perf_counter()
                s.run(None, feed)
                t.append(time.perf_counter() - t0)
            p50[k] = statistics.median(t)
        for k in ratios:
            ratios[k].append(p50["fp32"] / p50[k])
    return {k: (statistics.median(v), min(v), max(v)) for k, v in ratios.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["digits_cnn", "efficientnet_lite0"])
    ap.add_argument("--latency", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs")
    print(f"{'case':20} {'n':>4} {'SQNR plain':>10} {'SQNR bc':>8} {'gain':>6} {'flips plain (conf/tie)':>22} "
          f"{'flips bc (conf/tie)':>20} {'bc time':>8}")
    with tempfile.TemporaryDirectory(prefix="bench-bc-") as tmpdir:
        tmp = Path(tmpdir)
        for name in args.cases:
            try:
                model, plain = build(name, tmp / name / "plain", False)
                _, bc = build(name, tmp / name / "bc", True)
            except Exception as exc:  # a case that cannot be quantized at all says why
                print(f"{name:20} skipped: {type(exc).__name__}: {str(exc)[:150]}")
                continue
            a, b = summary(plain), summary(bc)
            flips = lambda s: "n/a" if s["confident"] is None else f"{s['confident']}/{s['near_tie']}"
            print(f"{name:20} {a['n']:>4} {a['sqnr']:>10.2f} {b['sqnr']:>8.2f} {b['sqnr'] - a['sqnr']:>+6.2f} "
                  f"{flips(a):>22} {flips(b):>20} {b['bc_s'] or 0:>7.2f}s")
            if args.latency:
                lat = latency({"fp32": Path(model), "int8": plain.model_path, "int8+bc": bc.model_path},
                              args.rounds, args.iters)
                print("    latency fp32/variant p50 ratio (median, min-max over rounds): " + ", ".join(
                    f"{k} {m:.2f}x ({lo:.2f}-{hi:.2f})" for k, (m, lo, hi) in lat.items()))


if __name__ == "__main__":
    main()
