"""The processes a test's recipe runs left running, found from ``/proc``."""

from __future__ import annotations

from pathlib import Path


def recipe_children(home: Path) -> list[int]:
    """Running (not zombie) recipe children of runs whose workspace is ``home``: their arguments name the recipe
    child, their environment ``ORTLAB_HOME=home``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
                env = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if "_recipe_child" in args and f"ORTLAB_HOME={home}".encode() in env and state != "Z":
                found.append(int(entry.name))
    return found
