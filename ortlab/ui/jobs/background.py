"""Engine work that runs in this server process on a thread (per-node analysis, a tune search), polled by a page.

The worker never calls Streamlit: it only runs the engine function and records what it returns, what it yields
(``items``, for generators) or the error it raised. A page keeps the :class:`Task` in the session state and polls
it from a fragment. With ``ORTLAB_SYNC_JOBS=1`` (or under AppTest) :func:`start` runs the work before returning,
so tests are deterministic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.progress import Completion
from ortlab.ui.jobs.status import CANCELLED, DONE, FAILED, RUNNING, sync_jobs


class Task(Completion):
    """One piece of work: ``state`` (running/done/failed/cancelled), ``result``, ``error`` (an ``OrtlabError``),
    ``items`` (what a generator yielded so far), ``meta`` (the page's notes), ``elapsed``."""

    def __init__(self, fn: Callable[[Task], Any], *, on_cancel: Callable[[], None] | None = None,
                 meta: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._fn = fn
        self._on_cancel = on_cancel
        self.meta: dict[str, Any] = dict(meta or {})
        self.state = RUNNING
        self.result: Any = None
        self.error: OrtlabError | Cancelled | None = None
        self.items: list[Any] = []
        self.cancelled = False
        self.handled = False

    def run(self) -> None:
        """Call the job's function and keep its outcome (on the job's thread, or inline in sync mode)."""
        try:
            out = self._fn(self)
            state = CANCELLED if self.cancelled else DONE
        except Cancelled as exc:
            out, state, self.error = None, CANCELLED, exc
        except OrtlabError as exc:
            out, state, self.error = None, FAILED, exc
        except Exception as exc:  # an engine bug: shown as a failure, never lost in the thread
            out, state, self.error = None, FAILED, OrtlabError(f"{type(exc).__name__}: {exc}")
        self.result = out
        self.state = state
        self._ended()

    def follow(self, iterable: Iterable[Any]) -> None:
        """For the worker: record every item ``iterable`` yields (pages read ``items`` while it runs)."""
        for item in iterable:
            self.items.append(item)

    def cancel(self) -> None:
        self.cancelled = True
        if self._on_cancel is not None:
            self._on_cancel()


def start(fn: Callable[[Task], Any], *, on_cancel: Callable[[], None] | None = None,
          meta: dict[str, Any] | None = None, name: str = "ortlab-task") -> Task:
    """Run ``fn(task)`` on a daemon thread (synchronously in sync mode) and return the task."""
    task = Task(fn, on_cancel=on_cancel, meta=meta)
    if sync_jobs():
        task.run()
    else:
        threading.Thread(target=task.run, name=name, daemon=True).start()
    return task
