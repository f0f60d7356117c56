"""The walk of one setting from its command-line flag to ONNX Runtime, traced in a real ``ortlab optimize`` run.

A ``sitecustomize`` on the ``PYTHONPATH`` of the CLI process (and so of its recipe child, which keeps it) profiles
every call into a file of the ``ortlab`` package and keeps the file when an argument other than ``self`` carries
the setting: the parsed flags, the recipe or its quantization settings, a spec, request or prepared run holding
them, their plain-data or JSON form, the setting's value itself. The CLI process is followed until its recipe
child starts (the call into ``ortlab/runtime/child.py``'s ``Child`` for ``recipe_child``; the child that reads the
model before it is passed), the child until ONNX Runtime's quantization
receives ``calibrate_method``. The walk is those files in the order first met. A file is visited twice when the
setting comes back into it through another file while it is still on the stack (A calls B, which calls back into
A), or when both processes pass through it; a function that calls two helpers in turn is one visit of its file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REENTRY = r'''
def _reentry(frame, path):
    """Whether ``frame`` (in ``path``) is called from another ortlab file while a frame of ``path`` is still below."""
    caller = frame.f_back
    while caller is not None and not caller.f_code.co_filename.startswith(_PKG):
        caller = caller.f_back
    if caller is None or caller.f_code.co_filename == path:
        return False
    f = caller.f_back
    while f is not None:
        if f.f_code.co_filename == path:
            return True
        f = f.f_back
    return False
'''

HOOK = r'''
import argparse, json, os, sys

_OUT, _PKG = os.environ["ORTLAB_WALK_OUT"], os.environ["ORTLAB_WALK_PKG"]
_CARRIERS = {"QuantConfig", "Recipe", "RunSpec", "RecipeRequest", "PreparedRun", "RunContext", "OrtArguments",
             "CalibrationMethod"}
_seq = []
_reentered = []  # files called back into from another file while still on the stack (A -> B -> A)
_on = []  # set once the command (or the child's entry) runs: imports before it are not the walk
_STARTS = {"parent": ("cli/main.py", ("main",)), "child": ("", ("recipe_child", "run_request"))}


def _carries(v):
    if isinstance(v, str):  # its JSON form (a bare name would match a path such as the test's own tmp folder)
        return '"calibration_method"' in v
    if isinstance(v, argparse.Namespace):  # the recipe's flags keep their dotted paths as names
        return hasattr(v, "quant.calibration_method") or hasattr(v, "calibration_method")
    if isinstance(v, dict):
        return any(k in v for k in ("calibration_method", "calibrate_method", "recipe", "quant", "spec"))
    if isinstance(v, (list, tuple)):
        return any(isinstance(x, str) and x == "--calibration-method" for x in v)
    return type(v).__name__ in _CARRIERS


def _importing(frame):
    """Whether the call is made by a module's top-level code (an import), not by the run."""
    f = frame.f_back
    while f is not None:
        if f.f_code.co_name == "<module>" and f.f_code.co_filename != "<string>":
            return True
        f = f.f_back
    return False


def _dump(role):
    sys.setprofile(None)
    with open(_OUT, "a") as f:
        f.write(json.dumps({"role": role, "files": _seq, "reentered": _reentered}) + "\n")


''' + REENTRY + r'''

def _profile(role):
    def prof(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if role == "child" and "onnxruntime" in path and "quantization" in path and "calibrate_method" in frame.f_locals:
            _dump(role)
            return
        if not path.startswith(_PKG):
            return
        if not _on:
            where, names = _STARTS[role]
            if where not in path or not any(n in frame.f_code.co_name for n in names):
                return
            _on.append(True)
        names = frame.f_code.co_varnames[:frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
        if not _importing(frame) and any(n not in ("self", "cls") and _carries(frame.f_locals.get(n)) for n in names):
            rel = "ortlab/" + os.path.relpath(path, _PKG)
            if rel not in _seq:
                _seq.append(rel)
            elif _reentry(frame, path) and rel not in _reentered:
                _reentered.append(rel)
        if role == "parent" and path.endswith("runtime/child.py") and frame.f_code.co_name == "__init__" \
                and "recipe_child" in repr((frame.f_locals.get("code"), frame.f_locals.get("args"))):
            if "ortlab/runtime/child.py" not in _seq:
                _seq.append("ortlab/runtime/child.py")
            _dump(role)
    return prof


_argv = " ".join(getattr(sys, "orig_argv", sys.argv))
if os.environ.get("ORTLAB_WALK_TOP") is None:
    os.environ["ORTLAB_WALK_TOP"] = str(os.getpid())
    sys.setprofile(_profile("parent"))
elif "recipe_child" in _argv:
    sys.setprofile(_profile("child"))
'''

PARENT_CALL = "import sys; from ortlab.cli.main import main; sys.exit(main(sys.argv[1:]))"


@dataclass(frozen=True)
class Walk:
    """The files of each process, in the order first met, and the files called back into (re-entered)."""

    parent: list[str]
    child: list[str]
    reentered: list[str]

    def revisited(self) -> list[str]:
        """The files visited twice: re-entered in one process, or passed through by both."""
        return sorted(set(self.reentered) | (set(self.parent) & set(self.child)))


def trace(root: Path, workdir: Path, method: str = "Entropy") -> Walk:
    """The :class:`Walk` of a static int8 run of the digits sample with ``--calibration-method method``, for the
    ortlab at ``root``."""
    hook = workdir / "walk_hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    out = workdir / "walk.jsonl"
    out.unlink(missing_ok=True)
    env = {**os.environ, "ORTLAB_WALK_OUT": str(out), "ORTLAB_WALK_PKG": str(root / "ortlab"),
           "ORTLAB_HOME": str(workdir / "home"), "PYTHONPATH": os.pathsep.join([str(hook), str(root)])}
    env.pop("ORTLAB_WALK_TOP", None)
    model = root / "sample_models" / "digits_cnn" / "model.onnx"
    args = ["optimize", str(model), str(workdir / "out.onnx"), "--precision", "int8", "--quant-mode", "static",
            "--calibration-method", method, "--calibration-samples", "8", "--verify-samples", "8", "--no-timing"]
    proc = subprocess.run([sys.executable, "-c", PARENT_CALL, *args], env=env, cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]
    walks = {w["role"]: w for w in map(json.loads, out.read_text().splitlines())}
    return Walk(walks["parent"]["files"], walks["child"]["files"],
                walks["parent"]["reentered"] + walks["child"]["reentered"])
