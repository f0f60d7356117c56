"""Background jobs for long engine calls, and the one-benchmark-at-a-time queue.

A ``Job`` runs ``fn(job)`` in a worker thread. The worker reports progress with ``job.report(event)``, pushes
data (e.g. latency samples) with ``job.emit(item)``, checks ``job.cancel``; it never calls Streamlit. The page
polls ``job.drain()`` from a fragment. With ``ORTLAB_SYNC_JOBS=1`` (or under Streamlit's AppTest) ``start()``
runs the work in the calling thread so tests finish deterministically.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import traceback
import uuid
from typing import Any
from collections.abc import Callable

from ..errors import Cancelled
from ..progress import CancelToken, ProgressEvent

log = logging.getLogger("ortlab.ui")

PENDING, QUEUED, RUNNING, DONE, FAILED, CANCELLED = "pending", "queued", "running", "done", "failed", "cancelled"


def sync_jobs() -> bool:
    """True when jobs must run in the calling thread (tests)."""
    if os.environ.get("ORTLAB_SYNC_JOBS", "") not in ("", "0"):
        return True
    try:
        from streamlit import config

        return bool(config.get_option("global.appTest"))
    except Exception:
        return False


class Job:
    """One unit of background work with progress events, a cancel token and a result or an error."""

    def __init__(self, name: str, fn: Callable[[Job], Any], *, exclusive: bool = False) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.name = name
        self.exclusive = exclusive
        self.cancel = CancelToken()
        self.state = PENDING
        self.result: Any = None
        self.error: BaseException | None = None
        self.traceback = ""
        self.progress: dict[str, ProgressEvent] = {}   # stage → latest event, filled by drain()
        self.stages: list[str] = []
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.handled = False   # set by the page once the result was stored
        self.meta: dict[str, Any] = {}
        self._fn = fn
        self._queue: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    # -- worker side --------------------------------------------------------------------------------
    def report(self, event: ProgressEvent) -> None:
        """Reporter passed to engine calls."""
        self._queue.put(event)

    def emit(self, item: Any) -> None:
        """Push a data item for the page (anything except a ProgressEvent)."""
        self._queue.put(item)

    def _run(self) -> None:
        self.started_at = time.time()
        try:
            if self.exclusive:
                with _exclusive_slot(self):
                    self.state = RUNNING
                    self.result = self._fn(self)
            else:
                self.state = RUNNING
                self.result = self._fn(self)
            self.state = DONE
        except Cancelled as exc:
            self.error, self.state = exc, CANCELLED
        except BaseException as exc:
            self.error, self.state = exc, FAILED
            self.traceback = traceback.format_exc()
            log.error("Job %s (%s) failed:\n%s", self.name, self.id, self.traceback)
        finally:
            self.finished_at = time.time()
            self._done.set()

    # -- page side ----------------------------------------------------------------------------------
    def start(self, sync: bool | None = None) -> Job:
        """Start the work (in this thread when ``sync`` or ``sync_jobs()``)."""
        if sync if sync is not None else sync_jobs():
            self._run()
        else:
            self._thread = threading.Thread(target=self._run, name=f"ortlab-{self.name}-{self.id}", daemon=True)
            self._thread.start()
        return self

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def drain(self) -> list[Any]:
        """Take everything queued so far: progress events update ``progress``; other items are returned."""
        items = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, ProgressEvent):
                if item.stage not in self.stages:
                    self.stages.append(item.stage)
                self.progress[item.stage] = item
            else:
                items.append(item)
        return items

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.finished_at or time.time()) - self.started_at


# -- one exclusive job (benchmark) at a time across every browser session ---------------------------------
# Process-wide on purpose: benchmarks compete for the same CPU cores. Holds only a lock and waiting job ids.
_SLOT = threading.Lock()
_WAITING: list[str] = []
_WAITING_LOCK = threading.Lock()
_RUNNING: list[str] = []


def queue_position(job_id: str) -> int:
    """How many exclusive jobs run or wait ahead of ``job_id`` (0 = it runs or may start now)."""
    with _WAITING_LOCK:
        if job_id in _RUNNING:
            return 0
        ahead = _WAITING.index(job_id) if job_id in _WAITING else len(_WAITING)
        return ahead + len(_RUNNING)


def busy() -> int:
    """Number of exclusive jobs running or waiting in this process."""
    with _WAITING_LOCK:
        return len(_RUNNING) + len(_WAITING)


class _exclusive_slot:
    def __init__(self, job: Job) -> None:
        self.job = job

    def __enter__(self) -> None:
        job = self.job
        with _WAITING_LOCK:
            _WAITING.append(job.id)
        try:
            while True:
                with _WAITING_LOCK:
                    first = bool(_WAITING) and _WAITING[0] == job.id
                if first and _SLOT.acquire(timeout=0.25):
                    break
                job.state = QUEUED
                ahead = queue_position(job.id)
                job.report(ProgressEvent("queued", 0, None,
                                         f"Queued behind {ahead} benchmark{'s' if ahead != 1 else ''}."))
                if job.cancel.cancelled:
                    raise Cancelled(step="queued")
                if not first:
                    time.sleep(0.25)
        finally:
            with _WAITING_LOCK:
                if job.id in _WAITING:
                    _WAITING.remove(job.id)
        with _WAITING_LOCK:
            _RUNNING.append(job.id)

    def __exit__(self, *exc) -> None:
        with _WAITING_LOCK:
            if self.job.id in _RUNNING:
                _RUNNING.remove(self.job.id)
        _SLOT.release()
