"""CPU seconds a search spent, counted across its processes, and how much of the machine it got.

:func:`cpu_seconds` is this process's CPU time (every thread) plus its children's: those that ended and were
reaped (``os.times``' children fields, i.e. ``RUSAGE_CHILDREN``) and, on Linux, those still running (and their
own descendants), read from ``/proc/<pid>/stat`` — ``RUSAGE_CHILDREN`` counts a child only once it has been
reaped. Elsewhere only reaped children count. In the app the process is the server: what other sessions do in it
at the same time counts too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BUSY_SHARE = 0.5  # the search got less than this share of the machine's cores…
OTHERS_SHARE = 0.25  # …while other processes used at least this share of them: the machine was busy
MIN_WALL_S = 10.0  # shorter searches get no busy note


def _ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def _children(pid: int) -> list[int]:
    """The live children of ``pid`` (every thread's), from ``/proc/<pid>/task/*/children``."""
    out: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def _stat_ticks(pid: int) -> int:
    """utime + stime + cutime + cstime of ``pid`` (its own CPU and its reaped children's), in clock ticks."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0
    fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) ": state is field 3, utime field 14
    try:
        return sum(int(fields[i]) for i in (11, 12, 13, 14))
    except (IndexError, ValueError):
        return 0


def live_children_cpu_s(pid: int | None = None) -> float:
    """CPU seconds of the live descendants of ``pid`` (default: this process), 0 where ``/proc`` cannot tell."""
    seen: set[int] = set()
    stack = _children(pid if pid is not None else os.getpid())
    ticks = 0
    while stack:
        child = stack.pop()
        if child in seen:
            continue
        seen.add(child)
        ticks += _stat_ticks(child)
        stack += _children(child)
    return ticks / _ticks()


def cpu_seconds() -> float:
    """This process's CPU seconds plus its children's, reaped and still running (see the module's note)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + live_children_cpu_s()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def machine_busy_s() -> float | None:
    """Seconds of CPU the whole machine spent busy since boot (every core, from ``/proc/stat``), None elsewhere."""
    try:
        first = (PROC / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        v = [int(x) for x in first[1:]]
    except ValueError:
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    busy = sum(v[:8]) - idle  # user nice system idle iowait irq softirq steal; guest time is inside user
    return busy / _ticks()


@dataclass(frozen=True)
class CpuShare:
    """What a piece of work got of the machine: ``cpu_s`` of CPU over ``wall_s`` on ``cores`` cores, and the CPU
    seconds ``others_s`` that other processes used meanwhile (None when unknown)."""

    cpu_s: float
    wall_s: float
    cores: int
    others_s: float | None = None

    @property
    def share(self) -> float:
        return self.cpu_s / max(1e-9, self.wall_s * self.cores)

    def busy_note(self) -> str | None:
        """"The machine was busy: the search got 37% of 2 cores (74 s of CPU in 600 s)…" when it got less than
        :data:`BUSY_SHARE` of the cores while others used at least :data:`OTHERS_SHARE` (or nobody can tell what
        the others used); None for a search shorter than :data:`MIN_WALL_S`."""
        if self.wall_s < MIN_WALL_S or self.share >= BUSY_SHARE:
            return None
        capacity = self.wall_s * self.cores
        if self.others_s is not None and self.others_s < OTHERS_SHARE * capacity:
            return None
        others = (f"; other processes used {self.others_s / capacity:.0%} of them" if self.others_s is not None else "")
        return (f"The machine was busy: the search got {self.share:.0%} of {self.cores} core{'s' if self.cores > 1 else ''}"
                f" ({self.cpu_s:.0f} s of CPU in {self.wall_s:.0f} s){others}. Its timings are noisier and it ran "
                f"fewer trials than on a quiet machine; a budget in CPU seconds buys the same work either way.")
