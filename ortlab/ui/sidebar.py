"""The sidebar every page shares: current model, data, artifacts and the providers that really work."""

from __future__ import annotations

import streamlit as st

from . import actions, auth, state
from ..text import format_bytes
from .guard import engine_errors
from .inert import md

CSS = """
<style>
[data-testid="stMetricValue"] { font-size: 2.2rem; }
[data-testid="stMetricLabel"] p { font-size: 1.05rem; }
</style>
"""


def home_relative(path) -> str:
    """``path`` with the home folder written as ``~`` (the sidebar does not spell out server paths)."""
    from pathlib import Path

    p, home = Path(path), Path.home()
    return "~/" + str(p.relative_to(home)) if p.is_relative_to(home) else p.name


def providers_text() -> str:
    """'CPU only: CUDA/TensorRT claimed by onnxruntime-gpu but not usable' or the working GPU providers."""
    from .. import providers

    working = providers.working_providers()
    claimed = providers.claimed_providers()
    short = {providers.TRT: "TensorRT", providers.CUDA: "CUDA", providers.CPU: "CPU"}
    gpu_claimed = [short[p] for p in (providers.TRT, providers.CUDA) if p in claimed and p not in working]
    gpu_working = [short[p] for p in (providers.TRT, providers.CUDA) if p in working]
    if gpu_working:
        text = "Working: " + ", ".join(gpu_working + ["CPU"])
        if gpu_claimed:
            text += f" ({'/'.join(gpu_claimed)} claimed but not usable)"
        return text
    if gpu_claimed:
        return f"CPU only: {'/'.join(gpu_claimed)} claimed by onnxruntime but not usable"
    return "CPU only"


def prepare():
    """Before a page runs: shared CSS, the first-open defaults (default sample, its data), and the sidebar's
    slot (returned; filled by :func:`draw` after the page)."""
    st.markdown(CSS, unsafe_allow_html=True)
    with engine_errors("Opening the default sample"):
        actions.ensure_defaults()
    return st.sidebar.container()


def draw(slot=None) -> None:
    """Draw the shared sidebar into ``slot`` (after the page, so it shows what the page just did)."""
    with slot if slot is not None else st.sidebar:
        st.markdown("### :material/tune: ortlab")
        info = state.model_info()
        st.markdown(f"**Model** · {md(state.model_label())}")
        if info is not None:
            st.caption(f"{format_bytes(info.total_bytes)} · {info.node_count} nodes · sha256 {info.sha256[:10]}")
        st.markdown(f"**Data** · {md(state.dataset_label())}")
        ds = state.dataset()
        if ds is not None and ds.is_random:
            st.warning("Random data: results are flagged.")
        st.markdown(f"**Artifacts** · {len(state.artifacts())}")
        job = state.job("recipe")
        if job is not None and not job.done:
            st.info(f"Running: {md(job.meta['recipe'].label())}")
        with engine_errors("Checking execution providers"):
            st.markdown(f"**Providers** · {providers_text()}")
        if auth.sign_in_configured():
            auth.account_box()
        else:
            st.caption("Workspace: " + md(home_relative(actions.workspace().root)))
