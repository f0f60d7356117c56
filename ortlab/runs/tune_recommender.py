"""A tune search's recommendation: which trial it stands for (:meth:`Recommender.pick`) and the
:class:`~ortlab.runs.tune_policy.TuneResult` that says so (:meth:`Recommender.result`). It neither times nor writes:
the finalists are re-timed by the ``retime`` it is given, and the tuner writes what it picked
(:mod:`ortlab.runs.tune_output`).

The pick: against the default (trial 1) on the same samples when the trials have per-sample records
(:func:`ortlab.runs.tune_pick.decide`); else the fastest (or smallest) accepted trial that is not both less accurate
and slower than the default, or, when none is accepted, the closest trial the verdict does not call broken. A trial
slower than the fp32 source is never picked. The pick's measure is then stated on the samples it was not chosen on
(:func:`ortlab.runs.tune_pick.claim_of`): when those say it misses the bar, it is written as the closest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ortlab.checks.task_kind import claim_bar
from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.runs.tune_evidence import SampleEvidence
from ortlab.runs.tune_pick import Claim, claim_of, decide
from ortlab.runs.tune_policy import (
    FINALISTS, Policy, Trial, TrialStatus, TuneResult, as_twin, judging_policy, rank_key,
)
from ortlab.runs.tune_recommend import Recommendation
from ortlab.timing.stats import SpeedUp
from ortlab.runs.tune_settings import TuneSettings
from ortlab.settings.config import Target
from ortlab.runs.tune_words import (
    budget_hint_s, claim_sentence, none_finished, pick_sentence, policy_text, sentence, slower_note,
    slower_than_source, unsettled_notes,
)

BUDGET_NOTE = "The budget ran out during a trial"  # how the note on a trial the budget stopped begins


@dataclass(frozen=True)
class Pick:
    """The trial a search stands for (``best``; None: none usable), whether it is ``accepted`` (the
    recommendation) or the closest, the recommender's decision against the default (``rec``), the pick's held-out
    ``claim``, the notes choosing it gave, and every trial as choosing it left it."""

    best: Trial | None
    accepted: bool
    rec: Recommendation | None
    claim: Claim | None
    notes: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()  # every trial as it is now: re-timed, compared with the default


@dataclass(frozen=True)
class SearchAccount:
    """How the search went, as its result states it: ``started`` trials, whether it was ``cancelled``, where the
    trial the budget stopped was (``stopped_in``), whether the budget is spent (``out_of_budget``) and by the CPU
    (``cpu_spent``), wall ``seconds`` and ``cpu_seconds`` (None: on a cluster), the ``hardware`` timings ran on,
    the ``notes`` said so far, the runner's notes on retried trials (``retried``) and the busy-machine note."""

    model: str
    started: int
    cancelled: bool
    stopped_in: str
    out_of_budget: bool
    cpu_spent: bool
    seconds: float
    cpu_seconds: float | None
    hardware: str
    notes: tuple[str, ...]
    retried: tuple[str, ...] = ()
    busy_note: str | None = None


class Recommender:
    """Picks and words a search's outcome under ``settings`` and ``policy``; ``evidence`` maps a trial's index to
    its per-sample record; ``retime`` re-times finalists (longer, interleaved with the source) and gives them back as
    they are then; ``head_to_head(candidate, default)`` times a candidate against the default in one interleaved
    run (None: a pick preferred for speed rests on the two timings apart)."""

    def __init__(self, settings: TuneSettings, policy: Policy, evidence: Mapping[int, SampleEvidence | None],
                 retime: Callable[[list[Trial]], list[Trial]],
                 head_to_head: Callable[[Trial, Trial], SpeedUp] | None = None) -> None:
        self.settings = settings
        self.policy = policy
        self.evidence = evidence
        self.retime = retime
        self.head_to_head = head_to_head

    def pick(self, trials: Sequence[Trial]) -> Pick:
        """The trial the search stands for (the finalists re-timed first); a trial whose model is an earlier one's
        (``same_as``) is no candidate of its own and ends with its twin's figures."""
        done = [t for t in trials if t.status == TrialStatus.DONE and t.cost is not None and t.same_as is None]
        best, accepted, rec, notes, done = self._choose(done)
        claim = claim_of(best, self._claim_bar(best), self.evidence.get(best.index)) if best is not None else None
        if claim is not None and best is not None and claim.word == "below the bar" and accepted:
            accepted = False  # the samples it was not chosen on say it misses the bar: never recommended "ok"
            notes.append(f"Not recommended: on the samples it was not chosen on, {best.label}'s "
                         f"{best.task_measure} interval lies below the bar; it is written as the closest.")
        now = swap(trials, done)
        by_index = {t.index: t for t in now}
        now = [as_twin(t, by_index[t.same_as]) if t.same_as in by_index else t for t in now]
        return Pick(best, accepted, rec, claim, tuple(notes), tuple(now))

    def _choose(self, done: list[Trial]) -> tuple[Trial | None, bool, Recommendation | None, list[str], list[Trial]]:
        """The pick, whether it is accepted, the recommender's decision, its notes, and ``done`` as they are now
        (re-timed, compared with the default): against the default (trial 1) on the same samples when it has a
        per-sample record (:func:`decide`); else the fastest accepted trial that is not both less accurate and
        slower than the default, or the closest usable."""
        accepted = [t for t in done if t.accepted and not slower_than_source(t)]
        usable = {t.index for t in done if not t.broken and not slower_than_source(t)}  # before any re-timing
        if accepted:
            done = swap(done, self._retime_finalists(accepted))
            default = next((t for t in done if t.index == 1), None)
            if default is not None and default.speed and not default.retimed:
                done = swap(done, self._retime_finalists([default]))  # compared with the finalists: timed as long
            accepted = [t for t in swap(accepted, done) if not slower_than_source(t)]  # the longer timing may say so
        default = next((t for t in done if t.index == 1), None)
        decided, timed_notes = self._decide_head_to_head(done)
        if decided is not None:
            done = decided[1]
            accepted = swap(accepted, done)
        rec = decided[0] if decided is not None else None
        if rec is not None and rec.pick is not None:
            best = next(t for t in done if t.index == rec.pick)
            return best, best.accepted, rec, [*unsettled_notes(rec, done), *timed_notes], done
        if accepted:
            return min(not_worse_and_slower(accepted, default),
                       key=lambda t: (t.cost, tuple(-x for x in rank_key(t)))), True, None, [], done
        if usable:
            top = max(rank_key(t) for t in done if t.index in usable)
            close = [t for t in done if t.index in usable and rank_key(t)[:2] == top[:2]]  # best level, task measure
            done = swap(done, self._retime_finalists(close))
            close = [t for t in swap(close, done) if not slower_than_source(t)]
            return (max(close, key=lambda t: (rank_key(t), -(t.cost or 0))) if close else None), False, None, [], done
        return None, False, None, [], done

    def _decide_head_to_head(self, done: list[Trial]) -> tuple[tuple[Recommendation, list[Trial]] | None, list[str]]:
        """:func:`decide`, with the pick's speed settled head to head (:attr:`head_to_head`, one interleaved run):
        a pick preferred over the default for speed alone stays only when that run shows it faster than the default;
        and a pick chosen as the faster of two candidates the evidence prefers alike, whose speed intervals apart
        overlap, is timed against that rival: when the rival is shown faster, the pick is withdrawn and the decision
        made again without it. And the notes saying so."""
        withdrawn: dict[int, str] = {}
        notes: list[str] = []
        raced: set[tuple[int, int]] = set()
        decided: tuple[Recommendation, list[Trial]] | None = None
        while True:
            decided = decide(done, self.evidence, lambda t: not t.broken and not slower_than_source(t)
                             and t.index not in withdrawn, self.settings.objective)
            if decided is None or self.head_to_head is None or self.settings.objective != "latency":
                break
            rec, now = decided
            comp = next((c for c in rec.comparisons if c.index == rec.pick), None)
            if comp is None:
                break
            cand, default = (next(t for t in now if t.index == i) for i in (rec.pick, 1))
            if not comp.more_accurate:
                speed = self._timed(cand, default, notes)
                if speed is None:
                    break
                timed = _timed_text(speed, "the default")
                if speed.speedup_range[0] <= 1.0:
                    withdrawn[cand.index] = f"faster than the default in two timings apart, but {timed}: not shown faster"
                    notes.append(f"Not picked: #{cand.index} {cand.label} timed faster than the default apart, but "
                                 f"{timed} (timings taken apart can differ by the machine's drift).")
                    continue
                now = [replace(t, vs_default=f"{t.vs_default}; {timed}") if t.index == cand.index else t for t in now]
                decided = rec, now = (replace(rec, reason=f"{rec.reason}; {timed}"), now)
            rival = _rival(rec, now, raced)
            if rival is None:
                break
            raced.add((cand.index, rival.index))
            speed = self._timed(rival, cand, notes)
            if speed is None:
                break
            timed = _timed_text(speed, f"#{cand.index}")
            lo, hi = speed.speedup_range
            if lo > 1.0:
                withdrawn[cand.index] = (f"preferred over the default as #{rival.index} {rival.label} is, which, "
                                         f"{timed}, is the faster of the two")
                notes.append(f"Not picked: #{cand.index} {cand.label}: #{rival.index} {rival.label}, which the "
                             f"evidence prefers over the default too, {timed}.")
                continue
            said = "slower" if hi < 1.0 else "not told apart"
            now = [replace(t, vs_default=f"{t.vs_default}; {timed}: {said}") if t.index == rival.index else t
                   for t in now]
            decided = (replace(rec, reason=f"{rec.reason}; #{rival.index} {rival.label}, preferred too, {timed}: "
                                            f"{said}"), now)
            break
        if decided is not None and withdrawn:
            decided = (decided[0], [replace(t, vs_default=withdrawn[t.index]) if t.index in withdrawn else t
                                    for t in decided[1]])
        return decided, notes

    def _timed(self, cand: Trial, against: Trial, notes: list[str]) -> SpeedUp | None:
        """``cand`` timed head to head against ``against``; None, with a note, when it could not be."""
        assert self.head_to_head is not None
        try:
            return self.head_to_head(cand, against)
        except (OrtlabError, Cancelled) as exc:
            name = "the default" if against.index == 1 else f"#{against.index} {against.label}"
            notes.append(f"#{cand.index} {cand.label} was not timed head to head against {name} ({exc.message}): "
                         f"its speed-up over {'the default' if against.index == 1 else 'it'} rests on two timings "
                         "apart.")
            return None

    def _retime_finalists(self, trials: list[Trial]) -> list[Trial]:
        """The cheapest :data:`FINALISTS` of ``trials``, re-timed (only a latency search is): as they are now."""
        if self.settings.objective != "latency":
            return []
        return self.retime(sorted(trials, key=lambda t: t.cost if t.cost is not None else math.inf)[:FINALISTS])

    def _claim_bar(self, best: Trial) -> float | None:
        """The bar the pick's held-out claim is worded against: the search's ``--min-task`` when given, else the
        verdict's own bar for a detector's F1 (the other measures' bars are the verdict's, judged on its figure)."""
        if self.policy.min_task is not None:
            return float(self.policy.min_task)
        return claim_bar(best.task_measure, judging_policy(self.policy))

    def result(self, trials: Sequence[Trial], pick: Pick, account: SearchAccount, written: str | None) -> TuneResult:
        """The search's result: every trial, the pick and its words, the notes; ``written`` the model file the
        tuner wrote for the pick."""
        s, best, a = self.settings, pick.best, account
        done = [t for t in trials if t.status == TrialStatus.DONE and t.cost is not None]
        notes = [*a.notes, *pick.notes, *a.retried]
        slow = [t for t in done if slower_than_source(t)]
        if slow:
            notes.append(slower_note(slow, s.objective))
        words = sentence(best, pick.accepted, s, len(trials), bool(done), bool(slow))
        if pick.rec is not None and best is not None:
            passed = [t for t in done if t.accepted and t.index != best.index]
            words = pick_sentence(best, pick.accepted, s, len(trials), pick.rec.reason, passed)
        spent = s.budget_cpu_s if a.cpu_spent and s.budget_cpu_s is not None else s.budget_s
        every_slower = bool(done) and len(slow) == len(done)  # more search keeps more in float: slower still
        hint = budget_hint_s(spent) if best is None and not a.cancelled and a.out_of_budget and not every_slower \
            else None
        budget = f"{'CPU' if a.cpu_spent else 'time'} budget of {spent:g} s"
        give = f"give {hint:g} {'CPU ' if a.cpu_spent else ''}s or more" if hint is not None else ""
        if best is None and not done:
            failed = sum(t.status == TrialStatus.FAILED for t in trials)
            how = f"stopped when the {budget} ran out" if hint is not None else ("cancelled" if a.cancelled else "")
            words = none_finished(a.started, failed, how, a.stopped_in, give or "nothing to recommend")
            notes = [n for n in notes if not n.startswith(BUDGET_NOTE)]  # said
        elif hint is not None:
            words += f" The {budget} was too short: {give}."
        elif best is None and every_slower and a.out_of_budget:
            words += (f" The {budget} ran out, but a longer one is not suggested: every finished trial ran slower "
                      "than the fp32 source on this CPU, and the search's further steps (more nodes in float, 16-bit "
                      "weights) run slower still.")
        if a.busy_note is not None:
            notes.append(a.busy_note)
        claim = pick.claim if best is not None else None
        if claim is not None and best is not None:
            words += claim_sentence(best, claim)
        return TuneResult(
            a.model, s.objective, Target(s.target).value,
            policy_text(judging_policy(self.policy), self.policy.bar_text), a.hardware,
            list(s.batch_sizes), dict(best.baseline_ms) if best is not None else {}, list(trials),
            best, pick.accepted, words, best.cli_line if best is not None else "", a.seconds, a.cancelled, notes,
            written, hint,
            claim=claim.value if claim else None, claim_low=claim.low if claim else None,
            claim_high=claim.high if claim else None, claim_evidence=claim.evidence if claim else "",
            claim_word=claim.word if claim else "", claim_settle=claim.settle if claim else None,
            chosen_on=claim.chosen_on if claim else "", baseline_index=1 if pick.rec is not None else None,
            cpu_seconds=a.cpu_seconds)


def _timed_text(speed: SpeedUp, against: str) -> str:
    lo, hi = speed.speedup_range
    return (f"timed head to head against {against} (interleaved in one run, {speed.rounds} rounds): "
            f"{speed.speedup:.2f}× ({lo:.2f}–{hi:.2f}×) its speed")


def _rival(rec: Recommendation, trials: Sequence[Trial], raced: set[tuple[int, int]]) -> Trial | None:
    """The fastest other trial the evidence prefers over the default alike with the pick (preferred, and accepted
    as the pick must be) whose speed-up interval over the source overlaps the pick's: the two speeds apart cannot tell
    which is faster. None when there is none, it was timed against the pick already, or the pick is not accepted
    (then it was chosen as the most accurate)."""
    by_index = {t.index: t for t in trials}
    pick = by_index.get(rec.pick or 0)
    if pick is None or not pick.speed or not pick.accepted:  # a pick none passes is the most accurate, not the fastest
        return None
    lo, hi = pick.speed[0].speedup_range
    preferred = [by_index[c.index] for c in rec.comparisons if c.preferred and c.index in by_index]
    rivals = [t for t in preferred if t.index != pick.index and t.accepted and t.speed
              and t.speed[0].speedup_range[0] <= hi and t.speed[0].speedup_range[1] >= lo
              and (pick.index, t.index) not in raced]
    return max(rivals, key=lambda t: (t.speed[0].speedup, -t.index), default=None)


def swap(trials: Sequence[Trial], newer: Sequence[Trial]) -> list[Trial]:
    """``trials`` with each that ``newer`` holds a later version of (the same index) replaced by it."""
    by_index = {t.index: t for t in newer}
    return [by_index.get(t.index, t) for t in trials]


def not_worse_and_slower(trials: list[Trial], default: Trial | None) -> list[Trial]:
    """``trials`` without those both less accurate (task measure below) and slower (speed-up interval wholly
    below) than the ``default`` (a search without per-sample records); all of them when that leaves none."""
    if default is None or default.task_value is None or not default.speed:
        return trials
    d_lo = default.speed[0].speedup_range[0]
    keep = [t for t in trials if not (t is not default and t.task_value is not None and t.speed
                                      and t.task_value < default.task_value and t.speed[0].speedup_range[1] < d_lo)]
    return keep or trials
