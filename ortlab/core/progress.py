"""Progress events, a reporter protocol and a cancel token shared by long-running engine calls."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from ortlab.core.errors import Cancelled


@dataclass(frozen=True)
class ProgressEvent:
    """One step of progress: ``stage`` (e.g. "calibrate"), ``done`` of ``total`` units and a message."""

    stage: str
    done: int = 0
    total: int | None = None
    message: str = ""

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, self.done / self.total)


class Reporter(Protocol):
    def __call__(self, event: ProgressEvent, /) -> None: ...


def null_reporter(event: ProgressEvent) -> None:
    """A reporter that ignores every event."""


class CancelToken:
    """Thread-safe flag a UI sets and workers check between units of work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self, step: str | None = None) -> None:
        if self._event.is_set():
            raise Cancelled(step=step)


class Completion:
    """When a piece of work started and ended: ``wait()``, ``done``, ``elapsed``; the worker calls ``_ended()``."""

    def __init__(self) -> None:
        self.started_at = time.time()
        self.finished_at: float | None = None
        self._done = threading.Event()

    def _ended(self) -> None:
        self.finished_at = time.time()
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the work ended (or ``timeout`` seconds passed); True when it ended."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def elapsed(self) -> float:
        return (self.finished_at or time.time()) - self.started_at
