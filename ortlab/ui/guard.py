"""Turn engine exceptions into messages on the page instead of tracebacks."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from collections.abc import Iterator

import streamlit as st

from ..errors import Cancelled, OrtlabError
from ..text import one_line

log = logging.getLogger("ortlab.ui")


class Outcome:
    """What happened inside an ``engine_errors`` block: ``failed`` and the ``message`` shown."""

    def __init__(self) -> None:
        self.failed = False
        self.message = ""


def error_message(step: str, exc: BaseException, hint: str = "") -> tuple[str, str]:
    """(level, text) to show for an exception raised while doing ``step``; logs unexpected ones."""
    if isinstance(exc, Cancelled):
        return "warning", f"{step} was cancelled."
    if isinstance(exc, OrtlabError):
        text = f"{step} failed: {one_line(exc)}"
        return "error", text + (f" {hint}" if hint else "")
    log.error("Unexpected error in %s", step, exc_info=exc)
    return "error", (f"Unexpected error in {step}: {type(exc).__name__}: {one_line(exc)}. The app is still usable; "
                     "try again, or pick another model or data set.")


def show_message(level: str, text: str) -> None:
    """Show ``text`` as st.error / warning / info / success (``level``)."""
    {"error": st.error, "warning": st.warning, "info": st.info, "success": st.success}[level](text)


@contextmanager
def engine_errors(step: str, hint: str = "") -> Iterator[Outcome]:
    """Run engine calls; an ``OrtlabError`` becomes ``st.error`` with its message, anything else a short
    "Unexpected error" (traceback to the server log only). Streamlit's rerun/stop signals pass through."""
    outcome = Outcome()
    try:
        yield outcome
    except Exception as exc:
        level, text = error_message(step, exc, hint)
        outcome.failed, outcome.message = True, text
        show_message(level, text)
