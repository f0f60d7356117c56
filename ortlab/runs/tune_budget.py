"""A tune search's budget: wall seconds, CPU seconds and trials, and whether the search was cancelled or ran out.

Its default is CPU seconds (the same search on a busy machine as on a quiet one), capped in wall time; on a Ray
cluster, whose CPU is not this machine's, wall seconds: the app's Tune page and ``ortlab tune`` both take it from
here (:func:`default_budget`, :func:`budget_limits`). The clocks are given to :class:`SearchBudget` (the wall
clock, the CPU clock of this process and its children, the machine's busy clock), so a test drives them instead of
swapping them in a search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortlab.core.progress import CancelToken
from ortlab.runtime import cpu_time

DEFAULT_CPU_BUDGET_S = 600.0  # the default budget: CPU seconds of tune and every process it starts
DEFAULT_WALL_CAP_S = 3600.0  # … unless the machine is so busy that an hour of wall time passes first


def budget_limits(cpu_s: float, ray: bool = False) -> tuple[float, float | None]:
    """(wall seconds, CPU seconds or None) of a search given ``cpu_s`` CPU seconds: the wall time is capped at six
    times the CPU budget (:data:`DEFAULT_WALL_CAP_S` for the default); on a cluster (``ray``) ``cpu_s`` seconds of
    wall time and no CPU budget."""
    if ray:
        return float(cpu_s), None
    return max(DEFAULT_WALL_CAP_S, DEFAULT_WALL_CAP_S / DEFAULT_CPU_BUDGET_S * float(cpu_s)), float(cpu_s)


def default_budget(ray: bool) -> tuple[float, float | None]:
    """(wall seconds, CPU seconds) of a search without a budget given: :data:`DEFAULT_CPU_BUDGET_S` CPU seconds
    (capped at :data:`DEFAULT_WALL_CAP_S` of wall time); on a cluster as many seconds of wall time."""
    return budget_limits(DEFAULT_CPU_BUDGET_S, ray)


@dataclass(frozen=True)
class Clocks:
    """The clocks a search reads: ``wall`` (monotonic seconds), ``cpu`` (CPU seconds of this process and every
    process it starts, :func:`ortlab.runtime.cpu_time.cpu_seconds`), ``machine`` (the machine's busy CPU seconds,
    None when it does not say)."""

    wall: Callable[[], float] = time.monotonic
    cpu: Callable[[], float] = cpu_time.cpu_seconds
    machine: Callable[[], float | None] = cpu_time.machine_busy_s


class SearchBudget:
    """``budget_s`` wall seconds, ``budget_cpu_s`` CPU seconds (None: no CPU budget) and ``max_trials`` (None: no
    limit) from :meth:`start`; :meth:`cancel` stops the search, ``token`` cancels its running work. ``started``
    counts the trials it let start."""

    def __init__(self, budget_s: float, budget_cpu_s: float | None = None, max_trials: int | None = None,
                 clocks: Clocks | None = None) -> None:
        self.budget_s, self.budget_cpu_s, self.max_trials = budget_s, budget_cpu_s, max_trials
        self.clocks = clocks or Clocks()
        self.cancelled = False
        self.out_of_time = False  # a trial was stopped because the budget ran out
        self.stopped_in = ""  # where that trial was: ", 290 s into it, in stage 3 of 5, …"
        self.started = 0  # trials started, the one stopped by the budget or a cancel included
        self.token = CancelToken()
        self._start = self._cpu_start = self._machine_start = 0.0

    def start(self) -> None:
        self._start = self.clocks.wall()
        self._cpu_start = self.clocks.cpu()
        self._machine_start = self.clocks.machine() or 0.0

    def cancel(self) -> None:
        self.cancelled = True
        self.token.cancel()

    @property
    def elapsed(self) -> float:
        return self.clocks.wall() - self._start if self._start else 0.0

    def left(self) -> float:
        """Wall seconds left."""
        return self.budget_s - self.elapsed

    @property
    def cpu_used(self) -> float:
        """CPU seconds the search has used so far (this process and the processes it started)."""
        return self.clocks.cpu() - self._cpu_start

    def spent(self) -> bool:
        """The wall-time budget or the CPU budget is spent."""
        cpu = self.budget_cpu_s
        return self.left() <= 0 or (cpu is not None and self.cpu_used >= cpu)

    def cpu_spent(self) -> bool:
        return self.budget_cpu_s is not None and self.cpu_used >= self.budget_cpu_s

    def stop(self, trials_done: int) -> bool:
        """Whether no further trial starts: cancelled, the budget spent, or ``max_trials`` done."""
        return self.cancelled or self.spent() or (self.max_trials is not None and trials_done >= self.max_trials)

    def cpu_share(self) -> cpu_time.CpuShare:
        """What the search got of the machine so far: its CPU seconds over its wall time, and what other processes
        used meanwhile (when the machine says)."""
        mine = self.cpu_used
        machine = self.clocks.machine()
        others = max(0.0, machine - self._machine_start - mine) if machine is not None and self._machine_start else None
        return cpu_time.CpuShare(mine, self.elapsed, cpu_time.cores(), others)
