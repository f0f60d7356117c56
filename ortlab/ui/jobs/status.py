"""The pages' view of background work: the states of a run-service handle, and whether to wait for it.

Recipes and benchmarks run through :mod:`ortlab.runs.service` (recipes in a child process, benchmarks one at a time
per process, each variant × batch size in its own child). With ``ORTLAB_SYNC_JOBS=1`` (or under Streamlit's
AppTest) the pages start a job and wait for its end before drawing, so tests finish deterministically; the work
still runs in a child process.
"""

from __future__ import annotations

import os

from ortlab import api
from ortlab.api import Handle

QUEUED, RUNNING, DONE, FAILED = api.recipes.QUEUED, api.recipes.RUNNING, api.recipes.DONE, api.recipes.FAILED
CANCELLED = api.recipes.CANCELLED

__all__ = ["CANCELLED", "DONE", "FAILED", "QUEUED", "RUNNING", "Handle", "busy", "started", "sync_jobs"]


def sync_jobs() -> bool:
    """True when a page must wait for the job it started (tests)."""
    if os.environ.get("ORTLAB_SYNC_JOBS", "") not in ("", "0"):
        return True
    try:
        from streamlit import config

        return bool(config.get_option("global.appTest"))
    except (ImportError, RuntimeError):  # no Streamlit, or an option this version lacks
        return False


def busy() -> int:
    """Benchmarks running or waiting in this server process."""
    return api.benchmarks.bench_busy()


def started(handle: Handle) -> Handle:
    """The handle, after waiting for its end in sync mode."""
    if sync_jobs():
        handle.wait()
    return handle
