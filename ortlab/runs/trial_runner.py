"""Where a tune search's trials run and are timed: the :class:`TrialRunner` protocol, and :class:`LocalTrials`, its
implementation on this machine (the cluster's: :class:`ortlab.runs.tune_cluster.ClusterTrials`).

A runner starts a trial's recipe (quantize, evaluate, judge) and hands back its handle; it times a trial's model
against the source with the benchmark's clock; and it says where both happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ortlab.core.progress import CancelToken
from ortlab.runs.runspec import RunSpec
from ortlab.runtime.machine import Machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.child_runs import PairTimer
from ortlab.timing.stats import SpeedUp


class TrialHandle(Protocol):
    """One running trial: poll :meth:`wait`, pass its progress on with :meth:`drain`, read ``result`` or ``error``."""

    result: Any
    error: Any

    def wait(self, timeout: float | None = None) -> bool: ...

    def drain(self) -> Any: ...

    def cancel(self) -> None: ...


class Timer(Protocol):
    """The benchmark's clock as a search uses it: ``candidate`` against ``reference``, interleaved."""

    def __call__(self, reference: str, candidate: str, cfg: BenchConfig, batch_size: int, *,
                 shapes: dict[str, list[int]], cancel: CancelToken) -> SpeedUp: ...


class TrialRunner(Protocol):
    """Where trials run and are timed. ``where``: a note naming the place ("" on this machine);
    ``timing_machine``: the machine timings ran on (None: this one); ``timing_node``: the node the last timing ran on
    ("" here); ``last``: the last timing's (source, trial) latency summaries; ``retried``: a note per trial that ran
    again elsewhere."""

    @property
    def where(self) -> str: ...

    @property
    def timing_machine(self) -> Machine | None: ...

    @property
    def timing_node(self) -> str: ...

    @property
    def retried(self) -> Sequence[str]: ...

    @property
    def last(self) -> Any: ...

    def start(self, spec: RunSpec, out: Path | None, workspace: Any) -> TrialHandle: ...

    def node_of(self, handle: Any) -> str:
        """The node a finished trial ran on ("" on this machine)."""
        ...

    def prefetch(self, specs: Iterable[RunSpec], workspace: Any) -> None: ...

    def measure(self, reference: str, candidate: str, cfg: BenchConfig, batch_size: int, *,
                shapes: dict[str, list[int]], cancel: CancelToken) -> SpeedUp: ...

    def close(self) -> None: ...


class LocalTrials:
    """Trials on this machine: each started by ``start`` (a child process through the run service,
    :func:`ortlab.runs.tune.start_here`); each timing against the source's timing child, which stays loaded from
    trial to trial (:class:`PairTimer`)."""

    where = ""
    timing_machine: Machine | None = None
    timing_node = ""
    retried: tuple[str, ...] = ()

    def __init__(self, start: Callable[[RunSpec, Path | None, Any], TrialHandle],
                 values: dict[str, float] | None = None) -> None:
        self._start = start
        self.values = dict(values or {}) or None  # control inputs' values (a VAD's sr) for the timing
        self._pair_timers: dict[str, PairTimer] = {}  # by reference: the source, or a trial timed head to head
        self._last: PairTimer | None = None

    @property
    def last(self) -> Any:
        return self._last.last if self._last is not None else None

    def start(self, spec: RunSpec, out: Path | None, workspace: Any) -> TrialHandle:
        return self._start(spec, out, workspace)

    def node_of(self, handle: Any) -> str:
        return ""

    def prefetch(self, specs: Iterable[RunSpec], workspace: Any) -> None:
        """Here trials run one at a time: nothing starts ahead (``specs`` is not read)."""

    def measure(self, reference: str, candidate: str, cfg: BenchConfig, batch_size: int, *,
                shapes: dict[str, list[int]], cancel: CancelToken) -> SpeedUp:
        timer = self._pair_timers.get(reference)
        if timer is None:
            timer = self._pair_timers[reference] = PairTimer(reference, shapes=shapes, values=self.values)
        self._last = timer
        return timer(candidate, cfg, batch_size, cancel=cancel)

    def close(self) -> None:
        """End the references' timing children."""
        timers, self._pair_timers, self._last = list(self._pair_timers.values()), {}, None
        for timer in timers:
            timer.close()
