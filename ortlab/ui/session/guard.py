"""Turn engine exceptions into messages on the page instead of tracebacks."""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path

import streamlit as st

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.text import one_line
from ortlab.core.disk import disk_full_message, is_disk_full
from ortlab.ui.session.inert import md
from ortlab import api
from ortlab.api import HistoryRecovered
from ortlab.ui.session.auth import workspace_root

log = logging.getLogger("ortlab.ui")


class Outcome:
    """What happened inside an ``engine_errors`` block: ``failed`` and the ``message`` shown."""

    def __init__(self) -> None:
        self.failed = False
        self.message = ""


_ABS_PATH = re.compile(r"(?<![\w.~:/])(?:/[^\s'\"“”()<>,;]+)+")


def public_paths(text: str, workspace_root: str | Path | None = None) -> str:
    """``text`` without server paths: a path in the workspace becomes ``workspace/…``, any other absolute path
    its file name."""
    root = str(workspace_root) if workspace_root is not None else ""

    def shown(m: re.Match) -> str:
        path = m.group(0).rstrip(".:")
        tail = m.group(0)[len(path):]
        if root and (path == root or path.startswith(root + "/")):
            return "workspace" + path[len(root):] + tail
        return (Path(path).name or path) + tail

    return _ABS_PATH.sub(shown, text)


def _workspace_root() -> str | None:
    """This session's workspace (the signed-in user's own when the app is shared)."""
    try:
        return str(Path(workspace_root()).resolve())
    except Exception:  # no session (tests, bare mode): the default workspace
        try:

            return str(api.workspaces.default_root().resolve())
        except (OSError, RuntimeError):
            return None


def error_message(step: str, exc: BaseException, hint: str = "") -> tuple[str, str]:
    """(level, text) to show for an exception raised while doing ``step``; logs unexpected ones. A
    ``HistoryRecovered`` notice is a warning."""

    if isinstance(exc, Cancelled):
        return "warning", f"{step} was cancelled."
    if isinstance(exc, HistoryRecovered):
        return "warning", one_line(exc)
    if is_disk_full(exc):  # an upload or a write that met a full disk: one line, whatever raised it
        return "error", f"{step} failed: {disk_full_message(_workspace_root() or '.')}"
    if isinstance(exc, OrtlabError):
        text = f"{step} failed: {one_line(exc)}"
        return "error", text + (f" {hint}" if hint else "")
    log.error("Unexpected error in %s", step, exc_info=exc)
    return "error", (f"Unexpected error in {step}: {type(exc).__name__}: {one_line(exc).rstrip('.')}. The app is still usable; "
                     "try again, or pick another model or data set.")


def show_message(level: str, text: str) -> None:
    """Show ``text`` as st.error / warning / info / success / caption (``level``): as literal text (names in it are
    never Markdown) with workspace-relative paths."""
    shown = md(public_paths(text, _workspace_root()))
    if level == "caption":
        st.caption(shown)
        return
    {"error": st.error, "warning": st.warning, "info": st.info, "success": st.success}[level](shown)


@contextmanager
def engine_errors(step: str, hint: str = "") -> Iterator[Outcome]:
    """Run engine calls; an ``OrtlabError`` becomes ``st.error`` with its message, anything else a short
    "Unexpected error" (traceback to the server log only). Streamlit's rerun/stop signals pass through."""
    outcome = Outcome()
    try:
        yield outcome
    except (Exception, Cancelled) as exc:  # Cancelled is not an Exception: shown as a warning all the same
        level, text = error_message(step, exc, hint)
        outcome.failed, outcome.message = True, text
        show_message(level, text)
