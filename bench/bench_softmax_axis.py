"""Is a Softmax over an inner axis faster computed over the last axis between two Transposes (as ``ortlab optimize``
does when the Softmax reads a Transpose, :mod:`ortlab.transforms.softmax_axis`)?

Per case a small model ``x → [Transpose(perm) →] Softmax(axis) → y`` (opset 17) and the same model with the Softmax
rewritten (whatever it reads), each loaded by ONNX Runtime with its default optimizations (as a result is timed),
timed interleaved in one process: per round each model runs ``--iters`` times, the ratio of p50s (plain /
rewritten) of each round is collected, and the median with the min–max across rounds is printed, with each p50 and
the largest absolute difference of the outputs. With ``--models``, the same for whole models (the file and its
rewrite; symbolic input dims: 1 for the first, ``--size`` for the rest). Cases: a YOLOv8's distribution-focal-loss
head at 320 and 640 (``[1, 4, 16, A] → Transpose(0, 2, 1, 3) → Softmax(axis=1)``), and Softmaxes over an inner axis
that read no Transpose: a segmentation map's classes ([1, 21, 128, 128], axis 1), class scores ([1, 80, 8400],
axis 1), [1, 4, 16, 8400] over axis 2.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_softmax_axis.py [--rounds 15] [--iters 30] [--models A.onnx ...]

Measured 2026-12-06 on an Intel Xeon VM (Sapphire Rapids class: AVX-512, VNNI, AVX-512 BF16, AMX), 2 CPUs,
onnxruntime 1.31.1, 15 rounds × 30 runs; every output equal to the bit (max |difference| 0)::

    dfl 320: [1,4,16,2100] T(0,2,1,3), axis 1    4.55× (4.35–4.95×)  p50 1.272 → 0.277 ms
    dfl 640: [1,4,16,8400] T(0,2,1,3), axis 1    5.65× (5.24–6.52×)  p50 6.236 → 1.076 ms
    segmentation: [1,21,128,128], axis 1         1.02× (0.99–1.04×)  p50 3.489 → 3.439 ms
    class scores: [1,80,8400], axis 1            1.01× (0.95–1.05×)  p50 0.983 → 0.975 ms
    [1,4,16,8400], axis 2                        1.02× (0.97–1.07×)  p50 1.057 → 1.030 ms
    320n.onnx (nudenet's YOLOv8n, fp32, 1 rewritten)  1.09× (1.02–1.14×)  p50 12.812 → 11.686 ms

Where the Softmax reads a Transpose, ONNX Runtime's transpose optimizer merges it with the rewrite's and the
Softmax runs 4.5–5.7× faster; elsewhere the rewrite changes nothing measurable (hence ortlab's rule). Whole models,
interleaved with the fp32 source (``bench_bias_correction.latency``, 15 rounds × 20 runs): the YOLOv8n's default
int8 1.49× → 1.69×, tune's pick (the class-score branch in float) 1.34× → 1.49×.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from ortlab.transforms.softmax_axis import softmax_over_last_axis  # noqa: E402

DFL = [0, 2, 1, 3]
CASES = {  # name: (input shape, Transpose before the Softmax or None, Softmax axis)
    "dfl 320: [1,4,16,2100] T(0,2,1,3), axis 1": ([1, 4, 16, 2100], DFL, 1),
    "dfl 640: [1,4,16,8400] T(0,2,1,3), axis 1": ([1, 4, 16, 8400], DFL, 1),
    "segmentation: [1,21,128,128], axis 1": ([1, 21, 128, 128], None, 1),
    "class scores: [1,80,8400], axis 1": ([1, 80, 8400], None, 1),
    "[1,4,16,8400], axis 2": ([1, 4, 16, 8400], None, 2),
}


def small_models(shape: list[int], perm: list[int] | None, axis: int) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The case as it is, and rewritten (whatever the Softmax reads: the cases ortlab leaves alone are timed too)."""
    first = [helper.make_node("Transpose", ["x"], ["t"], perm=perm)] if perm else []
    h, out = ("t", [shape[i] for i in perm]) if perm else ("x", list(shape))
    swap = list(range(len(shape)))
    swap[axis], swap[-1] = swap[-1], swap[axis]
    plain = [helper.make_node("Softmax", [h], ["y"], axis=axis)]
    rewritten = [helper.make_node("Transpose", [h], ["l"], perm=swap), helper.make_node("Softmax", ["l"], ["s"], axis=-1),
                 helper.make_node("Transpose", ["s"], ["y"], perm=swap)]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    return tuple(helper.make_model(helper.make_graph(first + nodes, "softmax", *io),  # type: ignore[return-value]
                                   opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
                 for nodes in (plain, rewritten))


def feed_of(sess: ort.InferenceSession, size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: rng.normal(0, 2, size=[d if isinstance(d, int) else (1 if k == 0 else size)
                                           for k, d in enumerate(i.shape)]).astype(np.float32)
            for i in sess.get_inputs()}


def compare(plain: onnx.ModelProto, rewritten: onnx.ModelProto, rounds: int, iters: int, size: int
            ) -> tuple[float, float, float, float, float, float]:
    """(median, min, max of the per-round p50 ratio plain / rewritten, plain p50 ms, rewritten p50 ms,
    max |difference|)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = os.cpu_count() or 1
    a = ort.InferenceSession(plain.SerializeToString(), so, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(rewritten.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = feed_of(a, size)
    diff = max(float(np.abs(x - y).max()) for x, y in zip(a.run(None, feed), b.run(None, feed)))
    ratios, p50s = [], ([], [])
    for _ in range(rounds):
        p50 = []
        for s, kept in zip((a, b), p50s):
            t = []
            for _ in range(iters):
                t0 = time.perf_counter()
                s.run(None, feed)
                t.append(time.perf_counter() - t0)
            p50.append(statistics.median(t))
            kept.append(p50[-1])
        ratios.append(p50[0] / p50[1])
    return (statistics.median(ratios), min(ratios), max(ratios), 1000 * statistics.median(p50s[0]),
            1000 * statistics.median(p50s[1]), diff)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--size", type=int, default=320)
    ap.add_argument("--models", nargs="*", default=[], type=Path)
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs; ratio = plain p50 / rewritten p50 per round")
    todo = [(name, *small_models(*case)) for name, case in CASES.items()]
    for p in args.models:
        plain, rewritten = onnx.load(str(p)), onnx.load(str(p))
        done = softmax_over_last_axis(rewritten)
        todo.append((f"{p.name} ({len(done)} rewritten)", plain, rewritten))
    for name, plain, rewritten in todo:
        med, lo, hi, a, b, diff = compare(plain, rewritten, args.rounds, args.iters, args.size)
        print(f"{name:44} {med:.2f}× ({lo:.2f}–{hi:.2f}×)  p50 {a:.3f} → {b:.3f} ms  max |difference| {diff:.2g}",
              flush=True)


if __name__ == "__main__":
    main()
