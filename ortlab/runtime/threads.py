"""How many intra-op threads the ONNX Runtime sessions ortlab opens use when nothing else asks: by default ONNX
Runtime's own choice (one per core); ``$ORTLAB_THREADS`` caps it. A Ray task sets it to the CPUs its node gave the
task (:mod:`ortlab.runtime.ray_cluster`), so a trial on a one-CPU node uses one core, as Ray's resources promise,
instead of every core of the host it shares with other nodes."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["THREADS_ENV", "limit_threads", "thread_limit"]

THREADS_ENV = "ORTLAB_THREADS"


def thread_limit() -> int:
    """``$ORTLAB_THREADS`` as a positive count; 0 (ONNX Runtime's default) when unset or not a positive number."""
    try:
        return max(0, int(os.environ.get(THREADS_ENV, "").strip() or 0))
    except ValueError:
        return 0


def limit_threads(options: Any) -> Any:
    """``options`` (ONNX Runtime SessionOptions) with :func:`thread_limit` intra-op threads, unless it already asks
    for a count."""
    n = thread_limit()
    if n and not options.intra_op_num_threads:
        options.intra_op_num_threads = n
    return options
