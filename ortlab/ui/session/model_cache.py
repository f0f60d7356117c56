"""Per-session caches of what the pages read from model files (model info, graph diff, graph description), each
read in a child process when the files are large (:mod:`ortlab.model.isolated`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortlab import api
from ortlab.ui.session import state

if TYPE_CHECKING:
    from ortlab.api import GraphDiff


def cache_key(*parts) -> tuple:
    return tuple(str(p) for p in parts)


def model_info(path: Path, c: dict | None = None):
    """``inspect_model`` of ``path`` (in a child process when it is large: ``isolated``), cached per session (or
    in ``c``, a session's cache taken earlier, for work done outside the session such as a deferred download)."""
    c = state.cache() if c is None else c
    k = cache_key("info", path)
    if k not in c:
        c[k] = api.models.model_info(path)
    return c[k]


def graph_diff(ref: Path, cand: Path, c: dict | None = None) -> GraphDiff:
    """``diff.graph_diff`` of two files (in a child process when they are large: ``isolated``), cached per
    session (or in ``c``, as :func:`model_info`)."""
    c = state.cache() if c is None else c
    k = cache_key("diff", ref, cand)
    if k not in c:
        c[k] = api.models.graph_diff(ref, cand)
    return c[k]


def graph_description(ref: Path, cand: Path) -> dict:
    """``diff.graph_description`` of two files (the merged before/after graph, as plain data; in a child process
    when they are large: ``isolated``), cached per session."""
    c = state.cache()
    k = cache_key("description", ref, cand)
    if k not in c:
        c[k] = api.models.graph_description(ref, cand)
    return c[k]
