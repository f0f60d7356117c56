"""Benchmark: latency of several variants side by side, drawn while it runs; one benchmark at a time."""

import streamlit as st

from ortlab import api
from ortlab.api import BenchConfig
from ortlab.ui.session import actions, state
from ortlab.ui.views import bench_view, charts
from ortlab.ui.jobs import status as jobs
from ortlab.ui.jobs.bench_job import collect, start_benchmark
from ortlab.ui.views.forms import dataclass_form
from ortlab.ui.session.guard import engine_errors, error_message, show_message
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import draw_stages, rerun_when_done, show_flash
from ortlab.ui.session.router import require_model, require_router

require_router()
st.title(":material/speed: Benchmark")
show_flash()
require_model()
job = state.job("bench")  # the current model's benchmark: another model's never shows here
running = job is not None and not job.done
others = actions.other_model_variants()
include_other = bool(others) and st.toggle(
    f"Also offer other models' artifacts ({len(others)})", key="bench.variants_other", disabled=running,
    help="Only artifacts whose inputs and outputs (names, dtypes, ranks) match this model's can be timed "
         "beside it; the others are listed with the reason.")
variants = actions.variants(include_other=include_other)
ids = [v.id for v in variants]
by_id = {v.id: v for v in variants}
colors = charts.variant_colors(ids)
names = {v.id: v.name for v in variants}
if job is not None:  # a job draws with the names it was started with
    names.update({vid: name for vid, name, _ in job.meta["variants"]})
if include_other:
    for v, why in others:
        if why is not None:
            st.caption(f"Not offered: {md(v.name)}: {why}.")

state.ensure_widget("bench.variants", ids[:1] + ([ids[-1]] if len(ids) > 1 else []))
if any(i not in by_id for i in state.widget("bench.variants", [])):
    state.set_widget("bench.variants", [i for i in state.widget("bench.variants", []) if i in by_id])
chosen = st.multiselect("Variants (the first is the baseline for speedups)", ids, key="bench.variants",
                        format_func=lambda i: names[i], disabled=running)
MAIN = ["batch_sizes", "runs", "duration_s", "warmup", "intra_op_threads", "inter_op_threads"]
with_openvino = api.machine.openvino_available()
if with_openvino:
    MAIN.append("openvino")
default = BenchConfig(warmup=5, duration_s=api.benchmarks.DEFAULT_BENCH_DURATION_S)  # a few seconds: the live chart grows
with st.container(border=True):
    cfg = dataclass_form(BenchConfig, default, "bench", only=MAIN, columns=3, disabled=running)
    if not with_openvino:
        st.caption(api.machine.OPENVINO_INSTALL_HINT)
    with st.expander("More settings"):
        cfg = dataclass_form(BenchConfig, cfg, "bench", exclude=(*MAIN, "openvino"), columns=3, disabled=running)
    memory = st.toggle("Show peak memory (of the separate process that times each variant and batch size)",
                       value=True, key="bench.memory", disabled=running)
    on_cluster = api.machine.configured_cluster() is not None and st.toggle(
        "Time on the server's Ray cluster", key="bench.on_cluster", disabled=running,
        help="Times every variant on each kind of node of the cluster the server's operator configured (its "
             "custom resources), one row per variant and machine; off: this machine.")
problems = []
if not chosen:
    problems.append("Pick at least one variant.")
if not cfg.batch_sizes or any(b < 1 for b in cfg.batch_sizes):
    problems.append("Batch sizes must be whole numbers ≥ 1, e.g. 1, 8.")
for p in problems:
    st.error(p)
ahead = jobs.busy()  # this session's benchmark is in that count only while it runs or waits
if ahead and not running:
    st.info(f"{ahead} benchmark{'s are' if ahead != 1 else ' is'} running or waiting in another session: one "
            f"started here now begins when {'they finish' if ahead != 1 else 'it finishes'}.")
if st.button("▶ Run benchmark", key="bench.run", type="primary", disabled=bool(problems) or running):
    with engine_errors("Starting the benchmark"):
        job = start_benchmark([by_id[i] for i in chosen], cfg, memory, on_cluster)
        running = not job.done


def draw_live(job) -> None:
    series = collect(job)
    if job.state == jobs.QUEUED and "queued" in job.progress:
        st.info(job.progress["queued"].message)
    draw_stages(job)
    if job.meta.get("cluster"):  # the nodes send their timings at the end: no live chart
        return
    batches = sorted({int(b) for b in job.meta["config"].batch_sizes})
    shown = None
    if len(batches) > 1:  # one batch size at a time: a few lines to read, not a tangle of every series
        pick = st.segmented_control("Runs drawn", [*map(str, batches), "all"], default=str(batches[0]),
                                    key="bench.live_batch",
                                    format_func=lambda b: "every batch size" if b == "all" else f"batch {b}",
                                    help="The other series stay in the legend: a click there draws them too.")
        shown = None if pick in (None, "all") else [int(pick)]
    st.plotly_chart(charts.latency_lines(series, {sid: f"{names.get(vid, vid)} · batch {bs}"
                                                  for sid in series for vid, bs in [api.benchmarks.split_series_id(sid)]},
                                         charts.variant_colors([api.benchmarks.split_series_id(sid)[0] for sid in series], known=colors),
                                         batches_shown=shown),
                    key="bench_live", width="stretch")
    rows = bench_view.live_rows(api.benchmarks.running_stats(series), names)
    if rows and not job.done:  # once done, the results table below has these numbers (and more)
        st.dataframe(rows, hide_index=True, width="stretch")


if job is not None and not job.done:
    @st.fragment(run_every=0.5)
    def poll() -> None:
        rerun_when_done(job.done)
        draw_live(job)
        if st.button(":material/cancel: Cancel benchmark", key="bench.cancel"):
            job.cancel()

    poll()
elif job is not None:
    draw_live(job)
    if job.state == jobs.DONE and not job.meta.get("cluster"):
        if not job.handled:  # the service already recorded it in the history
            job.handled = True
            state.set_last_benchmark(job.record)
    elif job.state != jobs.DONE:
        show_message(*error_message("Benchmarking", job.error))

across = bench_view.cluster_result(job)
if across is not None:
    st.subheader("Results across the cluster")
    st.dataframe(bench_view.cluster_rows(across), hide_index=True, width="stretch")
    st.caption("Timed on the server's Ray cluster: each kind of node timed every variant, in turn "
               "block by block; each speed-up is taken on its own node, with a 95 % interval. Each node's timing is "
               "in History with its machine.")
    for failure in across.failures:
        st.warning(md(f"Not timed on {failure}"), icon=":material/warning:")
last = state.last_benchmark()
if last and (job is None or job.done) and across is None:
    st.subheader("Results")
    lnames = last.names()
    precisions = {v.id: v.artifact.recipe.precision.value for v in variants if v.artifact is not None}
    comparison = api.benchmarks.compare_benchmarks(last.summaries, baseline=last.variants[0].id if last.variants else None,
                                                   precisions=precisions)
    rows = bench_view.result_rows(comparison, lnames)
    measured = any(row["peak memory MB"] is not None for row in rows)
    st.dataframe(rows, hide_index=True, width="stretch", column_config=bench_view.result_columns(memory=measured))
    ran_on = sorted({row["providers"] for row in rows if row["providers"]})
    st.caption(f"Throughput = {api.benchmarks.THROUGHPUT_METHOD}; speed-ups compare p50 at the same batch size, round by round "
               "(the variants ran in turn, block by block), with a 95 % interval: one that holds 1 is no clear "
               "difference (≈). Runs and IQR: the table's column menu. "
               f"Ran on {md(' / '.join(ran_on) or '–')}.")
    bold = {k: md(v) for k, v in lnames.items()}
    for note in bench_view.winner_lines(comparison, bold):
        st.markdown(f":material/trophy: {note}")
    noise = bench_view.noise_note(comparison, lnames)
    if noise:
        st.warning(md(noise), icon=":material/warning:")
    for note in bench_view.slowdown_lines(comparison, bold):
        st.markdown(note)
    last_colors = charts.variant_colors([v.id for v in last.variants], known=colors)  # the page's colours
    st.plotly_chart(charts.latency_panels(last.summaries, lnames, last_colors), key="bench_p50", width="stretch")
    st.plotly_chart(charts.throughput_panels(last.summaries, lnames, last_colors), key="bench_tp", width="stretch")
