"""What a start finds: the runs a killed process left behind are cleaned, stored or offered again.

:func:`startup` runs when the app or a CLI command that uses the workspace starts; :func:`interrupted_runs` lists
the runs the end of the server cut short, for the app to offer again or :func:`dismiss_interrupted`.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ortlab.core.errors import HistoryError, OrtlabError
from ortlab.runs import history, outputs
from ortlab.runs.history import History
from ortlab.runs.runspec import RunSpec
from ortlab.runs.workspace import Workspace


def startup(workspace=None) -> list[OrtlabError]:
    """When the app or a CLI command that uses the workspace starts: remove what killed runs left behind
    (``outputs.clean_stale``), open the history (a damaged one is moved aside and rebuilt), store the run
    folders that have a result but no row and the runs kept while the history was busy (``History.reindex``), and
    return the notices to show the person once (``history.HistoryRecovered``, and how many runs were listed late)."""

    ws = workspace if workspace is not None else Workspace()
    outputs.clean_stale(ws)
    read_only = None
    try:
        hist = ws.history()
        read_only = hist.read_only
        added = hist.reindex(skip=outputs.owner_alive)
    except HistoryError as exc:  # unusable and not even movable aside: said, and runs go on unrecorded
        return [*history.take_notices(), exc]
    except (OrtlabError, OSError, sqlite3.Error):
        added = []  # the folders stay; the next start tries again
    notices: list[OrtlabError] = list(history.take_notices())
    if read_only is not None:  # a full disk: the history is listed, and the line says what frees space
        notices.append(HistoryError(read_only))
    if added:
        n = len(added)
        notices.append(OrtlabError(
            f"{n} finished run{'s' if n != 1 else ''} that could not be recorded when {'they' if n != 1 else 'it'} "
            f"ended (the history was busy, or the run process died first) {'are' if n != 1 else 'is'} now listed "
            f"in History (run{'s' if n != 1 else ''} {', '.join(str(i) for i in added)})."))
    return notices


@dataclass(frozen=True)
class InterruptedRun:
    """A run that was going when the server (or the machine) stopped: its folder, what it ran (``spec``, None
    when the marker cannot be read), where it was started and when."""

    folder: Path
    spec: RunSpec | None
    origin: str
    started_at: str


def interrupted_runs(workspace=None) -> list[InterruptedRun]:
    """The workspace's run folders still marked as running (:data:`outputs.RUNNING_FILE`) whose process is gone
    and that no history row points at: runs the end of the server cut short. Newest first."""
    ws = workspace if workspace is not None else Workspace()
    out: list[InterruptedRun] = []
    hist: History | None = None
    for marker in sorted(Path(ws.artifacts_dir).glob(f"*/{outputs.RUNNING_FILE}"), reverse=True):
        folder = marker.parent
        if outputs.owner_alive(folder):
            continue
        try:
            hist = hist or ws.history()
            if hist.find_folder(folder) is not None:
                continue
        except (OrtlabError, OSError, sqlite3.Error):
            continue
        spec: RunSpec | None = None
        origin = started = ""
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
            origin, started = str(data.get("origin") or ""), str(data.get("started_at") or "")
            spec = RunSpec.from_dict(data["spec"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, OrtlabError):
            pass
        out.append(InterruptedRun(folder, spec, origin, started))
    return out


def dismiss_interrupted(run: InterruptedRun, workspace=None) -> None:
    """Remove an interrupted run's folder (after it was run again, or when the person does not want it)."""
    ws = workspace if workspace is not None else Workspace()
    folder = Path(run.folder).resolve()
    if folder.parent == Path(ws.artifacts_dir).resolve() and (folder / outputs.RUNNING_FILE).is_file():
        shutil.rmtree(folder, ignore_errors=True)
