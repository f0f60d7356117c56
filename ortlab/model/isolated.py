"""Reading models in a one-shot child process, so that a long-lived server never holds one.

Parsing and checking a model needs several times its size (the file's bytes, the parsed protobuf, the checker's
and shape inference's copies): a 1.5 GB ``.onnx`` took the app's server process to 4.8 GB. The app's server
serves every session from one process, so uploads and imports are validated and inspected here, in a fresh child
interpreter under the run memory limit (``child.memory_limit_gb``), and only a small typed result comes back
(a :class:`ortlab.model.inspect.ModelInfo`, a stored path, a :class:`ortlab.model.diff.GraphDiff`, a graph description), as
JSON over a pipe. Reads of models the workspace already holds (Compare, History) take the same way above
``limits.SERVER_MODEL_MAX_BYTES`` and stay in the caller's process below it, where a child's start (about a
second) would cost more than the read.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ortlab.core.errors import ModelLoadError, OrtlabError
from ortlab.model.inspect import ModelInfo, external_data_files, inspect_model as _inspect
from ortlab.model.importing import saved_upload
from ortlab.core.text import one_line
from ortlab.runtime.child import Child, error_of, memory_limit_gb, too_big
from ortlab.model.importing import import_model as _import
from ortlab.core import limits
from ortlab.core.limits import apply_memory_limit, is_alloc_failure, lacks_headroom
from ortlab.model.diff import GraphDiff, graph_diff as _diff
from ortlab.model.diff_view import graph_description as _description

# -- the tasks a child runs (JSON in, JSON out) ---------------------------------------------------------------

def _task_inspect(path: str) -> dict:
    return _inspect(path).to_dict()


def _task_import(source: str, models_dir: str, filename: str, member: str | None, sha256: str | None) -> dict:
    """Import ``source`` and inspect it: inspected before it enters ``models_dir``, so a model that inspection
    refuses (an IR version this ONNX Runtime cannot read, an unknown custom op) leaves nothing there."""
    seen: list[ModelInfo] = []
    stored = _import(Path(source), models_dir, filename, member=member, sha256=sha256,
                     check=lambda staged: seen.append(_inspect(staged)))
    info = dataclasses.replace(seen[0], path=str(stored)) if seen else _inspect(stored)
    return {"path": str(stored), "info": info.to_dict()}


def _task_graph_diff(ref: str, cand: str) -> dict:
    return _diff(ref, cand).to_dict()


def _task_graph_description(ref: str, cand: str) -> dict:
    return _description(ref, cand)


_TASKS: dict[str, Callable[..., dict]] = {"inspect": _task_inspect, "import": _task_import,
                                          "graph_diff": _task_graph_diff,
                                          "graph_description": _task_graph_description}


_PARSE_HEADROOM = 3  # parsing a model takes about its size again, plus the parser's own copies


def _input_bytes(args: dict) -> int:
    """The size of the model files a task reads (its path arguments), at least 16 MB."""
    total = 0
    for key in ("path", "source", "ref", "cand"):
        value = args.get(key)
        if isinstance(value, str) and Path(value).is_file():
            total += Path(value).stat().st_size
    return max(total, 16 * 2**20)


def _child(task: str, args_json: str, fd: int) -> None:
    """Runs inside the child interpreter: apply the memory limit, run ``task``, send its result over ``fd``."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    args = json.loads(args_json)
    limit = args.pop("memory_gb", None)
    apply_memory_limit(limit)
    what, todo = "Reading this model", "import a smaller model"

    def fail(kind: str, message: str, step: str | None = None) -> dict:
        return {"error": [kind, message, step]}

    try:
        reply: dict = {"ok": _TASKS[task](**args)}
    except MemoryError:
        reply = fail("ModelLoadError", too_big(limit, what, todo))
    except OrtlabError as exc:
        out_of_memory = is_alloc_failure(exc.message) or (
            isinstance(exc, ModelLoadError) and lacks_headroom(_PARSE_HEADROOM * _input_bytes(args)))
        message = too_big(limit, what, todo) if limit and out_of_memory else exc.message
        reply = fail(type(exc).__name__, message, exc.step)
    except BaseException as exc:  # whatever happens, the parent gets one sentence
        text = f"{type(exc).__name__}: {one_line(exc)}"
        reply = fail("ModelLoadError", too_big(limit, what, todo)) if limit and is_alloc_failure(text) else \
            fail("OrtlabError", f"Unexpected {text}")
    try:
        conn.send_bytes(json.dumps(reply).encode())
    finally:
        conn.close()


def crashed_sentence(signum: int) -> str:
    """What a read that killed its child with signal ``signum`` says (ONNX's C++ code, given a malformed file)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return (f"Reading the model crashed the process that read it ({name}): the file holds something ONNX's parser "
            "or checker does not survive, so it is not a model ortlab can work on. Nothing else was affected; "
            "export the model again from your framework.")


def run(task: str, memory_gb: float | None = None, **args: Any) -> Any:
    """Run ``task`` (one of the tasks above) with ``args`` in a fresh child interpreter limited to ``memory_gb``
    (default ``child.memory_limit_gb()``) and return its JSON result; the child's error is raised here as the
    same :class:`OrtlabError` subclass with the same message."""
    if task not in _TASKS:
        raise ValueError(f"unknown task {task!r}")
    limit = memory_gb if memory_gb is not None else memory_limit_gb()
    with Child.run(_child, task, json.dumps({**args, "memory_gb": limit})) as child:
        try:
            payload = child.receive_bytes()
        except BaseException:  # interrupted while waiting: the child goes too
            child.kill()
            raise
        code = child.finish()
        if payload is None:
            if code in (-9, 137) or "MemoryError" in child.last_line():
                raise ModelLoadError(too_big(limit, "Reading this model", "import a smaller model"))
            if code is not None and code < 0:  # a signal: the C++ parser or checker crashed on the file
                raise ModelLoadError(crashed_sentence(-code))
            raise ModelLoadError(f"Reading the model stopped unexpectedly (exit code {code}){child.last_line()}.")
    reply = json.loads(payload)
    if "error" in reply:
        kind, message, step = reply["error"]
        raise error_of(kind, message, step)
    return reply["ok"]


# -- what the app calls --------------------------------------------------------------------------------------


def inspect_model(path, memory_gb: float | None = None) -> ModelInfo:
    """``model.inspect_model`` of ``path``, run in a child process (which works in another folder: a relative
    ``path`` is resolved here, and the result names it as given)."""
    info = ModelInfo.from_dict(run("inspect", memory_gb, path=str(Path(path).absolute())))
    return dataclasses.replace(info, path=str(path))


def import_model(source, models_dir, filename: str = "model.onnx", *, member: str | None = None,
                 sha256: str | None = None, memory_gb: float | None = None) -> tuple[Path, ModelInfo]:
    """``model.import_model`` of the file ``source`` and ``inspect_model`` of the stored copy, both in one child
    process: returns the stored path and its :class:`ModelInfo`."""
    out = run("import", memory_gb, source=str(source), models_dir=str(models_dir), filename=filename,
              member=member, sha256=sha256)
    return Path(out["path"]), ModelInfo.from_dict(out["info"])


def import_upload(fileobj, models_dir, filename: str = "model.onnx", *, member: str | None = None,
                  on_saved=None, memory_gb: float | None = None) -> tuple[Path, ModelInfo]:
    """An upload (any binary stream) streamed to a temp file in ``models_dir`` (``model.saved_upload``), then
    :func:`import_model` from there: this process holds at most one chunk of it."""
    with saved_upload(fileobj, models_dir, filename, on_saved=on_saved) as (path, digest):
        return import_model(path, models_dir, filename or "model.onnx", member=member, sha256=digest,
                            memory_gb=memory_gb)


def in_server(*paths) -> bool:
    """True when the models at ``paths``, with their external data, total at most
    ``limits.SERVER_MODEL_MAX_BYTES``: small enough to read in this process. Only .onnx files under the limit are
    parsed to find their external data."""
    cap = limits.limit("SERVER_MODEL_MAX_BYTES")
    try:
        total = sum(Path(p).stat().st_size for p in paths)
        if total > cap:
            return False
        for p in paths:
            total += sum(f.stat().st_size for f in set(external_data_files(p).values()))
    except (OSError, OrtlabError):
        return True  # the read in this process raises the clear error
    return total <= cap


def model_info(path) -> ModelInfo:
    """``inspect_model`` of a model the workspace holds: in this process when it is small (:func:`in_server`),
    else in a child."""
    return _inspect(path) if in_server(path) else inspect_model(path)


def graph_diff(ref, cand):
    """``diff.graph_diff`` of two models: in this process when they are small (:func:`in_server`), else in a
    child."""

    return _diff(ref, cand) if in_server(ref, cand) else GraphDiff.from_dict(run("graph_diff", ref=str(ref),
                                                                                   cand=str(cand)))


def graph_description(ref, cand) -> dict:
    """``diff.graph_description`` of two models: in this process when they are small (:func:`in_server`), else in
    a child."""

    if in_server(ref, cand):
        return _description(ref, cand)
    return run("graph_description", ref=str(ref), cand=str(cand))

