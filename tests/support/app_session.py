"""The Streamlit app under AppTest as a real server runs it: its pages navigated with ``st.navigation`` from the
first run on, and the first run checked for an exception."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest
    from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def navigation_mode_like_the_server(mp: pytest.MonkeyPatch) -> None:
    """AppTest resets ``PagesManager.uses_pages_directory`` before EVERY run, so (pages being in ``pages/``)
    each run would start in Streamlit's old pages-folder mode; ``ortlab.ui.session.router`` then reroutes through
    app.py, but a rerun drops the button click of that run. A real server leaves that mode for good once
    app.py has called ``st.navigation``; keep it off here too."""
    from streamlit.runtime.pages_manager import PagesManager

    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    mp.setattr(PagesManager, "__init__", init)


def started_app(mp: pytest.MonkeyPatch, timeout: float) -> AppTest:
    """app.py after its first run, navigating as on a real server, each run allowed ``timeout`` seconds; fails
    the test if that first run raised."""
    from streamlit.testing.v1 import AppTest

    navigation_mode_like_the_server(mp)
    at = AppTest.from_file(APP, default_timeout=timeout).run()
    assert not at.exception, [e.value for e in at.exception]
    return at
