"""Netron embedded in a page, with the app's own graph drawing as the fallback."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ortlab.errors import OrtlabError
from ortlab.ui.inert import md
from ortlab.ui.netron_server import NetronViewer


@st.cache_resource(show_spinner=False)
def netron_viewer() -> NetronViewer:
    """The process-wide viewer pool (one private local server per model; no per-user state)."""
    return NetronViewer()


def show_netron(model_path: Path, key: str, height: int = 600) -> None:
    """Show ``model_path`` in an embedded Netron viewer.

    The viewer is served from ``http://127.0.0.1:<port>/`` and the iframe is loaded by the user's
    browser, so it works when the browser runs on the same machine as the app (the normal case for
    this tool). On failure (netron missing or unpatchable, unreadable model) a warning says why and the
    app's own graph drawing is shown instead. ``key`` keeps widgets of several viewers apart.
    """
    try:
        url = netron_viewer().serve(model_path)
    except OrtlabError as exc:
        st.warning(f"Netron viewer unavailable: {exc}. Showing the built-in graph view instead.")
        _fallback(Path(model_path), key, height)
        return
    with st.container(border=True):
        st.iframe(url, height=height)
    st.caption(f"Netron · {md(Path(model_path).name)} · [open in a new tab]({url}) · served on this machine only")


def _fallback(model_path: Path, key: str, height: int) -> None:
    try:
        from ortlab.diff import graph_description
        from ortlab.ui.graph_layout import graph_view
        from ortlab.ui.graph_view import diff_graph_figure

        fig = diff_graph_figure(graph_view(graph_description(model_path, model_path)))
    except (OrtlabError, ImportError) as exc:
        st.info(f"No graph drawing available: {exc}")
        return
    fig.update_layout(height=height, showlegend=False)
    st.plotly_chart(fig, key=f"{key}_graph_fallback", width="stretch")
