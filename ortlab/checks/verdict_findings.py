"""What a verdict collects while it judges an evaluation: each figure it looked at (:class:`Figure`) and the
reasons at each level (:class:`Findings`), shared by the verdict (:mod:`ortlab.checks.verdict`) and the task kinds
that judge their own figures (:mod:`ortlab.checks.task_kind`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ortlab.checks.uncertainty import Uncertainty, wilson_uncertainty

__all__ = ["Figure", "Findings", "db_text", "pct_text", "share"]


def pct_text(x: float) -> str:
    """0.123 → "12.3%"."""
    return f"{100 * x:.1f}%"


def db_text(x: float) -> str:
    """An SQNR in dB ("identical" for +inf)."""
    return "identical" if x == math.inf else f"{x:.1f} dB"


@dataclass
class Figure:
    """One figure a verdict looked at: its name, number and text, and the reason when it fails."""

    metric: str
    value: float | None
    text: str
    # its interval against the bars given (computed when it decides), the policy's bars for it (degraded, broken)
    uncertain: Callable[[tuple[float, ...]], Uncertainty | None] | None = None
    bars: tuple[float, ...] = ()
    bare: str = ""  # its reason without the bar (see verdict._one_bar)


class Findings:
    """(reason, figure) pairs at each level; task metrics are looked at before SQNR, so the first at a level
    decides it."""

    def __init__(self) -> None:
        self.broken: list[tuple[str, Figure]] = []
        self.degraded: list[tuple[str, Figure]] = []
        self.checked: list[tuple[str, Figure]] = []

    def grade(self, value: float, degraded_above: float, broken_above: float, text: str, fig: Figure) -> None:
        fig.bare = text
        if value > broken_above:
            self.broken.append((f"{text} > {pct_text(broken_above)}", fig))
        elif value > degraded_above:
            self.degraded.append((f"{text} > {pct_text(degraded_above)}", fig))

    def grade_low(self, value: float, degraded_below: float, broken_below: float, text: str, fig: Figure,
                  fmt=pct_text) -> None:
        fig.bare = text
        if value < broken_below:
            self.broken.append((f"{text} < {fmt(broken_below)}", fig))
        elif value < degraded_below:
            self.degraded.append((f"{text} < {fmt(degraded_below)}", fig))


def share(value: float, trials: float, n: int, unit: str = "share",
          what: str = "samples") -> Callable[[tuple[float, ...]], Uncertainty | None]:
    """The Wilson interval of a share (``value`` of ``trials``) against the bars it is given."""
    return lambda bars: wilson_uncertainty(value, trials, n, bars, unit, what)
