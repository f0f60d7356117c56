"""A new browser session (a reload included) starts where the workspace left off: the Compare pair named in the
page's address (``?ref=…&cand=…``), else the newest History run, is loaded with its model, so Compare is never
empty while History holds runs."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

from ortlab.api import Artifact
from ortlab.ui.session import actions, state

RUN_ID = re.compile(r"run(\d+)")


def _usable(run) -> bool:
    """A History run whose model and source files are both still there."""
    return isinstance(run, Artifact) and Path(run.model_path).is_file() and Path(run.source_path).is_file()


def _named(history, vid: str | None) -> Artifact | None:
    m = RUN_ID.fullmatch(vid or "")
    if m is None:
        return None
    try:
        run = history.get(int(m.group(1)))
    except Exception:  # gone from History, or unreadable: the newest run stands in
        return None
    return run if _usable(run) else None


def pair_params(ref: str, cand: str) -> dict[str, str]:
    """The address parameters that bring a reload back to this Compare pair (variant ids)."""
    return {"ref": ref, "cand": cand}


def resume(params: Mapping[str, str]) -> Artifact | None:
    """Load the pair named by ``params`` (``ref``/``cand`` variant ids from the address) or else the newest usable
    History run into this fresh session; returns the candidate run, or None when History has none."""
    history = actions.history()
    cand = _named(history, params.get("cand"))
    ref = _named(history, params.get("ref"))
    if cand is None:
        cand = next((r for r in history.list(limit=50) if _usable(r)), None)
        ref = None
    if cand is None:
        return None
    try:
        actions.load_run(cand)
    except Exception as exc:  # a run that cannot be opened any more never keeps the app from opening
        logging.getLogger("ortlab.ui").warning("Could not reopen History run %s: %s", cand.run_id, exc)
        return None
    if ref is not None and ref.source_sha256 == cand.source_sha256 and ref.run_id != cand.run_id:
        state.add_artifact(ref)
        state.set_compare_pair(actions.variant_id(ref), actions.variant_id(cand))
    return cand
