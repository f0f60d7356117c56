"""Where imported models, artifacts and the run history live on disk."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

ENV_VAR = "ORTLAB_HOME"


def default_root() -> Path:
    """``$ORTLAB_HOME`` when set, else ``~/.ortlab``."""
    env = os.environ.get(ENV_VAR, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".ortlab"


class Workspace:
    """A folder holding ``models/``, ``artifacts/`` and ``history.sqlite``.

    Each instance is independent: pass a different ``root`` per user or per test.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = (Path(root).expanduser() if root is not None else default_root()).resolve()
        self.models_dir = self.root / "models"
        self.artifacts_dir = self.root / "artifacts"
        self.db_path = self.root / "history.sqlite"
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)

    def new_artifact_dir(self, prefix: str = "run") -> Path:
        """Create and return a new, empty folder under ``artifacts/`` with a unique, sortable name."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        while True:
            path = self.artifacts_dir / f"{prefix}-{stamp}-{secrets.token_hex(4)}"
            try:
                path.mkdir(parents=True)
                return path
            except FileExistsError:
                continue

    def history(self):
        """The :class:`ortlab.history.History` stored in this workspace."""
        from .history import History

        return History(self.db_path)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"
