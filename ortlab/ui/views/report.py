"""The charts of a run's HTML report, drawn with plotly (plotly.js embedded once), put into the page the engine
builds (:func:`ortlab.api.workspaces.html_report`)."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

from ortlab import api
from ortlab.api import Artifact, EvalReport, GraphDiff, LatencySummary
from ortlab.ui.views.charts import latency_panels, plain, variant_colors


def _figures(diff: GraphDiff, bench: list[LatencySummary] | None) -> list[go.Figure]:
    figs = []
    deltas = [d for d in diff.op_deltas if d.get("delta")]
    if deltas:
        deltas = sorted(deltas, key=lambda d: d["delta"])
        figs.append(go.Figure(
            go.Bar(x=[d["delta"] for d in deltas], y=[plain(d["key"]) for d in deltas], orientation="h",
                   marker_color=["#d62728" if d["delta"] < 0 else "#2ca02c" for d in deltas]),
            layout={"title": "Op-count change (after − before)", "height": max(260, 24 * len(deltas) + 100),
                    "margin": {"l": 220, "r": 20, "t": 50, "b": 40}},
        ))
    if bench:  # the app's form: p50 bars with p90/p99 whiskers, one panel per batch size

        ids = list(dict.fromkeys(b.variant for b in bench))
        fig = latency_panels(bench, {}, variant_colors(ids), height=420)
        fig.update_layout(title={"text": "Latency per batch size (ms) · bar: p50 · whisker: p99 · ◆: p90",
                                 "font": {"size": 17}})
        figs.append(fig)
    return figs


def charts_html(diff: GraphDiff, bench: list[LatencySummary] | None) -> str:
    """The report's charts (op-count change, latency per batch size) as HTML, plotly.js inlined in the first."""
    out = []
    for i, fig in enumerate(_figures(diff, bench)):
        fig.update_layout(template="plotly_white", font={"size": 13})
        out.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False,
                               config={"displaylogo": False, "responsive": True}))
    return "\n".join(out)


def html_report(artifact: Artifact, ref_info: dict, cand_info: dict, diff: GraphDiff, evaluation: EvalReport | None,
                bench: list[LatencySummary] | None, *, title: str | None = None,
                speed: tuple[LatencySummary | None, LatencySummary | None] | None = None,
                machine: api.Machine | None = None) -> str:
    """The self-contained HTML report of one run (:func:`ortlab.api.workspaces.html_report`) with its charts."""
    return api.workspaces.html_report(artifact, ref_info, cand_info, diff, evaluation, bench, title=title, speed=speed,
                                      charts_html=charts_html(diff, bench), machine=machine)
