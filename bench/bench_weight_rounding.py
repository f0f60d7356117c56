"""Does GPTQ weight rounding (``QuantConfig.weight_rounding``) help static int8, and what does it cost?

For each case (bundled samples and test fixtures with their own calibration and held-out evaluation data, as in
``bench_bias_correction.py``), the engine's pipeline builds the default static int8 twice, with nearest rounding
(``weight_rounding=False``) and with GPTQ, and verifies each against fp32 on every evaluation sample (never a
calibration sample). Prints per case: worst-output SQNR vs fp32, the task measure ortlab's verdict reads (confident
flips for a classifier, detection F1 and the score channels' SQNR for a detector, mean cosine for an encoder, changed
strings for a recognizer), the weight-rounding stage's seconds and its note's node counts. ``--detector MODEL
CALIBRATION EVALUATION`` adds a YOLO-style detector from outside the repository (``--size`` its input; the photos of
``bench_third_party.py``), built through the CLI with ``--preset yolo``.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_weight_rounding.py [--cases digits_cnn efficientnet_lite0 ...]
        [--detector 320n.onnx CAL_DIR EVAL_DIR --size 320]

Measured 2026-12-05 on main (float64 products, the committed code), an Intel Xeon VM (Sapphire Rapids class:
AVX-512 VNNI, BF16, AMX), 2 CPUs, onnxruntime 1.31.1 (nearest → GPTQ; every evaluation sample is a photo or line
neither step saw; the last row is nudenet 3.4.2's ``320n.onnx`` on the 400 unseen crops of ``bench_tune_unseen.py``'s
split, calibrated on its 100):

==================  ====  =====================  =================================  =================================  =====
case                n     worst SQNR (dB)        task, nearest                      task, GPTQ                         stage
==================  ====  =====================  =================================  =================================  =====
digits_cnn          360   36.07 → 36.41          flips 0 confident / 0 near-tie     0 / 0                              0.8 s
efficientnet_lite0  64    22.78 → 24.85          0 / 6                              0 / 2                              26 s
text_encoder        24    30.67 → 30.62          mean cosine 0.9997                 0.9997                             0.1 s
yolov8_detector     64    63.97 → 65.57          F1 0.929 (466 of 509), scores      F1 0.931 (478 of 509), scores      1.5 s
                                                 27.6 dB                            32.1 dB
320n.onnx           400   -                      F1 0.963 (287 of 298)              F1 0.961 (286 of 298)              20 s
==================  ====  =====================  =================================  =================================  =====

Every node of every case was re-rounded (all passed the held-back check). A detector's F1 on 298 reference
detections moves by a few detections between equally good roundings (float32 products at 512 positions gave 0.966,
288 of 298); the near-threshold score-logit error (``bench_detector_scope.py``'s measure, real int8 kernels) tells
them apart: 0.211 → 0.185 on the 400 unseen crops, ratio 0.88 (0.82–0.94, paired bootstrap over photos). The
EfficientNet-Lite0 default on the 1,000 ImageNet photos of ``bench_tune_unseen.py``'s labelled case (``ortlab
optimize --eval DIR --verify-samples 1000``, float32 products): logits SQNR 22.1 → 23.6 dB, top-1 agreement with fp32
97.9% → 98.6% (21 → 14 photos answered differently), top-1 against the labels 88.8% → 88.3% (fp32 88.6%: which of
the few changed answers happen to be right moves it by tenths of a point either way).
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
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from bench_bias_correction import case  # noqa: E402
from ortlab.runs.in_process import run_recipe  # noqa: E402
from ortlab.settings.config import Precision, QuantConfig, Recipe  # noqa: E402


def task_measure(ev) -> str:
    """The task measure of an evaluation report as one short text."""
    t = ev.task
    if t is None:
        return "-"
    if t.classification is not None:
        c = t.classification
        return f"flips {c.confident_flips(0.1)} conf / {c.near_tie_flips(0.1)} tie"
    if t.boxes:
        b = t.boxes[0]
        return f"F1 {b.f1:.3f} ({b.matched} of {b.ref_total} ref), scores {b.score_sqnr_db:.1f} dB"
    if t.embeddings:
        return f"mean cos {t.embeddings[0].mean_cosine:.4f}"
    if t.sequences:
        return f"strings changed {t.sequences[0].changed_fraction:.3f}"
    return t.task.value


def worst_sqnr(ev) -> float:
    finite = [o.sqnr_db for o in ev.outputs if np.isfinite(o.sqnr_db)]
    return min(finite) if finite else float("inf")


def rounding_note(notes) -> str:
    for n in notes:
        if n.startswith("GPTQ weight rounding"):
            head = n.split(",")[0].split(": ", 1)[-1]
            return head
    return "-"


def build_case(name: str, out: Path, rounding: bool):
    model, cal, ev, pre = case(name)
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(weight_rounding=rounding))
    return run_recipe(model, recipe, out, dataset=cal, verify_dataset=ev, preprocess=pre, verify_samples=len(ev))


def build_detector(model: str, cal: str, ev: str, size: int, out: Path, rounding: bool) -> dict:
    flags = [] if rounding else ["--no-weight-rounding"]
    cmd = [sys.executable, "-m", "ortlab", "optimize", model, str(out), "--precision", "int8", "--preset", "yolo",
           "--size", str(size), str(size), "--calibration", cal, "--eval", ev, "--verify-samples", "100000",
           "--no-timing", "--json", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode not in (0, 3):
        raise RuntimeError(done.stderr[-500:])
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["digits_cnn", "efficientnet_lite0", "text_encoder", "yolov8_detector"])
    ap.add_argument("--detector", nargs=3, metavar=("MODEL", "CALIBRATION", "EVALUATION"))
    ap.add_argument("--size", type=int, default=320)
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs")
    print("| case | n | worst SQNR nearest → GPTQ | task nearest | task GPTQ | GPTQ stage | re-rounded |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-wr-") as tmpdir:
        tmp = Path(tmpdir)
        for name in args.cases:
            try:
                a = build_case(name, tmp / name / "nearest", False)
                b = build_case(name, tmp / name / "gptq", True)
            except Exception as exc:  # a case that cannot be quantized at all says why
                print(f"| {name} | skipped: {type(exc).__name__}: {str(exc)[:150]} |")
                continue
            print(f"| {name} | {b.evaluation.n_samples} | {worst_sqnr(a.evaluation):.2f} → {worst_sqnr(b.evaluation):.2f} dB "
                  f"| {task_measure(a.evaluation)} | {task_measure(b.evaluation)} "
                  f"| {b.timings.get('weight_rounding', 0):.1f} s | {rounding_note(b.notes)} |", flush=True)
        if args.detector:
            model, cal, ev = args.detector
            runs = {r: build_detector(model, cal, ev, args.size, tmp / f"det_{r}", r) for r in (False, True)}
            row = []
            for r in (False, True):
                boxes = runs[r]["evaluation"]["task"]["boxes"][0]
                row.append(f"F1 {boxes['matched'] * 2 / (boxes['ref_total'] + boxes['cand_total']):.3f} "
                           f"({boxes['matched']} of {boxes['ref_total']} ref)")
            b = runs[True]
            note = next((n.split(",")[0].split(": ", 1)[-1] for n in b["notes"] if n.startswith("GPTQ")), "-")
            print(f"| {Path(model).name} | {b['evaluation']['n_samples']} | - | {row[0]} | {row[1]} "
                  f"| {b.get('timings', {}).get('weight_rounding', 0):.1f} s | {note} |")


if __name__ == "__main__":
    main()
