"""What a tune search may spend: its budget in CPU seconds (the same search on a busy machine as on a quiet one),
capped in wall time; on a Ray cluster, whose CPU is not this machine's, in wall seconds. The app's Tune page and
``ortlab tune`` both take it from here."""

from __future__ import annotations

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
