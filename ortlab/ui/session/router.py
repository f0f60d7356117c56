"""Make sure every page runs inside app.py's router.

The pages live in ``pages/``, a folder name Streamlit also reads in its old multipage mode: until app.py
calls ``st.navigation`` once in the process, a URL such as ``/history`` opened first after a server start
(and every AppTest run) executes ``pages/history.py`` directly — no page config, no first-open defaults, no
sidebar — and app.py would never run. A page that finds itself outside the router turns that old mode off
(exactly what ``st.navigation`` does) and reruns, which then goes through app.py to the same page.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from collections.abc import Iterator

import streamlit as st
from ortlab.ui.session import state

_local = threading.local()
_MAX_REROUTES = 3


class PageDone(BaseException):
    """Raised by :func:`stop_page`; ends the page but not the app run (unlike ``st.stop()``, after which the
    shared sidebar could not be drawn). A BaseException so ``engine_errors`` lets it through."""


def stop_page() -> None:
    """End the current page here; app.py still draws the sidebar."""
    raise PageDone()


@contextmanager
def routing() -> Iterator[None]:
    """Used by app.py around ``page.run()``."""
    _local.active = True
    try:
        yield
    except PageDone:
        pass
    finally:
        _local.active = False


def require_router() -> None:
    """First call of every page: rerun through app.py when the page was started without it."""
    if getattr(_local, "active", False):
        st.session_state["ortlab.reroutes"] = 0
        return
    tries = st.session_state.get("ortlab.reroutes", 0)
    if tries >= _MAX_REROUTES:  # never loop; the page still works without the sidebar
        return
    st.session_state["ortlab.reroutes"] = tries + 1
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    st.rerun()


def require_model():
    """The current model's ModelInfo; without one, say where to choose it and end the page."""

    info = state.model_info()
    if info is None:
        st.info("Choose a model on the Model page first.")
        stop_page()
    return info

