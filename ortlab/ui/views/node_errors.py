"""Compare → Per-node error: rank an int8 static candidate's nodes by the error they add (``ortlab.checks.analyze``),
tick nodes to keep in float, re-run the candidate's recipe with them excluded and put the two results side by side.

The analysis runs on a thread (:mod:`ortlab.ui.jobs.background`; synchronously under tests) and is kept per candidate
model in the session. Its per-node SQNR goes to :func:`ortlab.ui.session.state.set_node_overlay` for the graph-diff view.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import streamlit as st

from ortlab.core.layout import QDQ_FILE
from ortlab.api import Artifact
from ortlab.core.text import format_bytes
from ortlab.ui.session import actions, state
from ortlab.ui.jobs import background
from ortlab.ui.views import cards, speed
from ortlab.ui.session.guard import engine_errors, error_message, show_message
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import rerun_when_done
from ortlab.ui.jobs.status import DONE
from ortlab.core.errors import DataError
from ortlab.core.progress import CancelToken
from ortlab.core.errors import OrtlabError
from ortlab import api

N_SAMPLES = 32
TOP_ROWS = 25
KEEP = "keep in float"
_RESULTS = "node_errors.results"  # {candidate path: NodeAnalysis}
_RERUN = "node_errors.rerun"  # {"base": variant id, "nodes": (..), "job": recipe handle id, "new": variant id | None}


# -- engine side (no Streamlit) ---------------------------------------------------------------------------
def qdq_model(a: Artifact | None) -> Path | None:
    """The QDQ model of an int8 static artifact (``model.qdq.onnx`` in its folder), None for anything else."""
    if a is None or not a.recipe.is_static:
        return None
    p = Path(a.model_path).parent / QDQ_FILE
    return p if p.is_file() else None


def _data_for(a: Artifact):
    """(evaluation dataset, preprocess) the run was verified on (its RunSpec), else the session's."""
    spec = a.spec
    if spec is not None and spec.evaluation is not None:
        return spec.evaluation.load(), spec.preprocess
    ds = state.eval_dataset()
    if ds is None:

        raise DataError("No evaluation data: choose data on the Data page first.")
    return ds, state.preprocess() if getattr(ds, "kind", "images") == "images" else None


def start_analysis(a: Artifact, n: int = N_SAMPLES) -> background.Task:
    """Analyse ``a``'s QDQ model against its fp32 source on ``n`` evaluation samples (a thread); the task's
    result is the ``NodeAnalysis``."""

    cand = qdq_model(a)
    if cand is None:

        raise OrtlabError(f"Per-node analysis needs an int8 static run with its {QDQ_FILE}.")
    token = CancelToken()
    dataset, pre = _data_for(a)  # loaded here: the session's state is not read from the thread

    def work(task: background.Task):
        return api.checks.analyze(a.source_path, cand, dataset, pre, n=n, cancel=token, shapes=a.input_shapes or None)

    task = background.start(work, on_cancel=token.cancel, meta={"candidate": str(cand), "label": a.recipe.label()},
                            name="ortlab-analyze")
    state.set_job("analyze", task)
    return task


def results() -> dict[str, Any]:
    """The analyses of this session by candidate model path."""
    out = state.ui(_RESULTS)
    if out is None:
        out = {}
        state.set_ui(_RESULTS, out)
    return out


def collect(task: background.Task) -> None:
    """Keep a finished analysis (once) and publish its per-node SQNR as the graph-diff overlay."""
    if task.state != DONE or task.handled:
        return
    task.handled = True
    res = task.result
    results()[task.meta["candidate"]] = res
    state.set_node_overlay(task.meta["candidate"], api.checks.overlay_values(res, ACCUMULATED), "accumulated SQNR",
                           api.checks.overlay_values(res, ADDED))


ACCUMULATED, ADDED, MODES = api.checks.ACCUMULATED, api.checks.ADDED, api.checks.NODE_ERROR_MODES


def thresholds(policy=None) -> tuple[float, float]:
    """(broken bar, ok bar) in dB of the overlay's absolute scale (:func:`ortlab.api.checks.sqnr_bars` of the session's
    verdict policy, or of ``policy``)."""
    bars = api.checks.sqnr_bars(policy if policy is not None else actions.verdict_policy())
    return bars.broken, bars.ok


def culprit_sentence(analysis, policy=None) -> str | None:
    """One sentence naming the worst node by accumulated error, against the policy's bars."""
    return api.checks.culprit_sentence(analysis, api.checks.sqnr_bars(policy if policy is not None else actions.verdict_policy()))


def _num(x: float | None, digits: int = 1) -> float | None:
    if x is None:
        return None
    if math.isinf(x):
        return 999.0 if x > 0 else -999.0
    return round(float(x), digits)


def table_rows(analysis, keep: Collection[str] = (), top: int = TOP_ROWS, by: str = ACCUMULATED) -> list[dict]:
    """The worst ``top`` nodes by accumulated SQNR (``by``) or by what each adds alone (local SQNR), as table
    rows (infinite SQNR shown as ±999 dB so the column sorts)."""
    worst = api.checks.ranked_nodes(analysis, by, top)
    return [{KEEP: e.name in keep, "node": e.name, "op": e.op_type, "accumulated SQNR dB": _num(e.sqnr_db),
             "local SQNR dB": _num(e.local_sqnr_db), "added dB": _num(e.added_db), "cosine": _num(e.cosine, 4),
             # a detector's score channels vs box channels: the group that ranks the node (ortlab.checks.analyze)
             **({"worst group": f"{e.group} {_num(e.score_db)} dB" if e.group else ""}
                if getattr(analysis, "groups", None) else {})} for e in worst]


def comparison_rows(base: Artifact, new: Artifact, latency: dict | None = None) -> list[dict]:
    """Verdict, worst output SQNR, top-1 agreement, size, batch-1 latency (``latency``: {run id: LatencySummary})
    and nodes kept in float of the two runs, one column each."""
    timed = latency or {}

    def col(a: Artifact) -> dict[str, str]:
        ev = a.evaluation
        return {"verdict": cards.verdict_text(actions.run_verdict(a)),
                "logits SQNR (worst output)": api.checks.db_text(api.checks.worst_output_sqnr(ev)),
                "top-1 agreement": cards.pct(ev.top1_agreement if ev else None), "size": format_bytes(a.size_bytes),
                "latency b1 p50": speed.latency_text(timed.get(a.run_id)),
                "kept in float": str(len(a.recipe.quant.nodes_to_exclude))}
    b, n = col(base), col(new)
    return [{"metric": k, f"before (#{base.run_id})": b[k], f"with exclusions (#{new.run_id})": n[k]} for k in b]


def exclusion_sentence(base: Artifact, new: Artifact, nodes) -> str:
    """One sentence: did keeping ``nodes`` in float help? (SQNR of the worst output, before → after)."""
    return api.checks.exclusion_sentence(api.checks.worst_output_sqnr(base.evaluation), api.checks.worst_output_sqnr(new.evaluation),
                                         list(nodes))


# -- page section ---------------------------------------------------------------------------------------------
def _artifact_by_variant(vid: str | None) -> Artifact | None:
    return next((v.artifact for v in actions.variants() if v.id == vid), None)


def _rerun_panel() -> None:
    """The last keep-in-float re-run next to the run it started from."""
    rr = state.ui(_RERUN)
    if not rr:
        return
    job = state.job("recipe")
    if rr.get("new") is None and job is not None and job.id == rr.get("job") and job.state == DONE and job.result:
        rr["new"] = actions.variant_id(job.result)
        state.set_ui(_RERUN, rr)
    base, new = _artifact_by_variant(rr.get("base")), _artifact_by_variant(rr.get("new"))
    if base is None:
        return
    with st.container(border=True):
        st.markdown(f"**Re-run with {len(rr['nodes'])} node{'s' if len(rr['nodes']) != 1 else ''} kept in float**")
        if new is None:
            if job is not None and job.id == rr.get("job") and job.done:
                st.caption("The re-run did not finish (see the message above).")
            else:
                st.caption("Running… the result appears here when it finishes.")
            return
        timed = {x.run_id: speed.run_latency(x.run_id) for x in (base, new)}
        st.dataframe(comparison_rows(base, new, timed), hide_index=True, width="stretch")
        if any(v is None for v in timed.values()):
            st.caption("Latency: not timed yet. Pick the two runs as reference and candidate above (Compare times "
                       "them at batch 1), or time them on the Benchmark page.")
        sentence = exclusion_sentence(base, new, rr["nodes"])
        (st.warning if "lowered" in sentence else st.info)(md(sentence))


def sample_count_text(a: Artifact) -> str:
    """How many evaluation samples the analysis will run on: the run's own evaluation set (at most
    ``N_SAMPLES``) when it was verified on one, else "up to N"."""
    ev = a.evaluation
    if a.spec is not None and a.spec.evaluation is not None and ev is not None and ev.n_samples:
        return str(min(N_SAMPLES, ev.n_samples))
    return f"up to {N_SAMPLES}"


def section(cand) -> None:
    """Compare's "Per-node error" tab for the candidate variant ``cand``."""
    _rerun_panel()
    a = cand.artifact
    qdq = qdq_model(a)
    if a is None or qdq is None:
        st.info("Per-node error needs an int8 static run (its folder keeps the QDQ model, model.qdq.onnx): pick "
                "one as the candidate.")
        return
    st.caption(f"Each quantized node's output in {QDQ_FILE} against the same tensor of the fp32 source, on "
               f"{sample_count_text(a)} evaluation samples. *Local*: the node alone on fp32 inputs; *accumulated*: in the "
               "quantized model, with everything upstream; *added dB*: what upstream nodes add.")
    task = state.job("analyze")
    running = task is not None and not task.done
    if st.button("Analyse per-node error", key="node_errors.analyse", disabled=running,
                 type="primary" if str(qdq) not in results() else "secondary"):
        with engine_errors("Starting the per-node analysis"):
            task = start_analysis(a)
            running = not task.done
            if task.done:  # finished at once (tests): draw again so the graph above shows the overlay
                collect(task)
                st.rerun()
    if task is not None and not task.done:
        _poll(task)
        return
    if task is not None and task.done:
        collect(task)
        if task.state != DONE and not task.handled and task.meta.get("candidate") == str(qdq):
            show_message(*error_message("Analysing per-node error", task.error or Exception("cancelled")))
    res = results().get(str(qdq))
    if res is None:
        return
    _table(a, res)


def _poll(task: background.Task) -> None:
    @st.fragment(run_every=0.5)
    def poll() -> None:
        rerun_when_done(task.done)
        st.progress(0.0, text=f"Analysing {md(task.meta.get('label', ''))} · {task.elapsed:.0f} s")
        if st.button(":material/cancel: Cancel", key="node_errors.cancel", disabled=task.cancelled):
            task.cancel()

    poll()


def _table(a: Artifact, res) -> None:
    st.markdown(f"**{len(res.nodes)} quantized nodes** on {res.n_samples} samples, {res.seconds:.1f} s · worst "
                f"{min(TOP_ROWS, len(res.nodes))} first" + ("" if res.qdq else " · no QDQ nodes: accumulated only"))
    import pandas as pd

    by = st.radio("Rank by", MODES, horizontal=True, key="node_errors.sort",
                  help="accumulated: the node's output in the quantized model, with every upstream error; added by "
                       "the node: its local SQNR (the node alone on fp32 inputs). Click a column header to sort by it.")
    rows = table_rows(res, by=by)
    if not rows:
        st.info("No node to list.")
        return
    edited = st.data_editor(
        pd.DataFrame(rows), key=f"node_errors.table.{actions.variant_id(a)}", hide_index=True, width="stretch",
        disabled=[c for c in rows[0] if c != KEEP],
        column_config={
            KEEP: st.column_config.CheckboxColumn("keep", help="Leave this node in float in the re-run.", default=False,
                                                  width="small"),
            "node": st.column_config.TextColumn("node", help="Node name in the QDQ model.", width="medium"),
            "op": st.column_config.TextColumn("op", width="small"),
            "accumulated SQNR dB": st.column_config.NumberColumn("accum. dB", format="%.1f", width="small",
                                                                 help="Accumulated SQNR: with everything upstream."),
            "local SQNR dB": st.column_config.NumberColumn("local dB", format="%.1f", width="small",
                                                           help="Local SQNR: the node alone on fp32 inputs."),
            "added dB": st.column_config.NumberColumn(format="%.1f", width="small",
                                                      help="local − accumulated: what upstream adds."),
            "cosine": st.column_config.NumberColumn(format="%.4f", width="small"),
        })
    keep = tuple(str(n) for n in edited.loc[edited[KEEP].astype(bool), "node"])
    if res.unmatched:
        st.caption(f"Not in the fp32 model (renamed by pre-processing): {md(', '.join(res.unmatched[:8]))}"
                   + (" …" if len(res.unmatched) > 8 else ""))
    current = state.model_path()
    same_model = current is not None and Path(a.source_path).resolve() == Path(current).resolve()
    busy = state.job("recipe") is not None and not state.job("recipe").done
    if not same_model:
        st.caption("Re-running needs the candidate's source model to be the current model (load the run from "
                   "History).")
    if st.button("Re-run with these nodes in float", key="node_errors.rerun", disabled=not keep or busy or not same_model,
                 help="The candidate's recipe with the ticked nodes added to nodes_to_exclude, on the current data."):
        with engine_errors("Starting the re-run"):
            job = actions.start_recipe_job(api.checks.excluded_recipe(a.recipe, keep, a.run_id))
            state.set_ui(_RERUN, {"base": actions.variant_id(a), "nodes": keep, "job": job.id, "new": None})
            st.rerun()


def graph_overlay(a: Artifact | None, mode: str = ACCUMULATED) -> dict | None:
    """The stored overlay (:func:`ortlab.ui.session.state.node_overlay`) when it belongs to ``a``'s QDQ model, its values
    also under the names of ``a``'s own (ORT-optimized, fused) graph, so that they land on both the QDQ and the
    fused nodes of the graph diff."""
    task = state.job("analyze")
    if task is not None and task.done:
        collect(task)  # an analysis that ended since the last run: the graph tab is drawn before its own tab
    ov = state.node_overlay()
    qdq = qdq_model(a)
    if a is None or not ov or qdq is None or ov.get("candidate") != str(qdq) or not ov.get("values"):
        return None

    c = state.cache()
    k = ("node_names", str(qdq), str(a.model_path))
    if k not in c:
        c[k] = api.models.map_node_names(qdq, a.model_path)
    values = ov["values"] if mode == ACCUMULATED or not ov.get("local") else ov["local"]
    label = "accumulated SQNR" if mode == ACCUMULATED else "SQNR added by the node (local)"
    return {**ov, "label": label, "values": api.models.carry_values(values, c[k], lower_is_worse=True)}


def overlay_unavailable(a: Artifact | None) -> str:
    """Why the graph diff has no error overlay for the candidate ``a`` yet (a sentence for the disabled toggle)."""
    if qdq_model(a) is None:
        return ("Error overlay: colours each node by its measured int8 error; it needs an int8 static result as "
                "the candidate.")
    return ("Error overlay: colours each node by its measured error once the Per-node error tab has run its "
            "analysis on this candidate.")


def analysis_for(a: Artifact | None):
    """The kept analysis of ``a``'s QDQ model, or None."""
    qdq = qdq_model(a)
    return results().get(str(qdq)) if qdq is not None else None
