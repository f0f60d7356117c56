"""After a run's verdict, its result timed against its source with the one clock
(:func:`ortlab.timing.child_runs.time_pair`: both models in child processes, interleaved rounds) and summarised by the
one statistic (:class:`ortlab.timing.stats.SpeedUp`), so a result that runs slower than its source is named so.
``ortlab optimize`` and the app's Run both get it from the run service (:func:`ortlab.runs.prepare.start_recipe`'s
``speed_check``); it is stored with the run as :class:`ResultSpeed`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.progress import CancelToken
from ortlab.core.text import one_line
from ortlab.data.feeds import control_values
from ortlab.model.inspect import ModelInfo, inspect_model
from ortlab.runtime.hardware import real_cpu
from ortlab.runtime.providers import ORT_ERRORS
from ortlab.settings.config import BenchConfig, Target
from ortlab.timing.child_runs import time_pair
from ortlab.timing.stats import ResultSpeed, SpeedUp

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


def with_data_values(check: SpeedCheck, source: str | Path, data: Sequence[Any],
                     model_info: dict[str, Any] | None = None) -> SpeedCheck:
    """``check`` with each control input (a VAD's ``sr``) it has no value for at the value the run's tensor data
    holds (``data``: its evaluation and calibration :class:`~ortlab.runs.runspec.DataRef`, the first that has it),
    as the benchmark and tune do (:func:`ortlab.data.feeds.control_values`); ``check`` as it is when none does.
    The source's inputs come from ``model_info`` (the run's :meth:`ModelInfo.to_dict`) when given, else it is read."""
    given = dict(check.values)
    refs = [ref for ref in data if ref is not None and ref.path is not None and ref.tokenizer is None]
    inputs = None  # the source's, read only when some data is a tensor file (an image cannot hold a value)
    try:
        for ref in refs:  # the evaluation first; the calibration data is loaded only when that holds no value
            ds = ref.load()
            if ds.kind == "tensors":
                inputs = inputs if inputs is not None else (
                    ModelInfo.from_dict(model_info).inputs if model_info else inspect_model(source).inputs)
                given = control_values(ds, inputs) | given
                if len(given) > len(check.values):
                    break
    except (OrtlabError, OSError, ValueError, KeyError, TypeError):  # a stored model_info of another shape
        return check
    return replace(check, values=tuple(given.items())) if len(given) > len(check.values) else check


def shapes_of(artifact: Any) -> dict[str, list[int]]:
    """The input shapes a run's timing uses: its ``--shape`` values, then the shapes its verification fed."""
    spec = getattr(artifact, "spec", None)
    out = {k: list(v) for k, v in (getattr(spec, "shapes", None) or {}).items()}
    for k, v in (getattr(artifact, "input_shapes", None) or {}).items():
        out.setdefault(k, list(v))
    return out
