"""After a run's verdict, its result timed against its source with the one clock
(:func:`ortlab.timing.child_runs.time_pair`: both models in child processes, interleaved rounds) and summarised by the
one statistic (:class:`ortlab.timing.stats.SpeedUp`), so a result that runs slower than its source is named so.
``ortlab optimize`` and the app's Run both get it from the run service (:func:`ortlab.runs.service.start_recipe`'s
``speed_check``); it is stored with the run as :class:`ResultSpeed`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.progress import CancelToken
from ortlab.core.text import one_line
from ortlab.runtime.hardware import real_cpu
from ortlab.runtime.providers import ORT_ERRORS
from ortlab.settings.config import BenchConfig, Target
from ortlab.timing.child_runs import time_pair
from ortlab.timing.stats import SpeedUp

DEFAULT_SECONDS = 3.0  # of timing in all, shared by the source and the result
SECONDS_VAR = "ORTLAB_SPEED_CHECK_S"  # seconds of that timing by default; 0 turns it off by default
STAGE = "speed"  # the progress stage of the timing
STAGE_LABEL = "Speed against the source"


@dataclass(frozen=True)
class SpeedCheck:
    """Whether and how a run's result is timed against its source after its verdict: ``seconds`` of timing in all
    (half for each model, interleaved) at ``batch_size``; ``enabled`` False skips it. ``values``: (input name,
    number) of the control inputs (a sample rate), which are never random (``--input-value``)."""

    enabled: bool = True
    seconds: float = DEFAULT_SECONDS
    batch_size: int = 1
    values: tuple[tuple[str, float], ...] = ()


SKIP = SpeedCheck(enabled=False)


def default_check() -> SpeedCheck:
    """The speed check a run gets unless told otherwise: :data:`DEFAULT_SECONDS`, or ``$ORTLAB_SPEED_CHECK_S``
    seconds when set (0: none)."""
    raw = os.environ.get(SECONDS_VAR, "").strip()
    if not raw:
        return SpeedCheck()
    try:
        seconds = float(raw)
    except ValueError:
        raise OrtlabError(f"${SECONDS_VAR} must be a number of seconds (0: no timing), not {raw!r}.") from None
    return SpeedCheck(seconds=seconds) if seconds > 0 else SpeedCheck(enabled=False)


def times(x: float) -> str:
    """A speed-up as text: two decimals, or two significant digits below 0.1 (``0.012×``)."""
    return f"{x:.2f}×" if x >= 0.1 else f"{x:.2g}×"


@dataclass
class ResultSpeed:
    """A run's result timed against its source: ``speed`` (None when the timing failed: ``error`` says why) at
    ``batch_size``, the wall ``seconds`` the timing took and the ``machine`` it ran on
    (:meth:`ortlab.runtime.hardware.CpuFeatures.summary`)."""

    batch_size: int
    seconds: float
    machine: str
    speed: SpeedUp | None = None
    error: str = ""

    @property
    def slower(self) -> bool:
        """The whole 95 % interval of the speed-up lies below 1: the result is slower than its source."""
        return self.speed is not None and self.speed.paired and self.speed.speedup_range[1] < 1.0

    @property
    def faster(self) -> bool:
        """The whole 95 % interval of the speed-up lies above 1."""
        return self.speed is not None and self.speed.paired and self.speed.speedup_range[0] > 1.0

    def sentence(self) -> str:
        """``Speed: 1.90× faster than the source (95% 1.80–2.00×, 12 rounds, <machine>)``; ``Speed: slower than
        the source: 0.82× (…)``; ``Speed: no clear speed difference: 1.02× (…)``; or why it was not timed."""
        sp = self.speed
        if sp is None:
            return f"Speed: not timed ({self.error or 'no latencies'}); the verdict stands."
        lo, hi = sp.speedup_range
        how = (f"95% {times(lo)[:-1]}–{times(hi)}, {sp.rounds} rounds at batch {self.batch_size}, "
               f"{self.seconds:.1f} s, {self.machine}")
        noisy = "; noisy: the machine was busy" if sp.noisy else ""
        if self.faster:
            return f"Speed: {times(sp.speedup)} faster than the source ({how}){noisy}"
        if self.slower:
            return f"Speed: slower than the source: {times(sp.speedup)} ({how}){noisy}"
        return f"Speed: no clear speed difference: {times(sp.speedup)} ({how}){noisy}"


Timer = Callable[..., SpeedUp]


def time_result(source, result, check: SpeedCheck = SpeedCheck(), *, target: Target = Target.CPU,
                shapes: Mapping[str, Sequence[int]] | None = None, cancel: CancelToken | None = None,
                timer: Timer | None = None) -> ResultSpeed:
    """Time the model file ``result`` against ``source`` for ``check.seconds`` in all at ``check.batch_size``
    (``timer``: :func:`time_pair` unless a test gives another with its arguments). A failure or a cancel is
    kept as the record's ``error``, never raised: the run's verdict stands without it."""
    start = time.monotonic()
    machine = real_cpu().summary()  # where the timing ran
    b = max(1, int(check.batch_size))
    cfg = BenchConfig(batch_sizes=(b,), warmup=3, target=target, duration_s=max(0.1, float(check.seconds) / 2))
    speed: SpeedUp | None = None
    error = ""
    try:
        speed = (timer or time_pair)(str(Path(source)), str(Path(result)), cfg, b, cancel=cancel,
                                     shapes=dict(shapes or {}), **({"values": dict(check.values)} if check.values else {}))
    except Cancelled:
        error = "cancelled"
    except OrtlabError as exc:
        error = exc.message
    except ORT_ERRORS as exc:  # ONNX Runtime's own errors while timing
        error = f"{type(exc).__name__}: {one_line(exc)}"
    return ResultSpeed(b, time.monotonic() - start, machine, speed, error)


def shapes_of(artifact: Any) -> dict[str, list[int]]:
    """The input shapes a run's timing uses: its ``--shape`` values, then the shapes its verification fed."""
    spec = getattr(artifact, "spec", None)
    out = {k: list(v) for k, v in (getattr(spec, "shapes", None) or {}).items()}
    for k, v in (getattr(artifact, "input_shapes", None) or {}).items():
        out.setdefault(k, list(v))
    return out
