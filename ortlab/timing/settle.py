"""A pair timed until its speed-up is settled: interleaved rounds (:func:`ortlab.timing.child_runs.time_interleaved`
with an :class:`UntilSettled` rule) go on until the 95 % interval of the speed-up (:func:`ortlab.timing.stats.paired`)
lies within ±:data:`TARGET` of it, or :data:`CAP_S` seconds have passed. The result (:class:`SettledSpeed`) says how
it stopped and what may be read from it: a clear speed-up, "no clear difference" (the interval holds 1) or "noisy:
the machine was busy" (still wide at the cap). Compare's speed cards and ``ortlab compare`` time through it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ortlab.timing import stats
from ortlab.timing.stats import MIN_ROUNDS, SpeedUp

TARGET = 0.10  # stop once the 95 % interval is within ±10 % of the speed-up
CAP_S = 20.0  # ... or after this many seconds of timing
TIGHT, CAP, PLANNED = "tight", "cap", "planned"  # how a timing stopped (PLANNED: a fixed-length benchmark)
NOISY = "noisy: the machine was busy"


def half_width(sp: SpeedUp) -> float:
    """Half the 95 % interval's width, relative to the ratio (0.1: ±10 %)."""
    return (sp.high - sp.low) / 2 / sp.ratio if sp.ratio > 0 else float("inf")


class UntilSettled:
    """The stop rule of a pair timed until settled: after each round, :func:`time_interleaved` asks :meth:`done`
    with every series' round p50s so far (series 0 the reference); it says stop once every other series' speed-up
    against the reference has at least ``min_rounds`` rounds and an interval within ±``target``, or ``cap_s``
    seconds of ``clock`` have passed since :meth:`start`. ``stop`` is then :data:`TIGHT` or :data:`CAP`."""

    def __init__(self, target: float = TARGET, cap_s: float = CAP_S, *, min_rounds: int = MIN_ROUNDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.target, self.cap_s, self.min_rounds, self.clock = float(target), float(cap_s), int(min_rounds), clock
        self.began: float | None = None
        self.seconds = 0.0
        self.stop = ""

    def start(self) -> None:
        """The timing begins (the series are loaded and warmed up)."""
        self.began = self.clock()

    def done(self, round_p50s: Sequence[Sequence[float]]) -> bool:
        """Whether to stop after the rounds timed so far (``round_p50s[k]``: series k's p50 in each round)."""
        if self.began is None:
            self.start()
        assert self.began is not None
        self.seconds = self.clock() - self.began
        rounds = min((len(r) for r in round_p50s), default=0)
        if rounds >= self.min_rounds and all(half_width(stats.paired(1, round_p50s[0], r)) <= self.target
                                             for r in round_p50s[1:]):
            self.stop = TIGHT
        elif self.seconds >= self.cap_s:
            self.stop = CAP
        return bool(self.stop)


@dataclass(frozen=True)
class SettledSpeed:
    """A speed-up timed until settled: ``speed`` (the one statistic), how the timing stopped (``stop``:
    :data:`TIGHT`, :data:`CAP` or :data:`PLANNED`), the ``seconds`` it took, and the rule's ``target``/``cap_s``."""

    speed: SpeedUp
    stop: str
    seconds: float = 0.0
    target: float = TARGET
    cap_s: float = CAP_S

    @property
    def tight(self) -> bool:
        """The 95 % interval lies within ±``target`` of the speed-up."""
        return self.speed.paired and half_width(self.speed) <= self.target

    @property
    def verdict(self) -> str:
        """"faster", "slower", "no clear difference" (the interval holds 1) or "noisy" (still wider than
        ±``target``: the machine was too busy to settle it)."""
        if not self.tight:
            return "noisy"
        if not self.speed.clear:
            return "no clear difference"
        return "faster" if self.speed.speedup > 1 else "slower"

    def caveat(self) -> str:
        """"" for a settled, clear speed-up; else "no clear difference", or :data:`NOISY` (with "; no clear
        difference" when the wide interval also holds 1)."""
        v = self.verdict
        if v == "noisy":
            return NOISY + ("" if self.speed.clear else "; no clear difference")
        return "no clear difference" if v == "no clear difference" else ""

    def how(self) -> str:
        """"95% 1.71–1.95×, 48 rounds, 6.2 s (settled within ±10%)" or "… (20 s cap reached)"."""
        lo, hi = self.speed.speedup_range
        why = {TIGHT: f"settled within ±{self.target:.0%}", CAP: f"{self.cap_s:g} s cap reached"}.get(self.stop, "")
        took = f", {self.seconds:.1f} s" if self.seconds else ""
        return f"95% {lo:.2f}–{hi:.2f}×, {self.speed.rounds} rounds{took}" + (f" ({why})" if why else "")

    def text(self) -> str:
        """The speed-up in words, never a bare number: ``1.84× faster (95% 1.71–1.95×, 48 rounds, …)``,
        ``0.80×: slower (…)``, ``no clear difference: 1.02× (…)`` or ``noisy: the machine was busy: 1.9× (…)``."""
        s, v = self.speed.speedup, self.verdict
        if v == "faster":
            return f"{s:.2f}× faster ({self.how()})"
        if v == "slower":
            return f"{s:.2f}×: slower ({self.how()})"
        return f"{self.caveat()}: {s:.2f}× ({self.how()})"


def settled(sp: SpeedUp, rule: UntilSettled | None = None) -> SettledSpeed:
    """``sp`` as a :class:`SettledSpeed`: with the ``rule`` that stopped its timing, its stop and seconds; without
    one (a stored benchmark of fixed length), :data:`TIGHT` when its interval is within ±:data:`TARGET`, else
    :data:`PLANNED`."""
    if rule is not None and rule.stop:
        return SettledSpeed(sp, rule.stop, rule.seconds, rule.target, rule.cap_s)
    stop = TIGHT if sp.paired and half_width(sp) <= TARGET else PLANNED
    return SettledSpeed(sp, stop)
