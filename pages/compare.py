"""Compare: two variants side by side — graph diff, Netron, size, accuracy and output error."""

import streamlit as st

from ortlab.core.text import format_bytes
from ortlab.ui.session import actions, compare_data, model_cache, resume, state
from ortlab.ui.views import cards, charts
from ortlab.ui.views.forms import dataclass_form
from ortlab.api import VerdictPolicy
from ortlab import api
from ortlab.ui.session.guard import engine_errors
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import demo_button, recipe_job_panel, show_flash
from ortlab.ui.graph.graph_view import counts_text, show_graph_diff
from ortlab.ui.views import node_errors, speed
from ortlab.ui.views.viewers import netron
from ortlab.ui.session.router import require_router, stop_page

require_router()
st.title(":material/compare: Compare")
verdict_slot = st.container()  # the verdict comes first; it is drawn once the pair and its evaluation are known
show_flash()
recipe_job_panel("compare")

others = actions.other_model_variants()
include_other = bool(others) and st.toggle(
    f"Also offer other models' artifacts ({len(others)})", key="compare.other_models",
    help="Only artifacts whose inputs and outputs (names, dtypes, ranks) match this model's can be compared "
         "with it; the others are listed with the reason.")
if include_other:
    for v, why in others:
        if why is not None:
            st.caption(f"Not offered: {md(v.name)}: {why}.")
variants = actions.variants(include_other=include_other)
if len(variants) < 2:
    st.info("Nothing to compare yet: run a recipe (or the demo) first, or load a run from History.")
    demo_button("compare")
    stop_page()

ids = [v.id for v in variants]
by_id = {v.id: v for v in variants}
colors = charts.variant_colors(ids)
pair = state.compare_pair() or (ids[0], ids[-1])
if pair[0] not in by_id or pair[1] not in by_id:
    pair = (ids[0], ids[-1])
if state.widget("compare.ref") not in by_id or state.ui("compare_pair_seen") != pair:
    state.set_widget("compare.ref", pair[0])
    state.set_widget("compare.cand", pair[1])
c1, c2 = st.columns(2)
ref_id = c1.selectbox("Reference", ids, key="compare.ref", format_func=lambda i: by_id[i].name)
cand_id = c2.selectbox("Candidate", ids, key="compare.cand", format_func=lambda i: by_id[i].name,
                       help=cards.GLOSS["QDQ"] if any("QDQ" in v.name for v in variants) else None)
state.set_compare_pair(ref_id, cand_id)
resume.remember(ref_id, cand_id)  # a reload (a new session) comes back to this pair
state.set_ui("compare_pair_seen", (ref_id, cand_id))
ref, cand = by_id[ref_id], by_id[cand_id]
if ref_id == cand_id:
    st.warning("Reference and candidate are the same model; pick two different ones.")
random_flag = any(v.artifact is not None and v.artifact.random_data for v in (ref, cand))
if random_flag:
    cards.random_data_warning("This run")
if cand.artifact is not None:
    for w in cand.artifact.warnings[:6]:
        st.caption(f"⚠ {md(w)}")
    coverage = getattr(cand.artifact, "coverage", None)
    if coverage is not None:
        with st.expander(f"int8 coverage · {coverage.summary()}", expanded=coverage.total == 0):
            st.dataframe([{"op type": op, "quantized": q, "nodes": n} for op, q, n in coverage.rows()],
                         hide_index=True)
            if coverage.in_subgraphs:
                st.caption(f"{coverage.in_subgraphs} of the quantized nodes are inside If/Loop/Scan subgraphs.")

ref_info = cand_info = diff = None
with engine_errors("Reading the two models"):
    ref_info = model_cache.model_info(ref.path)
    cand_info = model_cache.model_info(cand.path)
with engine_errors("Computing the graph diff"):
    diff = model_cache.graph_diff(ref.path, cand.path)
ev = compare_data.stored_evaluation(ref, cand)

# -- verdict (drawn at the top of the page) -----------------------------------------------------------
with verdict_slot:
    policy = actions.verdict_policy()
    if ref_id == cand_id:
        verdict = api.checks.not_evaluated("reference and candidate are the same model")
    elif ev is None:
        verdict = api.checks.not_evaluated("not evaluated yet: press “Evaluate this pair” (Accuracy tab)")
    else:
        verdict = api.checks.judge(ev, policy, getattr(cand.artifact, "coverage", None))
    cards.verdict_banner(verdict, f"Verdict on {cand.name}")
    with st.expander("Verdict policy", icon=":material/tune:"):
        st.caption("Thresholds that turn the evaluation into ok / degraded / broken (the same as the CLI flags). "
                   "Task and decision threshold apply to new evaluations and runs.")
        new_policy = dataclass_form(VerdictPolicy, policy, "verdict", columns=3)
        if new_policy.problems():
            st.error(" ".join(new_policy.problems()))
        elif new_policy != policy:
            state.set_ui("verdict_policy", new_policy)
            st.rerun()

# -- headline: the figure that decided the verdict first ----------------------------------------------
if ev is not None:
    if ev.random_data and not random_flag:
        cards.random_data_warning("This evaluation")
    cards.eval_cards(ev, "reference", "candidate", verdict, policy.min_sqnr_db)
if ref_info and cand_info:
    ratio = cand_info.total_bytes / max(1, ref_info.total_bytes)
    cards.metric_row([
        ("Reference size", format_bytes(ref_info.total_bytes), None, md(ref.name)),
        ("Candidate size", format_bytes(cand_info.total_bytes), f"{100 * (ratio - 1):+.1f}%", md(cand.name),
         "inverse"),
        ("Size ratio", f"{100 * ratio:.1f}%", None, "Candidate size as a share of the reference."),
        ("Nodes", f"{ref_info.node_count} → {cand_info.node_count}",
         f"{cand_info.node_count - ref_info.node_count:+d}", None, "off"),
    ])
speed.section(ref, cand)

# keyed: the selected tab survives reruns (e.g. turning on Netron) instead of jumping back to the first
tabs = st.tabs(["Graph diff", "Netron", "Size", "Accuracy", "Output error", "Per-node error"], key="compare_tab")

with tabs[0]:
    if diff is not None:
        counts = diff.counts  # the one count of the changes: these cards and the diff view's header read it
        st.markdown("#### What changed")
        st.caption(counts_text(counts))
        m = st.container(key="compare-change-cards").columns(4)  # left out on a phone: the caption has the counts
        m[0].metric("Removed nodes", counts.get("removed", 0), border=True,
                    help=f"{counts.get('fused', 0)} of them folded into fused or quantized nodes")
        m[1].metric("Added nodes", counts.get("added", 0), border=True,
                    help="Nodes with no counterpart in the reference (e.g. QuantizeLinear/DequantizeLinear)")
        m[2].metric("Changed nodes", counts.get("changed", 0), border=True,
                    help="Matched by name or place, with new inputs, attributes or op: "
                         f"{counts.get('retyped', 0)} quantized or fused under the same name (Conv → QLinearConv)")
        m[3].metric("Unchanged nodes", counts.get("unchanged", 0), border=True)
        if diff.fusions:
            st.markdown("**Fusions and rewrites**\n" + "\n".join(f"- {md(f)}" for f in diff.fusions))
        else:
            st.caption("No fusions found.")
        for n in diff.notes:
            st.caption(md(n))
        show_all = st.toggle("Show unchanged op types", value=False, key="compare.all_ops")
        cc = st.columns([1, 1])
        with cc[0]:
            cards.op_delta_table(diff.op_deltas, ref.name, cand.name, show_all)
        with cc[1].container(key="compare-op-chart"):  # left out on a phone (the table beside it says it)
            st.plotly_chart(charts.op_counts_grouped(diff.op_deltas, (ref.name, cand.name),
                                                     (colors[ref_id], colors[cand_id])),
                            key="compare_ops", width="stretch")
        st.markdown("#### Diff graph")
        # the diff's one search box: both panes narrow to the hits and their neighbours, each hit in view
        focus = st.text_input("Find a node: name or op type (empty = whole graph)", key="compare.focus",
                              placeholder="e.g. Conv, QLinearConv, com.microsoft::FusedConv, block1/Conv")
        with engine_errors("Drawing the diff graph"):
            overlay = node_errors.graph_overlay(cand.artifact)  # per-node SQNR, once analysed (Per-node error tab)
            bars = node_errors.thresholds()
            # always there, so it can be found: disabled with the reason until the Per-node error tab measured
            why_not = None if overlay else node_errors.overlay_unavailable(cand.artifact)
            mode = st.radio("Error overlay", node_errors.MODES, horizontal=True, key="compare.overlay_mode",
                            disabled=why_not is not None,
                            help=why_not or (f"Node fill on an absolute scale: red below {bars[0]:g} dB (the verdict "
                                             f"policy's broken bar), amber up to {bars[1]:g} dB, green above. "
                                             "Accumulated: with every upstream error; added by the node: the node "
                                             "alone (local SQNR)."))
            if why_not is not None:
                st.caption(md(why_not))
            if overlay:
                overlay = node_errors.graph_overlay(cand.artifact, mode)
                sentence = node_errors.culprit_sentence(node_errors.analysis_for(cand.artifact))
                if sentence:
                    st.markdown(f"**{md(sentence)}**")
            view = show_graph_diff(model_cache.graph_description(ref.path, cand.path),
                                   key=f"compare_graph_{ref_id}_{cand_id}", titles=(ref.name, cand.name),
                                   focus=focus.strip() or None,
                                   overlay=overlay["values"] if overlay else None,
                                   overlay_label=overlay["label"] if overlay else "value", higher_is_worse=False,
                                   thresholds=bars)
            if view["focus"] and not view["focus_matches"]:
                st.caption(f"No node matches “{md(view['focus'])}”.")
            st.caption(f"Before and after side by side, at most {view['visible']} boxes a side for "
                       f"{view['total_nodes']} nodes: layers grouped by name scope, unchanged runs and long "
                       "stretches folded; click a ▸ box to open it on both sides, a node for its details and "
                       "its match on the other side."
                       + (f" {view['constants_hidden']} Constant nodes (weights held as nodes) are not drawn; "
                          "type Constant in the search box to see them." if view["constants_hidden"] else ""))

with tabs[1]:
    if st.toggle("Show both graphs in Netron", value=False, key="compare.netron"):
        n1, n2 = st.columns(2)
        with n1:
            st.markdown(f"**{md(ref.name)}**")
            netron(ref.path, key="compare_netron_ref", height=700)
        with n2:
            st.markdown(f"**{md(cand.name)}**")
            netron(cand.path, key="compare_netron_cand", height=700)

with tabs[2]:
    if ref_info and cand_info:
        sc = st.columns(2)
        rows = [{"id": v.id, "name": v.name, "bytes": i.total_bytes} for v, i in ((ref, ref_info), (cand, cand_info))]
        sc[0].plotly_chart(charts.size_bars(rows, colors), key="compare_size", width="stretch")
        sc[1].plotly_chart(charts.initializer_bytes_bars({ref_id: ref_info.initializer_bytes,
                                                          cand_id: cand_info.initializer_bytes},
                                                         {ref_id: ref.name, cand_id: cand.name}, colors),
                           key="compare_init", width="stretch")

with tabs[3]:
    if ev is None:
        st.info("No evaluation stored for this pair.")
        if st.button("Evaluate this pair", key="compare.evaluate", type="primary"):
            with engine_errors("Evaluating the pair"):
                with st.spinner("Running both models on the evaluation samples…"):
                    compare_data.evaluate_pair(ref, cand)
                st.rerun()
    else:
        acc = [{"metric": name, "reference": cards.pct(r), "candidate": cards.pct(c)}
               for name, r, c in (("top-1 accuracy", ev.top1_accuracy_ref, ev.top1_accuracy_cand),
                                  ("top-5 accuracy", ev.top5_accuracy_ref, ev.top5_accuracy_cand))]
        acc.append({"metric": "top-1 agreement", "reference": "", "candidate": cards.pct(ev.top1_agreement)})
        acc.append({"metric": "top-5 containment", "reference": "", "candidate": cards.pct(ev.top5_containment)})
        for cm in ev.task.classifications if ev.task is not None else []:
            acc.append({"metric": f"confident flips (margin ≥ {policy.margin:g})", "reference": "",
                        "candidate": str(cm.confident_flips(policy.margin))})
            acc.append({"metric": f"near-tie flips (margin < {policy.margin:g})", "reference": "",
                        "candidate": str(cm.near_tie_flips(policy.margin))})
        acc = [row for row in acc if row["reference"] not in ("", "–") or row["candidate"] != "–"]
        if ev.task is not None:
            st.caption(f"Task: **{ev.task.task.value}** "
                       f"({'inferred: ' + md(ev.task.why) if ev.task.inferred else 'given'})")
        if acc:
            flips = any("flips" in row["metric"] for row in acc)
            st.dataframe(acc, hide_index=True, column_config={"metric": st.column_config.TextColumn(
                "metric", help=cards.GLOSS["near-tie flip"] if flips else None)})
        if ev.task is not None:
            tm = ev.task
            rows = [{"output": b.output, "metric": f"detections F1 vs reference (score > {b.threshold:g}, NMS, "
                     f"class + IoU ≥ {b.match_iou:g})",
                     "value": "–" if b.f1 is None else f"{b.f1:.3f} (precision {cards.pct(b.precision)}, recall "
                                                      f"{cards.pct(b.recall)}; {b.matched}/{b.ref_total} matched)"}
                    for b in tm.boxes]
            rows += [{"output": b.output, "metric": "score channels SQNR · box channels SQNR",
                      "value": f"{cards.sqnr_db_text(b.score_sqnr_db)} · {cards.sqnr_db_text(b.box_sqnr_db)}"}
                     for b in tm.boxes]
            rows += [{"output": q.output, "metric": "decoded strings changed (greedy CTC) · character error rate",
                      "value": f"{q.changed}/{q.n_samples} ({cards.pct(q.changed_fraction)}) · {cards.pct(q.cer, 2)}"}
                     for q in tm.sequences]
            rows += [{"output": d.output, "metric": f"elements crossing {d.threshold:g} ({d.scale})",
                     "value": cards.pct(d.crossing_fraction, 2)} for d in tm.dense_maps]
            rows += [{"output": b.output, "metric": f"anchors above {b.threshold:g} that changed (before NMS)",
                      "value": cards.pct(b.changed_fraction, 2)} for b in tm.boxes]
            rows += [{"output": e.output, "metric": "per-sample cosine min / mean · nearest-neighbour agreement",
                      "value": f"{e.min_cosine:.4f} / {e.mean_cosine:.4f} · {cards.pct(e.nn_agreement)}"}
                     for e in tm.embeddings]
            rows += [{"output": x.output, "metric": f"{x.dtype}: values that differ (exact)",
                      "value": f"{x.n_different:,} of {x.n_elements:,}"} for x in tm.exact]
            if rows:
                st.dataframe(rows, hide_index=True, width="stretch")
        st.caption(f"{ev.n_samples} samples · reference ran on {', '.join(ev.providers_ref)}"
                   f" · candidate on {', '.join(ev.providers_cand)}")
        if ev.per_class:
            st.plotly_chart(charts.per_class_bars(ev.per_class, (ref.name, cand.name),
                                                  (colors[ref_id], colors[cand_id])),
                            key="compare_classes", width="stretch")

with tabs[4]:
    if ev is not None and ev.outputs:
        st.dataframe([{"output": o.name, "max |Δ|": o.max_abs, "mean |Δ|": o.mean_abs,
                       "cosine": o.cosine, "SQNR": cards.sqnr_text(o)} for o in ev.outputs],
                     hide_index=True, width="stretch",
                     column_config={"SQNR": st.column_config.TextColumn("SQNR", help=cards.GLOSS["SQNR"])})
    else:
        st.info("Output errors appear once the pair is evaluated (Accuracy tab).")

with tabs[5]:
    node_errors.section(cand)
