"""History's "Models and data" section: each imported model and uploaded data set with the space it takes and
its runs, and a Delete button that asks first."""

from __future__ import annotations

import streamlit as st

from ortlab.core.text import format_bytes
from ortlab import api
from ortlab.ui.session import actions, state
from ortlab.ui.session.guard import engine_errors
from ortlab.ui.session.inert import md

CONFIRM = "history.stored.confirm"  # the folder waiting for "Yes, delete"


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def deleted_message(done) -> str:
    """``Deleted X (N runs, Y freed).``"""
    return f"Deleted {done.kind} {done.name} ({_runs(len(done.run_ids))}, {format_bytes(done.freed_bytes)} freed)."


def stored_section() -> None:
    """The section, collapsed, under a heading that says how many items there are and what they take."""
    items = []
    with engine_errors("Listing the imported models and data sets"):
        items = actions.stored_items()
    if not items:
        return
    models = sum(1 for i in items if i.kind == api.workspaces.STORED_MODEL)
    total = sum(i.size_bytes for i in items)
    label = (f"Models and data: {models} imported model{'s' if models != 1 else ''}, {len(items) - models} "
             f"uploaded data set{'s' if len(items) - models != 1 else ''} ({format_bytes(total)})")
    with st.expander(label, icon=":material/inventory_2:", expanded=state.ui(CONFIRM) is not None):
        st.caption("Delete removes the item's files from the workspace (a data set: the copy of the uploaded files "
                   "ortlab keeps in data/) and the runs made from it, with their result files and the benchmarks "
                   "that timed them. Your own files are not touched. It asks first.")
        for k, item in enumerate(items):
            key = str(item.folder)
            row = st.container(horizontal=True, vertical_alignment="center")
            row.markdown(f"**{item.kind.capitalize()}** {md(item.name)} · {format_bytes(item.size_bytes)} on disk "
                         f"· {_runs(len(item.run_ids))}")
            if state.ui(CONFIRM) != key:
                what = "model file" if item.kind == api.workspaces.STORED_MODEL else "stored copy of this data"
                if row.button(":material/delete: Delete", key=f"history.stored.delete.{k}",
                              help=f"Removes the {what} and its {_runs(len(item.run_ids))} (asks first)."):
                    state.set_ui(CONFIRM, key)
                    st.rerun()
                continue
            runs = (f" and its {_runs(len(item.run_ids))} (their files and the benchmarks that timed them)"
                    if item.run_ids else "")
            st.warning(f"Delete the {item.kind} {md(item.name)}{runs} from the workspace? This frees "
                       f"{format_bytes(item.size_bytes)} or more and cannot be undone.", icon=":material/delete:")
            yes, no = st.columns([1, 4])
            if yes.button("Yes, delete", key=f"history.stored.yes.{k}", type="primary"):
                state.set_ui(CONFIRM, None)
                with engine_errors(f"Deleting the {item.kind}"):
                    state.flash(deleted_message(actions.delete_stored(item)), "success")
                    st.rerun()
            if no.button("Keep it", key=f"history.stored.no.{k}"):
                state.set_ui(CONFIRM, None)
                st.rerun()
