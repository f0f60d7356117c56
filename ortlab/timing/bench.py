"""Latency benchmarking: a generator of timed runs in this process, a summary with its spread, and peak memory
measured in a child process (timing in child processes, streamed or interleaved: :mod:`ortlab.timing.child_runs`)."""

from __future__ import annotations

import functools
import importlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from collections.abc import Generator, Iterator, Mapping, Sequence

import numpy as np

from ortlab.core import dtypes, limits
from ortlab.settings.config import BenchConfig, OptLevel
from ortlab.core.errors import BenchmarkError, OrtlabError
from ortlab.data.inputs import (
    InputSpec, control_input_text, given_array, infer_specs, is_control_input, random_array,
)
from ortlab.core.progress import CancelToken
from ortlab.core.serial import from_plain, to_plain
from ortlab.core.text import format_bytes, one_line
from ortlab.runtime import openvino as openvino_runtime, providers as runtime_providers
from ortlab.runtime.child import Child

@dataclass(frozen=True)
class LatencySample:
    """One timed ``session.run``: ``ms`` its latency, ``t`` seconds since timing began (end of this run)."""

    variant: str
    batch_size: int
    index: int
    ms: float
    t: float
    round: int = -1  # the interleaving round it ran in (:func:`time_interleaved`); -1 outside one


@dataclass(frozen=True)
class LatencySummary:
    """Statistics of one variant at one batch size (milliseconds; throughput in samples per second, computed as
    batch size ÷ p50, see :func:`throughput`)."""

    variant: str
    batch_size: int
    n: int
    p50: float
    p90: float
    p99: float
    mean: float
    std: float
    min: float
    max: float
    throughput_per_s: float
    peak_rss_mb: float | None = None
    providers: list[str] = field(default_factory=list)
    profile_path: str | None = None
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # the shape of every input as timed
    p25: float | None = None  # quartiles: the interquartile range p25–p75 is the spread of one run's latency
    p75: float | None = None
    p50_low: float | None = None  # 95 % interval of the p50 (order statistics, no assumption on the distribution)
    p50_high: float | None = None
    round_p50s: list[float] = field(default_factory=list)  # p50 of each interleaved round, in round order

    @property
    def spread(self) -> float | None:
        """Interquartile range ÷ p50 (0.2 = the middle half of the runs spans 20 % of the median); None when the
        quartiles were not recorded (older benchmarks)."""
        if self.p25 is None or self.p75 is None or not self.p50:
            return None
        return (self.p75 - self.p25) / self.p50

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this summary (an infinite throughput is written as "inf")."""
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict) -> LatencySummary:
        return from_plain(cls, data)


def input_specs(session_inputs: Sequence[Any], shapes: Mapping[str, Sequence[int]] | None = None,
                dims: Mapping[str, int] | None = None) -> list[InputSpec]:
    """The :class:`ortlab.data.inputs.InputSpec` of ``session.get_inputs()`` with the user's ``shapes`` (by input
    name; names this model does not take are left for the other models of a benchmark) and ``dims`` (by
    symbolic dim name); DataError naming any dim that stays open."""
    infos = []
    for arg in session_inputs:
        dtype = dtypes.from_ort(arg.type)
        if dtypes.to_numpy(dtype) is None:  # string, bfloat16, float8, int4…: no plain numpy array to fill
            raise BenchmarkError(f"Input {arg.name!r} has type {arg.type}, which the benchmark cannot generate.")
        infos.append(SimpleNamespace(name=arg.name, dtype=dtype, shape=tuple(arg.shape)))
    names = {i.name for i in infos}
    return infer_specs(infos, overrides={k: v for k, v in (shapes or {}).items() if k in names}, dims=dims)


def make_inputs(session_inputs: Sequence[Any], batch_size: int, seed: int = 0,
                dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None,
                values: Mapping[str, float] | None = None) -> dict[str, np.ndarray]:
    """Random feeds for ``session.get_inputs()`` at ``batch_size`` on each input's batch axis (not always the
    first: ``[layers, batch, hidden]`` states work); other symbolic dims come from ``shapes`` (by input name,
    ``--shape``) or ``dims`` (by dim name) — never guessed: an open one raises DataError naming it. A fixed
    batch other than ``batch_size`` is refused unless batch_size is 1. Floats ~ N(0, 1), token ids and other
    integers in {0, 1}, attention masks ones, states zeros. A control input (``inputs.is_control_input``, e.g.
    a sample rate) is never random: it takes its value from ``values`` (``--input-value``), else BenchmarkError."""
    specs = input_specs(session_inputs, shapes, dims)
    given = dict(values or {})
    control = next((s for s in specs if is_control_input(s) and s.name not in given), None)
    if control is not None:
        raise BenchmarkError(control_input_text(control) + f" Give the value to time it with: --input-value "
                             f"{control.name}=VALUE (the Benchmark page takes it from the data on the Data page).")
    for s in specs:
        if s.batch_fixed and batch_size not in (1, s.shape[s.batch_axis]):  # type: ignore[index]
            d = s.shape[s.batch_axis]  # type: ignore[index]
            raise BenchmarkError(f"Input {s.name!r} has a fixed batch size of {d}; "
                                 f"batch size {batch_size} cannot be timed. Use batch size 1 or {d}.")
    at = {s.name: s.shape[s.batch_axis] if s.batch_fixed else batch_size for s in specs}  # type: ignore[index]
    limits.check_generated_size({s.name: (list(s.at_batch(at[s.name])), dtypes.to_numpy(s.dtype)) for s in specs},
                                batch_size, "Benchmark input", error=BenchmarkError,
                                hint="Give a smaller --shape (symbolic dims) or batch size.")
    rng = np.random.default_rng(seed)
    return {s.name: (given_array(s, given[s.name], at[s.name]) if s.name in given else random_array(s, rng, at[s.name]))
            for s in specs}


@dataclass(frozen=True)
class RunSetup:
    """What a latency run times and how: the model, the config, the batch size, the variant's name, the session's
    optimization level, where profiles go, and how its inputs are made (``dims`` for symbolic axes, ``shapes`` for
    open inputs, ``values`` for control inputs), under ``runtime`` ("onnxruntime" or an OpenVINO precision)."""

    model_path: Path
    config: BenchConfig
    batch_size: int
    variant: str
    opt_level: OptLevel
    profile_dir: Path | None = None
    dims: Any = None
    shapes: dict[str, list[int]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    runtime: str = "onnxruntime"


class LatencyRun(Iterator[LatencySample]):
    """Iterator of :class:`LatencySample`; after it is exhausted, ``summary()`` gives the statistics with the
    providers that really ran and the profile file (when profiling was on). ``cancelled`` is True when the
    cancel token stopped it early."""

    def __init__(self, model_path, config: BenchConfig, batch_size: int, variant: str,
                 cancel: CancelToken | None, profile_dir, dims, opt_level: OptLevel | None,
                 shapes: Mapping[str, Sequence[int]] | None = None, values: Mapping[str, float] | None = None,
                 runtime: str = "onnxruntime") -> None:
        path = Path(model_path)
        self.setup = RunSetup(path, config, int(batch_size), variant or path.stem,
                              OptLevel(opt_level or config.session_opt_level),
                              Path(profile_dir) if profile_dir is not None else None, dims,
                              {k: [int(x) for x in v] for k, v in (shapes or {}).items()}, dict(values or {}), runtime)
        self.providers: list[str] = []
        self.profile_path: str | None = None
        self.input_shapes: dict[str, tuple[int, ...]] = {}
        self.samples: list[LatencySample] = []
        self.cancelled = False
        self.profile_note: str | None = None  # why there is no profile file although profiling was on
        self._cancel = cancel
        self.keep_samples = True  # False in the isolated child: samples go to the parent, not into a list
        self.unbounded = False  # True: run until closed (blocks of an interleaved benchmark), ignoring runs/duration
        self.round = -1  # stamped on the samples: the interleaving round now timed
        self._session: Any = None
        self._feeds: Any = None
        self._profiling = False
        self._gen = self._generate()

    @property
    def model_path(self) -> Path:
        return self.setup.model_path

    @property
    def config(self) -> BenchConfig:
        return self.setup.config

    @property
    def batch_size(self) -> int:
        return self.setup.batch_size

    @property
    def variant(self) -> str:
        return self.setup.variant

    @property
    def runtime(self) -> str:
        return self.setup.runtime

    def __iter__(self) -> LatencyRun:
        return self

    def __next__(self) -> LatencySample:
        return next(self._gen)

    def close(self) -> None:
        """Stop early and release the session (also writes the profile when profiling is on)."""
        self._gen.close()

    def summary(self, peak_rss_mb: float | None = None) -> LatencySummary:
        """Statistics of the samples yielded so far."""
        return summarize(self.samples, providers=self.providers, peak_rss_mb=peak_rss_mb,
                         profile_path=self.profile_path, input_shapes=self.input_shapes)

    def _check(self) -> None:
        if self.batch_size < 1:
            raise BenchmarkError(f"Batch size must be at least 1, got {self.batch_size}.")
        if not self.model_path.is_file():
            raise BenchmarkError(f"Model file not found: {self.model_path}.")

    def _open(self):
        self._check()
        precision = openvino_runtime.RUNTIME_PRECISION.get(self.runtime)
        if precision is not None:
            return openvino_runtime.OpenVinoSession(self.model_path, precision), [openvino_runtime.PROVIDER]
        prefix = None
        if self.config.profile and self.setup.profile_dir is not None:
            pdir = self.setup.profile_dir
            pdir.mkdir(parents=True, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.variant) or "model"
            prefix = str(pdir / f"{safe}_b{self.batch_size}")
        options = runtime_providers.session_options(self.config, self.setup.opt_level, profile_prefix=prefix)
        try:
            session, used = runtime_providers.create_session(self.model_path, self.config.target, options)
        except OrtlabError:
            raise
        except runtime_providers.ORT_ERRORS as exc:
            raise BenchmarkError(f"Could not load {self.model_path.name}: {one_line(exc)}") from exc
        return session, list(used)

    def _run_error(self, exc: Exception) -> BenchmarkError:
        return BenchmarkError(f"{self.variant}: the model failed to run with inputs {self.input_shapes}: "
                              f"{one_line(exc)}")

    def _end_profiling(self, session) -> None:
        """Write the profile (ORT stops profiling then) and delete it when it is over ``PROFILE_MAX_BYTES``."""
        path = session.end_profiling() or None
        self.profile_path = path
        cap = int(limits.limit("PROFILE_MAX_BYTES"))
        if path and Path(path).is_file() and Path(path).stat().st_size > cap:
            size = Path(path).stat().st_size
            Path(path).unlink(missing_ok=True)
            self.profile_path = None
            self.profile_note = (f"The profile of {self.variant} at batch {self.batch_size} was {format_bytes(size)}, "
                                 f"over the {format_bytes(cap)} limit ({limits.env_name('PROFILE_MAX_BYTES')}); it was "
                                 f"deleted. Profile a smaller model or raise the limit.")

    def prepare(self) -> bool:
        """Create the session, make the inputs and run the untimed warm-up (once; the first ``next()`` does it
        otherwise). False when the cancel token stopped the warm-up."""
        if self._session is not None:
            return True
        cfg = self.config
        session, self.providers = self._open()
        self._profiling = bool(cfg.profile) and self.runtime == "onnxruntime"  # ORT's profiler; none in OpenVINO
        profile_runs = int(limits.limit("PROFILE_MAX_RUNS"))  # warm-up included; then profiling stops
        feeds = make_inputs(session.get_inputs(), self.batch_size, cfg.seed, self.setup.dims, self.setup.shapes, self.setup.values)
        self.input_shapes = {k: tuple(v.shape) for k, v in feeds.items()}
        self._session, self._feeds = session, feeds
        cancel = self._cancel
        try:
            for w in range(cfg.warmup):
                if cancel is not None and cancel.cancelled:
                    self.cancelled = True
                    return False
                session.run(None, feeds)
                if self._profiling and w + 1 >= profile_runs:
                    self._end_profiling(session)
                    self._profiling = False
        except runtime_providers.ORT_ERRORS as exc:
            raise self._run_error(exc) from exc
        return True

    def _generate(self) -> Generator[LatencySample, None, None]:
        cfg = self.config
        try:
            if not self.prepare():
                return
            session, feeds = self._session, self._feeds
            profile_runs = int(limits.limit("PROFILE_MAX_RUNS"))
            run = session.run
            cancel = self._cancel
            clock = time.perf_counter
            duration = float(cfg.duration_s)
            limit = None if self.unbounded or duration > 0 else int(cfg.runs)
            if self.unbounded:
                duration = math.inf
            start = clock()
            i = 0
            while True:
                if cancel is not None and cancel.cancelled:
                    self.cancelled = True
                    return
                try:  # zero-cost unless it raises
                    t0 = clock()
                    run(None, feeds)
                    t1 = clock()
                except runtime_providers.ORT_ERRORS as exc:
                    raise self._run_error(exc) from exc
                sample = LatencySample(self.variant, self.batch_size, i, (t1 - t0) * 1000.0, t1 - start, self.round)
                if self.keep_samples:
                    self.samples.append(sample)
                yield sample
                i += 1
                if self._profiling and cfg.warmup + i >= profile_runs:
                    self._end_profiling(session)
                    self._profiling = False
                if limit is not None:
                    if i >= limit:
                        return
                elif t1 - start >= duration:
                    return
        finally:
            if self._profiling and self._session is not None:
                self._end_profiling(self._session)
                self._profiling = False
            self._session = self._feeds = None


def config_problems(config: BenchConfig) -> list[str]:
    """Why ``config`` cannot run here: its own bounds, and OpenVINO when asked for but not installed."""
    out = config.problems()
    if config.openvino and not openvino_runtime.available():
        out.append(f"OpenVINO is not installed. {openvino_runtime.INSTALL_HINT}")
    return out


def latency_samples(model_path, config: BenchConfig, batch_size: int, variant: str = "",
                    cancel: CancelToken | None = None, *, profile_dir=None,
                    dims: Mapping[str, int] | None = None, opt_level: OptLevel | None = None,
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    values: Mapping[str, float] | None = None, runtime: str = "onnxruntime") -> LatencyRun:
    """Time ``session.run`` on random inputs, yielding one :class:`LatencySample` per run.

    The session (threads, execution mode, memory pattern, arena, target from ``config``) is created on the
    first ``next()``; ``config.warmup`` untimed runs follow, then ``config.runs`` timed runs, or as many as fit
    in ``config.duration_s`` when it is set. ``cancel`` is checked between runs and ends the iteration early.
    With ``config.profile`` ORT's profile JSON is written into ``profile_dir`` (a new temp folder when None);
    ``LatencyRun.profile_path`` / ``summary().profile_path`` name the file. Only the first
    ``limits.PROFILE_MAX_RUNS`` runs (warm-up included) are profiled, and a profile over
    ``limits.PROFILE_MAX_BYTES`` is deleted (``profile_note`` says so). ``opt_level`` overrides
    ``config.session_opt_level``, the optimization ORT applies when it loads the model. ``shapes`` (input name →
    shape, ``--shape``) sets the inputs' open dims and ``values`` the control inputs' values (:func:`make_inputs`);
    ``input_shapes`` reports what ran. ``runtime="openvino"`` times the file under OpenVINO's CPU runtime instead
    (:mod:`ortlab.runtime.openvino`; no profile).
    """
    return LatencyRun(model_path, config, batch_size, variant, cancel, profile_dir, dims, opt_level, shapes, values,
                      runtime)


THROUGHPUT_METHOD = "batch size ÷ p50 latency"


def throughput(batch_size: int, p50_ms: float) -> float:
    """Samples per second at the median latency: ``batch_size × 1000 / p50_ms`` (inf for a 0 ms p50)."""
    return batch_size * 1000.0 / p50_ms if p50_ms > 0 else float("inf")


def median_rank(n: int, level: float = 0.95) -> int:
    """The 1-based rank j such that the j-th smallest and the j-th largest of ``n`` values bound their median
    with at least ``level`` confidence (binomial order statistics, exact up to 1000 values, normal above); 1
    when ``n`` is too small for that level (then the interval is min–max and covers less)."""
    if n < 1:
        return 1
    tail = (1.0 - level) / 2.0
    if n > 1000:
        return max(1, int(math.floor(n / 2.0 - 1.959964 * math.sqrt(n) / 2.0)))
    total, acc, j = 2 ** n, 0, 0
    while True:  # largest j with P(Binomial(n, 1/2) <= j - 1) <= tail
        acc += math.comb(n, j)
        if acc / total > tail:
            return max(1, j)
        j += 1


def median_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """A distribution-free ``level`` interval of the median of ``values`` (:func:`median_rank`)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    if not x.size:
        raise BenchmarkError("No values to take a median of.")
    j = median_rank(int(x.size), level)
    return float(x[j - 1]), float(x[x.size - j])


def round_medians(samples: Sequence[LatencySample]) -> list[float]:
    """The p50 of each interleaving round, in round order; [] when the samples were not timed in rounds."""
    by_round: dict[int, list[float]] = {}
    for s in samples:
        if s.round < 0:
            return []
        by_round.setdefault(s.round, []).append(s.ms)
    return [float(np.median(by_round[r])) for r in sorted(by_round)]


def summarize(samples: Sequence[LatencySample], *, providers: Sequence[str] = (), peak_rss_mb: float | None = None,
              profile_path: str | None = None,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> LatencySummary:
    """p50/p90/p99, mean, std, min, max of the samples' latencies, their quartiles, a 95 % interval of the p50
    (:func:`median_interval`) and, for samples timed in interleaved rounds, each round's p50; throughput =
    batch × 1000 / p50 ms (:data:`THROUGHPUT_METHOD`: the median, so that one slow outlier cannot flip which
    variant is faster)."""
    if not samples:
        raise BenchmarkError("No timed runs to summarize.")
    first = samples[0]
    if any(s.variant != first.variant or s.batch_size != first.batch_size for s in samples):
        raise BenchmarkError("Summarize one variant at one batch size at a time.")
    ms = np.fromiter((s.ms for s in samples), dtype=np.float64, count=len(samples))
    p25, p50, p75, p90, p99 = (float(v) for v in np.percentile(ms, [25, 50, 75, 90, 99]))
    low, high = median_interval(ms)
    mean = float(ms.mean())
    return LatencySummary(
        variant=first.variant, batch_size=first.batch_size, n=int(ms.size), p50=p50, p90=p90, p99=p99,
        mean=mean, std=float(ms.std()), min=float(ms.min()), max=float(ms.max()),
        throughput_per_s=throughput(first.batch_size, p50),
        peak_rss_mb=peak_rss_mb, providers=list(providers), profile_path=profile_path,
        input_shapes={k: [int(x) for x in v] for k, v in (input_shapes or {}).items()},
        p25=p25, p75=p75, p50_low=low, p50_high=high, round_p50s=round_medians(samples),
    )


# -- peak memory ------------------------------------------------------------------------------------------

def maxrss_mb() -> float:
    """This interpreter's peak resident memory (MB)."""
    # Linux keeps ru_maxrss across fork+exec (a child of a big parent would report the parent's size);
    # VmHWM belongs to the new address space, so it measures this interpreter alone.
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


def _memory_child(args_json: str, fd: int) -> None:
    """Runs inside the child interpreter (``Child.run``): load the model and run it ``runs`` times (or do nothing),
    then send ``{"maxrss_mb": …}`` over ``fd``."""
    from multiprocessing.connection import Connection

    args = json.loads(args_json)
    if args.get("model_path"):
        config = BenchConfig.from_dict(args["config"])
        config = BenchConfig.from_dict({**config.to_dict(), "warmup": 0, "runs": int(args["runs"]),
                                        "duration_s": 0.0, "profile": False})
        for _ in latency_samples(args["model_path"], config, int(args["batch_size"]), shapes=args.get("shapes"),
                                 values=args.get("values")):
            pass
    else:  # the baseline: the same imports (ORT, onnx, numpy, ortlab) as a timed child, no model
        importlib.import_module("ortlab.runtime.providers")
    with Connection(fd) as conn:
        conn.send({"maxrss_mb": maxrss_mb()})


def _run_child(args: dict, timeout: float) -> float:
    if sys.platform == "win32":
        raise BenchmarkError("Peak memory is measured with the resource module, which Windows lacks.")
    with Child.run(_memory_child, json.dumps(args), new_session=True) as child:
        if not child.conn.poll(timeout):
            child.kill()
            raise BenchmarkError(f"Measuring memory took longer than {timeout:.0f} s.")
        got = child.receive()
        if isinstance(got, dict) and "maxrss_mb" in got:
            return float(got["maxrss_mb"])
        code = child.finish()
        raise BenchmarkError(f"Measuring memory failed{child.last_line() or f': exit status {code}'}")


@functools.lru_cache(maxsize=1)
def baseline_memory_mb() -> float:
    """Peak RSS (MB) of a fresh interpreter that imported ONNX Runtime (and the rest of what the measuring child
    imports) but loaded no model; measured once per process."""
    return _run_child({"model_path": None}, timeout=120)


def peak_memory_mb(model_path, config: BenchConfig, batch_size: int, runs: int = 3, timeout: float = 300,
                   shapes: Mapping[str, Sequence[int]] | None = None,
                   values: Mapping[str, float] | None = None) -> float:
    """Peak RSS (MB) of a child process that creates the session (as ``config`` says) and runs it ``runs`` times."""
    if not Path(model_path).is_file():
        raise BenchmarkError(f"Model file not found: {model_path}.")
    args = {"model_path": str(Path(model_path).resolve()), "config": config.to_dict(),
            "batch_size": int(batch_size), "runs": max(1, int(runs)), "shapes": dict(shapes or {}),
            "values": dict(values or {})}
    return _run_child(args, timeout)
