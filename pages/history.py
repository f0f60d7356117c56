"""History: every run stored in the workspace's SQLite DB, with downloads and "load into Compare"."""

import streamlit as st

from ortlab.artifact import Artifact
from ortlab.serial import to_plain
from ortlab.text import format_bytes
from ortlab.ui import actions, cards
from ortlab.ui.guard import engine_errors
from ortlab.ui.progress_view import show_flash
from ortlab.ui.router import require_router, stop_page

require_router()
st.title(":material/history: History")
show_flash()
records = []
with engine_errors("Reading the history"):
    records = actions.history().list()
if not records:
    st.info("No runs yet. Run a recipe (or the demo) and it will be listed here, even after a restart.")
    stop_page()

runs = [r for r in records if isinstance(r, Artifact)]
unreadable = [r for r in records if not isinstance(r, Artifact)]
table = [{"run": r.run_id, "time": r.created_at.replace("T", " ")[:19], "model": r.source_name,
          **actions.run_summary(r), "sha256": r.sha256[:12], "random data": "⚠ yes" if r.random_data else ""}
         for r in runs]
st.dataframe(table, hide_index=True, width="stretch")
if unreadable:
    st.warning(f"{len(unreadable)} stored run{'s' if len(unreadable) != 1 else ''} cannot be read and "
               f"{'are' if len(unreadable) != 1 else 'is'} left out above:", icon=":material/warning:")
    st.dataframe([{"run": u.id, "time": u.created_at.replace("T", " ")[:19], "why": u.reason} for u in unreadable],
                 hide_index=True, width="stretch")
if not runs:
    stop_page()

by_id = {r.run_id: r for r in runs}
run_id = st.selectbox("Run", list(by_id), key="history.run",
                      format_func=lambda i: f"#{i} · {actions.recipe_label(by_id[i])} · {by_id[i].source_name}")
r = by_id[run_id]
recipe = r.recipe
model_file = r.model_path

st.subheader(f"Run #{run_id}: {recipe.label()}")
cards.verdict_banner(actions.run_verdict(r), f"Verdict on run #{run_id}")
if r.random_data:
    cards.random_data_warning("This run")
ev = r.evaluation
cards.metric_row([
    ("Size", format_bytes(r.size_bytes), f"{100 * (r.size_ratio - 1):+.1f}%", "Against the source model.",
     "inverse"),
    ("Top-1 (candidate)", cards.pct(ev.top1_accuracy_cand if ev else None), None, None),
    ("Agreement", cards.pct(ev.top1_agreement if ev else None), None, None),
    ("Total time", f"{r.total_seconds:.1f} s", None, ", ".join(f"{k} {v:.2f}s" for k, v in r.timings.items())),
])
st.caption(f"Source {r.source_path} (sha256 {r.source_sha256[:12]}) → {r.model_path} "
           f"(sha256 {r.sha256[:12]}) · providers {', '.join(r.providers)}")
for w in r.warnings:
    st.caption(f"⚠ {w}")

cli = actions.cli_line(r, f"run{run_id}.onnx")
st.code(cli, language="bash")
d = st.columns(5)
if model_file.is_file():
    # files are read or built only when the button is clicked (a model can be tens of MB, a report ~5 MB)
    d[0].download_button("⬇ Model (.onnx)", model_file.read_bytes, file_name=f"run{run_id}_{model_file.name}",
                         mime="application/octet-stream", key="history.dl_model")
else:
    d[0].warning("The model file is gone from the workspace.")
d[1].download_button("⬇ Recipe (JSON)", recipe.to_json(), file_name=f"run{run_id}_recipe.json",
                     mime="application/json", key="history.dl_recipe")
d[2].download_button("⬇ CLI line", cli + "\n", file_name=f"run{run_id}_cli.sh", mime="text/x-shellscript",
                     key="history.dl_cli")
if model_file.is_file() and r.source_path.is_file():
    d[3].download_button("⬇ HTML report", lambda: actions.run_report(r), file_name=f"run{run_id}_report.html",
                         mime="text/html", key="history.dl_report")
if d[4].button(":material/compare: Load into Compare", key="history.load", type="primary",
               disabled=not model_file.is_file()):
    with engine_errors("Loading the run"):
        actions.load_run(r)
        st.switch_page("pages/compare.py")
with st.expander("Raw record"):
    st.json(to_plain(r))
