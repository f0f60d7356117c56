"""Does ``ortlab.bench.latency_samples`` measure the same latency as a bare ``session.run`` loop?

Interleaved rounds on one model (the digits_cnn sample; a small built-in Conv model when the sample is
missing): (a) the engine's generator, (b) a bare loop with ``time.perf_counter`` around ``session.run`` on a
session with identical options and identical inputs. Prints median per-run latency of each and the ratio
a/b (target: within ±3 %), plus the median gap between consecutive run ends, which also counts the
generator's own work.

    python bench/bench_generator_overhead.py [--rounds 10] [--runs 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from ortlab.bench import latency_samples  # noqa: E402
from ortlab.config import BenchConfig  # noqa: E402


def pick_model(tmp: Path) -> tuple[Path, str]:
    from ortlab.samples import samples_root

    sample = samples_root() / "digits_cnn" / "model.onnx"
    if sample.is_file():
        copy = tmp / "digits_cnn.onnx"  # a private copy: the sample folder may be rebuilt meanwhile
        copy.write_bytes(sample.read_bytes())
        return copy, "digits_cnn sample"
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.3, (10, 16)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "conv",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp / "conv.onnx"
    onnx.save(model, str(path))
    return path, "built-in Conv model"


def bare_session(model: Path, cfg: BenchConfig) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = cfg.intra_op_threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_mem_pattern = cfg.enable_mem_pattern
    so.enable_cpu_mem_arena = cfg.enable_cpu_mem_arena
    return ort.InferenceSession(str(model), sess_options=so, providers=["CPUExecutionProvider"])


def bare_loop(model: Path, cfg: BenchConfig, batch: int) -> tuple[list[float], list[float]]:
    """Per-run latencies (ms) and gaps between consecutive run ends (ms: latency + loop overhead)."""
    sess = bare_session(model, cfg)
    inp = sess.get_inputs()[0]
    shape = [batch if not isinstance(d, int) else d for d in inp.shape]
    feeds = {inp.name: np.random.default_rng(cfg.seed).standard_normal(shape).astype(np.float32)}
    for _ in range(cfg.warmup):
        sess.run(None, feeds)
    out, ends = [], []
    clock = time.perf_counter
    for _ in range(cfg.runs):
        t0 = clock()
        sess.run(None, feeds)
        t1 = clock()
        out.append((t1 - t0) * 1000.0)
        ends.append(t1)
    return out, list(np.diff(ends) * 1000.0)


def engine_loop(model: Path, cfg: BenchConfig, batch: int) -> tuple[list[float], list[float]]:
    samples = list(latency_samples(model, cfg, batch, variant="engine"))
    return [s.ms for s in samples], list(np.diff([s.t for s in samples]) * 1000.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, what = pick_model(Path(tmp))
        cfg = BenchConfig(warmup=50, runs=args.runs, intra_op_threads=1)
        print(f"model: {what} ({model.name}); {args.rounds} interleaved rounds × {args.runs} runs; "
              f"intra-op threads 1; ORT {ort.__version__}")
        print(f"{'batch':>5}  {'engine p50 ms':>13}  {'bare p50 ms':>11}  {'ratio':>7}  {'engine p90':>10}  "
              f"{'bare p90':>8}  {'engine gap':>10}  {'bare gap':>8}")
        worst = 0.0
        for batch in args.batch_sizes:
            eng: list[float] = []
            bare: list[float] = []
            eng_gap: list[float] = []
            bare_gap: list[float] = []
            for r in range(args.rounds):
                order = (engine_loop, bare_loop) if r % 2 == 0 else (bare_loop, engine_loop)
                for fn in order:
                    ms, gaps = fn(model, cfg, batch)
                    (eng if fn is engine_loop else bare).extend(ms)
                    (eng_gap if fn is engine_loop else bare_gap).extend(gaps)
            e50, b50 = float(np.median(eng)), float(np.median(bare))
            ratio = e50 / b50
            worst = max(worst, abs(ratio - 1))
            print(f"{batch:>5}  {e50:>13.4f}  {b50:>11.4f}  {ratio:>7.3f}  {np.percentile(eng, 90):>10.4f}  "
                  f"{np.percentile(bare, 90):>8.4f}  {np.median(eng_gap):>10.4f}  {np.median(bare_gap):>8.4f}")
        print(f"largest |ratio - 1| = {worst:.1%} (target ≤ 3%). 'gap' = median time between the ends of "
              f"consecutive runs (latency + the loop's own work per iteration).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
