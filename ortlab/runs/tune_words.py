"""The words of a tune search's outcome: its sentence, the notes on what was left out, and how far a stopped trial
got. Pure functions of the trials and the settings."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ortlab.core.text import format_bytes
from ortlab.checks.verdict import VerdictPolicy
from ortlab.runs.tune_pick import Claim
from ortlab.runs.tune_policy import CLOSEST_DIR, Trial
from ortlab.runs.tune_settings import TuneSettings

MIN_USEFUL_BUDGET_S = 120.0  # a few trials of a small model, each verified and timed


def budget_hint_s(budget_s: float) -> float:
    """The budget to suggest after ``budget_s`` ran out before a usable trial: four times as much, rounded up to
    whole minutes, and at least :data:`MIN_USEFUL_BUDGET_S`."""
    return max(MIN_USEFUL_BUDGET_S, 60.0 * math.ceil(4 * budget_s / 60.0))


def slower_than_source(t: Trial) -> bool:
    """Whether a trial's timing says it runs slower than the fp32 source at some batch size: the whole 95 %
    interval of its speed-up lies below 1. Such a trial is never recommended, nor written as the closest."""
    return any(sp.paired and sp.speedup_range[1] < 1.0 for sp in t.speed)


def slower_note(trials: Sequence[Trial], objective: str = "latency") -> str:
    """The note that names the trials left out of the recommendation for running slower than the source; in a
    search for size, smallest first, each with its size (a smaller model than the pick may be among them)."""
    if objective == "size":
        trials = sorted(trials, key=lambda t: (t.size_bytes if t.size_bytes is not None else math.inf, t.index))
        shown = [f"#{t.index} {t.label} ({format_bytes(t.size_bytes) + ', ' if t.size_bytes else ''}{t.speed_text()})"
                 for t in trials[:4]]
    else:
        shown = [f"#{t.index} {t.label} ({t.speed_text()})" for t in trials[:4]]
    names = ", ".join(shown) + (" …" if len(trials) > 4 else "")
    return (f"Never recommended: {len(trials)} trial(s) ran slower than the fp32 source (the speed-up's 95% interval "
            f"lies below 1×): {names}.")


def stopped_where(handle: Any, now: float | None = None) -> str:
    """How far a stopped run got, from its progress events: ``, 290 s into it, in stage 3 of 5 (calibrate:
    calibration sample 37/100)``; the stage is the last one that reported."""
    seconds = (now if now is not None else time.time()) - handle.started_at
    reported = [name for name in handle.stages if name in handle.progress]
    if not reported:
        return f", {seconds:.0f} s into it, before its first stage ({len(handle.stages)} planned) reported"
    name = reported[-1]
    event = handle.progress[name]
    detail = f": {event.message}" if event.message else (f": {event.done} of {event.total}" if event.total else "")
    return f", {seconds:.0f} s into it, in stage {handle.stages.index(name) + 1} of {len(handle.stages)} ({name}{detail})"


def none_finished(started: int, failed: int, how: str, stopped_in: str = "", then: str = "nothing to recommend") -> str:
    """The sentence of a search where no trial finished: how many started and failed, and how the one still
    running was ended (``how``: "stopped when the time budget of 300 s ran out", "cancelled", "" when none was;
    ``stopped_in``: :func:`stopped_where`), then ``then`` (what to do)."""
    if started == 0:
        return f"No trial finished: none started{' before ' + how.split(' when ')[-1] if how else ''}; {then}."
    if not how or started == failed:
        return f"No trial finished: {started} started and {'it' if started == 1 else 'all'} failed; {then}."
    if failed:
        return f"No trial finished: {started} started; {failed} failed and the last was {how}{stopped_in}; {then}."
    return f"No trial finished: 1 started and was {how}{stopped_in}; {then}."


def sentence(best: Trial | None, accepted: bool, s: TuneSettings, n: int, any_done: bool = True,
              any_slower: bool = False) -> str:
    if best is None:
        if any_slower:
            return (f"No trial of {n} is both usable by the verdict and at least as fast as the fp32 source; nothing "
                    f"is recommended and no model was written.")
        if any_done:
            return (f"Every trial of {n} that finished is broken by the verdict; nothing is recommended and no model "
                    f"was written.")
        return f"No trial finished ({n} started); nothing to recommend."
    q = best.quality()
    quality = f"verdict {best.level or 'unknown'}" + (f", {q.text()}" if q.text() else "")
    if s.objective == "latency":
        gain = (f"{best.speed_words()} (timed interleaved at batch {', '.join(str(b) for b in s.batch_sizes)})"
                if best.speed else "of unknown speed")
    else:
        gain = format_bytes(best.size_bytes or 0)
    if accepted and not_shown_faster(best, s):
        return not_faster_sentence(best.label, n, gain, quality)
    if accepted:
        return f"{best.label} is the {'fastest' if s.objective == 'latency' else 'smallest'} recipe the policy " \
               f"accepts of {n} tried: {gain}; {quality}."
    return f"No recipe of {n} tried meets the bar; the closest that is not broken, {best.label}, is {gain}; " \
           f"{quality} ({best.verdict}). It is written under {CLOSEST_DIR}/, not as the recommendation."


def not_shown_faster(best: Trial, s: TuneSettings) -> bool:
    """Whether a search for speed found its best accepted trial timed but not shown faster than the fp32 source
    (its speed-up's 95% interval holds 1)."""
    return s.objective == "latency" and bool(best.speed) and best.speed_direction() != "faster"


def not_faster_sentence(who: str, n: int, gain: str, quality: str) -> str:
    """The sentence of a search for speed whose best accepted trial is not shown faster than the source."""
    return (f"No accepted recipe of {n} tried is clearly faster than the fp32 source on this machine; the best "
            f"accepted, {who}: {gain}; {quality}. Keep the fp32 model for speed (a recipe here buys only size), or "
            f"try another target.")


def against(bar: float | None) -> str:
    return f" against the bar of {bar:g}" if bar is not None else ""


def unsettled_notes(rec: Any, done: Sequence[Trial]) -> list[str]:
    """Notes on the faster candidates the data could not tell from the default, with the count that would."""
    out = []
    for comp in rec.comparisons:
        if comp.faster and not comp.not_worse:
            t = next(x for x in done if x.index == comp.index)
            out.append(f"Not decided: #{t.index} {t.label} is faster than the default, but {t.vs_default}.")
    return out


def pick_sentence(best: Trial, accepted: bool, s: TuneSettings, n: int, why: str,
                  passed: Sequence[Trial] = ()) -> str:
    """The sentence of a search decided against its default (trial 1) on the same samples; ``passed``: the trials
    that met the bar but were not picked (none of them shown better than the default on the same samples)."""
    q = best.quality()
    quality = f"verdict {best.level or 'unknown'}" + (f", {q.text()}" if q.text() else "")
    gain = (f"{best.speed_words()} (timed interleaved at batch {', '.join(str(b) for b in s.batch_sizes)})"
            if s.objective == "latency" and best.speed else format_bytes(best.size_bytes or 0))
    who = f"{best.label} (trial 1, the default)" if best.index == 1 else best.label
    if accepted and not_shown_faster(best, s):
        return f"{not_faster_sentence(who, n, gain, quality)} Why this one: {why}."
    if accepted:
        return f"{who} is the pick of {n} tried: {gain}; {quality}. Why: {why}."
    if passed:
        met = ", ".join(f"#{t.index} {t.label}" for t in passed)
        head = (f"{len(passed)} of {n} tried met the bar on the samples tune chose on ({met}), but none is shown "
                f"better than the default on the same samples, so none is recommended")
    else:
        head = f"No recipe of {n} tried meets the bar"
    return (f"{head}; the closest, {who}, is {gain}; {quality} ({best.verdict}). Why: "
            f"{why}. It is written under {CLOSEST_DIR}/, not as the recommendation.")




def policy_text(vp: VerdictPolicy, bar: str | None) -> str:
    """How a search's policy reads in its result: the verdict's bars and this search's own."""
    return (f"verdict ok (the same policy as optimize: broken below {vp.min_sqnr_db:g} dB, confident-flip margin "
            f"{vp.margin:g})" + (f" and this search's bar: {bar}" if bar is not None else ""))


def claim_sentence(best: Trial, claim: Claim) -> str:
    """The pick's measure on the samples it was (not) chosen on, with its interval, against the bar."""
    held_out = claim.chosen_on.startswith("chosen on")
    return (f" On the {claim.evidence} it was {'not ' if held_out else ''}chosen on"
            f" ({claim.chosen_on}): "
            f"{best.task_measure} {claim.value:.3f} (95% interval {claim.low:.3f}–{claim.high:.3f})"
            f"{against(claim.bar)}: {claim.text()}.")
