"""The processes a test's recipe runs left running, found from ``/proc``; a recipe child held at work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GATE_VAR = "ORTLAB_TEST_RECIPE_GATE"

# in the recipe child, each progress event waits while the gate file exists: the run is surely at work when a test
# acts on it, on a machine of any speed (the child works as usual once the gate is gone)
HELD_RECIPE_CHILD = f"""
import os, sys, time

if "_recipe_child" in " ".join(getattr(sys, "orig_argv", sys.argv)) and os.environ.get("{GATE_VAR}"):
    from ortlab.runs import recipe_child

    _real = recipe_child.run_recipe_spec

    def _held(spec, run_dir, report, **kwargs):
        def held_report(ev):
            while os.path.exists(os.environ["{GATE_VAR}"]):
                time.sleep(0.05)
            report(ev)
        return _real(spec, run_dir, held_report, **kwargs)

    recipe_child.run_recipe_spec = _held
"""


def hold_recipe_children(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Recipe children started from now on (in this test) stop at their first progress event until the returned
    gate file is removed; the hook is a ``sitecustomize`` in ``folder`` on the children's PYTHONPATH."""
    (folder / "sitecustomize.py").write_text(HELD_RECIPE_CHILD)
    gate = folder / "gate"
    gate.touch()
    monkeypatch.setenv(GATE_VAR, str(gate))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    return gate


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
