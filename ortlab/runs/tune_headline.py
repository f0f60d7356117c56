"""The recommendation of a tune search in one sentence with its level: what the Tune page heads its result with.
A cancel is neutral ("Stopped after N trials"); a recommendation slower than fp32 is never called the fastest or
faster; a pick decided against the default says what its held-out claim is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortlab.checks.uncertainty import about
from ortlab.core.text import format_bytes
from ortlab.runs.tune_policy import Trial, TuneResult

INFO, SUCCESS, WARNING = "info", "success", "warning"


@dataclass(frozen=True)
class Headline:
    """The sentence heading a search's result, and its ``level``: "info", "success" or "warning"."""

    level: str
    text: str


def plural(n: int, word: str) -> str:
    """``"1 trial"``, ``"3 trials"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _quality(t: Trial) -> str:
    if t.sqnr_db is None:
        return "accuracy not measured"
    if math.isinf(t.sqnr_db):
        return "identical outputs"
    return f"SQNR {t.sqnr_db:.1f} dB"


def _speed(t: Trial) -> str:
    """The trial's speed-up with its interval, "faster" only when the whole interval lies above 1
    (``Trial.speed_words``); a trial without an interval: ``1.84× faster than fp32`` / ``0.98× … slower``."""
    if t.speed:
        return t.speed_words()
    s = t.speedup
    if not s:
        return "speed unknown"
    if s >= 1.0:
        return f"{s:.2f}× faster than the fp32 source"
    return f"{s:.2f}× the fp32 source's speed, i.e. slower"


def _mb(t: Trial) -> str:
    return format_bytes(t.size_bytes or 0)


def headline(result: TuneResult | None, started: int = 0) -> Headline:
    """The headline of a finished, cancelled or empty search (``result`` None: ``started`` trials so far)."""
    n = len(result.trials) if result is not None else started
    best = result.best if result is not None else None
    latency = result is None or result.objective == "latency"
    if result is None or result.cancelled:
        text = f"Stopped after {plural(n, 'trial')}."
        if best is not None and result is not None and result.accepted:
            text += f" Best so far that the policy accepts: trial {best.index}, {best.label} — {_speed(best)}, " \
                    f"{_quality(best)}."
        elif n:
            text += " No finished trial passed the accuracy policy yet."
        return Headline(INFO, text)
    if best is None and any(t.status == "done" for t in result.trials):  # all broken, or slower than fp32
        return Headline(WARNING, result.sentence)
    if best is None:  # no trial finished: the engine's sentence counts those started and says why they stopped
        return Headline(WARNING, result.sentence)
    if not result.accepted:
        return Headline(WARNING, f"No recipe of {plural(n, 'trial')} passes the accuracy policy; the closest is "
                                 f"trial {best.index}, {best.label} — {_speed(best) if latency else _mb(best)}, "
                                 f"{_quality(best)} ({best.verdict}).{claim_text(result)}")
    unclear = best.speed_direction() != "faster" if best.speed else best.speedup is not None and best.speedup < 1.0
    if latency and unclear:
        return Headline(WARNING, f"No accepted recipe is clearly faster than the fp32 source on this machine: the "
                                 f"best accepted, trial {best.index} ({best.label}): {_speed(best)}; {_quality(best)}. "
                                 f"Keep the fp32 model for speed, or try another target.")
    if result.baseline_index is not None:  # decided against the default on the same samples
        who = f"Trial {best.index}, {best.label}" + (", the default," if best.index == result.baseline_index else "")
        text = (f"{who} is the pick of {plural(n, 'trial')}: {_speed(best) if latency else _mb(best)}, "
                f"{best.task_text() or _quality(best)}.{claim_text(result)}")
        return Headline(SUCCESS if result.claim_word in ("", "ok") else WARNING, text)
    what = "fastest" if latency else "smallest"
    return Headline(SUCCESS, f"Trial {best.index}, {best.label}, is the {what} recipe the policy accepts of "
                             f"{plural(n, 'trial')}: {_speed(best) if latency else _mb(best)}, {_quality(best)}.")


def claim_text(result: TuneResult | None) -> str:
    """" On 100 held-out samples (100 reference detections): detection F1 0.946 (0.90–0.98), on the edge." — the
    pick's measure on the samples it was not chosen on; "" without one."""
    if result is None or result.claim is None or result.best is None:
        return ""
    held_out = "not " if result.chosen_on.startswith("chosen on") else ""
    return (f" On {result.claim_evidence} it was {held_out}chosen on: {result.best.task_measure} {result.claim:.3f} "
            f"(95% interval {result.claim_low:.3f}–{result.claim_high:.3f}), {result.claim_word}"
            + (f"; about {about(result.claim_settle)} evaluation samples would settle it." if result.claim_settle else "."))
