"""Which stored benchmark speaks for a model: the batch-1 ONNX Runtime timings History already holds for a pair of
models (Compare's speed line), for one run (the keep-in-float table) and for a run's report. Each comes with the
machine that timed it (:class:`ortlab.runtime.machine.Machine`), said as "timed on this machine" or "timed on
another machine"; a speed-up is said with its 95% interval, or why it has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ortlab.model.inspect import sha256_file_cached
from ortlab.runs.artifact import Artifact
from ortlab.runs.history import BenchmarkRecord, BenchVariant, History
from ortlab.runtime.machine import Machine, this_machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencySummary
from ortlab.timing.stats import SpeedUp, of_summaries

SCAN = 50  # how many recent benchmarks to look through


@dataclass(frozen=True)
class TimedModel:
    """A model as a benchmark records it: its History run (``run_id``), else its file (``path``)."""

    run_id: int | None
    path: str


@dataclass(frozen=True)
class PairSpeed:
    """Batch-1 latency of the reference and the candidate from one benchmark (``bench_id`` in History)."""

    ref: LatencySummary
    cand: LatencySummary
    bench_id: int | None
    created_at: str = ""
    machine: Machine | None = None

    @property
    def speed(self) -> SpeedUp | None:
        """The one statistic (:func:`ortlab.timing.stats.of_summaries`): the median of the rounds' ratios with its
        interval when the pair was timed interleaved, else the ratio of the p50s."""
        return of_summaries(self.ref, self.cand)

    @property
    def speedup(self) -> float:
        """Reference ÷ candidate (above 1: the candidate is faster), from :attr:`speed`."""
        sp = self.speed
        return sp.speedup if sp is not None else float("inf")

    def sentence(self) -> str:
        s = self.speedup
        how = f"{s:.2f}× faster" if s >= 1.0 else f"{1 / s:.2f}× slower"
        sp = self.speed
        if sp is not None:
            how += " " + speed_interval_text(sp)
        return (f"Batch 1, {machine_text(self.machine)}: {self.cand.p50:.2f} ms p50 (p90 {self.cand.p90:.2f}) "
                f"against {self.ref.p50:.2f} ms (p90 {self.ref.p90:.2f}): the candidate is {how}; benchmark "
                f"#{self.bench_id}, {self.ref.n} and {self.cand.n} runs.")


def speed_interval_text(sp: SpeedUp) -> str:
    """What a speed-up is said with: "(95% interval 1.9–2.3×, 20 interleaved rounds)", with "noisy" when it is,
    or, for two series timed apart, why there is no interval."""
    if not sp.paired:
        return (f"(a ratio of p50s of {sp.reference_runs} and {sp.candidate_runs} runs timed apart: no interval; "
                "time the pair again on Compare or Benchmark for one)")
    if sp.rounds < 2:
        return "(1 interleaved round: no interval; time the pair again on Compare or Benchmark for one)"
    lo, hi = sp.speedup_range
    return (f"(95% interval {lo:.2f}–{hi:.2f}×, {sp.rounds} interleaved rounds)"
            + ("; noisy: the machine was busy" if sp.noisy else ""))


def machine_text(machine: Machine | None) -> str:
    """"timed on this machine: …", "timed on another machine: …", or that the machine was not recorded."""
    return machine.provenance() if machine is not None else "machine not recorded (timed before ortlab stored it)"


@dataclass(frozen=True)
class ReportTiming:
    """What a run's report shows of speed: ``bench``, the summaries of the benchmark that timed the run (None when
    none did), and ``speed``, the (source, run) batch-1 summaries of that benchmark (None when it has no run's)."""

    bench: list[LatencySummary] | None
    speed: tuple[LatencySummary | None, LatencySummary | None] | None
    machine: Machine | None = None  # the machine of that benchmark

    def sentence(self) -> str:
        """The run's batch-1 speed against its source with its interval and the machine, or "not timed yet"."""
        ref, cand = self.speed or (None, None)
        if cand is None:
            return "Speed: not timed yet (time it on the Compare or Benchmark page, or with ortlab bench)."
        text = f"Speed at batch 1: {cand.p50:.2f} ms p50"
        if cand.p50_low is not None and cand.p50_high is not None:
            text += f" (95% interval {cand.p50_low:.2f}–{cand.p50_high:.2f})"
        sp = of_summaries(ref, cand) if ref is not None else None
        if ref is not None and sp is not None:
            how = f"{sp.speedup:.2f}× faster" if sp.speedup >= 1 else f"{1 / sp.speedup:.2f}× slower"
            text += f" against {ref.p50:.2f} ms for the source: {how} {speed_interval_text(sp)}"
        return f"{text}; {machine_text(self.machine)}."


def record_pair_timing(history: History, source_path: str, run_id: int | None, name: str, model_path: str,
                       config: BenchConfig, pairs: Sequence[tuple[LatencySummary, LatencySummary]],
                       origin: str = "tune", machine: Machine | None = None) -> int:
    """Store a run timed against its source (``pairs``: the (source, run) summaries of each batch size, timed
    interleaved) as a History benchmark with the machine that timed it (``machine``; default this one), so the
    run's report, Compare and History find it.
    Returns the benchmark id."""
    variants = [BenchVariant("source", "source", str(source_path)), BenchVariant("run", name, str(model_path), run_id)]
    summaries = [replace(x, variant=v) for ref, cand in pairs for x, v in ((ref, "source"), (cand, "run"))]
    return history.add_benchmark(variants, config, summaries, origin=origin,
                                 machine=machine if machine is not None else this_machine(config.intra_op_threads))


def _benchmarks(history: History) -> Iterator[BenchmarkRecord]:
    for rec in history.list_benchmarks(limit=SCAN):
        if isinstance(rec, BenchmarkRecord):
            yield rec


def _same_file(bv: BenchVariant, path: str | Path) -> bool:
    try:
        return bv.run_id is None and Path(bv.path).resolve() == Path(path).resolve()
    except OSError:
        return False


def _is(bv: BenchVariant, m: TimedModel) -> bool:
    """Whether the timed ``bv`` is ``m`` (its History run, else its file under ORT)."""
    if m.run_id is not None:
        return bv.run_id == m.run_id
    return bv.runtime == "onnxruntime" and _same_file(bv, m.path)


def _batch1(rec: BenchmarkRecord, pick: Callable[[BenchVariant], bool], timed_only: bool = True) -> LatencySummary | None:
    ids = {bv.id for bv in rec.variants if pick(bv)}
    return next((s for s in rec.summaries if s.variant in ids and s.batch_size == 1 and (s.p50 > 0 or not timed_only)),
                None)


class _Graph:
    """A model's file as its bytes (sha256), read only for a stored file of the same size."""

    def __init__(self, path: str) -> None:
        self.size = _size(path)
        self.sha = sha256_file_cached(path) if self.size is not None else None

    def same(self, bv: BenchVariant) -> bool:
        """Whether ``bv`` (timed under ORT) was a file with these very bytes."""
        if self.sha is None or bv.runtime != "onnxruntime" or _size(bv.path) != self.size:
            return False
        try:
            return sha256_file_cached(bv.path) == self.sha
        except OSError:
            return False


def _size(path: str) -> int | None:
    try:
        return Path(path).stat().st_size if path and Path(path).is_file() else None
    except OSError:
        return None


def latest_pair(history: History, ref: TimedModel, cand: TimedModel, here: Machine | None = None) -> PairSpeed | None:
    """The newest History benchmark that timed both ``ref`` and ``cand`` at batch 1 under ORT: as those runs or
    files, or as identical graphs (the same sha256, e.g. a copy, or a run that made the same graph again) timed on
    the same hardware as ``here`` (default: this machine) — one measurement for one pair of graphs, batch and
    machine."""
    graphs = (_Graph(ref.path), _Graph(cand.path))
    here = here if here is not None else this_machine()
    for rec in _benchmarks(history):
        a, b = _batch1(rec, lambda bv: _is(bv, ref)), _batch1(rec, lambda bv: _is(bv, cand))
        if (a is None or b is None) and rec.machine is not None and rec.machine.same_hardware(here):
            a = a or _batch1(rec, graphs[0].same)
            b = b or _batch1(rec, graphs[1].same)
        if a is not None and b is not None and a.variant != b.variant:
            return PairSpeed(a, b, rec.id, rec.created_at, rec.machine)
    return None


def run_latency(history: History, run_id: int | None) -> LatencySummary | None:
    """Batch-1 latency (ORT) of a History run from the newest benchmark that timed it."""
    if run_id is None:
        return None
    for rec in _benchmarks(history):
        s = _batch1(rec, lambda bv: bv.run_id == run_id and bv.runtime == "onnxruntime")
        if s is not None:
            return s
    return None


def _report_speed(rec: BenchmarkRecord, run: Artifact) -> tuple[LatencySummary | None, LatencySummary | None]:
    """(source, run) batch-1 ORT summaries of ``rec``, when it timed them."""
    def ort(pred: Callable[[BenchVariant], bool]) -> Callable[[BenchVariant], bool]:
        return lambda bv: bv.runtime == "onnxruntime" and pred(bv)

    return (_batch1(rec, ort(lambda bv: _same_file(bv, run.source_path)), timed_only=False),
            _batch1(rec, ort(lambda bv: bv.run_id == run.run_id), timed_only=False))


def report_timing(history: History, run: Artifact) -> ReportTiming:
    """The benchmark a run's report shows: the newest that timed the run at batch 1 under ORT together with its
    source, else the newest that timed the run at batch 1, else the newest that timed it at all."""
    timed = [b for b in history.list_benchmarks(limit=SCAN)
             if isinstance(b, BenchmarkRecord) and any(v.run_id == run.run_id for v in b.variants)]
    with_run = [(b, s) for b in timed if (s := _report_speed(b, run))[1] is not None]
    rec, speed = next(((b, s) for b, s in with_run if s[0] is not None), with_run[0] if with_run else (None, None))
    if rec is None and timed:
        rec = timed[0]
    return ReportTiming(rec.summaries if rec is not None else None, speed, rec.machine if rec is not None else None)
