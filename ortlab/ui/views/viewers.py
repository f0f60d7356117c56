"""The graph viewers (written in their own modules), called so that a failing viewer shows a message instead
of taking the page down."""

from __future__ import annotations

from pathlib import Path

from ortlab.ui.session.guard import engine_errors
from ortlab.ui.netron.viewer import show_netron


def netron(model_path: Path, key: str, height: int = 600) -> None:
    """Embed Netron for exactly ``model_path``."""
    with engine_errors("Opening Netron"):
        show_netron(Path(model_path), key=key, height=height)
