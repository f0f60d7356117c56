"""Which execution providers really work here, and sessions that report what really ran.

``onnxruntime-gpu`` claims CUDA and TensorRT even on machines without a GPU (or without the CUDA
libraries); asking for them then silently falls back to the CPU with loud native stderr. Nothing
here trusts ``get_available_providers()``: each GPU provider is probed once with a tiny model.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

import onnx.defs
import onnxruntime as ort
from onnx import TensorProto, helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from ortlab.settings.config import BenchConfig, ExecutionMode, OptLevel, Target
from ortlab.core.errors import ModelLoadError, OrtlabError
from ortlab.core.text import one_line
from ortlab.runtime.threads import limit_threads

TRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
GPU_PROVIDERS = (TRT, CUDA)

# warnings about CUDA libraries, fallbacks and unused initializers are noise for our users, and ORT's error
# lines repeat the exception it raises anyway: only fatal messages are logged (ortlab shows the exception's text)
ort.set_default_logger_severity(4)

_STDERR_LOCK = threading.RLock()
_SAVED_STDERR: list[int] = []  # fd 2's earlier targets while redirected, outermost first

CUSTOM_OPS_ENV = "ORTLAB_CUSTOM_OP_LIBRARIES"  # custom-op libraries, os.pathsep-separated; children inherit it

# what ONNX Runtime's Python API raises: its status types (Fail, InvalidArgument, NoSuchFile…, each a plain
# Exception subclass) and the RuntimeError/ValueError/TypeError/MemoryError of its bindings
ORT_ERRORS: tuple[type[Exception], ...] = (
    *(c for c in vars(ort_state).values() if isinstance(c, type) and issubclass(c, Exception)),
    RuntimeError, ValueError, TypeError, MemoryError,
)

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
        except (OSError, ValueError):  # a closed or broken stream: nothing buffered to lose
            pass
        with tempfile.TemporaryFile(mode="w+b") as tmp:
            saved = os.dup(2)
            _SAVED_STDERR.append(saved)
            try:
                os.dup2(tmp.fileno(), 2)
                yield captured
            finally:
                try:
                    sys.stderr.flush()
                except (OSError, ValueError):  # a closed or broken stream: nothing buffered to lose
                    pass
                if saved in _SAVED_STDERR:  # else restore_native_stderr already put it back
                    _put_back(_SAVED_STDERR.index(saved))
                tmp.seek(0)
                captured.text = tmp.read().decode("utf-8", "replace")


def _put_back(level: int) -> None:
    """Undo the redirections of fd 2 from the innermost down to ``level`` (an index of :data:`_SAVED_STDERR`)."""
    while len(_SAVED_STDERR) > level:
        fd = _SAVED_STDERR.pop()
        os.dup2(fd, 2)
        os.close(fd)


def restore_native_stderr() -> None:
    """Put fd 2 back where it pointed before :func:`quiet_native_stderr` redirected it, if a redirection is still in
    effect: a Ctrl-C that lands in the redirection's own exit leaves its restoring to the garbage collector, after the
    command's last line (which then went to the temp file: status 130 and nothing said)."""
    _put_back(0)


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
    except ORT_ERRORS:
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


def custom_op_libraries() -> list[str]:
    """The custom-op libraries (shared objects) every session ortlab creates registers (``$ORTLAB_CUSTOM_OP_LIBRARIES``,
    set by ``ortlab --custom-op-library PATH`` and the app's settings)."""
    return [p for p in os.environ.get(CUSTOM_OPS_ENV, "").split(os.pathsep) if p.strip()]


def set_custom_op_libraries(paths) -> list[str]:
    """Register ``paths`` (server-side files) for every session created from now on, in this process and the
    child processes it starts; an empty list clears them. Raises ``ModelLoadError`` for a path that is not a
    file or that ONNX Runtime cannot load as a custom-op library."""
    resolved = []
    for p in paths:
        text = str(p).strip()
        if not text:
            continue
        path = Path(text).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"Custom-op library '{text}' does not exist or is not a file.")
        resolved.append(str(path.resolve()))
    for lib in resolved:
        try:
            with quiet_native_stderr():
                ort.SessionOptions().register_custom_ops_library(lib)
        except ORT_ERRORS as exc:
            raise ModelLoadError(f"ONNX Runtime cannot load custom-op library '{lib}': {one_line(exc)}") from None
    if resolved:
        os.environ[CUSTOM_OPS_ENV] = os.pathsep.join(resolved)
    else:
        os.environ.pop(CUSTOM_OPS_ENV, None)
    return resolved


def register_custom_ops(so: ort.SessionOptions) -> ort.SessionOptions:
    """Register :func:`custom_op_libraries` on ``so``; returns it."""
    for lib in custom_op_libraries():
        try:
            so.register_custom_ops_library(lib)
        except ORT_ERRORS as exc:
            raise ModelLoadError(f"ONNX Runtime cannot load custom-op library '{lib}': {one_line(exc)}") from None
    return so


@functools.lru_cache(maxsize=1)
def max_ir_version() -> int:
    """The newest ONNX IR version this ONNX Runtime reads (probed once with a tiny model)."""
    import onnx

    model = onnx.ModelProto.FromString(_probe_model())
    for ir in range(max(int(onnx.IR_VERSION), 10) + 2, 3, -1):
        model.ir_version = ir
        try:
            with quiet_native_stderr():
                ort.InferenceSession(model.SerializeToString(), providers=[CPU])
            return ir
        except ORT_ERRORS:  # too new for this ONNX Runtime: try the next older version
            continue
    return 3


def ir_version_problem(ir_version: int) -> str | None:
    """The sentence for a model whose IR version this ONNX Runtime cannot read, None when it can."""
    newest = max_ir_version()
    if ir_version <= newest:
        return None
    return (f"This model has IR version {ir_version}; ONNX Runtime {ort.__version__} reads up to {newest}. Re-export "
            f"it with an exporter that writes IR version {newest} or older (e.g. an older onnx/torch release, or "
            f"set model.ir_version = {newest} with onnx if its opsets allow), or upgrade onnxruntime.")


_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_IR_TOO_NEW = re.compile(r"Unsupported model IR version:\s*(\d+),\s*max supported IR version:\s*(\d+)")
# "/onnxruntime_src/…/reshape_helper.h:91 onnxruntime::ReshapeHelper::ReshapeHelper(const …&, bool) "
_CPP_LOCATION = re.compile(r"/\S+?\.(?:cc|h|cpp|hpp|cu):\d+\s+(?:[\w:~<>]+\((?:[^()]|\([^()]*\))*\)\s*)?")
# a C++ function signature ORT puts before its reason without a source location ("onnxruntime::common::Status
# onnxruntime::contrib::X::Compute(onnxruntime::OpKernelContext*, …) const")
_CPP_SIGNATURE = re.compile(r"(?:onnxruntime::[\w:]+\s+)?onnxruntime::[\w:~<>]+\((?:[^()]|\([^()]*\))*\)(?:\s*const)?\s*")
# "Failed to find kernel for AveragePool(1) (node:'' ep:'CPUExecutionProvider'). … node_version: 1 kernel start
# version: 7 kernel_end_version: 9 …", or "Could not find an implementation for AveragePool(1) node with name ''"
_OP_TOO_OLD = re.compile(r"(?:Failed to find kernel for|Could not find an implementation for) (\w+)\((\d+)\)")
OLDEST_OPSET = 7  # ONNX Runtime runs ai.onnx opset 7 and newer
_KERNEL_STARTS = re.compile(r"kernel start version:\s*(\d+)")
_UNKNOWN_OP = re.compile(r"(?:Fatal error:\s*)?([\w.\-]*):(\w+)\((-?\d+)\) is not a registered function/op")


def explain_ort_error(exc: BaseException | str) -> str:
    """ONNX Runtime's error text as one line a person can act on: the IR-version and unknown-op cases become a
    sentence naming both versions or the op and its domain; else ORT's text without its C++ source location
    prefix (the reason is kept whole)."""
    text = one_line(exc)
    m = _IR_TOO_NEW.search(text)
    if m:
        newest = int(m.group(2))
        return (f"This model has IR version {m.group(1)}; ONNX Runtime {ort.__version__} reads up to {newest}. "
                f"Re-export it with an exporter that writes IR version {newest} or older, or upgrade onnxruntime.")
    m = _UNKNOWN_OP.search(text)
    if m:
        return unknown_op_sentence([(m.group(1), m.group(2))])
    m = _OP_TOO_OLD.search(text)
    starts = [int(x) for x in _KERNEL_STARTS.findall(text)]
    oldest = min(starts) if starts else OLDEST_OPSET
    if m and int(m.group(2)) < oldest and _standard_op_at(m.group(1), int(m.group(2))):
        op, version = m.group(1), m.group(2)
        return (f"ONNX Runtime has no kernel for {op} version {version} (its kernels start at version {oldest}): "
                f"this model's opset is older than ONNX Runtime runs. Convert it to a newer opset with onnx's "
                f"version converter (onnx.version_converter.convert_version(model, 13)) or re-export it.")
    text = _ORT_PREFIX.sub("", text)
    return _CPP_SIGNATURE.sub("", _CPP_LOCATION.sub("", text)).strip() or one_line(exc)


def op_without_kernel(text: str) -> str | None:
    """The op ONNX Runtime's error ``text`` says it has no kernel for ("Could not find an implementation for
    EyeLike(22)", "Failed to find kernel for …"); None when the text says something else."""
    m = _OP_TOO_OLD.search(text)
    return m.group(1) if m else None


def _standard_op_at(op: str, version: int) -> bool:
    """Whether ai.onnx had ``op`` at opset ``version`` (a contrib op of the same name is another op)."""
    try:
        return onnx.defs.get_schema(op, version, "").since_version <= version
    except onnx.defs.SchemaError:
        return False


def unknown_op_sentence(ops) -> str:
    """The sentence for ops (domain, op type) no registered kernel or custom-op library implements."""
    names = ", ".join(f"{op} (domain '{dom or 'ai.onnx'}')" for dom, op in ops)
    libs = custom_op_libraries()
    where = (f"none of the registered custom-op libraries ({', '.join(Path(p).name for p in libs)}) implements it"
             if libs else "no custom-op library is registered")
    return (f"ONNX Runtime has no kernel for {names}: {where}. Register the library that implements it "
            f"(ortlab --custom-op-library PATH, or the app's settings), or re-export the model with standard ops.")


def session_options(bench: BenchConfig | None = None, opt_level: OptLevel = OptLevel.ALL, *,
                    profile_prefix: str | None = None) -> ort.SessionOptions:
    """SessionOptions from a BenchConfig (threads, execution mode, memory, profiling) and an opt level; threads the
    config does not set are capped by ``$ORTLAB_THREADS`` (:mod:`ortlab.runtime.threads`).

    Profiling writes ``<profile_prefix>_<timestamp>.json``; without a prefix it goes into a new temp
    folder, never the current directory.
    """
    so = register_custom_ops(ort.SessionOptions())
    so.graph_optimization_level = OPT_LEVELS[OptLevel(opt_level)]
    so.log_severity_level = 4  # errors reach the caller as exceptions, not as native stderr lines
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
    return limit_threads(so)


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
        except ORT_ERRORS + (OrtlabError,) as exc:
            error = exc
    assert error is not None
    if isinstance(error, OrtlabError):
        raise error
    raise ModelLoadError(f"ONNX Runtime could not load the model: {explain_ort_error(error)}") from None
