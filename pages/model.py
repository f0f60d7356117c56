"""Model: pick a bundled sample or upload an .onnx/.zip; see its summary, operators and graph."""

import os

import streamlit as st

from ortlab.core.text import format_bytes
from ortlab.ui.session import actions, state
from ortlab.ui.views import cards, charts
from ortlab.ui.session.guard import engine_errors
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import demo_button, recipe_job_panel, show_flash
from ortlab.ui.views.viewers import netron
from ortlab.ui.session.router import require_router

require_router()
st.title(":material/deployed_code: Model")
st.caption(actions.WHAT_ORTLAB_DOES)
show_flash()
demo_button("model")
recipe_job_panel("model")

left, right = st.columns(2)

with right:
    up = st.file_uploader("…or upload your own model (.onnx, or .zip with external data)", type=["onnx", "zip"],
                          key="model_upload", help="The file is copied into the workspace; your file is never changed.")
    if up is not None:
        done = state.ui("upload")
        file_id = up.file_id
        if not done or done[0] != file_id:
            up_name = actions.upload_name(up.name)[0]  # a name with NUL, controls or slashes: cleaned first
            with engine_errors(f"Importing {up_name}", "The previously selected model is still selected.") as out:
                # streamed to the workspace, never copied in memory; dropped from memory once it is on disk
                actions.import_uploaded_model(up.name, up, on_saved=lambda: actions.release_upload(file_id, up))
                state.set_widget("sample_select", None)
            # the message belongs to the model that stayed selected: it is not repeated once another is chosen
            state.set_ui("upload", (file_id, out.message if out.failed else "", state.model_key()))
            actions.release_upload(file_id, up)
            del up
            if not out.failed:  # draw the page again from the top for the new model (demo button, data, flash)
                st.rerun()
            show_flash()
        elif done[1] and done[2:] == (state.model_key(),):
            st.error(done[1])
    if actions.local_imports_allowed():
        with st.expander("…or import from a path on this machine", icon=":material/folder_open:"):
            roots = actions.import_roots()
            if not roots:
                st.caption("Off: no import folders are set. To import models too big to upload, start the app "
                           "with ORTLAB_IMPORT_ROOTS set to the folders to import from (separated by "
                           f"'{os.pathsep}'), e.g. ORTLAB_IMPORT_ROOTS=~/models streamlit run app.py.")
            else:
                with st.form("local_import", border=False):
                    local = st.text_input("Import from a path on this machine", key="model_local_path",
                                          placeholder="/path/to/model.onnx or model.zip",
                                          help="For models larger than the upload limit: the .onnx (with its "
                                               "external data beside it) or .zip is copied into the workspace. "
                                               "Only from the folders of ORTLAB_IMPORT_ROOTS: "
                                               + ", ".join(str(r) for r in roots))
                    if st.form_submit_button("Import") and local.strip():
                        with engine_errors("Importing from a path",
                                           "The previously selected model is still selected.") as out:
                            actions.import_local_model(local)
                            state.set_widget("sample_select", None)
                        if not out.failed:
                            st.rerun()
                        show_flash()

with left, engine_errors("Listing the bundled samples"):
    from ortlab import api

    options = {s.name: s for s in api.models.list_samples(skip_broken=True)}
    state.ensure_widget("sample_select", state.sample_name())

    def _picked() -> None:
        state.set_ui("sample_request", True)

    choice = st.selectbox("Bundled sample", list(options), key="sample_select", on_change=_picked,
                          format_func=lambda n: f"{options[n].title} ({n})" if options[n].title else n,
                          placeholder="— an uploaded model is selected —")
    if state.ui("sample_request") and choice:
        state.set_ui("sample_request", False)
        with engine_errors(f"Opening sample {choice}") as out:
            actions.select_sample(choice)
        if not out.failed:  # draw the page again from the top for the new model
            st.rerun()
    if choice and choice in options:
        s = options[choice]
        with st.expander("About this sample: what it is, licence", icon=":material/info:"):
            st.caption(f"{s.description}  \nLicense: {s.license} · {s.attribution}")

info = state.model_info()
if info is None:
    st.info("Pick a sample or upload a model to start.")
else:
    st.subheader(md(state.model_label()))
    st.caption(f"Producer {md(info.producer or '–')} {md(info.producer_version or '')} · graph "
               f"“{md(info.graph_name)}” · sha256 {info.sha256[:16]}…")
    cards.model_cards(info)
    for w in info.warnings:
        st.warning(w)
    st.markdown("#### Inputs and outputs")
    io = cards.io_rows(info)
    st.dataframe(io, hide_index=True, width="stretch", column_config=cards.io_columns(io))
    c1, c2 = st.columns([2, 3])
    with c1:
        st.markdown("#### Weights by dtype")
        weights = cards.weight_rows(info)
        if weights:
            st.dataframe(weights, hide_index=True, width="stretch")
        if info.constant_bytes and not info.initializer_bytes:
            st.caption(f"The weights are stored in Constant nodes ({format_bytes(info.constant_bytes)}), "
                       "not as initializers.")
        elif not weights:
            st.caption("This model has no weights (no initializers, no float Constant nodes).")
    with c2:
        st.plotly_chart(charts.op_histogram(info.op_counts, "Operators by (domain, op type)"), key="model_ops",
                        width="stretch")
    st.markdown("#### Input shapes")  # full width: symbolic shapes ("[batch, 3, height, width]") are long
    with engine_errors("Working out the input shapes"):
        spec_rows = actions.spec_rows(actions.input_specs(info))
        # where each dim came from is a sentence per input under the table: as a column it ran past the page
        # ("axis 0 (batch): batch, axis 2 (height): unre…") and the table scrolled sideways
        shown = [{k: v for k, v in r.items() if k != "from"} for r in spec_rows]
        st.dataframe(shown, hide_index=True, width="stretch", column_config=cards.spec_columns(shown))
        for r in spec_rows:
            if r["from"] != "model":
                st.caption(f"{md(r['input'])}: {md(r['from'])}.")
        st.caption("Dims the model leaves open are set on the Data page (or with --shape in the CLI).")
    st.markdown("#### Graph")
    if st.toggle("Show the graph in Netron", value=True, key="model_netron"):
        path = state.model_path()
        assert path is not None  # the model's info was read from it above
        netron(path, key="model_netron_view", height=640)
