"""Where does a YOLO detector's int8 error come from? Variants of the default static int8 recipe, each scored on
photos no search saw, to tell which lever could lift detection F1 vs fp32 above the default's.

Each variant is made by ``ortlab optimize`` (in this process, its ``--json``) from the same calibration photos, then
compared with the fp32 source on the held-back evaluation photos (the files ``bench_tune_unseen.py --seen-share``
keeps from tune: with 700 evaluation crops and 300/700, the 400 unseen) by the evaluation the verdict uses; each
row prints detection F1 with its 95% interval and evidence, the paired difference to the default on the same photos
(bootstrap, 95%), and its speed at batch 1 against the default, head to head (interleaved rounds in one run; the
default's own row: against fp32). Speed-ups against fp32 taken minutes apart differ by more than their intervals on a
VM (the same two recipes 1.76× and 1.95× against fp32, 0.98× head to head), so variants are timed against the default.

Variants: ``default`` (ortlab's own: stem, DFL and decode in float); ``head/neck/backbone float`` (also every Conv of
that part in float: a third of the activations each); ``int16 weights`` (16-bit weights on every Conv outside the
float scope: weight rounding error gone, activations still int8 — what any rounding optimization, AdaRound or GPTQ,
could at best reach); ``Entropy``/``Percentile`` calibration; ``no SiLU-aware ranges`` (each SiLU input quantized on
its whole calibrated range, as before the default cut it, ``ortlab.transforms.silu_range``); ``QDQ simulated`` (the default's QDQ graph with
ONNX Runtime's optimizations off: the int8 rounding alone, without the fused int8 kernels); ``fp16`` (the floor of
a near-lossless change: detections so near the threshold that any change flips them).

    ORT_DISABLE_TELEMETRY=1 python bench/bench_detector_scope.py --models DIR --data DIR [--seen-share 0.4286] \
        [--variants LABEL …]   # the default and these only

Measured 2026-12-04 on main at 57ae31c (+ this script), AMD EPYC (Zen 4) VM, 2 CPUs, AVX-512 with VNNI and BF16,
load average 3.3; nudenet 3.4.2's ``320n.onnx`` (YOLOv8n, 320×320), 100 calibration crops, 400 unseen crops of the
prepared data (298 reference detections). Detection F1 vs fp32 (95%) · paired − default (95%) · speed:

* default: 0.963 (0.935–0.979) · — · 1.96× (1.95–1.97×) vs fp32, 40 rounds (1.76× in a run 10 minutes earlier)
* head Convs float: 0.964 (0.936–0.980) · +0.000 (−0.010 to +0.011) · 0.91× the default
* neck Convs float: 0.955 (0.925–0.973) · −0.009 (−0.021 to +0.003) · 0.97×
* backbone Convs float: 0.949 (0.918–0.969) · −0.014 (−0.032 to +0.003) · 0.96×
* int16 weights (every Conv outside the float scope): 0.961 (0.933–0.978) · −0.002 (−0.017 to +0.011) · 0.32×
* Entropy: 0.484 (0.415–0.553) · −0.480 · 0.99×; Percentile: 0.757 (0.699–0.806) · −0.207 · 0.99×
* QDQ simulated (the default's QDQ graph, optimizations off): 0.968 (0.942–0.983) · +0.005 (−0.006 to +0.017)
* fp16: 0.997 (0.981–1.000) · +0.033 (+0.019 to +0.051)

What it shows: the default's loss is in its int8 activations, spread over the network, not in one part and not in its
weights. Weight rounding error removed (16-bit weights) leaves F1 where it was, so no rounding optimization (AdaRound,
GPTQ) or bias correction can lift it; a third of the network's activations in float (any third) moves F1 by less
than the interval and costs 3–9% of the speed; int8 rounding alone, without ONNX Runtime's fused kernels, is 0.968.
F1 ≥ 0.97 on these photos is within the intervals of the default and of every MinMax variant, but no variant is
shown above the default.

Measured 2026-12-05 on main at f19b84a (SiLU-aware ranges on by default), an Intel Xeon VM (Sapphire Rapids class:
AVX-512, VNNI, AVX-512 BF16, AMX), 2 CPUs, quiet (load average 1.4); the same data rebuilt from the wheels
(``bench_tune_unseen.py --prepare --eval-crops 700``), ``--variants "no SiLU-aware ranges"``:

* default: 0.963 (0.935–0.979), 298 reference detections in 400 photos; score SQNR 14.5 dB; 1.52× (1.50–1.53×) vs
  fp32, 40 rounds (1.91× (1.89–1.93×) in a run beside the test suite: the load slows fp32 more than int8)
* no SiLU-aware ranges: 0.963 (0.935–0.979); score SQNR 14.3 dB; +0.000 (−0.017 to +0.016) vs the default; speed
  1.00× (1.00–1.01×) the default's (same graph)

The cut (50 SiLU inputs, median int8 step 0.82× the calibrated range's) lowers the error of the score logits near
the decision threshold (reference score 0.1–0.6: 3,835 values in 196 of the 400 photos) from 0.230 (0.215–0.246)
to 0.211 (0.194–0.228) rms, a ratio of 0.92 (0.85–0.98, paired bootstrap over photos); detection F1 does not move:
at this noise a few detections within ±0.05 of the 0.3 threshold flip either way. By the same measure, 16-bit weights
on every quantized Conv give 0.222 and the SiLU outputs are now the largest int8 error left; cutting the top of
their ranges (MSE-optimal ranges) breaks the detector (F1 0.79).

Measured 2026-12-07 on main at d0e0000 (+ score-aware ranges), the same Xeon VM (load average 0.9–1.3), the same
data, timed 10–20 s a variant:

* default: 0.965 (0.937–0.980), 298 reference detections; score SQNR 14.7 dB; 1.72× (1.71–1.74×) vs fp32, 79 rounds
* score branch float, all scales: 0.973 (0.948–0.986); 22.2 dB; +0.009 (−0.001 to +0.019); 0.88× the default
* score branch float, strides 16+32: 0.967 (0.940–0.982); 14.7 dB; +0.002 (−0.005 to +0.010); 0.95×
* score branch float, stride 8: 0.971 (0.945–0.985); 21.9 dB; +0.007 (+0.001 to +0.013); 0.93×
* the three score-logit Convs float: 0.963 (0.935–0.979); 20.8 dB; −0.002 (−0.006 to +0.000); 0.99×

The score SQNR lost by int8 is in the stride-8 output's last rounding: its logits calibrated to −25.2..0.0, so the
int8 model capped every stride-8 score at 0.5 (fp32: 287 anchors above 0.5 in 200 unseen photos; int8: none).
Score-aware ranges (``ortlab.transforms.score_range``, on by default) raise the top of those logits' ranges to 4.6
(a score of 0.99), the low end kept:

* default with them: 0.963 (0.935–0.979); score SQNR 20.7 dB; without them 0.965, 14.7 dB, +0.002 (−0.006 to
  +0.009), 1.00× (0.99–1.01×) the speed (same graph). ``ortlab compare --threshold 0.5`` on all 700 crops: F1 0.93
  (236 of 256 reference detections) with them, 0.78 (167 of 256, BROKEN) without; at 0.3, 0.96 either way.

Tune now tries the stride-8 (40×40) part of the branch before the whole (``SearchStrategy.decision_head_trial``) and
picks it when the two are preferred alike and it is the faster head to head: ``bench_tune_unseen.py``'s row of
2026-12-07 (unseen F1 0.971, 1.62× against the default's 1.74×).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import onnx  # noqa: E402

import bench_third_party as third_party  # noqa: E402
from bench_tune_unseen import CASES, machine, preprocess_of, split_folder  # noqa: E402
from ortlab.checks import evaluate as evaluation  # noqa: E402
from ortlab.runs.runspec import DataRef  # noqa: E402
from ortlab.runs.tune_evidence import evidence_of  # noqa: E402
from ortlab.runs.tune_recommend import interval, paired_difference  # noqa: E402
from ortlab.runtime import providers  # noqa: E402
from ortlab.settings.config import BenchConfig, OptLevel  # noqa: E402
from ortlab.timing.child_runs import PairTimer  # noqa: E402

MODEL = "320n.onnx"
STEM_AND_DFL = ("/model.0/", "/model.1/", "/model.2/cv1/", "/model.22/dfl")
PARTS = {"head": ("model.22",), "neck": ("model.12", "model.15", "model.16", "model.18", "model.19", "model.21"),
         "backbone": ("model.3", "model.4", "model.5", "model.6", "model.7", "model.8", "model.9")}


@dataclass(frozen=True)
class Variant:
    label: str
    flags: tuple[str, ...] = ()
    qdq_simulated: bool = False  # evaluate the default's QDQ graph with ORT's optimizations off
    timed: bool = True


def convs(model: onnx.ModelProto, block_ids: tuple[str, ...] | None = None) -> str:
    """The Conv nodes of the blocks ``block_ids`` (``/model.N/…``), or every Conv outside the stem and DFL."""
    names = [n.name for n in model.graph.node if n.op_type == "Conv"]
    if block_ids is None:
        return ",".join(n for n in names if not n.startswith(STEM_AND_DFL))
    return ",".join(n for n in names if n.count("/") > 1 and n.split("/")[1] in block_ids and "dfl" not in n)


def branch(model: onnx.ModelProto, scales: tuple[int, ...]) -> str:
    """Every node of the class-score branch ``cv3`` at the head's ``scales`` (0: stride 8, 1: 16, 2: 32)."""
    prefixes = tuple(f"/model.22/cv3.{i}/" for i in scales)
    return ",".join(n.name for n in model.graph.node if n.name.startswith(prefixes))


def variants(model: onnx.ModelProto) -> list[Variant]:
    out = [Variant("default")]
    out += [Variant(f"score branch {label} float", ("--exclude-nodes", branch(model, scales)))
            for label, scales in (("all scales", (0, 1, 2)), ("strides 16+32", (1, 2)), ("stride 8", (0,)))]
    out += [Variant("score logits Convs float", ("--exclude-nodes", ",".join(
                f"/model.22/cv3.{i}/cv3.{i}.2/Conv" for i in range(3)))),
            Variant("stride 8 score logits Conv float", ("--exclude-nodes", "/model.22/cv3.0/cv3.0.2/Conv"))]
    out += [Variant(f"{part} Convs float", ("--exclude-nodes", convs(model, ids))) for part, ids in PARTS.items()]
    out += [Variant("int16 weights", ("--int16-weight-nodes", convs(model))),
            Variant("Entropy", ("--calibration-method", "Entropy")),
            Variant("Percentile", ("--calibration-method", "Percentile")),
            Variant("no SiLU-aware ranges", ("--no-silu-range",)),
            Variant("no score-aware ranges", ("--no-score-range",)),
            Variant("QDQ simulated", qdq_simulated=True, timed=False),
            Variant("fp16", ("--precision", "fp16"), timed=False)]
    return out


def make(v: Variant, src: Path, calibration: Path, unseen: Path, out: Path) -> Path | None:
    """``ortlab optimize`` of ``v`` into ``out``; None when it failed (printed)."""
    flags = list(v.flags) if "--precision" in v.flags else ["--precision", "int8", *v.flags]
    step = third_party.ortlab(v.label, ["optimize", str(src), str(out), *flags, "--preset", "yolo", "--size", "320",
                                        "320", "--calibration", str(calibration), "--eval", str(unseen),
                                        "--verify-samples", "8", "--no-timing"])
    if not out.is_file():
        print(f"    {v.label}: no model ({step.error or step.code})")
        return None
    return out


def without_optimizations(path: Path):
    """A session of ``path`` with every graph optimization off (the QDQ graph computed as written)."""
    return providers.create_session(path, options=providers.session_options(opt_level=OptLevel.DISABLED))


def qdq_as_written(plain):
    """``create_session`` that opens a ``*.qdq.onnx`` without optimizations and anything else with ``plain``."""
    def create(path, *args, **kwargs):
        return without_optimizations(path) if str(path).endswith(".qdq.onnx") else plain(path, *args, **kwargs)
    return create


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="folder with nudenet's 320n.onnx")
    ap.add_argument("--data", type=Path, required=True, help="folder with photos/calibration, photos/evaluation")
    ap.add_argument("--seen-share", type=float, default=300 / 700,
                    help="share of the evaluation crops left out (tune's, in bench_tune_unseen.py); the rest is scored")
    ap.add_argument("--timing-s", type=float, default=10.0, help="seconds of interleaved timing per variant")
    ap.add_argument("--variants", nargs="+", metavar="LABEL", help="only these variants (default and all others)")
    args = ap.parse_args(argv)
    chosen = [v for v in variants(onnx.load(str(args.models / MODEL), load_external_data=False))
              if not args.variants or v.label in ("default", *args.variants)]
    src = args.models / MODEL
    work = Path(tempfile.mkdtemp(prefix="ortlab-scope-"))
    try:
        split_folder(args.data / "photos" / "evaluation", work / "seen", work / "unseen", args.seen_share)
        unseen = DataRef(path=str(work / "unseen")).load(None)
        pre = preprocess_of(src, CASES["yolov8n"])
        print(f"{MODEL}: {len(unseen)} unseen photos; {machine()}", flush=True)
        made: dict[str, Path] = {}
        for v in chosen:
            if v.qdq_simulated:
                made[v.label] = made["default"].with_name("default.qdq.onnx") if "default" in made else Path()
            elif (path := make(v, src, args.data / "photos" / "calibration", work / "unseen",
                               work / f"{v.label.replace(' ', '_')}.onnx")) is not None:
                made[v.label] = path
        base = None
        shapes = dict(CASES["yolov8n"].shapes)
        cfg = BenchConfig(warmup=3, duration_s=args.timing_s, session_opt_level=OptLevel.ALL)
        with PairTimer(src, shapes=shapes) as vs_fp32, PairTimer(made["default"], shapes=shapes) as vs_default:
            for v in chosen:
                path = made.get(v.label)
                if path is None or not path.is_file():
                    continue
                plain = evaluation.create_session
                if v.qdq_simulated:
                    evaluation.create_session = qdq_as_written(plain)
                try:
                    report = evaluation.evaluate(src, path, unseen, pre)
                    e = evidence_of(report)
                finally:
                    evaluation.create_session = plain
                if e is None or (iv := interval(e)) is None:
                    continue
                base = e if v.label == "default" else base
                d = paired_difference(e, base) if base is not None and v.label != "default" else None
                timer = vs_fp32 if v.label == "default" else vs_default
                speed = third_party.speed(timer, path, None, cfg.duration_s) if v.timed else "-"
                boxes = report.task.boxes if report.task is not None else []
                sqnr = f"score SQNR {boxes[0].score_sqnr_db:.1f} dB; " if boxes else ""
                print(f"  {v.label:<22} {e.measure} {iv.value:.3f} ({iv.low:.3f}–{iv.high:.3f}), {e.text()}; {sqnr}"
                      f"vs default {d.text(signed=True) if d else '-'}; speed "
                      f"{'vs fp32' if v.label == 'default' else 'vs the default'} {speed}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
