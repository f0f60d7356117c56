"""ortlab: quantize and graph-optimize ONNX models with ONNX Runtime. This file only routes and draws the sidebar."""

import os

import streamlit as st

from ortlab.ui.session import auth, router, sidebar, state, uploads

os.umask(0o077)  # the workspace and every file the app writes are private to the user running it (0600/0700)
uploads.install()  # upload names with NUL, control characters or slashes are cleaned as they arrive
st.set_page_config(layout="wide", page_title="ortlab", page_icon="⚡", initial_sidebar_state="expanded")
if auth.sign_in_configured() and not auth.signed_in():  # shared app: nothing but the sign-in page until then
    st.navigation([st.Page(auth.sign_in_page, title="Sign in", icon=":material/login:")], position="hidden").run()
    st.stop()

# The default page is served at "/" only (Streamlit gives it no other URL), so /model gets a hidden page of its
# own: every page opens by its direct URL without a "Page not found" dialog.
pages = [
    st.Page("pages/model.py", title="Model", icon=":material/deployed_code:", url_path="start", default=True),
    st.Page("pages/model.py", title="Model", icon=":material/deployed_code:", url_path="model", visibility="hidden"),
    st.Page("pages/data.py", title="Data", icon=":material/photo_library:", url_path="data"),
    st.Page("pages/recipe.py", title="Recipe", icon=":material/science:", url_path="recipe"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
    st.Page("pages/tune.py", title="Tune", icon=":material/auto_awesome:", url_path="tune"),
    st.Page("pages/benchmark.py", title="Benchmark", icon=":material/speed:", url_path="benchmark"),
    st.Page("pages/history.py", title="History", icon=":material/history:", url_path="history"),
]
page = st.navigation(pages)
slot = sidebar.prepare()
try:
    with router.routing():
        state.enter_page(page.title)
        page.run()
finally:  # also after st.stop() on a page; the sidebar then shows what the page just did
    sidebar.draw(slot)
