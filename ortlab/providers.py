"""Which execution providers really work here, and sessions that report what really ran.

``onnxruntime-gpu`` claims CUDA and TensorRT even on machines without a GPU (or without the CUDA
libraries); asking for them then silently falls back to the CPU with loud native stderr. Nothing
here trusts ``get_available_providers()``: each GPU provider is probed once with a tiny model.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

import onnxruntime as ort
from onnx import TensorProto, helper

from .config import BenchConfig, ExecutionMode, OptLevel, Target
from .errors import ModelLoadError, OrtlabError
from .text import one_line

TRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
GPU_PROVIDERS = (TRT, CUDA)

# warnings about CUDA libraries, fallbacks and unused initializers are noise for our users
ort.set_default_logger_severity(3)

_STDERR_LOCK = threading.RLock()

OPT_LEVELS = {
    OptLevel.DISABLED: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    OptLevel.BASIC: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    OptLevel.EXTENDED: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    OptLevel.ALL: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class CapturedStderr:
    """What native code wrote to fd 2 inside ``quiet_native_stderr`` (filled in on exit)."""

    text: str = ""


@contextmanager
def quiet_native_stderr() -> Iterator[CapturedStderr]:
    """Redirect file descriptor 2 to a temp file while ORT prints; yields the captured text holder.

    A process-wide lock serialises redirections (fd 2 is shared by all threads); nesting in one
    thread is allowed.
    """
    captured = CapturedStderr()
    with _STDERR_LOCK:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        saved = os.dup(2)
        with tempfile.TemporaryFile(mode="w+b") as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield captured
            finally:
                try:
                    sys.stderr.flush()
                except Exception:
                    pass
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                captured.text = tmp.read().decode("utf-8", "replace")


def claimed_providers() -> list[str]:
    """What ORT claims to have (``ort.get_available_providers()``); may include unusable GPU providers."""
    return list(ort.get_available_providers())


def _probe_model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _probe(provider: str) -> bool:
    try:
        with quiet_native_stderr():
            sess = ort.InferenceSession(_probe_model(), providers=[provider, CPU], enable_fallback=0)
    except Exception:
        return False
    return provider in sess.get_providers()


@functools.lru_cache(maxsize=1)
def _working() -> tuple[str, ...]:
    claimed = set(claimed_providers())
    found = [p for p in GPU_PROVIDERS if p in claimed and _probe(p)]
    return (*found, CPU)


def working_providers() -> list[str]:
    """Providers that really create a session here (probed once per process); always ends with CPU."""
    return list(_working())


def runtime_providers(target: Target) -> list[str]:
    """Providers to run ``target`` with: cpu → [CPU]; gpu → TRT > CUDA > CPU, only those that work."""
    if Target(target) == Target.CPU:
        return [CPU]
    return [p for p in (TRT, CUDA, CPU) if p in _working()]


def session_options(bench: BenchConfig | None = None, opt_level: OptLevel = OptLevel.ALL, *,
                    profile_prefix: str | None = None) -> ort.SessionOptions:
    """SessionOptions from a BenchConfig (threads, execution mode, memory, profiling) and an opt level.

    Profiling writes ``<profile_prefix>_<timestamp>.json``; without a prefix it goes into a new temp
    folder, never the current directory.
    """
    so = ort.SessionOptions()
    so.graph_optimization_level = OPT_LEVELS[OptLevel(opt_level)]
    so.log_severity_level = 3
    if bench is not None:
        if bench.intra_op_threads:
            so.intra_op_num_threads = int(bench.intra_op_threads)
        if bench.inter_op_threads:
            so.inter_op_num_threads = int(bench.inter_op_threads)
        so.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if bench.execution_mode == ExecutionMode.PARALLEL
                             else ort.ExecutionMode.ORT_SEQUENTIAL)
        so.enable_mem_pattern = bool(bench.enable_mem_pattern)
        so.enable_cpu_mem_arena = bool(bench.enable_cpu_mem_arena)
    if profile_prefix is not None or (bench is not None and bench.profile):
        if profile_prefix is None:
            profile_prefix = str(Path(tempfile.mkdtemp(prefix="ortlab-profile-")) / "profile")
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return so


def create_session(model_path, target: Target = Target.CPU,
                   options: ort.SessionOptions | None = None) -> tuple[ort.InferenceSession, list[str]]:
    """Create a session for ``target`` with only working providers; return it and the providers it
    really uses (``session.get_providers()``). Native stderr is captured, never printed.

    Raises ``ModelLoadError`` when ORT cannot load the model.
    """
    providers = runtime_providers(target)
    options = options if options is not None else session_options()
    path = os.fspath(model_path) if not isinstance(model_path, (bytes, bytearray)) else bytes(model_path)
    attempts = [providers] if providers == [CPU] else [providers, [CPU]]
    error: Exception | None = None
    for provs in attempts:
        try:
            with quiet_native_stderr():
                sess = ort.InferenceSession(path, sess_options=options, providers=provs, enable_fallback=0)
            return sess, list(sess.get_providers())
        except Exception as exc:
            error = exc
    assert error is not None
    if isinstance(error, OrtlabError):
        raise error
    raise ModelLoadError(f"ONNX Runtime could not load the model: {one_line(error)}") from None
