"""The benchmark job through the run service (one benchmark per server process at a time, each variant × batch
size timed in its own child process, peak memory from that child, recorded in the history when it ends), and the
tables the Benchmark page draws from its samples."""

from __future__ import annotations

import numpy as np

from ..config import BenchConfig
from ..service import BenchHandle
from . import state
from .actions import Variant, workspace
from .jobs import started


def start_benchmark(variants: list[Variant], cfg: BenchConfig, measure_memory: bool) -> BenchHandle:
    """Start timing ``variants`` at every batch size of ``cfg``; peak memory is kept when ``measure_memory``."""
    from .. import service

    plain = [service.BenchVariant(v.id, v.name, str(v.path), (v.artifact or {}).get("run_id")) for v in variants]
    job = service.start_benchmark(plain, cfg, measure_memory=measure_memory, workspace=workspace(), origin="app")
    job.meta = {"samples": {}, "config": cfg, "variants": [(v.id, v.name, str(v.path)) for v in variants]}
    state.set_job("bench", job)
    return started(job)  # type: ignore[return-value]


def collect(job: BenchHandle) -> dict[str, list[float]]:
    """Move queued samples into ``job.meta['samples']`` (series id ``variant@batch`` → latencies in ms)."""
    series = job.meta["samples"]
    for s in job.drain():
        series.setdefault(f"{s.variant}@{s.batch_size}", []).append(s.ms)
    return series


def running_stats(series: dict[str, list[float]], names: dict[str, str]) -> list[dict]:
    """Rows of n, p50, p90, p99 per series so far."""
    rows = []
    for sid, ms in series.items():
        if not ms:
            continue
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        vid, _, bs = sid.partition("@")
        rows.append({"variant": names.get(vid, vid), "batch": int(bs), "runs": len(ms), "p50 ms": round(float(p50), 3),
                     "p90 ms": round(float(p90), 3), "p99 ms": round(float(p99), 3)})
    return rows


def final_table(summaries: list[dict], names: dict[str, str]) -> list[dict]:
    """Summary rows with the speedup of p50 against the first variant at the same batch size."""
    base: dict[int, float] = {}
    for s in summaries:
        base.setdefault(s["batch_size"], s["p50"])
    rows = []
    for s in summaries:
        b = base.get(s["batch_size"])
        rows.append({"variant": names.get(s["variant"], s["variant"]), "batch": s["batch_size"], "runs": s["n"],
                     "p50 ms": round(s["p50"], 3), "p90 ms": round(s["p90"], 3), "p99 ms": round(s["p99"], 3),
                     "mean ms": round(s["mean"], 3), "throughput /s": round(s["throughput_per_s"], 1),
                     "speedup (p50)": f"{b / s['p50']:.2f}×" if b and s["p50"] else "–",
                     "peak memory MB": None if s.get("peak_rss_mb") is None else round(s["peak_rss_mb"], 1),
                     "providers": ", ".join(p.replace("ExecutionProvider", "") for p in s.get("providers", []))})
    return rows


def slowdown_notes(summaries: list[dict], names: dict[str, str], precisions: dict[str, str]) -> list[str]:
    """One sentence per variant that is slower (p50) than the first variant at the same batch size, with the
    numbers and the likely reason for its precision ("int8", "fp16", "fp32"; missing for the original)."""
    base: dict[int, dict] = {}
    for s in summaries:
        base.setdefault(s["batch_size"], s)
    notes = []
    for s in summaries:
        b = base[s["batch_size"]]
        if s is b or not s["p50"] or s["p50"] <= b["p50"]:
            continue
        ratio = b["p50"] / s["p50"]
        name, base_name = names.get(s["variant"], s["variant"]), names.get(b["variant"], b["variant"])
        text = (f"**{name}** is slower than **{base_name}** at batch {s['batch_size']}: "
                f"p50 {s['p50']:.3f} ms vs {b['p50']:.3f} ms ({ratio:.2f}×, +{s['p50'] - b['p50']:.3f} ms per run).")
        precision = precisions.get(s["variant"], "")
        if ratio > 0.95:
            text += " A gap under 5 % is within run-to-run noise."
        elif precision == "int8" and b["p50"] < 1.0:
            text += (f" At {b['p50']:.2f} ms per run the model is tiny: the QuantizeLinear/DequantizeLinear steps "
                     "around the int8 operators cost more than the int8 arithmetic saves. Int8 pays off on larger "
                     "models and batch sizes, where the matrix work dominates.")
        elif precision == "int8":
            text += (" For this model the QuantizeLinear/DequantizeLinear conversions around the int8 operators cost "
                     "more than the int8 arithmetic saves (few quantized operators, or a CPU without fast int8 "
                     "instructions such as VNNI).")
        elif precision == "fp16":
            text += (" On CPU most kernels compute in fp32, so ONNX Runtime adds Cast nodes around them: fp16 saves "
                     "file size, not time.")
        else:
            text += " The graph changes did not pay off for this model on this machine."
        notes.append(text)
    return notes
