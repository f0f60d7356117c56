"""A new browser session (a reload included) starts where the workspace left off: the Compare pair viewed last
in this workspace, else the newest History run, is loaded with its model and, when it still exists, the data it was
made with, so Compare is never empty while History holds runs and a reload comes back to the pair it showed."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from ortlab.api import Artifact
from ortlab.core.errors import OrtlabError
from ortlab.ui.session import actions, state

RUN_ID = re.compile(r"run(\d+)")
OPENED = "resume.opened"  # (run id, its model's path, which run) a new session reopened
PAIR_FILE = "compare_pair.json"  # in the workspace's root: {"ref": variant id, "cand": variant id}
log = logging.getLogger("ortlab.ui")


def _usable(run) -> bool:
    """A History run whose model and source files are both still there."""
    return isinstance(run, Artifact) and Path(run.model_path).is_file() and Path(run.source_path).is_file()


def _named(history, vid: str | None) -> Artifact | None:
    m = RUN_ID.fullmatch(vid or "")
    if m is None:
        return None
    try:
        run = history.get(int(m.group(1)))
    except (OrtlabError, OSError):  # gone from History, or unreadable: the newest run stands in
        return None
    return run if _usable(run) else None


def remember(ref: str, cand: str) -> None:
    """Keep Compare's pair (variant ids) in the workspace for the next session; written only when it changed."""
    if state.ui("resume.saved") == (ref, cand):
        return
    path = actions.workspace().root / PAIR_FILE
    try:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"ref": ref, "cand": cand}), "utf-8")
        tmp.replace(path)
    except OSError as exc:  # a read-only workspace only loses this convenience
        log.warning("Could not keep the Compare pair: %s", exc)
    state.set_ui("resume.saved", (ref, cand))


def _last_pair() -> dict:
    try:
        data = json.loads((actions.workspace().root / PAIR_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resume() -> Artifact | None:
    """Load the Compare pair viewed last in this workspace, or else the newest usable History run, into this fresh
    session; returns the candidate run, or None when History has none."""
    history = actions.history()
    pair = _last_pair()
    cand = _named(history, pair.get("cand"))
    ref = _named(history, pair.get("ref"))
    if cand is None:
        cand = next((r for r in history.list(limit=50) if isinstance(r, Artifact) and _usable(r)), None)
        ref = None
    if cand is None:
        return None
    try:
        actions.load_run(cand)
    except Exception as exc:  # a run that cannot be opened any more never keeps the app from opening
        log.warning("Could not reopen History run %s: %s", cand.run_id, exc)
        return None
    if ref is not None and ref.source_sha256 == cand.source_sha256 and ref.run_id != cand.run_id:
        state.add_artifact(ref)
        state.set_compare_pair(actions.variant_id(ref), actions.variant_id(cand))
    try:  # the data it was made with, as the Data page would have set it (a stored data set, a sample's sets)
        no_data = actions.restore_run_data(cand)
    except Exception as exc:  # never keeps the app from opening
        log.warning("Could not restore the data of History run %s: %s", cand.run_id, exc)
        no_data = "its data could not be read"
    # said in the sidebar while that model is open: the app did not start on the bundled sample on its own
    which = "the pair viewed last" if pair.get("cand") == f"run{cand.run_id}" else "the newest run"
    state.set_ui(OPENED, (cand.run_id, str(state.model_path()), which, no_data))
    return cand


def opened_text() -> str | None:
    """The sidebar's line while the model a new session reopened from History is still the current one."""
    opened = state.ui(OPENED)
    if not opened or str(state.model_path()) != opened[1]:
        return None
    run_id, _, which, no_data = opened
    data = ("with the data it was made with" if no_data is None
            else f"without its data ({no_data}: the Data page picks data)")
    return (f"Reopened from History: run {run_id}, {which} in this workspace, {data}. The Model page opens another "
            "model or a bundled sample.")
