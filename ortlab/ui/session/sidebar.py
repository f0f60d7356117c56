"""The sidebar every page shares: current model, data, artifacts and the providers that really work."""

from __future__ import annotations

import os

import streamlit as st

from ortlab.ui.session import actions, auth, resume, state
from ortlab.core.text import format_bytes
from ortlab.ui.session.guard import engine_errors
from ortlab.ui.session.inert import md
from ortlab import api

# a row of metric cards (a horizontal block with cards in its columns and no further columns inside)
CARD_ROW = ('[data-testid="stHorizontalBlock"]:has(> [data-testid="stColumn"] [data-testid="stMetric"])'
            ':not(:has([data-testid="stHorizontalBlock"]))')
CSS = """
<style>
[data-testid="stMetricValue"] { font-size: clamp(1.35rem, 1.9vw, 2.2rem); line-height: 1.15; }
/* a long value wraps (at "/", "×", spaces) instead of ending in "…"; the card's help has it in one piece */
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * {
    white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
    overflow-wrap: anywhere; }
[data-testid="stMetricDelta"] div, [data-testid="stMetricDelta"] p {
    white-space: normal !important; overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMetricLabel"] p { font-size: 1.05rem; }
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] * {
    white-space: normal !important; overflow: visible !important; text-overflow: clip !important; }
/* a button that deletes for good is red, not the theme's blue: History's "Yes, delete" confirmations */
.st-key-history-delete_yes button, [class*="st-key-history-stored-yes-"] button {
    background-color: #b3261e !important; border-color: #b3261e !important; color: #fff !important; }
.st-key-history-delete_yes button:hover, [class*="st-key-history-stored-yes-"] button:hover {
    background-color: #8c1d18 !important; border-color: #8c1d18 !important; }
/* a running recipe's progress panel stays at full opacity while its fragment reruns every 0.5 s (Streamlit fades
   elements it marks stale, so the panel greyed mid-run) */
[class*="st-key-run_progress_"] [data-stale="true"], [class*="st-key-run_progress_"] [data-stale="true"] * {
    opacity: 1 !important; transition: none !important; }
/* the first view on a laptop screen: less empty space above the title */
[data-testid="stMainBlockContainer"] { padding-top: 2.2rem; }
/* phones: a row of metric cards becomes a compact grid, two a row, so what follows them (Compare's graph diff)
   is within reach instead of thousands of pixels down; what only repeats a neighbour is left out there (the op-count
   chart: the table's numbers; the four change cards: the caption's counts) and the op table scrolls in 12rem */
@media (max-width: 640px) {
  CARD_ROW { flex-flow: row wrap !important; gap: .5rem !important; }
  CARD_ROW > [data-testid="stColumn"] {
      flex: 1 1 calc(50% - .5rem) !important; width: calc(50% - .5rem) !important;
      min-width: calc(50% - .5rem) !important; }
  [data-testid="stMetric"] > div { padding: .35rem .55rem !important; }
  [data-testid="stMetricValue"] { font-size: 1.3rem; }
  [data-testid="stMetricLabel"] p { font-size: .9rem; }
  [data-testid="stMetricDelta"] { font-size: .8rem; }
  .st-key-compare-op-chart, .st-key-compare-change-cards { display: none; }
  .ortlab-op-deltas { max-height: 12rem !important; }
}
</style>
""".replace("CARD_ROW", CARD_ROW)


def home_relative(path) -> str:
    """``path`` with the home folder written as ``~`` (the sidebar does not spell out server paths)."""
    from pathlib import Path

    p, home = Path(path), Path.home()
    return "~/" + str(p.relative_to(home)) if p.is_relative_to(home) else p.name


def providers_text() -> str:
    """Where models run, in words: "Running on CPU" or "Running on CUDA and CPU" (what works here)."""

    working = api.machine.working_providers()
    short = {api.machine.TRT: "TensorRT", api.machine.CUDA: "CUDA", api.machine.CPU: "CPU"}
    gpu_working = [short[p] for p in (api.machine.TRT, api.machine.CUDA) if p in working]
    return "Running on " + (", ".join(gpu_working) + " and CPU" if gpu_working else "CPU")


def provider_details() -> list[str]:
    """What onnxruntime claims against what a probe found working, one line per provider (for the details)."""

    working = set(api.machine.working_providers())
    claimed = api.machine.claimed_providers()
    short = {api.machine.TRT: "TensorRT", api.machine.CUDA: "CUDA", api.machine.CPU: "CPU"}
    lines = []
    for p in dict.fromkeys([*claimed, *working]):
        name = short.get(p, p.replace("ExecutionProvider", ""))
        if p in working:
            lines.append(f"{name}: works (checked by running a tiny model)")
        else:
            lines.append(f"{name}: listed by onnxruntime, but a test run fell back to the CPU (no usable GPU or "
                         "driver libraries here), so it is not used")
    return lines


def prepare():
    """Before a page runs: shared CSS, the first-open defaults (default sample, its data), and the sidebar's
    slot (returned; filled by :func:`draw` after the page)."""
    st.markdown(CSS, unsafe_allow_html=True)
    fresh = not state.initialized()
    with engine_errors("Opening the default sample"):
        actions.ensure_defaults()
    if fresh:  # a new browser session (or a reload): back to the last Compare pair, else the newest run
        with engine_errors("Opening the latest run"):
            resume.resume()
    return st.sidebar.container()


def draw(slot=None) -> None:
    """Draw the shared sidebar into ``slot`` (after the page, so it shows what the page just did)."""
    with slot if slot is not None else st.sidebar:
        st.markdown("### :material/tune: ortlab")
        info = state.model_info()
        st.markdown(f"**Model** · {md(state.model_label())}")
        if info is not None:
            st.caption(f"{format_bytes(info.total_bytes)} · {info.node_count} nodes · sha256 {info.sha256[:10]}")
        reopened = resume.opened_text()
        if reopened:
            st.caption(md(reopened))
        st.markdown(f"**Data** · {md(state.dataset_label())}")
        ds = state.dataset()
        if ds is not None and ds.is_random:
            st.warning("Random data: results are flagged.")
        mine = len(actions.model_artifacts())
        others = len(state.artifacts()) - mine
        st.markdown(f"**Artifacts** · {mine}" + (f" (+{others} of other models)" if others > 0 else ""),
                    help="This session's runs of the current model; other models' runs are on History.")
        job = state.job("recipe")
        if job is not None and not job.done:
            st.info(f"Running: {md(job.meta['recipe'].label())}")
        with engine_errors("Checking execution providers"):
            st.markdown(f"**Providers** · {providers_text()}")
            with st.expander("Provider details", icon=":material/memory:"):
                for line in provider_details():
                    st.caption(line)
                st.caption("CPU: " + md(api.machine.detect_hardware().summary()))  # AVX-512, VNNI, AMX, bf16 when present
        if auth.sign_in_configured():
            auth.account_box()
        else:
            st.caption("Workspace: " + md(home_relative(actions.workspace().root)))
        custom_op_settings()


def custom_op_settings() -> None:
    """A text input for custom-op libraries already on the server (paths, never uploads), registered in every
    ONNX Runtime session ortlab creates from now on (its runs' child processes included). With sign-in configured
    (a shared server) the libraries are only shown: the operator sets ``$ORTLAB_CUSTOM_OP_LIBRARIES``."""

    current = os.pathsep.join(api.machine.custom_op_libraries())
    if auth.sign_in_configured():  # a shared server: loading native code is the operator's choice, not a user's
        if current:
            st.caption("Custom-op libraries: " + md(current))
        return
    with st.expander("Settings", expanded=False):
        text = st.text_input("Custom-op libraries", value=current, key="settings.custom_op_libraries",
                             help="Paths on this server of shared libraries (.so/.dll/.dylib) that implement a "
                                  f"model's custom ops, separated by '{os.pathsep}'. Registered in every ONNX Runtime "
                                  "session ortlab creates; upload the model again after changing them.")
        if text.strip() != current:
            with engine_errors("Registering custom-op libraries"):
                paths = [p.strip() for p in text.split(os.pathsep) if p.strip()]
                api.machine.set_custom_op_libraries(paths)
                st.caption(f"Registered {len(paths)} librar{'y' if len(paths) == 1 else 'ies'}.")
