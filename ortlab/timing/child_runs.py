"""Timing in child processes: each variant × batch size in its own fresh interpreter, under the run memory limit,
streamed (:func:`latency_samples_isolated`) or in short blocks that the parent interleaves across variants round by
round (:func:`latency_blocks`, :func:`time_interleaved`), so that a change in the machine's load hits every variant
alike. This is ortlab's one interleaved timer: Benchmark (and Compare's quick timing of a pair) time through it in
the run service, Tune through :func:`time_pair`; every speed-up is :mod:`ortlab.timing.stats`'s. Each child starts
through :class:`ortlab.runtime.child.ChildExecutor`, with a :class:`TimingRequest`.

Size: the child's side and the parent's side of the same two protocols (streamed and blocks) stay
together so that a change to one side is seen beside the other.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import IO, Any
from collections.abc import Generator, Iterator, Mapping, Sequence


from ortlab.core import limits
from ortlab.settings.config import BenchConfig, OptLevel
from ortlab.core.errors import BenchmarkError, Cancelled, OrtlabError
from ortlab.core.progress import CancelToken
from ortlab.core.text import one_line
from ortlab.runtime.child import STOP_GRACE_S, default_memory_gb, error_of
from ortlab.timing import stats
from ortlab.runtime.child import ChildExecutor, ChildJob
from ortlab.timing.bench import LatencyRun, LatencySample, LatencySummary, latency_samples, maxrss_mb, summarize
from ortlab.timing.stats import MIN_ROUNDS, SpeedUp


FLUSH_S = 0.05     # the child sends its samples at least this often


@dataclass(frozen=True)
class TimingRequest:
    """What a timing child is given to build the same run as :func:`ortlab.timing.bench.latency_samples`: the model,
    the benchmark ``config``, the batch size and variant, the profile folder, the open dims' values, the session's
    optimization level, the inputs' shapes and values, the child's memory limit, the runtime, and ``blocks``
    (timed in blocks the parent orders, else streamed)."""

    model_path: str
    config: BenchConfig
    batch_size: int
    variant: str
    opt_level: OptLevel
    profile_dir: str | None = None
    dims: dict[str, int] | None = None
    shapes: dict[str, list[int]] | None = None
    values: dict[str, float] | None = None
    memory_gb: float | None = None
    runtime: str = "onnxruntime"
    blocks: bool = False


def _child_stream(run: LatencyRun, conn) -> None:
    """The child's timed loop of one series: samples sent every ``FLUSH_S``."""
    ms_buf: list[float] = []
    t_buf: list[float] = []
    last = 0.0
    for s in run:
        ms_buf.append(s.ms)
        t_buf.append(s.t)
        if s.t - last >= FLUSH_S:
            conn.send(("samples", ms_buf, t_buf))
            ms_buf, t_buf, last = [], [], s.t
    if ms_buf:
        conn.send(("samples", ms_buf, t_buf))


def _child_blocks(run: LatencyRun, conn) -> None:
    """The child's side of an interleaved benchmark: warm up, say ("ready",), then time one block per
    ("block", runs, seconds, round) order and answer ("block", [ms...], [t...], seconds taken); anything else
    from the parent (or its end of the pipe closing) ends it. Nothing runs while the other children time."""
    run.unbounded = True
    if not run.prepare():
        return
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if not (isinstance(msg, tuple) and msg and msg[0] == "block"):
            return
        _, runs, seconds, rnd = msg
        ms, ts, took = time_block(run, runs, seconds, rnd)
        conn.send(("block", ms, ts, took))


def time_block(run: LatencyRun, runs: int | None, seconds: float, rnd: int) -> tuple[list[float], list[float], float]:
    """Time one block of an unbounded ``run``: ``runs`` runs, or (``runs`` None) runs until ``seconds`` have
    passed (at least one). Returns the latencies (ms), their end times and the seconds the block took."""
    run.round = rnd
    clock = time.perf_counter
    ms: list[float] = []
    ts: list[float] = []
    t0 = clock()
    for s in run:
        ms.append(s.ms)
        ts.append(s.t)
        if runs is not None:
            if len(ms) >= runs:
                break
        elif clock() - t0 >= seconds:
            break
    return ms, ts, clock() - t0


def _isolated_child(request: TimingRequest, fd: int) -> None:
    """Runs inside the child interpreter (:class:`~ortlab.runtime.child.ChildExecutor`): time the model
    ``request`` describes and send samples to the parent over ``fd``.

    Messages: ("start", pid), ("samples", [ms...], [t...]) every ``FLUSH_S``, then ("end", info) or
    ("error", class name, message, step). Any message from the parent (or its end of the pipe closing)
    cancels the run between two timed runs.
    """
    import threading
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    token = CancelToken()

    def listen() -> None:  # blocked in recv, it takes no GIL from the timed loop until the parent speaks
        try:
            conn.recv()
        except (EOFError, OSError):
            pass
        token.cancel()

    blocks = request.blocks
    if not blocks:  # timed in blocks, the child reads the parent's orders itself between two blocks
        threading.Thread(target=listen, daemon=True).start()
    limit = request.memory_gb
    limits.apply_memory_limit(limit)
    conn.send(("start", os.getpid()))
    run = None
    try:
        run = latency_samples(request.model_path, request.config, request.batch_size, request.variant, token,
                              profile_dir=request.profile_dir, dims=request.dims, opt_level=request.opt_level,
                              shapes=request.shapes, values=request.values, runtime=request.runtime)
        run.keep_samples = False
        if blocks:
            _child_blocks(run, conn)
        else:
            _child_stream(run, conn)
        run.close()  # writes the profile now, so its path can be reported
        conn.send(("end", {"providers": run.providers, "input_shapes": run.input_shapes,
                           "profile_path": run.profile_path, "profile_note": run.profile_note,
                           "cancelled": run.cancelled, "peak_rss_mb": maxrss_mb()}))
    except MemoryError:
        conn.send(("error", "BenchmarkError", memory_message(limit, request.variant, request.batch_size), None))
    except OrtlabError as exc:
        message = exc.message
        if limit and limits.is_alloc_failure(message):
            message = memory_message(limit, request.variant, request.batch_size)
        conn.send(("error", type(exc).__name__, message, exc.step))
    except Cancelled as exc:  # stopped (SIGTERM): said as such, not as a failure
        conn.send(("error", "Cancelled", exc.message, exc.step))
    except BaseException as exc:  # the child's last net: the parent always gets one error message
        conn.send(("error", "BenchmarkError", f"The timing process failed: {type(exc).__name__}: {one_line(exc)}",
                   None))
    finally:
        conn.close()


def memory_message(limit_gb: float | None, variant: str | None, batch_size: int) -> str:
    """The error of a timing child that hit its memory limit."""
    what = f"Timing {variant or 'the model'} at batch {batch_size}"
    if not limit_gb:
        return f"{what} ran out of memory; use a smaller batch size."
    return (f"{what} needed more than {float(limit_gb):g} GB of memory (the limit of its process, "
            f"$ORTLAB_RUN_MEMORY_GB); use a smaller batch size or input shape, or raise the limit.")


class IsolatedLatencyRun(LatencyRun):
    """A :class:`LatencyRun` whose session and timed loop live in a child interpreter, so nothing in this
    process (a UI thread, the GIL) can disturb the timings. Same samples and end-of-run attributes, plus
    ``child_pid`` (reported by the child) and ``peak_rss_mb`` (the child's peak resident memory, read by the
    child itself after its last run)."""

    def __init__(self, *args, memory_gb: float | None = None, **kwargs) -> None:
        self.child_pid: int | None = None
        self.peak_rss_mb: float | None = None
        self.returncode: int | None = None
        self.memory_gb = memory_gb
        super().__init__(*args, **kwargs)

    def _take_end(self, info: dict) -> None:
        """The child's end-of-run report: providers, input shapes, profile, peak memory."""
        self.providers = list(info["providers"])
        self.input_shapes = {k: tuple(v) for k, v in info["input_shapes"].items()}
        self.profile_path = info["profile_path"]
        self.profile_note = info.get("profile_note")
        self.peak_rss_mb = info["peak_rss_mb"]

    def request(self, *, blocks: bool = False) -> TimingRequest:
        """What the timing child needs to build the same run (``blocks``: timed in blocks the parent orders)."""
        return TimingRequest(str(self.model_path.resolve()), self.config, self.batch_size, self.variant,
                             OptLevel(self.setup.opt_level),
                             str(self.setup.profile_dir.resolve()) if self.setup.profile_dir is not None else None,
                             dict(self.setup.dims) if self.setup.dims else None, self.setup.shapes, self.setup.values,
                             self.memory_gb,
                             self.runtime, blocks)

    def _generate(self) -> Generator[LatencySample, None, None]:
        self._check()
        if os.name != "posix":
            raise BenchmarkError("Timing in a separate process needs Linux or macOS; use latency_samples().")
        child = ChildExecutor(duplex=True).submit(_isolated_child, self.request())
        try:
            yield from self._receive(child)
        finally:
            self.returncode = child.finish(STOP_GRACE_S)  # the child's listener sees EOF and cancels, if it still runs
            child.close()

    def _receive(self, job: ChildJob) -> Iterator[LatencySample]:
        conn, proc, stderr = job.conn, job.child.proc, job.child.log
        cancel = self._cancel
        stop_at: float | None = None
        i = 0
        while True:
            if stop_at is None and cancel is not None and cancel.cancelled:
                stop_at = self._request_stop(conn)
            if stop_at is not None and time.monotonic() - stop_at > STOP_GRACE_S:
                self.cancelled = True
                return
            try:
                if not conn.poll(FLUSH_S):
                    if proc.poll() is not None and not conn.poll(0):
                        raise self._died(proc, stderr)
                    continue
                msg = conn.recv()
            except (EOFError, OSError):
                proc.wait(STOP_GRACE_S)
                raise self._died(proc, stderr) from None
            kind = msg[0]
            if kind == "samples" and stop_at is None:
                for ms, t in zip(msg[1], msg[2]):
                    sample = LatencySample(self.variant, self.batch_size, i, ms, t)
                    self.samples.append(sample)
                    yield sample
                    i += 1
                    if cancel is not None and cancel.cancelled:
                        stop_at = self._request_stop(conn)
                        break
            elif kind == "start":
                self.child_pid = int(msg[1])
            elif kind == "end":
                self._take_end(msg[1])
                self.cancelled = bool(msg[1]["cancelled"]) or stop_at is not None
                return
            elif kind == "error":
                raise error_of(msg[1], msg[2], msg[3], default=BenchmarkError)

    @staticmethod
    def _request_stop(conn) -> float:
        try:
            conn.send("stop")
        except OSError:
            pass
        return time.monotonic()

    def _died(self, proc: Any, stderr: IO[bytes] | None) -> BenchmarkError:
        try:
            assert stderr is not None
            stderr.seek(0)
            lines = [ln for ln in stderr.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except (OSError, AssertionError):
            lines = []
        reason = lines[-1].strip() if lines else f"exit status {proc.poll()}"
        if self.memory_gb and any(limits.is_alloc_failure(ln) for ln in lines[-20:]):
            return BenchmarkError(memory_message(self.memory_gb, self.variant, self.batch_size))
        return BenchmarkError(f"{self.variant}: the timing process stopped unexpectedly: {reason}")


def latency_samples_isolated(model_path, config: BenchConfig, batch_size: int, variant: str = "",
                             cancel: CancelToken | None = None, *, profile_dir=None,
                             dims: Mapping[str, int] | None = None,
                             opt_level: OptLevel | None = None, memory_gb: float | None = None,
                             shapes: Mapping[str, Sequence[int]] | None = None,
                             values: Mapping[str, float] | None = None,
                             runtime: str = "onnxruntime") -> IsolatedLatencyRun:
    """Like :func:`latency_samples`, but the session is created and timed in a fresh child interpreter.

    Samples arrive in batches (at least every ``FLUSH_S`` seconds); ``cancel`` stops the child between two
    runs (it is terminated if it does not stop within ``STOP_GRACE_S``); the child's errors are raised here
    as the same :class:`OrtlabError` subclass with the same message. ``peak_rss_mb`` is the child's peak
    resident memory (the same quantity :func:`peak_memory_mb` measures). ``memory_gb`` limits the child's
    address space (Linux); a run past it raises "Timing … needed more than X GB of memory". POSIX only.
    """
    return IsolatedLatencyRun(model_path, config, batch_size, variant, cancel, profile_dir, dims, opt_level, shapes,
                              values, runtime, memory_gb=memory_gb)


# -- interleaved timing: every variant of a batch size alternates with the others, block by block --------------

MAX_BLOCK_S = 0.25  # and blocks no longer than this, so a change in the machine's load hits every variant alike
OVERRUN = 2.0  # rounds stop once the whole takes this many times the time asked for (a very slow variant)


class LatencyBlocks:
    """One variant × batch size of an interleaved benchmark timed in this process: opened and warmed up once
    (``ready``), then timed one block at a time (``block``). Same end-of-run attributes as :class:`LatencyRun`."""

    def __init__(self, run: LatencyRun) -> None:
        run.unbounded = True
        self.run = run
        self.variant, self.batch_size = run.variant, run.batch_size
        self.cancelled = False
        self.peak_rss_mb: float | None = None

    @property
    def samples(self) -> list[LatencySample]:
        return self.run.samples

    def start(self) -> None:
        """Nothing to start in this process (the isolated kind starts its child here)."""

    def ready(self, cancel: CancelToken | None = None) -> bool:
        """Load and warm up; False when cancelled."""
        ok = self.run.prepare()
        self.cancelled = self.run.cancelled
        return ok

    def block(self, runs: int | None, seconds: float, rnd: int,
              cancel: CancelToken | None = None) -> tuple[list[LatencySample], float] | None:
        """Time ``runs`` runs (or, None, for ``seconds``) as round ``rnd``; the new samples and the block's
        seconds, or None when cancelled."""
        before = len(self.run.samples)
        _, _, took = time_block(self.run, runs, seconds, rnd)
        if self.run.cancelled:
            self.cancelled = True
            return None
        return self.run.samples[before:], took

    def finish(self) -> None:
        """End the session (and write its profile)."""
        self.run.close()

    def close(self) -> None:
        self.run.close()

    def summary(self, peak_rss_mb: float | None = None) -> LatencySummary:
        return summarize(self.run.samples, providers=self.run.providers, peak_rss_mb=peak_rss_mb,
                         profile_path=self.run.profile_path, input_shapes=self.run.input_shapes)

    @property
    def providers(self) -> list[str]:
        return self.run.providers


class IsolatedLatencyBlocks(IsolatedLatencyRun):
    """:class:`LatencyBlocks` whose session lives in a child interpreter that waits, idle, between its blocks
    (``_child_blocks``): while one child times its block, the others sleep in ``recv``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._child: ChildJob | None = None
        self._ready = False

    def start(self) -> None:
        """Start the child (it loads the model and warms up while the others start)."""
        if self._child is not None:
            return
        self._check()
        if os.name != "posix":
            raise BenchmarkError("Timing in a separate process needs Linux or macOS; use LatencyBlocks.")
        self._child = ChildExecutor(duplex=True).submit(_isolated_child, self.request(blocks=True))

    def _wait_for(self, want: str, cancel: CancelToken | None) -> tuple | None:
        assert self._child is not None
        conn, proc, log = self._child.conn, self._child.child.proc, self._child.child.log
        while True:
            if cancel is not None and cancel.cancelled:
                self.cancelled = True
                return None
            try:
                if not conn.poll(FLUSH_S):
                    if proc.poll() is not None and not conn.poll(0):
                        raise self._died(proc, log)
                    continue
                msg = conn.recv()
            except (EOFError, OSError):
                proc.wait(STOP_GRACE_S)
                raise self._died(proc, log) from None
            if msg[0] == "start":
                self.child_pid = int(msg[1])
            elif msg[0] == "error":
                raise error_of(msg[1], msg[2], msg[3], default=BenchmarkError)
            elif msg[0] == want:
                return msg

    def ready(self, cancel: CancelToken | None = None) -> bool:
        """Start the child and wait until it is loaded and warmed up (at once when it already was)."""
        self.start()
        if not self._ready:
            self._ready = self._wait_for("ready", cancel) is not None
        return self._ready

    def block(self, runs: int | None, seconds: float, rnd: int,
              cancel: CancelToken | None = None) -> tuple[list[LatencySample], float] | None:
        assert self._child is not None
        self._child.send(("block", runs, seconds, rnd))
        msg = self._wait_for("block", cancel)
        if msg is None:
            return None
        i = len(self.samples)
        new = [LatencySample(self.variant, self.batch_size, i + k, ms, t, rnd) for k, (ms, t) in enumerate(zip(msg[1], msg[2]))]
        self.samples.extend(new)
        return new, float(msg[3])

    def finish(self) -> None:
        """Tell the child to stop and take its end-of-run report (providers, shapes, profile, peak memory)."""
        assert self._child is not None
        self._child.send("stop")
        msg = self._wait_for("end", None)
        assert msg is not None
        self._take_end(msg[1])

    def close(self) -> None:
        """Close the pipe and reap the child (terminated if it does not stop within ``STOP_GRACE_S``)."""
        if self._child is not None:
            self.returncode = self._child.finish(STOP_GRACE_S)
            self._child.close()
            self._child = None


def latency_blocks(model_path, config: BenchConfig, batch_size: int, variant: str = "",
                   cancel: CancelToken | None = None, *, isolated: bool = True, memory_gb: float | None = None,
                   **kwargs) -> LatencyBlocks | IsolatedLatencyBlocks:
    """One series of an interleaved benchmark (:func:`time_interleaved`): in a child interpreter when
    ``isolated`` (POSIX), else in this process. ``kwargs`` as for :func:`latency_samples`."""
    keys = ("profile_dir", "dims", "opt_level", "shapes", "values", "runtime")
    args = [kwargs.get(k) for k in keys[:-1]] + [kwargs.get("runtime") or "onnxruntime"]
    if isolated and os.name == "posix":
        return IsolatedLatencyBlocks(model_path, config, batch_size, variant, cancel, *args, memory_gb=memory_gb)
    return LatencyBlocks(LatencyRun(model_path, config, batch_size, variant, cancel, *args))


def round_plan(config: BenchConfig) -> tuple[int | None, float, int]:
    """How an interleaved benchmark cuts each series: (runs per block or None for timed blocks, seconds per
    block, rounds planned). With ``duration_s`` set: at least :data:`MIN_ROUNDS` rounds of at most
    :data:`MAX_BLOCK_S` each; with ``runs``: that many runs in :data:`MIN_ROUNDS` blocks (fewer runs, fewer
    blocks)."""
    duration = float(config.duration_s)
    if duration > 0:
        rounds = max(MIN_ROUNDS, math.ceil(duration / MAX_BLOCK_S))
        return None, duration / rounds, rounds
    total = max(1, int(config.runs))
    per = math.ceil(total / MIN_ROUNDS)
    return per, math.inf, math.ceil(total / per)


def time_interleaved(series: Sequence[Any], config: BenchConfig, cancel: CancelToken | None = None,
                     on_block: Any = None, on_round: Any = None, until: Any = None) -> bool:
    """Time ``series`` (:class:`LatencyBlocks`-like: ``start``, ``ready``, ``block``) interleaved: in round r
    every series times one block, in an order rotated by r, so a change of the machine's load between rounds hits
    every series alike and a speed-up can be taken round by round (:func:`ortlab.timing.stats.of_summaries`).
    Blocks per :func:`round_plan`; with ``duration_s`` rounds go on until every series has timed that long and at
    least :data:`MIN_ROUNDS` rounds ran (or the whole has taken :data:`OVERRUN` × the time asked for), with
    ``runs`` every series times exactly that many.
    ``until`` (an :class:`ortlab.timing.settle.UntilSettled`) replaces that end: rounds of the planned blocks go on
    until ``until.done(round_p50s)`` says stop (each series' p50 in every round so far).
    ``on_block(samples)`` gets every block's samples, ``on_round(done, planned)`` every round's end. False when
    cancelled. The caller ends the series (``finish``/``close``)."""
    for s in series:
        s.start()
    for s in series:  # loaded in parallel, warmed up before any block is timed
        if not s.ready(cancel):
            return False
    runs, seconds, planned = round_plan(config)
    n = len(series)
    duration = float(config.duration_s)
    spent = [0.0] * n
    left = max(1, int(config.runs))
    began = time.monotonic()
    rounds: list[list[float]] = [[] for _ in range(n)]  # each series' p50 in every round
    if until is not None:
        until.start()
    rnd = 0
    while True:
        size = None if runs is None else min(runs, left)
        for k in range(n):
            idx = (k + rnd) % n
            got = series[idx].block(size, seconds, rnd, cancel)
            if got is None:
                return False
            samples, took = got
            spent[idx] += took
            rounds[idx].append(statistics.median(x.ms for x in samples) if samples else math.nan)
            if on_block is not None:
                on_block(samples)
        rnd += 1
        if on_round is not None:
            on_round(rnd, planned)
        if until is not None:
            if until.done(rounds):
                return True
        elif runs is not None:
            left -= size or 0
            if left <= 0:
                return True
        elif (min(spent) >= duration and rnd >= MIN_ROUNDS) or time.monotonic() - began >= OVERRUN * n * duration:
            return True


class PairTimer:
    """Candidates timed one after another against one reference, the way a benchmark times them (each in its own
    child, warmed up, then interleaved rounds of short blocks: :func:`time_interleaved`), summarised by
    :mod:`ortlab.timing.stats`. The reference's child stays loaded between calls (one per batch size), so a search
    that times many candidates starts one child per candidate. Close it (or use it as a context manager) when done.
    ``kwargs`` as for :func:`latency_blocks`; ``blocks`` makes one series instead of :func:`latency_blocks` (tests)."""

    def __init__(self, reference_path, *, memory_gb: float | None = None, blocks: Any = None, **kwargs: Any) -> None:
        self.reference_path = reference_path
        self._make = blocks or latency_blocks
        self._memory_gb, self._own = memory_gb, blocks is None
        self._kwargs = kwargs
        self._references: dict[int, Any] = {}
        self.last: tuple[LatencySummary, LatencySummary] | None = None  # (reference, candidate) of the last call

    def __call__(self, candidate_path, config: BenchConfig, batch_size: int, *,
                 cancel: CancelToken | None = None, until: Any = None) -> SpeedUp:
        """``candidate_path`` against the reference at ``batch_size`` for ``config.duration_s`` (or ``config.runs``),
        or until ``until`` says stop (:func:`time_interleaved`); Cancelled when ``cancel`` stops it."""
        kwargs = dict(self._kwargs)
        if self._own:
            kwargs["memory_gb"] = self._memory_gb if self._memory_gb is not None else default_memory_gb(config.target)
        reference = self._references.get(batch_size)
        if reference is None:
            reference = self._make(self.reference_path, config, batch_size, variant="reference", cancel=cancel,
                                   **kwargs)
            self._references[batch_size] = reference
        candidate = self._make(candidate_path, config, batch_size, variant="candidate", cancel=cancel, **kwargs)
        before = len(reference.samples)
        try:
            if not time_interleaved([reference, candidate], config, cancel, until=until):
                raise Cancelled(step="bench")
            candidate.finish()
        except BaseException:  # interrupted or failed: the references are dropped, then re-raised
            self._drop(batch_size)  # a reference stopped mid-block, or dead: the next call starts a fresh one
            raise
        finally:
            candidate.close()
        self.last = (summarize(reference.samples[before:]), summarize(candidate.samples))
        speed = stats.of_summaries(*self.last)
        if speed is None:
            raise BenchmarkError(f"Timing at batch {batch_size} gave no latencies to compare.")
        return speed

    def _drop(self, batch_size: int) -> None:
        reference = self._references.pop(batch_size, None)
        if reference is not None:
            reference.close()

    def close(self) -> None:
        """End every reference child."""
        for batch_size in list(self._references):
            reference = self._references[batch_size]
            try:
                reference.finish()
            except OrtlabError:
                pass  # it died: closing reaps it
            self._drop(batch_size)

    def __enter__(self) -> PairTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def time_pair(reference_path, candidate_path, config: BenchConfig, batch_size: int, *,
              cancel: CancelToken | None = None, **kwargs: Any) -> SpeedUp:
    """Time ``candidate_path`` against ``reference_path`` at ``batch_size`` once (:class:`PairTimer`, whose
    arguments ``kwargs`` are)."""
    with PairTimer(reference_path, **kwargs) as timer:
        return timer(candidate_path, config, batch_size, cancel=cancel)
