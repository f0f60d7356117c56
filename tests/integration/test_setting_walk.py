"""One way out of the process: a setting's walk from its flag to ONNX Runtime crosses the process boundary once, as a
typed request, and the recipe child goes from that request straight to the pipeline (it parses, validates and
prepares nothing again); out-of-process work is given frozen request dataclasses, never ``args[...]`` dicts."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from types import SimpleNamespace
from pathlib import Path

import pytest

from ortlab.runs import cluster_bench, recipe_child
from ortlab.runs.recipe_request import RecipeRequest
from ortlab.runs.runspec import RunSpec
from ortlab.runtime.child import decode, encode
from ortlab.settings.config import BenchConfig, Recipe
from ortlab.timing import child_runs
from tests.support.setting_walk import REENTRY, trace

ROOT = Path(__file__).resolve().parents[2]
CHILD_WALK = ["ortlab/runs/recipe_child.py", "ortlab/runs/pipeline.py", "ortlab/transforms/quantize.py"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_the_recipe_child_imports_no_flag_parser_and_not_the_parent_side():
    imported = _imports(ROOT / "ortlab" / "runs" / "recipe_child.py")
    banned = {"argparse", "ortlab.settings.flags", "ortlab.runs.service", "ortlab.runs.prepare"}
    assert not imported & banned and not any(m.startswith("ortlab.cli") for m in imported), imported


@pytest.mark.parametrize("module", ["common.py", "inputs.py"])
def test_the_cli_helpers_shared_by_commands_take_the_values_they_read_not_the_parsed_flags(module):
    tree = ast.parse((ROOT / "ortlab" / "cli" / module).read_text(encoding="utf-8"))
    takers = [f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for a in f.args.args + f.args.kwonlyargs
              if a.arg == "ns" or (a.annotation is not None and "Namespace" in ast.unparse(a.annotation))]
    assert takers == [], takers


@pytest.mark.parametrize("entry, request_class", [(recipe_child.run_recipe_child, RecipeRequest),
                                                   (child_runs._isolated_child, child_runs.TimingRequest),
                                                   (cluster_bench.time_on_node, cluster_bench.NodeBenchPlan)])
def test_each_out_of_process_entry_receives_a_frozen_typed_request(entry, request_class):
    first = next(iter(inspect.signature(entry).parameters))
    assert typing.get_type_hints(entry)[first] is request_class
    assert dataclasses.is_dataclass(request_class) and request_class.__dataclass_params__.frozen


def test_a_request_crosses_as_the_object_it_is_and_a_wrong_kind_is_refused(tmp_path):
    request = RecipeRequest(RunSpec("m.onnx", Recipe()), tmp_path / "run", db=tmp_path / "history.db", timeout_s=60.0)
    got = decode(RecipeRequest, encode(request))
    assert got == request and type(got.spec.recipe.quant.calibration_method) is type(Recipe().quant.calibration_method)
    timing = child_runs.TimingRequest("m.onnx", BenchConfig(), 1, "fp32", BenchConfig().session_opt_level)
    assert decode(child_runs.TimingRequest, encode(timing)) == timing
    with pytest.raises(TypeError, match="expected a RecipeRequest request, got a TimingRequest"):
        decode(RecipeRequest, encode(timing))
    with pytest.raises(TypeError):
        RecipeRequest(RunSpec("m.onnx", Recipe()), tmp_path, out_fiel=None)  # type: ignore[call-arg]


def test_the_calibration_method_walks_from_its_flag_to_onnx_runtime_crossing_the_process_once(tmp_path):
    walk = trace(ROOT, tmp_path)
    parent, child = walk.parent, walk.child
    assert parent[-1] == "ortlab/runtime/child.py" and "ortlab/settings/flags.py" in parent
    assert "ortlab/cli/optimize.py" in parent  # the parsed flags are followed into the command (a blind spot before)
    assert child == CHILD_WALK  # typed request in, straight to the pipeline: nothing parsed or prepared again
    assert "ortlab/runs/service.py" not in child and "ortlab/settings/config.py" not in child
    assert walk.revisited() == [], walk  # no file is called back into, and none is passed by both processes
    # issue 35: at most 8 files. The CLI's own are main, flags and the command (the shared helpers take the values they
    # read, not the parsed flags); the engine's are 5: the decisions before the start with the start itself, the
    # process start; the child's entry, the stages, ONNX Runtime's call.
    assert parent == ["ortlab/cli/main.py", "ortlab/settings/flags.py", "ortlab/cli/optimize.py",
                      "ortlab/runs/prepare.py", "ortlab/runtime/child.py"], walk
    assert len(set(parent + child)) <= 8, walk


def _stack(*files: str) -> SimpleNamespace:
    """Stand-in frames, outermost first; returns the innermost."""
    frame = None
    for f in files:
        frame = SimpleNamespace(f_code=SimpleNamespace(co_filename=f), f_back=frame)
    assert frame is not None
    return frame


def test_a_file_called_back_into_is_re_entered_and_helpers_called_in_turn_are_not():
    scope: dict = {"_PKG": "/pkg/ortlab"}
    exec(REENTRY, scope)
    reentry = scope["_reentry"]
    a, b = "/pkg/ortlab/a.py", "/pkg/ortlab/b.py"
    assert reentry(_stack(a, b, a), a)  # a calls b, which calls back into a
    assert reentry(_stack(a, b, "/lib/x.py", a), a)  # through a library frame too
    assert not reentry(_stack(a, a), a)  # a's own helper
    assert not reentry(_stack(a, b), b)  # first entry
    assert not reentry(_stack("/lib/x.py", a), a)

