"""History: every run stored in the workspace's SQLite DB, with downloads and "load into Compare"."""

import streamlit as st

from ortlab.core.layout import QDQ_FILE
from ortlab.api import Artifact
from ortlab.core.serial import to_plain
from ortlab.core.text import format_bytes
from ortlab.ui.session import actions, state
from ortlab.ui.views import cards, speed
from ortlab import api
from ortlab.ui.session.guard import engine_errors, error_message, show_message
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import show_flash
from ortlab.ui.session.router import require_router, stop_page
from ortlab.ui.views.stored_view import stored_section
from ortlab.ui.views.history_rows import (TuneSearch, fold_tune_searches, measure_heading, measure_text, run_measure,
                                         search_recipe_text)

require_router()
st.title(":material/history: History")
show_flash()
records = []
with engine_errors("Reading the history"):
    records = actions.history().list()
for notice in api.workspaces.take_notices():  # the database was damaged and has just been rebuilt: say so (a warning)
    show_message(*error_message("Reading the history", notice))
with engine_errors("Measuring the workspace"):
    st.caption(f"Storage used by the workspace (imported models, data, results, history): "
               f"{format_bytes(actions.workspace().size_bytes())}")
stored_section()  # imported models and uploaded data sets: their size, runs and a Delete
with engine_errors("Listing interrupted runs"):
    for k, lost in enumerate(actions.interrupted_runs()):  # the server stopped while these ran
        box = st.container(border=True, horizontal=True, vertical_alignment="center")
        recipe_text = lost.spec.recipe.label() if lost.spec is not None else "recipe unreadable"
        box.warning(f"Interrupted: a run started {lost.started_at.replace('T', ' ')[:16] or 'earlier'} "
                    f"({recipe_text}) was stopped when the server ended.", icon=":material/history_toggle_off:")
        if box.button("Run again", key=f"history.rerun.{k}", disabled=lost.spec is None):
            with engine_errors("Running the interrupted run again"):
                actions.rerun_interrupted(lost)
                st.rerun()
        if box.button("Dismiss", key=f"history.dismiss.{k}"):
            actions.dismiss_interrupted(lost)
            st.rerun()
if not records:
    st.info("No runs yet. Run a recipe (or the demo) and it will be listed here, even after a restart.")
    stop_page()

runs = [r for r in records if isinstance(r, Artifact)]
unreadable = [r for r in records if not isinstance(r, Artifact)]
titles = {r.run_id: actions.source_title(r) for r in runs}
groups: dict[str, list[Artifact]] = {}
for r in runs:  # grouped by source model (sha256), the model of the newest run first
    groups.setdefault(r.source_sha256, []).append(r)


def _row(r: Artifact) -> dict:
    m = run_measure(r)
    return {"run": r.run_id, "time": r.created_at.replace("T", " ")[:16], "model": titles[r.run_id],
            **actions.run_summary(r), "task (95%)": measure_text(m), "measure": m.measure if m else "",
            "sha256": r.sha256[:12], "random data": "⚠ yes" if r.random_data else ""}


def _search_row(search: TuneSearch) -> dict:
    """A tune search's one row: its recommended trial's figures (none: "–"), its trial count in the recipe cell."""
    rec = search.recommended
    row = _row(rec) if rec is not None else {k: None if isinstance(v, (int, float)) else "–"  # one type per column
                                             for k, v in _row(search.trials[0]).items()}
    # "search", not its trial's number: the trial keeps its own number in the list of trials below
    return {**row, "run": "search", "time": search.started_at.replace("T", " ")[:16],
            "recipe": search_recipe_text(search, actions.recipe_label(rec) if rec is not None else None,
                                         rec.run_id if rec is not None else None),
            "random data": "⚠ yes" if any(t.random_data for t in search.trials) else ""}


text = st.column_config.TextColumn
for sha, group in groups.items():
    # the model is said once, in the group's heading (its table has no model column, so every column fits 1280 px)
    items = fold_tune_searches(group)
    searches = [i for i in items if isinstance(i, TuneSearch)]
    st.markdown(f"##### {md(titles[group[0].run_id])} · {len(items)} run{'s' if len(items) != 1 else ''}")
    table = [_search_row(i) if isinstance(i, TuneSearch) else {**_row(i), "run": str(i.run_id)} for i in items]
    # the hash and seconds are in the run's details below, "random data" only when it applies
    order = ["run", "time", "verdict", "recipe", "size", "vs source", "top-1", "agreement"]
    if any(row["task metric"] != "–" for row in table):  # a detector's F1, changed strings, cosine: not "–"
        order = [c for c in order if c not in ("top-1", "agreement") or any(row[c] != "–" for row in table)]
        order.append("task metric")
    if any(r.random_data for r in group):
        order.append("random data")
    # what does not fit beside the rest at 1280 px goes to the column menu: the size (its share of the source's
    # stays) beside a task metric; with a tune search the interval beside the verdict, top-1 and the whole-set metric
    hide = ["size"] if "task metric" in order else []
    if searches and any(row["task (95%)"] != "–" for row in table):
        hide = [c for c in ("size", "top-1", "agreement", "task metric") if c in order]
        order.insert(3, "task (95%)")
    order = [*(c for c in order if c not in hide), *hide]
    config = {"run": text("run", width=55, help="The run's number; \"search\": a tune search (its trials, each with "
                                                "its number, are listed below the table)."),
              "time": text("time", width=120 if not searches else 110), "verdict": text("verdict", width=85),
              "recipe": text("recipe", width=230 if not searches else 205,
                             help="A tune search is one row: the trial it recommended (\"pick of 6: #3\": run 3, "
                                  "of 6 trials), every trial in the list below the table."
                             if searches else None), "size": text("size", width=80),
              "vs source": text("size vs source", width=95, help="The result's file size as a share of its "
                                                                   "source model's."),
              "top-1": text("top-1", width=60),
              "agreement": text("agreement", width=80),
              "task metric": text("task metric", width=230,
                                  help="Where top-1 says nothing: a detector's F1 against the reference and its "
                                       "score SQNR, changed OCR strings, an encoder's cosine."),
              "task (95%)": text(measure_heading({row["measure"] for row in table} - {"", "–"}), width=262,
                                 help="The task's measure (detection F1, no confident flip, strings kept, NN "
                                      "agreement) with its 95% interval and the evidence it rests on: a tune "
                                      "trial's on the samples its search chose on (as on the Tune page), another "
                                      "run's on all its evaluation samples. Size, top-1 and the whole-set task "
                                      "metric: the column menu.")}
    config = {k: {**v, "hidden": True} if k in hide else v for k, v in config.items()}
    st.dataframe(table, hide_index=True, width="stretch", key=f"history.table.{sha[:16]}", column_order=order,
                 column_config=config)
    for k, search in enumerate(searches):  # a search's trials, one row each, behind its expander
        n = len(search.trials)
        with st.expander(f"Trials of the tune search started {search.started_at.replace('T', ' ')[:16]} ({n})"):
            # the day is in the expander's title: a trial's time is its hour and minute
            st.dataframe([{**row, "time": row["time"][11:]} for row in map(_row, search.trials)], hide_index=True,
                         width="stretch", key=f"history.trials.{sha[:16]}.{k}", column_order=order,
                         column_config={**config, "recipe": text("recipe", width=190),  # fits inside the expander
                                        "time": text("time", width=60),
                                        "run": st.column_config.NumberColumn("run", width=45)})
if unreadable:
    st.warning(f"{len(unreadable)} stored run{'s' if len(unreadable) != 1 else ''} cannot be read and "
               f"{'are' if len(unreadable) != 1 else 'is'} left out above:", icon=":material/warning:")
    st.dataframe([{"run": u.id, "time": u.created_at.replace("T", " ")[:19], "why": u.reason} for u in unreadable],
                 hide_index=True, width="stretch")
    if st.button(f"Remove the unreadable run{'s' if len(unreadable) != 1 else ''} from the history",
                 key="history.forget_unreadable"):
        with engine_errors("Removing unreadable runs"):
            for u in unreadable:
                actions.delete_run(u.id)
            state.flash(f"Removed {len(unreadable)} unreadable run{'s' if len(unreadable) != 1 else ''} from the "
                        "history.", "success")
            st.rerun()
if not runs:
    stop_page()

by_id = {r.run_id: r for r in runs}
run_id = st.selectbox("Run", list(by_id), key="history.run",
                      format_func=lambda i: f"#{i} · {actions.recipe_label(by_id[i])} · {titles[i]}")
assert run_id is not None  # runs read from the history all have their id
r = by_id[run_id]
recipe = r.recipe
model_file = r.model_path

st.subheader(f"Run #{run_id}: {md(recipe.label())}")
cards.verdict_banner(actions.run_verdict(r), f"Verdict on run #{run_id}")
if r.random_data:
    cards.random_data_warning("This run")
ev = r.evaluation
cards.metric_row([
    ("Size", format_bytes(r.size_bytes), f"{100 * (r.size_ratio - 1):+.1f}%", "Against the source model.",
     "inverse"),
    # a detector, OCR recognizer or encoder shows its task's own figures, as its row in the table above
    *([(label, value, None, None) for label, value, _ in figures] if (figures := actions.task_figures(ev)) else
      [("Top-1 (candidate)", cards.pct(ev.top1_accuracy_cand if ev else None), None, None),
       ("Agreement", cards.pct(ev.top1_agreement if ev else None), None, None)]),
    ("Total time", f"{r.total_seconds:.1f} s", None, ", ".join(f"{k} {v:.2f}s" for k, v in r.timings.items())),
])
ws = actions.workspace()
st.caption(f"Source {md(ws.relative(r.source_path))} (sha256 {r.source_sha256[:12]}) → "
           f"{md(ws.relative(r.model_path))} (sha256 {r.sha256[:12]}) · providers {md(', '.join(r.providers))}")
st.caption(md(speed.run_speed_text(r)))
for w in r.warnings:
    st.caption(f"⚠ {md(w)}")

cli = actions.cli_line(r, f"run{run_id}.onnx")
st.code(cli, language="bash", wrap_lines=True)  # whole, wrapped: a 1280 px page cut it off
# buttons as wide as their labels, wrapping onto a second line rather than cutting a label
row = st.container(horizontal=True, key="history_actions")
# on_click="ignore": a download needs no rerun. A click's rerun registers new deferred files and drops the old
# ones, at times before the browser asks for the file it clicked ("Failed to generate file for download").
qdq_file = model_file.parent / QDQ_FILE
if model_file.is_file() and r.kind == "int8-static" and qdq_file.is_file():
    # the plain QDQ graph is the portable file (any QDQ-aware runtime); the optimized one suits ORT on this CPU
    row.download_button("⬇ Model (QDQ, portable)", qdq_file.read_bytes,
                         file_name=f"run{run_id}_{QDQ_FILE}", mime="application/octet-stream", key="history.dl_qdq",
                         type="primary", help="Plain QDQ graph: runs in ORT, TensorRT, OpenVINO or any QDQ-aware runtime.",
                         on_click="ignore")
    row.download_button("⬇ ORT-only model", model_file.read_bytes,
                         file_name=f"run{run_id}_{model_file.name}", mime="application/octet-stream",
                         key="history.dl_model", help="Optimized for this CPU (QLinear and com.microsoft ops): "
                                                      "for ONNX Runtime only.", on_click="ignore")
elif model_file.is_file():
    # files are read or built only when the button is clicked (a model can be tens of MB, a report ~5 MB)
    row.download_button("⬇ Model (.onnx)", model_file.read_bytes, file_name=f"run{run_id}_{model_file.name}",
                         mime="application/octet-stream", key="history.dl_model", on_click="ignore")
else:
    row.warning("The model file is gone from the workspace.")
# every download is a callable, even small text: Streamlit serves a callable's file only around the click that asks
# for it, while bytes given here stay served at their /media URL to anyone who has it, signed in or not
row.download_button("⬇ Recipe (JSON)", recipe.to_json, file_name=f"run{run_id}_recipe.json",
                     mime="application/json", key="history.dl_recipe", on_click="ignore")
row.download_button("⬇ CLI line", lambda: cli + "\n", file_name=f"run{run_id}_cli.sh", mime="text/x-shellscript",
                     key="history.dl_cli", on_click="ignore")
if model_file.is_file() and r.source_path.is_file():
    row.download_button("⬇ HTML report", actions.report_download(r), file_name=f"run{run_id}_report.html",
                         mime="text/html", key="history.dl_report", on_click="ignore")
if row.button(":material/compare: Load into Compare", key="history.load", type="primary",
               disabled=not model_file.is_file()):
    with engine_errors("Loading the run"):
        actions.load_run(r)
        st.switch_page("pages/compare.py")
with st.expander("Raw record"):
    st.json(to_plain(r))

# -- delete, with a confirmation ------------------------------------------------------------------------
inside = ws.contains(model_file)
if state.ui("history.confirm_delete") != run_id:
    if st.button(f":material/delete: Delete run #{run_id}", key="history.delete"):
        state.set_ui("history.confirm_delete", run_id)
        st.rerun()
else:
    what = ("its files in the workspace" if inside else
            "nothing on disk: its model lies outside the workspace and stays where it is")
    timed = []
    with engine_errors("Listing the benchmarks of the run"):
        timed = actions.benchmarks_of(run_id)
    benches = (f", and the {len(timed)} benchmark{'s' if len(timed) != 1 else ''} that timed it ("
               + "; ".join(timed) + ")") if timed else " (no benchmark timed it)"
    st.warning(md(f"Delete run #{run_id} from the history? This also deletes {what}{benches}. It cannot be undone."),
               icon=":material/delete:")
    yes, no = st.columns([1, 4])
    if yes.button("Yes, delete", key="history.delete_yes", type="primary"):
        state.set_ui("history.confirm_delete", None)
        with engine_errors(f"Deleting run #{run_id}"):
            done = actions.delete_run(run_id)
            bench = (f" and the {len(done.timed)} benchmark{'s' if len(done.timed) != 1 else ''} that timed it ("
                     + "; ".join(done.timed) + ")") if done.timed else ""
            state.flash(f"Deleted run #{run_id}{bench}; {format_bytes(done.freed_bytes)} freed.", "success")
            st.rerun()
    if no.button("Keep it", key="history.delete_no"):
        state.set_ui("history.confirm_delete", None)
        st.rerun()
