"""Tune: search recipes within a CPU-time budget on the current model and data; recommend the fastest (or smallest)
one the accuracy policy accepts, with the Pareto front filling in as trials finish."""

import streamlit as st

from ortlab import api
from ortlab.ui.session import state
from ortlab.ui.views import tune_view as tv
from ortlab.ui.session.guard import engine_errors, error_message, show_message
from ortlab.ui.session.inert import md
from ortlab.core.errors import OrtlabError
from ortlab.ui.jobs.status import CANCELLED, FAILED
from ortlab.ui.jobs.progress_view import rerun_when_done, show_flash
from ortlab.ui.session.router import require_model, require_router

require_router()
st.title(":material/auto_awesome: Tune")
show_flash()
require_model()
st.caption(f"Model **{md(state.model_label())}** · data {md(state.dataset_label())}. Each trial is a recipe run "
           "(recorded in History), verified on the evaluation samples and timed against the fp32 source; then "
           "nodes are kept in float in the order the task's metric ranks them (screened in memory, confirmed by trials).")

task = state.job("tune")
running = task is not None and not task.done
# the form shows the settings of the search that runs (or ran last): never a default beside "16 s of 60 s"
for key, value in tv.form_values(task.meta["choice"] if task is not None else tv.TuneChoice()).items():
    (state.set_widget if running else state.ensure_widget)(key, value)
with st.form("tune.form", border=True):
    c = st.columns(4)
    target = c[0].selectbox("Target", ("cpu", "gpu"), key="tune.target", disabled=running)
    objective = c[1].selectbox("Objective", tv.OBJECTIVES, key="tune.objective", disabled=running,
                               help="latency: the fastest accepted recipe; size: the smallest.")
    budget = c[2].number_input(
        "Budget (CPU seconds)", min_value=5, max_value=24 * 3600, step=60, key="tune.budget", disabled=running,
        help="CPU time of the search and every process it starts (quantizing, verifying and timing each trial), as "
             "`ortlab tune --budget 600cpu`: a busy machine buys the same trials as a quiet one. No trial starts "
             "once it is spent (the running one finishes); what it bought is said under the result. With the trials "
             "on the server's Ray cluster, whose CPU is not this machine's, it counts wall seconds.")
    policy = c[3].selectbox("Accuracy policy", tv.POLICIES, key="tune.policy", disabled=running,
                            help="verdict: the verdict policy of Compare must say OK, and the task's own measure "
                                 "(detection F1, strings, flips, neighbours) decides; min SQNR: every output at or "
                                 "above the bar, nothing else.")
    c = st.columns(4)
    min_sqnr = c[0].number_input("SQNR bar (dB, 0 = task)", min_value=0.0, max_value=100.0, step=1.0,
                                 key="tune.min_sqnr", disabled=running,
                                 help="0: a model with a task measure of ours is held to it, plain tensors to 20 dB "
                                      "SQNR. A bar given here holds for every model (a detector's score channels).")
    max_trials = c[1].number_input("Max trials (0 = budget only)", min_value=0, max_value=500,
                                   key="tune.max_trials", disabled=running)
    bench_s = c[2].number_input("Timing per trial (s)", min_value=0.1, max_value=30.0, step=0.5,
                                key="tune.bench_s", disabled=running)
    steps = c[3].number_input("Keep-in-float steps", min_value=0, max_value=20, key="tune.steps",
                              disabled=running)
    on_cluster, timing_resource = False, ""
    if api.machine.configured_cluster() is not None:  # the operator's cluster; a page never names one
        with st.expander("Run on the server's Ray cluster"):
            where = st.columns(2)
            on_cluster = where[0].toggle("Trials on the cluster", key="tune.on_cluster", disabled=running,
                                         help="Trials run as Ray tasks on the nodes of the cluster the server's "
                                              "operator configured; the model and data go through it once.")
            timing_resource = where[1].text_input(
                "Timing node's resource (optional)", key="tune.timing_resource", disabled=running,
                help="Every timing runs on a node that carries this custom resource (e.g. cpu_epyc): the machine "
                     "you deploy to. Empty: one node of the cluster, chosen once.")
    submitted = st.form_submit_button(":material/play_arrow: Start tuning", type="primary", disabled=running)
if submitted and not running:
    choice = tv.TuneChoice(target=target, objective=objective, budget_cpu_s=float(budget), policy=policy,
                           min_sqnr_db=float(min_sqnr), max_trials=int(max_trials), bench_s=float(bench_s),
                           exclusion_steps=int(steps), on_cluster=on_cluster, timing_resource=timing_resource)
    with engine_errors("Starting the search"):
        task = tv.start_tune(choice)
        if not task.done:
            st.rerun()  # redraw the form disabled while the search runs

if task is None:
    st.info("Pick the target, objective, budget and accuracy policy, then start.")
else:
    if not task.done:
        @st.fragment(run_every=1.0)
        def live() -> None:
            task.drain()
            rerun_when_done(task.done)
            share, text = tv.search_progress(task)
            st.progress(share, text=text)
            if st.button(":material/cancel: Cancel", key="tune.cancel", disabled=task.cancelled):
                task.cancel()
                st.toast("Cancelling: the running trial is stopped; the result covers the finished ones.")
            if tv.has_points(list(task.items), task.meta["choice"].objective):
                st.plotly_chart(tv.pareto_figure(list(task.items), task.meta["choice"].objective), key="tune_live",
                                width="stretch")

        live()
    else:
        task.drain()
        result = task.result
        if task.state == FAILED:
            show_message(*error_message("Tuning", task.error or OrtlabError("the search ended without a result")))
        elif task.state == CANCELLED or result is not None:
            level, text = tv.headline(result, task.items)
            show_message(level, text)
        if result is not None:
            best = result.best
            if best is not None:
                b = st.columns([1, 3])
                if b[0].button(":material/compare: Open on Compare", key="tune.open", type="primary",
                               disabled=best.run_id is None):
                    with engine_errors("Opening the recommendation"):
                        tv.open_on_compare(best)
                        st.switch_page("pages/compare.py")
                run = f" · History run #{best.run_id}" if best.run_id is not None else ""
                b[1].caption(f"{'Recommended' if result.accepted else 'Closest'}: trial {best.index}, "
                             f"{md(best.label)}{run} · {md(best.verdict)}")
                if best.edge and not result.claim_settle:  # the verdict's own interval, and what would settle it
                    st.caption(md(best.edge))
                st.code(tv.pick_cli_line(best), language="bash", wrap_lines=True)
            st.caption(f"The budget bought {md(result.bought())} · a trial is accepted when: {md(result.policy)} · "
                       f"{md(result.hardware)}")
            if result.notes:
                with st.expander(f"How the search went: {tv.plural(len(result.notes), 'note')}"):
                    for note in result.notes:
                        st.markdown(f"- {md(note)}")
        trials = list(result.trials) if result is not None else list(task.items)
        best = result.best if result is not None and result.accepted else None  # "recommended" only when it is
        if tv.has_points(trials, task.meta["choice"].objective):
            st.plotly_chart(tv.pareto_figure(trials, task.meta["choice"].objective, recommended=best),
                            key="tune_chart", width="stretch")
        if trials:
            st.dataframe(tv.trial_rows(trials), hide_index=True, width="stretch", column_config=tv.trial_columns())
