"""A tune search's timings: each trial against the fp32 source at every batch size with the benchmark's clock (the
runner's :meth:`~ortlab.runs.trial_runner.TrialRunner.measure`, or the timer given), the same model (the same
``Trial.model_sha``: its file and its external data) timed once, and each timing kept in History with the machine
it ran on."""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.progress import CancelToken
from ortlab.runs.stored_timing import record_pair_timing
from ortlab.runs.trial_runner import Timer, TrialRunner
from ortlab.runs.tune_policy import Trial
from ortlab.runs.tune_settings import TuneSettings
from ortlab.settings.config import BenchConfig
from ortlab.timing.stats import SpeedUp


class TrialTiming:
    """Times the trials of a search of ``model`` under ``settings`` on ``runner`` (``timer``: another clock, None:
    the runner's); ``shapes`` the open dims the timing runs (``--shape`` and what the data sets); a timing that
    could not be kept in History is said to ``say``."""

    def __init__(self, model: str, settings: TuneSettings, runner: TrialRunner, workspace: Any,
                 say: Callable[[str], None], timer: Timer | None = None) -> None:
        self.model, self.settings, self.runner, self.workspace = model, settings, runner, workspace
        self.say = say
        self.timer = timer
        self.shapes: dict[str, list[int]] = dict(settings.shapes)
        self._timed: dict[tuple[str, int, float], SpeedUp] = {}  # (identity, batch, seconds): the same model once
        self._timed_pairs: dict[tuple[str, int, float], Any] = {}  # the same keys: (source, trial) summaries

    def time(self, t: Trial, cancel: CancelToken, duration_s: float | None = None) -> Trial:
        """``t`` timed against the source at every batch size (``duration_s`` each; None: the settings' bench
        seconds); a model already timed for as long (the same ``model_sha``) keeps that measurement; a trial whose
        identity could not be read is timed on its own."""
        s = self.settings
        seconds = float(duration_s if duration_s is not None else s.bench_s)
        cfg = BenchConfig(batch_sizes=tuple(s.batch_sizes), warmup=3, target=s.target, duration_s=seconds)
        sha = t.model_sha or f"unread:{t.model_path}"
        ratios: list[SpeedUp] = []
        for b in s.batch_sizes:
            key = (sha, int(b), seconds)
            if key not in self._timed:
                self._timed[key] = self._measure(self.model, t.model_path or "", cfg, int(b), cancel,
                                                 f"Timing {t.label}")
                self._timed_pairs[key] = self.runner.last
            ratios.append(self._timed[key])
        if cancel.cancelled:
            raise Cancelled()
        t = replace(t, speed=ratios, timed_on=self.runner.timing_node)
        self.record(t, cfg, [self._timed_pairs.get((sha, int(b), seconds)) for b in s.batch_sizes])
        return self._summed(t, ratios)

    def head_to_head(self, candidate: Trial, default: Trial, cancel: CancelToken) -> SpeedUp:
        """``candidate`` timed against ``default`` (not the source) in one interleaved run at the first batch size,
        twice a trial's bench seconds: the machine's speed drifts between two trials' timings by more than each
        timing's own interval holds, and in one run the drift hits both alike. Not kept in History."""
        s = self.settings
        b = int(s.batch_sizes[0])
        cfg = BenchConfig(batch_sizes=(b,), warmup=3, target=s.target, duration_s=2 * float(s.bench_s))
        return self._measure(default.model_path or "", candidate.model_path or "", cfg, b, cancel,
                             f"Timing {candidate.label} against {default.label}")

    def _measure(self, reference: str, candidate: str, cfg: BenchConfig, batch_size: int, cancel: CancelToken,
                 what: str) -> SpeedUp:
        """``candidate`` against ``reference`` on the clock (the timer given, or the runner's); ORT's own errors
        while timing become an :class:`OrtlabError` that says ``what`` failed."""
        measure = self.timer or self.runner.measure
        try:
            return measure(reference, candidate, cfg, batch_size, shapes=self.shapes, cancel=cancel)
        except OrtlabError:
            raise
        except Exception as exc:  # ORT's own errors while timing
            raise OrtlabError(f"{what} failed: {exc}") from exc

    def _summed(self, t: Trial, ratios: list[SpeedUp]) -> Trial:
        """``t`` with its latencies, its relative latency (the geometric mean of the ratios) and its cost."""
        s = self.settings
        latency_ms = {str(r.batch_size): r.candidate_p50_ms for r in ratios}
        good = [r.ratio for r in ratios if r.ratio > 0 and math.isfinite(r.ratio)]
        relative = math.exp(sum(math.log(x) for x in good) / len(good)) if good else None
        return replace(t, latency_ms=latency_ms, baseline_ms={str(r.batch_size): r.reference_p50_ms for r in ratios},
                       relative_latency=relative, p50_ms=latency_ms.get(str(s.batch_sizes[0])),
                       cost=relative if s.objective == "latency" else float(t.size_bytes or 0))

    def record(self, t: Trial, cfg: BenchConfig, pairs: list[Any]) -> None:
        """The trial's timing against the source, kept in History with the machine it ran on (its report, Compare
        and History show it); a model timed before (the same ``model_sha``) is recorded with that measurement."""
        if t.run_id is None or not pairs or any(p is None for p in pairs):
            return
        try:
            record_pair_timing(self.workspace.history(), self.model, t.run_id, t.label, str(t.model_path), cfg, pairs,
                               machine=self.runner.timing_machine)
        except OrtlabError as exc:
            self.say(f"The timing of {t.label} was not kept in History: {exc.message}")
