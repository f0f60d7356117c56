"""History: every run stored in the workspace's SQLite DB, with downloads and "load into Compare"."""

import json
from pathlib import Path

import streamlit as st

from ortlab.config import Recipe
from ortlab.ui import actions, cards
from ortlab.ui.guard import engine_errors
from ortlab.ui.progress_view import show_flash
from ortlab.ui.router import require_router, stop_page

require_router()
st.title(":material/history: History")
show_flash()
rows = []
with engine_errors("Reading the history"):
    rows = actions.history().list()
if not rows:
    st.info("No runs yet. Run a recipe (or the demo) and it will be listed here, even after a restart.")
    stop_page()

table = [{"run": r["id"], "time": r["created_at"].replace("T", " ")[:19], "model": r["source_name"],
          **actions.run_summary(actions.artifact_dict(r)), "sha256": r["sha256"][:12],
          "random data": "⚠ yes" if r.get("random_data") else ""} for r in rows]
st.dataframe(table, hide_index=True, width="stretch")

ids = [r["id"] for r in rows]
by_id = {r["id"]: r for r in rows}
run_id = st.selectbox("Run", ids, key="history.run",
                      format_func=lambda i: f"#{i} · {actions.recipe_label(by_id[i])} · {by_id[i]['source_name']}")
r = by_id[run_id]
recipe = Recipe.from_dict(r["recipe"])
model_file = Path(r["model_path"])

st.subheader(f"Run #{run_id}: {recipe.label()}")
if r.get("random_data"):
    cards.random_data_warning("This run")
ev = r.get("metrics")
cards.metric_row([
    ("Size", cards.human_bytes(r["size_bytes"]), f"{100 * (r['size_bytes'] / max(1, r['source_size_bytes']) - 1):+.1f}%",
     "Against the source model.", "inverse"),
    ("Top-1 (candidate)", cards.pct((ev or {}).get("top1_accuracy_cand")), None, None),
    ("Agreement", cards.pct((ev or {}).get("top1_agreement")), None, None),
    ("Total time", f"{sum((r.get('timings') or {}).values()):.1f} s", None,
     ", ".join(f"{k} {v:.2f}s" for k, v in (r.get("timings") or {}).items())),
])
st.caption(f"Source {r['source_path']} (sha256 {r['source_sha256'][:12]}) → {r['model_path']} "
           f"(sha256 {r['sha256'][:12]}) · providers {', '.join(r.get('providers') or [])}")
for w in r.get("warnings") or []:
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
if model_file.is_file() and Path(r["source_path"]).is_file():
    d[3].download_button("⬇ HTML report", lambda: actions.run_report(r), file_name=f"run{run_id}_report.html",
                         mime="text/html", key="history.dl_report")
if d[4].button(":material/compare: Load into Compare", key="history.load", type="primary",
               disabled=not model_file.is_file()):
    with engine_errors("Loading the run"):
        actions.load_run(r)
        st.switch_page("pages/compare.py")
with st.expander("Raw record"):
    st.json(json.loads(json.dumps(r, default=str)))
