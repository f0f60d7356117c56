"""Speed on Compare: the latest benchmark in History that timed both models of the pair at batch 1 (the engine
chooses it: :func:`ortlab.api.benchmarks.latest_pair`), else the figure the run stored when it was timed against its source
after its verdict, else a batch-1 timing of the two started in the background through the run service until the
speed-up's 95% interval is within ±10% or 20 s have passed (:func:`ortlab.api.benchmarks.start_pair_timing`, the call
``ortlab compare`` makes; recorded in History when it ends). Also the per-run latency of the keep-in-float table."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ortlab import api
from ortlab.api import BenchHandle, BenchVariant, LatencySummary, PairSpeed
from ortlab.ui.session import actions, state
from ortlab.ui.session.guard import engine_errors, error_message, show_message
from ortlab.ui.session.inert import md
from ortlab.ui.views.cards import GLOSS
from ortlab.ui.jobs.progress_view import rerun_when_done
from ortlab.ui.jobs.status import DONE, started



def _timed(v) -> api.TimedModel:
    """A Variant as benchmarks record it: its History run, else its file."""
    run_id = v.artifact.run_id if v.artifact is not None else None
    return api.TimedModel(run_id, str(v.path))


def latest_pair(ref, cand) -> PairSpeed | None:
    """The newest History benchmark that timed both ``ref`` and ``cand`` (Variants) at batch 1 under ORT."""
    return api.benchmarks.latest_pair(actions.history(), _timed(ref), _timed(cand))


def run_latency(run_id: int | None) -> LatencySummary | None:
    """Batch-1 latency (ORT) of a History run from the newest benchmark that timed it."""
    return api.benchmarks.run_latency(actions.history(), run_id)


def run_speed_text(run) -> str:
    """A History run's stored batch-1 speed against its source, with its interval and the machine that timed it."""
    return api.benchmarks.report_timing(actions.history(), run).sentence()


def latency_text(s: LatencySummary | None) -> str:
    return "not timed" if s is None else f"{s.p50:.2f} ms (p90 {s.p90:.2f})"


def _key(ref, cand) -> str:
    return f"{ref.id}|{cand.id}|{ref.path}|{cand.path}"


def job(ref, cand) -> BenchHandle | None:
    """This session's quick timing of the pair, when it is this pair's."""
    j = state.job("speed")
    return j if j is not None and getattr(j, "meta", {}).get("pair") == _key(ref, cand) else None


def start_quick(ref, cand) -> BenchHandle:
    """Time ``ref`` and ``cand`` at batch 1 in the background until the speed-up is settled (the run service;
    recorded in History when it ends)."""
    plain = [BenchVariant(v.id, v.name, str(v.path), v.artifact.run_id if v.artifact else None) for v in (ref, cand)]
    info = state.model_info()
    values = api.data.control_values(state.eval_dataset(), info.inputs) if info is not None else {}
    handle = api.benchmarks.start_pair_timing(plain[0], plain[1], workspace=actions.workspace(), origin="app",
                                              shapes=actions.bench_shapes(), values=values)
    handle.meta = {"pair": _key(ref, cand)}
    state.set_job("speed", handle)
    return started(handle)  # type: ignore[return-value]


def speedup_card(sp: api.SpeedUp, settled: api.SettledSpeed | None = None) -> tuple[str, str, str]:
    """Compare's "Speed-up" card as (value, delta, help): never a bare number — the delta is the 95% interval with
    its rounds, after the caveat when there is one ("no clear difference", "noisy: the machine was busy"); the help
    says how the figure was computed.
    ``settled``, the pair timed until settled (:func:`ortlab.api.benchmarks.start_pair_timing`), words the caveat when given."""
    s = sp.speedup
    value = f"{api.benchmarks.times(s)} (slower)" if sp.clear and s < 1 else api.benchmarks.times(s)  # as the run's sentence says it
    if not sp.paired:
        return value, sp.caveat(), (f"The ratio of the p50s of {sp.reference_runs} and {sp.candidate_runs} runs "
                                    "timed apart (an older benchmark): no interval. Time the pair again for one.")
    lo, hi = sp.speedup_range
    interval = f"95% interval {lo:.2f}–{hi:.2f}×, {sp.rounds} rounds"
    caveat = settled.caveat() if settled is not None else sp.caveat()
    delta = f"{caveat} · {interval}" if caveat else interval
    return value, delta, (f"{interval}" + (f": {caveat}" if caveat else "") + ". The median of the rounds' latency "
                          "ratios (reference ÷ candidate), both timed in the same benchmark, block by block in turn.")


def _cards(ref_ms: float, ref_help: str, cand_ms: float, cand_help: str, sp: api.SpeedUp | None,
           settled: api.SettledSpeed | None = None) -> None:
    """Compare's three speed cards: the two batch-1 p50 latencies and the speed-up (when there is one)."""
    c = st.columns(3)
    c[0].metric("Latency b1 · reference (p50)", f"{ref_ms:.2f} ms", border=True, help=f"{ref_help}. {GLOSS['p50']}")
    c[1].metric("Latency b1 · candidate (p50)", f"{cand_ms:.2f} ms", f"{100 * (cand_ms / ref_ms - 1):+.0f}%",
                delta_color="inverse", border=True, help=f"{cand_help}. {GLOSS['p50']}")
    if sp is not None:
        value, delta, help_ = speedup_card(sp, settled)
        c[2].metric("Speed-up (p50)", value, delta, delta_color="off", delta_arrow="off", border=True, help=help_)


def _draw(found, handle: BenchHandle | None = None) -> None:
    """The cards of a stored benchmark of the pair; worded as timed until settled when ``handle`` timed it so."""
    settled = handle.settled() if handle is not None and handle.bench_id == found.bench_id else None
    _cards(found.ref.p50, f"p90 {found.ref.p90:.2f} ms · p99 {found.ref.p99:.2f} ms · {found.ref.n} runs",
           found.cand.p50, f"p90 {found.cand.p90:.2f} ms · p99 {found.cand.p99:.2f} ms · {found.cand.n} runs",
           found.speed, settled)
    said = f" Timed until settled: {settled.text()}." if settled is not None else ""
    st.caption(found.sentence() + said + " Time more batch sizes and threads on the Benchmark page.")


def stored_speed(ref, cand) -> api.ResultSpeed | None:
    """The speed the run ``cand`` stored when it was timed against its source after its verdict (optimize, the
    Run), when ``ref`` is that source and the timing gave a figure."""
    a = cand.artifact
    rs = getattr(a, "speed", None) if a is not None else None
    if rs is None or rs.speed is None or ref.artifact is not None:
        return None
    try:
        same = Path(ref.path).resolve() == Path(a.source_path).resolve()
    except OSError:
        return None
    return rs if same else None


def _draw_stored(rs: api.ResultSpeed) -> None:
    sp = rs.speed
    assert sp is not None
    _cards(sp.reference_p50_ms, f"{sp.reference_runs} runs, timed with the candidate after its verdict",
           sp.candidate_p50_ms, f"{sp.candidate_runs} runs", sp)
    (st.warning if rs.slower else st.caption)(md(rs.sentence()) + " (timed when the run ended; time more batch "
                                              "sizes and threads on the Benchmark page).")


def _failed(handle) -> None:
    if handle.state != DONE and not handle.handled:
        handle.handled = True
        level, text = error_message("Timing the pair", handle.error or Exception("it did not finish"))
        show_message("warning" if level == "error" else level, text)


def section(ref, cand) -> None:
    """Compare's speed line: the latest benchmark of the pair, else a quick timing started in the background,
    polled in a fragment; when it ends the page reruns and draws the speed. All of it sits in one container, so
    what follows keeps its place in the page and the graph view below is not reloaded (its zoom and selection
    stay)."""
    if ref.id == cand.id:
        return
    with st.container(key="compare-speed"):
        _section(ref, cand)


def _section(ref, cand) -> None:
    found = latest_pair(ref, cand)
    handle = job(ref, cand)
    stored = stored_speed(ref, cand) if found is None and handle is None else None
    if stored is not None:
        _draw_stored(stored)
        return
    if found is None and handle is None:
        with engine_errors("Timing the pair"):
            handle = start_quick(ref, cand)
            if handle.done:  # finished at once (tests): it is in History now
                found = latest_pair(ref, cand)
    if found is not None:
        _draw(found, handle)
        return
    if handle is None:
        return
    if handle.done:
        _failed(handle)
        return

    @st.fragment(run_every=1.0)
    def poll() -> None:
        handle.drain()
        rerun_when_done(handle.done)  # the page's run draws the result (or why there is none)
        st.caption(f":material/timer: Timing both models at batch 1 in the background, in turn, until the "
                   f"speed-up's 95% interval is within ±{api.benchmarks.SETTLE_TARGET:.0%} (at most {api.benchmarks.SETTLE_CAP_S:g} s)… "
                   "the speed appears here when it ends.")

    poll()
