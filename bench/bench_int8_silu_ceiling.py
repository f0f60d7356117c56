"""How fast can an int8 YOLOv8n run on this CPU, and what holds it back? The default int8 (``ortlab optimize``),
the same graph with each SiLU's two int8 kernels replaced by one lookup-table kernel (timing only), the default with
every SiLU left in float, and every node int8 (no known patterns: the stem and the head's post-processing quantized
too), timed interleaved against the fp32 source by ``ortlab bench`` (batch 1).

ONNX Runtime's CPU provider runs an int8 SiLU (``x · sigmoid(x)``) as two kernels, QLinearSigmoid (a 256-entry
lookup table) and QLinearMul; it has no int8 SiLU and no lookup-table op that takes a table (its only lookup kernels
are QLinearSigmoid and QLinearLeakyRelu, whose tables it builds from their own function). The ``one-kernel SiLU``
variant replaces each QLinearSigmoid + QLinearMul pair on the same input by one QLinearLeakyRelu with the pair's
input and output scales: the cost of one lookup pass, the speed an int8 SiLU kernel would buy. **Its outputs are not
the model's** (it computes a leaky ReLU): it is timed, never scored. The pair exists only in ONNX Runtime's own fused
graph, so every model here (the fp32 source too) is saved after ONNX Runtime's ``all`` optimizations on this machine
and timed as saved (``ortlab bench --session-opt-level disabled``): the same graphs ONNX Runtime would run.

    ORT_DISABLE_TELEMETRY=1 python bench/bench_int8_silu_ceiling.py --models DIR --data DIR [--duration 20]

Measured 2026-12-07 on main at e69734d (+ this script), an Intel Xeon VM (Sapphire Rapids class: AVX-512, VNNI,
AVX-512 BF16, AMX), 2 CPUs, load average 1.2–2.0, onnxruntime 1.31.1, nudenet 3.4.2's ``320n.onnx`` (YOLOv8n,
320×320), the 100 calibration crops of ``bench_tune_unseen.py --prepare``, 20 s each, vs fp32, twice:

* default int8: 1.72× (1.71–1.74×), 1.70× (1.69–1.71×)
* one-kernel SiLU (54 pairs, timing only): **1.97× (1.96–1.99×), 1.96× (1.93–1.97×)**: 1.14–1.15× the default
* SiLUs in float (57 Sigmoid + Mul pairs excluded): 1.38× (1.37–1.39×) both times
* every node int8: 1.65× (1.64–1.66×)

Beside them (``ortlab bench``, 15 s each, the graphs optimized at load): the default with its float stem quantized as
well (``--no-known-patterns --no-bias-correction`` and the head's 24 post-processing nodes excluded) 1.67×
(1.64–1.69×), with only the first Conv unit in float 1.71× (1.70–1.73×), against the default's 1.72× (1.71–1.74×):
at 160×160 and 80×80 the int8 SiLU's two passes cost more than the float Conv's. On this CPU no graph of stock ONNX
Runtime kernels runs this detector at 1.8× its fp32 source; an int8 SiLU kernel would (1.96–1.97×). A model that
needs a kernel of ortlab's own would not run in the ONNX Runtime the person deploys, so ortlab does not write one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import helper  # noqa: E402

from bench_tune_unseen import machine  # noqa: E402
from ortlab.model.graph_index import GraphIndex  # noqa: E402
from ortlab.model.patterns import is_silu  # noqa: E402

MODEL = "320n.onnx"


def ortlab(*argv: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ortlab", *argv], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "ORTLAB_HOME": str(home)})  # not the person's History


def optimized(model: Path, out: Path) -> Path:
    """``model`` as ONNX Runtime's CPU provider runs it after every optimization (QDQ groups fused into QLinear
    kernels, layouts chosen for this CPU), saved to ``out``."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3  # its warning that the saved graph is for this machine only: that is the point here
    ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return out


def one_kernel_silu(model: onnx.ModelProto) -> int:
    """Replace, in place, each QLinearSigmoid + QLinearMul pair on one input by a QLinearLeakyRelu with the pair's
    input and output quantization; the count replaced."""
    made_by = {o: n for n in model.graph.node for o in n.output}
    kept, gone, replaced = [], set(), 0
    for n in model.graph.node:
        if n.op_type == "QLinearMul":
            sig = next((p for a, b in ((n.input[0], n.input[3]), (n.input[3], n.input[0]))
                        if (p := made_by.get(b)) is not None and p.op_type == "QLinearSigmoid" and p.input[0] == a),
                       None)
            if sig is not None:
                kept.append(helper.make_node("QLinearLeakyRelu", [sig.input[0], sig.input[1], sig.input[2],
                                                                  n.input[6], n.input[7]], [n.output[0]],
                                             name=f"{n.name}/one_kernel", domain="com.microsoft", alpha=0.1))
                gone.add(sig.name)
                replaced += 1
                continue
        kept.append(n)
    del model.graph.node[:]
    model.graph.node.extend(n for n in kept if n.name not in gone)
    return replaced


def silu_nodes(model: onnx.ModelProto) -> str:
    """The Sigmoid and Mul nodes of every SiLU (``Mul(x, Sigmoid(x))``, :func:`ortlab.model.patterns.is_silu`) in the
    fp32 ``model``."""
    g = GraphIndex(model)
    names = []
    for n in g.nodes:
        if is_silu(g, n):
            sigmoid = next(g.producer[i] for i in n.input if i in g.producer and g.producer[i].op_type == "Sigmoid")
            names += [sigmoid.name, n.name]
    return ",".join(names)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="folder with nudenet's 320n.onnx")
    ap.add_argument("--data", type=Path, required=True, help="folder with photos/calibration")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of interleaved timing per model")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ortlab-silu-"))
    try:
        return measure(args.models / MODEL, args.data / "photos" / "calibration", work, args.duration)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(src: Path, calibration: Path, work: Path, duration: float) -> int:
    """Make the int8 models of ``src`` in ``work``, time them against it and print the rows."""
    home = work / "home"
    common = ["--precision", "int8", "--preset", "yolo", "--size", "320", "320",
              "--calibration", str(calibration), "--no-timing", "-q"]
    print(f"{MODEL}; {machine()}; onnxruntime {ort.__version__}", flush=True)
    made = ortlab("optimize", str(src), str(work / "default"), *common, home=home)
    if made.returncode != 0:
        print(f"ortlab optimize failed: {made.stderr.strip()[-400:]}")
        return 1
    floats = silu_nodes(onnx.load(str(src), load_external_data=False))
    made = ortlab("optimize", str(src), str(work / "silu_float"), *common, "--exclude-nodes", floats, home=home)
    if made.returncode != 0:
        print(f"ortlab optimize (SiLUs in float) failed: {made.stderr.strip()[-400:]}")
        return 1
    fp32 = optimized(src, work / "fp32.onnx")
    default = optimized(work / "default" / "model.onnx", work / "default.onnx")
    made = ortlab("optimize", str(src), str(work / "every_node"), *common, "--no-known-patterns",
                  "--no-weight-rounding", "--no-bias-correction", home=home)  # the roundings do not change speed
    if made.returncode != 0:
        print(f"ortlab optimize (every node int8) failed: {made.stderr.strip()[-400:]}")
        return 1
    lut = onnx.load(str(default))
    count = one_kernel_silu(lut)
    onnx.save(lut, str(work / "one_kernel_silu.onnx"))
    print(f"one-kernel SiLU: {count} QLinearSigmoid + QLinearMul pairs replaced (timing only); "
          f"SiLUs in float: {floats.count(',') // 2 + 1} Sigmoid + Mul pairs excluded", flush=True)
    models = {"default int8": default, "one-kernel SiLU": work / "one_kernel_silu.onnx",
              "SiLUs in float": optimized(work / "silu_float" / "model.onnx", work / "silu_float.onnx"),
              "every node int8": optimized(work / "every_node" / "model.onnx", work / "every_node.onnx")}
    got = ortlab("bench", str(fp32), *map(str, models.values()), "--json", "-q", "--duration", f"{duration:g}",
                 "--session-opt-level", "disabled", "--shape", "images=1,3,320,320", home=home)
    if got.returncode != 0:
        print(f"ortlab bench failed: {got.stderr.strip()[-400:]}")
        return 1
    rows = [x for x in json.loads(got.stdout)["speedups"] if x.get("interleaved")]
    for label, row in zip(models, rows):
        print(f"  {label:<16} {row['speedup']:.2f}× ({row['low']:.2f}–{row['high']:.2f}×) vs fp32, interleaved, "
              f"{duration:g} s each", flush=True)
    if len(rows) == len(models):
        print(f"  one-kernel SiLU ÷ default: {rows[1]['speedup'] / rows[0]['speedup']:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
