"""Speed on Compare: the latest benchmark in History that timed both models of the pair at batch 1, else a short
batch-1 timing of the two started in the background through the run service (recorded in History when it ends).
Also the per-run latency of the keep-in-float table and the HTML report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from ortlab.runs.history import BenchmarkRecord, BenchVariant
from ortlab.runs.bench_service import BenchHandle
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencySummary
from ortlab.api import control_values, start_benchmark
from ortlab.ui import actions, state
from ortlab.ui.guard import engine_errors, error_message, show_message
from ortlab.ui.jobs import DONE, started

QUICK = BenchConfig(batch_sizes=(1,), warmup=5, duration_s=1.5)  # a short batch-1 timing of the pair
SCAN = 50  # how many recent benchmarks to look through


@dataclass(frozen=True)
class PairSpeed:
    """Batch-1 latency of the reference and the candidate from one benchmark (``bench_id`` in History)."""

    ref: LatencySummary
    cand: LatencySummary
    bench_id: int | None
    created_at: str = ""

    @property
    def speedup(self) -> float:
        """Reference p50 ÷ candidate p50 (above 1: the candidate is faster)."""
        return self.ref.p50 / self.cand.p50 if self.cand.p50 > 0 else float("inf")

    def sentence(self) -> str:
        s = self.speedup
        how = f"{s:.2f}× faster" if s >= 1.0 else f"{1 / s:.2f}× slower"
        return (f"Batch 1 on this machine: {self.cand.p50:.2f} ms p50 (p90 {self.cand.p90:.2f}) against "
                f"{self.ref.p50:.2f} ms (p90 {self.ref.p90:.2f}): the candidate is {how}; benchmark "
                f"#{self.bench_id}, {self.ref.n} and {self.cand.n} runs.")


def _same(bv: BenchVariant, v) -> bool:
    """Whether the timed ``bv`` is the variant ``v`` (its History run, else its file)."""
    if v.artifact is not None and v.artifact.run_id is not None:
        return bv.run_id == v.artifact.run_id
    try:
        return bv.run_id is None and bv.runtime == "onnxruntime" and Path(bv.path).resolve() == Path(v.path).resolve()
    except OSError:
        return False


def _summary(record: BenchmarkRecord, v, batch: int = 1) -> LatencySummary | None:
    ids = [bv.id for bv in record.variants if _same(bv, v)]
    return next((s for s in record.summaries if s.variant in ids and s.batch_size == batch and s.p50 > 0), None)


def latest_pair(ref, cand) -> PairSpeed | None:
    """The newest History benchmark that timed both ``ref`` and ``cand`` (Variants) at batch 1 under ORT."""
    for rec in actions.history().list_benchmarks(limit=SCAN):
        if not isinstance(rec, BenchmarkRecord):
            continue
        a, b = _summary(rec, ref), _summary(rec, cand)
        if a is not None and b is not None:
            return PairSpeed(a, b, rec.id, rec.created_at)
    return None


def run_latency(run_id: int | None) -> LatencySummary | None:
    """Batch-1 latency (ORT) of a History run from the newest benchmark that timed it."""
    if run_id is None:
        return None
    for rec in actions.history().list_benchmarks(limit=SCAN):
        if not isinstance(rec, BenchmarkRecord):
            continue
        ids = [bv.id for bv in rec.variants if bv.run_id == run_id and bv.runtime == "onnxruntime"]
        s = next((s for s in rec.summaries if s.variant in ids and s.batch_size == 1 and s.p50 > 0), None)
        if s is not None:
            return s
    return None


def latency_text(s: LatencySummary | None) -> str:
    return "not timed" if s is None else f"{s.p50:.2f} ms (p90 {s.p90:.2f})"


def _key(ref, cand) -> str:
    return f"{ref.id}|{cand.id}|{ref.path}|{cand.path}"


def job(ref, cand) -> BenchHandle | None:
    """This session's quick timing of the pair, when it is this pair's."""
    j = state.job("speed")
    return j if j is not None and getattr(j, "meta", {}).get("pair") == _key(ref, cand) else None


def start_quick(ref, cand) -> BenchHandle:
    """Time ``ref`` and ``cand`` at batch 1 for a short while in the background (the run service; recorded in
    History when it ends)."""
    plain = [BenchVariant(v.id, v.name, str(v.path), v.artifact.run_id if v.artifact else None) for v in (ref, cand)]
    info = state.model_info()
    values = control_values(state.eval_dataset(), info.inputs) if info is not None else {}
    handle = start_benchmark(plain, QUICK, workspace=actions.workspace(), origin="app",
                             shapes=actions.bench_shapes(), values=values)
    handle.meta = {"pair": _key(ref, cand)}
    state.set_job("speed", handle)
    return started(handle)  # type: ignore[return-value]


def _draw(found) -> None:
    s = found.speedup
    c = st.columns(3)
    c[0].metric("Latency b1 · reference (p50)", f"{found.ref.p50:.2f} ms", border=True,
                help=f"p90 {found.ref.p90:.2f} ms · p99 {found.ref.p99:.2f} ms · {found.ref.n} runs")
    c[1].metric("Latency b1 · candidate (p50)", f"{found.cand.p50:.2f} ms",
                f"{100 * (found.cand.p50 / found.ref.p50 - 1):+.0f}%", delta_color="inverse", border=True,
                help=f"p90 {found.cand.p90:.2f} ms · p99 {found.cand.p99:.2f} ms · {found.cand.n} runs")
    c[2].metric("Speed-up (p50)", f"{s:.2f}×" if s >= 1 else f"{s:.2f}× (slower)", border=True,
                help="Reference p50 ÷ candidate p50, both timed in the same benchmark.")
    st.caption(found.sentence() + " Time more batch sizes and threads on the Benchmark page.")


def _failed(handle) -> None:
    if handle.state != DONE and not handle.handled:
        handle.handled = True
        level, text = error_message("Timing the pair", handle.error or Exception("it did not finish"))
        show_message("warning" if level == "error" else level, text)


def section(ref, cand) -> None:
    """Compare's speed line: the latest benchmark of the pair, else a quick timing started in the background,
    polled in a fragment that draws the speed when it ends (only the fragment reruns: the graph view and its
    zoom stay as they are)."""
    if ref.id == cand.id:
        return
    found = latest_pair(ref, cand)
    handle = job(ref, cand)
    if found is None and handle is None:
        with engine_errors("Timing the pair"):
            handle = start_quick(ref, cand)
            if handle.done:  # finished at once (tests): it is in History now
                found = latest_pair(ref, cand)
    if found is not None:
        _draw(found)
        return
    if handle is None:
        return
    if handle.done:
        _failed(handle)
        return

    @st.fragment(run_every=1.0)
    def poll() -> None:
        handle.drain()
        if not handle.done:
            st.caption(f":material/timer: Timing both models at batch 1 in the background "
                       f"({QUICK.duration_s:g} s each)… the speed appears here when it ends.")
            return
        got = latest_pair(ref, cand)
        if got is not None:
            _draw(got)
        else:
            _failed(handle)

    poll()
