"""One benchmark at a time per server process: the queue that benchmarks on this machine and across a cluster
wait in (a cluster's nodes may include this machine, whose timings another benchmark would disturb)."""

from __future__ import annotations

import threading
from typing import Any

from ortlab.core.errors import Cancelled
from ortlab.core.progress import ProgressEvent

_BENCH = threading.Condition()
_BENCH_QUEUE: list[str] = []  # handle ids; the first one runs


def bench_busy() -> int:
    """Benchmarks running or waiting in this process."""
    with _BENCH:
        return len(_BENCH_QUEUE)


def bench_queue_position(handle_id: str) -> int:
    """How many benchmarks run or wait ahead of ``handle_id`` (0 = it runs, or has ended)."""
    with _BENCH:
        return _BENCH_QUEUE.index(handle_id) if handle_id in _BENCH_QUEUE else 0


def enqueue(handle: Any) -> None:
    """Put the benchmark ``handle`` (a ``Handle``) at the end of the queue."""
    with _BENCH:
        _BENCH_QUEUE.append(handle.id)


def leave_queue(handle: Any) -> None:
    """Take ``handle`` out of the queue (it ended): the next benchmark starts."""
    with _BENCH:
        if handle.id in _BENCH_QUEUE:
            _BENCH_QUEUE.remove(handle.id)
        _BENCH.notify_all()


def wait_for_slot(handle: Any) -> None:
    """Block until ``handle`` is first in the queue, saying how many wait ahead; Cancelled when it is cancelled
    meanwhile."""
    said = -1
    with _BENCH:
        while _BENCH_QUEUE[0] != handle.id:
            ahead = _BENCH_QUEUE.index(handle.id)
            if ahead != said:
                handle.put(ProgressEvent("queued", 0, None, f"Queued behind {ahead} benchmark"
                                                             f"{'s' if ahead != 1 else ''}."))
                said = ahead
            if handle.cancel_requested:
                raise Cancelled(step="queued")
            _BENCH.wait(0.2)
    if said >= 0:
        handle.put(ProgressEvent("queued", 1, 1, "Started."))
