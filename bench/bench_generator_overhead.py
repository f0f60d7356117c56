"""Do ``ortlab.timing.bench.latency_samples`` and ``latency_samples_isolated`` measure the same latency as a bare
``session.run`` loop?

Interleaved rounds on one model (the digits_cnn sample; a small built-in Conv model when the sample is
missing): (a) the engine's generator in this process, (b) a bare loop with ``time.perf_counter`` around
``session.run`` on a session with identical options and identical inputs, (c) the isolated generator (the
session and loop in a child process, samples piped back). Prints median per-run latency of each and the ratios
a/b and c/b (target: within ±3 %), plus the median gap between consecutive run ends, which also counts the
generator's own work.

``--ui-load`` adds a thread in this process that rebuilds the Benchmark page's live latency figure every 0.5 s
(what the Streamlit server does while a benchmark runs): (a) and (b) then share the GIL with it, (c) does not.

    python bench/bench_generator_overhead.py [--rounds 10] [--runs 1000] [--ui-load]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnxruntime as ort

from ortlab.timing.bench import latency_samples
from ortlab.timing.child_runs import latency_samples_isolated
from ortlab.settings.config import BenchConfig


def pick_model(tmp: Path) -> tuple[Path, str]:
    """A private copy of the digits_cnn sample, or a small Conv model built here when it is missing."""
    from ortlab.data.samples import samples_root

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
    """A plain ORT CPU session with the same settings the engine uses."""
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
    """Latencies (ms) and end-to-end gaps (ms) of ``latency_samples`` in this process."""
    samples = list(latency_samples(model, cfg, batch, variant="engine"))
    return [s.ms for s in samples], list(np.diff([s.t for s in samples]) * 1000.0)


def isolated_loop(model: Path, cfg: BenchConfig, batch: int) -> tuple[list[float], list[float]]:
    """Latencies (ms) and end-to-end gaps (ms) of ``latency_samples_isolated`` (child process)."""
    samples = list(latency_samples_isolated(model, cfg, batch, variant="isolated"))
    return [s.ms for s in samples], list(np.diff([s.t for s in samples]) * 1000.0)


class UiLoad:
    """A thread rebuilding the live latency figure (two series of 20,000 runs) every 0.5 s, like the page."""

    def __init__(self) -> None:
        import threading

        self.stop = threading.Event()
        self.builds = 0
        self.thread = threading.Thread(target=self._work, daemon=True)

    def _work(self) -> None:
        from ortlab.ui.views import charts

        rng = np.random.default_rng(0)
        series = {"a@1": list(rng.random(20_000)), "b@1": list(rng.random(20_000))}
        while not self.stop.wait(0.5):
            charts.latency_lines(series, {}, {}).to_json()
            self.builds += 1

    def __enter__(self) -> UiLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def main() -> int:
    """Run the comparison and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--ui-load", action="store_true", help="rebuild the live chart in a thread meanwhile")
    args = ap.parse_args()
    loops = {"engine": engine_loop, "bare": bare_loop, "isolated": isolated_loop}
    with tempfile.TemporaryDirectory() as tmp:
        model, what = pick_model(Path(tmp))
        cfg = BenchConfig(warmup=50, runs=args.runs, intra_op_threads=1)
        print(f"model: {what} ({model.name}); {args.rounds} interleaved rounds × {args.runs} runs; "
              f"intra-op threads 1; ORT {ort.__version__}" + ("; with UI load in this process" if args.ui_load else ""))
        print(f"{'batch':>5}  {'engine p50':>10}  {'bare p50':>8}  {'isolated p50':>12}  {'eng/bare':>8}  "
              f"{'iso/bare':>8}  {'engine p99':>10}  {'bare p99':>8}  {'iso p99':>8}  {'engine gap':>10}  "
              f"{'bare gap':>8}  {'iso gap':>7}  {'iso max':>7}  {'eng max':>7}")
        worst = 0.0
        load = UiLoad() if args.ui_load else None
        if load:
            load.__enter__()
        try:
            for batch in args.batch_sizes:
                ms: dict[str, list[float]] = {k: [] for k in loops}
                gap: dict[str, list[float]] = {k: [] for k in loops}
                for r in range(args.rounds):
                    names = list(loops)
                    order = names[r % 3:] + names[: r % 3]  # rotate who goes first
                    for name in order:
                        m, g = loops[name](model, cfg, batch)
                        ms[name].extend(m)
                        gap[name].extend(g)
                p50 = {k: float(np.median(v)) for k, v in ms.items()}
                p99 = {k: float(np.percentile(v, 99)) for k, v in ms.items()}
                r_eng, r_iso = p50["engine"] / p50["bare"], p50["isolated"] / p50["bare"]
                worst = max(worst, abs(r_eng - 1), abs(r_iso - 1))
                print(f"{batch:>5}  {p50['engine']:>10.4f}  {p50['bare']:>8.4f}  {p50['isolated']:>12.4f}  "
                      f"{r_eng:>8.3f}  {r_iso:>8.3f}  {p99['engine']:>10.4f}  {p99['bare']:>8.4f}  "
                      f"{p99['isolated']:>8.4f}  {np.median(gap['engine']):>10.4f}  {np.median(gap['bare']):>8.4f}  "
                      f"{np.median(gap['isolated']):>7.4f}  {max(ms['isolated']):>7.2f}  {max(ms['engine']):>7.2f}")
        finally:
            if load:
                load.__exit__()
        print(f"largest |ratio - 1| = {worst:.1%} (target ≤ 3%). 'gap' = median time between the ends of "
              f"consecutive runs (latency + the loop's own work per iteration); latencies in ms.")
        if load:
            print(f"the UI thread rebuilt the live figure {load.builds} times meanwhile.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
