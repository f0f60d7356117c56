"""What a tune search is for and how long it may take: :class:`TuneSettings`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ortlab.settings.config import OptLevel, Target

ALL_SAMPLES = 0  # TuneSettings.verify_samples: every evaluation sample given


@dataclass
class TuneSettings:
    """How long and what for: ``budget_s`` wall seconds, ``budget_cpu_s`` CPU seconds (this process and every
    process it starts, :func:`ortlab.runtime.cpu_time.cpu_seconds`; None: no CPU budget), ``max_trials`` trials at
    most (None: no limit) — the search stops at the first limit it reaches —, ``objective`` "latency" or "size",
    ``target``, ``batch_sizes`` timed per trial for ``bench_s`` seconds each, ``exclusion_steps`` keep-in-float
    trials at most per stage (accuracy-controlled, dynamic greedy), ``int16_steps`` greedy 16-bit-weight steps at
    most (:data:`INT16_STEP` nodes each), ``verify_samples`` evaluation samples per trial (0: all the evaluation
    data given, resolved when the search starts)."""

    budget_s: float = 600.0
    objective: str = "latency"
    target: Target = Target.CPU
    batch_sizes: tuple[int, ...] = (1,)
    bench_s: float = 1.0
    exclusion_steps: int = 6
    verify_samples: int = ALL_SAMPLES
    opt_level: OptLevel = OptLevel.EXTENDED
    max_trials: int | None = None
    int16_steps: int = 3
    shapes: dict[str, list[int]] = field(default_factory=dict)  # --shape: {input name: shape} for open dims
    budget_cpu_s: float | None = None
    ray: str | None = None  # --ray: a Ray cluster's address ("auto" or HOST:PORT); None: trials run here
    timing_resource: str | None = None  # --timing-resource: the custom resource of the cluster node(s) timings run on
    values: dict[str, float] = field(default_factory=dict)  # --input-value: control inputs' values (a VAD's sr)
