"""ortlab: quantize and graph-optimize ONNX models with ONNX Runtime. This file only routes and draws the sidebar."""

import os

import streamlit as st

from ortlab.ui import auth, router, sidebar

os.umask(0o077)  # the workspace and every file the app writes are private to the user running it (0600/0700)
st.set_page_config(layout="wide", page_title="ortlab", page_icon="⚡", initial_sidebar_state="expanded")
if auth.sign_in_configured() and not auth.signed_in():  # shared app: nothing but the sign-in page until then
    st.navigation([st.Page(auth.sign_in_page, title="Sign in", icon=":material/login:")], position="hidden").run()
    st.stop()

pages = [
    st.Page("pages/model.py", title="Model", icon=":material/deployed_code:", url_path="model", default=True),
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
        page.run()
finally:  # also after st.stop() on a page; the sidebar then shows what the page just did
    sidebar.draw(slot)
