"""The run service: recipes in a child process that records its own result, cancel, crashes, benchmarks and
their queue; the plan of stages; one calibration path whose methods really differ."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ortlab.runs import prepare
from ortlab.cli import main as cli
from ortlab.runs import service, bench_service
from ortlab.settings.config import (BenchConfig, CalibrationMethod, OptLevel, Precision, QuantConfig, QuantMode, Recipe)
from ortlab.core.errors import OrtlabError
from ortlab.model.inspect import sha256_file
from ortlab.runs.pipeline import plan
from ortlab.runs.in_process import run_recipe
from tests.support.reporting import CollectingReporter
from ortlab.runs.history import BenchVariant
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace

from tests.support.models import conv_bn_model, random_image_folder


def until(condition, timeout: float = 60.0, step: float = 0.02):
    """Poll ``condition`` until it is truthy (its value is returned) or fail after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("svc") / "conv.onnx")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("svc_imgs"), per_class=2, prefix="c", seed=3)


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path / "home")


STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=10))
# static int8 of EfficientNet-Lite0 on the most random calibration samples a recipe allows (10,000, about a
# minute here): it is always still calibrating when the test cancels or kills it
ENDLESS = Recipe(precision=Precision.INT8, allow_random_data=True, quant=QuantConfig(calibration_samples=10_000))


@pytest.fixture(scope="module")
def big_src():
    from ortlab.data import samples

    return samples.get_sample("efficientnet_lite0").model_path


def test_a_recipe_runs_in_a_child_and_leaves_the_parent_alone(src, image_dir, ws, capfd):
    fd2 = os.readlink("/proc/self/fd/2") if sys.platform.startswith("linux") else None
    spec = RunSpec(str(src), STATIC, calibration=DataRef(path=str(image_dir)), verify_samples=4)
    handle = prepare.start_recipe(spec, workspace=ws, origin="cli")
    assert [s.name for s in handle.plan] == handle.stages  # every stage is known before any runs
    seen = []
    while not handle.wait(0.02):
        seen += handle.drain() or []
        if handle.progress:
            print("parent writes to stderr while the child runs", file=sys.stderr)
            if fd2 is not None:
                assert os.readlink("/proc/self/fd/2") == fd2
    handle.drain()
    assert handle.state == service.DONE, handle.error
    assert handle.pid is not None and handle.pid != os.getpid()
    assert handle.progress["calibrate"].done == 10 and handle.progress["verify"].fraction == 1.0
    art = handle.result
    assert art.run_id == 1 and art.model_path.is_file() and art.sha256 == sha256_file(art.model_path)
    assert json.loads((art.dir / "artifact.json").read_text())["run_id"] == 1
    row = ws.history().get(1)
    assert row.origin == "cli" and row.spec == spec
    err = capfd.readouterr().err
    assert "parent writes to stderr" in err and "onnxruntime" not in err.lower()  # ORT's noise stayed in the child


def test_cancel_terminates_the_child_and_removes_its_folder(big_src, ws):
    handle = prepare.start_recipe(RunSpec(str(big_src), ENDLESS), workspace=ws)
    until(lambda: handle.drain() is not None and "calibrate" in handle.progress)
    pid = handle.pid
    assert pid is not None
    handle.cancel()
    assert handle.wait(30) and handle.state == service.CANCELLED
    assert not handle.run_dir.exists() and ws.history().list() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_child_that_dies_is_a_clear_error_not_a_hang(big_src, ws):
    handle = prepare.start_recipe(RunSpec(str(big_src), ENDLESS), workspace=ws)
    until(lambda: handle.pid)
    assert handle.pid is not None
    os.kill(handle.pid, signal.SIGKILL)
    assert handle.wait(30) and handle.state == service.FAILED
    assert isinstance(handle.error, OrtlabError)
    assert str(handle.error).startswith("The run process ended unexpectedly (exit code -9)")
    assert not handle.run_dir.exists()


def test_a_run_nobody_watches_is_recorded_with_its_model(src, image_dir, ws):
    spec = RunSpec(str(src), Recipe(opt_level=OptLevel.BASIC), calibration=DataRef(path=str(image_dir)))
    prepare.start_recipe(spec, workspace=ws)  # the handle is dropped: no page polls it
    rows = until(lambda: ws.history().list())
    model = Path(rows[0].model_path)
    assert model.is_file() and sha256_file(model) == rows[0].sha256
    # the child records the row, then re-saves artifact.json (atomically) with the row's id
    until(lambda: json.loads((model.parent / "artifact.json").read_text())["run_id"] == rows[0].run_id)


def test_errors_come_back_typed_with_their_step(src, ws):
    from ortlab.core.errors import RecipeError

    before = sorted(ws.root.rglob("*"))
    with pytest.raises(RecipeError) as err:  # refused before a child or a run folder exists
        prepare.start_recipe(RunSpec(str(src), STATIC), workspace=ws)
    assert err.value.step == "validate"
    assert sorted(ws.root.rglob("*")) == before


@pytest.mark.slow
def test_run_spec_round_trips_and_its_cli_line_runs(src, image_dir, tmp_path, capsys):
    spec = RunSpec(str(src), STATIC, calibration=DataRef(path=str(image_dir)),
                   evaluation=DataRef(path=str(image_dir), count=6), verify_samples=6)
    assert RunSpec.from_json(spec.to_json()) == spec
    handle = prepare.start_recipe(spec, tmp_path / "app_side")
    art = handle.follow()
    line = spec.cli_line(str(tmp_path / "cli.onnx"))
    assert cli.main(__import__("shlex").split(line)[1:]) == 0
    capsys.readouterr()
    assert sha256_file(tmp_path / "cli.onnx") == art.sha256


def test_cli_runs_and_benchmarks_are_recorded_in_the_workspace(src, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    assert cli.main(["optimize", str(src), str(out), "--opt-level", "basic"]) == 0
    assert cli.main(["bench", str(out), "--runs", "3", "--warmup", "0", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["history", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["origin"], r["model_path"]) for r in doc["runs"]] == [("cli", str(out.resolve()))]
    bench = doc["benchmarks"][0]
    assert bench["origin"] == "cli" and bench["variants"][0]["run_id"] == doc["runs"][0]["run_id"]
    assert bench["summaries"][0]["n"] == 3


# -- benchmarks: one at a time per process, an honest queue position ----------------------------------------


class _FakeRun:
    """Stands in for a LatencyRun: yields nothing until ``gate`` opens (or cancel)."""

    def __init__(self, gate: threading.Event, cancel) -> None:
        self.gate, self.cancel, self.cancelled, self.peak_rss_mb = gate, cancel, False, None

    def __iter__(self):
        while not self.gate.wait(0.02):
            if self.cancel.cancelled:
                self.cancelled = True
                return
        yield from ()

    def summary(self, peak_rss_mb=None):
        from ortlab.timing.bench import LatencySummary

        return LatencySummary("v", 1, 1, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1000.0)


def test_benchmarks_queue_one_at_a_time_with_an_honest_position(ws):
    gates = {"a": threading.Event(), "b": threading.Event()}

    def timer(gate_name):
        return lambda path, cfg, bs, variant, cancel, profile_dir: _FakeRun(gates[gate_name], cancel)

    cfg = BenchConfig(duration_s=0, runs=1)
    v = [BenchVariant("x", "x", "x.onnx")]
    a = bench_service.start_benchmark(v, cfg, workspace=ws, timer=timer("a"), interleave=False)
    until(lambda: a.state == service.RUNNING)
    b = bench_service.start_benchmark(v, cfg, workspace=ws, timer=timer("b"), interleave=False)
    c = bench_service.start_benchmark(v, cfg, workspace=ws, timer=timer("b"), interleave=False)
    assert bench_service.bench_busy() == 3 and (a.queue_position, b.queue_position, c.queue_position) == (0, 1, 2)
    until(lambda: b.drain() is not None and "queued" in b.progress)
    assert b.progress["queued"].message == "Queued behind 1 benchmark."
    c.cancel()
    assert c.wait(10) and c.state == service.CANCELLED and b.queue_position == 1
    gates["a"].set()
    assert a.wait(10) and a.state == service.DONE
    assert until(lambda: b.state == service.RUNNING) and b.queue_position == 0
    gates["b"].set()
    assert b.wait(10) and b.state == service.DONE and bench_service.bench_busy() == 0
    assert len(ws.history().list_benchmarks()) == 2


# -- the plan and the calibration path ---------------------------------------------------------------------


@pytest.mark.parametrize("recipe, stages", [
    (Recipe(), ["validate", "optimize", "verify"]),
    (Recipe(precision=Precision.FP16), ["validate", "convert", "optimize", "verify"]),
    (Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC)),
     ["validate", "quantize", "optimize", "verify"]),
    (STATIC, ["validate", "preprocess", "calibrate", "quantize", "weight_rounding", "bias_correction", "optimize",
              "verify"]),
    (Recipe(precision=Precision.INT8, opt_level=OptLevel.DISABLED,
            quant=QuantConfig(preprocess=False, calibration_samples=4, bias_correction=False, weight_rounding=False)),
     ["validate", "calibrate", "quantize", "verify"]),
])
def test_plan_lists_exactly_the_stages_each_recipe_runs(recipe, stages, src, image_dir, tmp_path):
    from ortlab.data.loaders import load_image_folder

    assert [s.name for s in plan(recipe)] == stages and all(s.label for s in plan(recipe))
    rep = CollectingReporter()
    art = run_recipe(src, recipe, tmp_path, load_image_folder(image_dir), reporter=rep, verify_samples=2)
    assert rep.stages() == stages and list(art.timings) == stages


def activation_scales(path) -> dict[str, float]:
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return {n.input[0]: float(inits[n.input[1]]) for n in model.graph.node
            if n.op_type == "QuantizeLinear" and n.input[1] in inits and inits[n.input[1]].ndim == 0}


def test_calibration_methods_give_different_scales(src, image_dir, tmp_path):
    from ortlab.transforms.calibration import CalibrationReader
    from ortlab.data.loaders import load_image_folder
    from ortlab.data.preprocess import detect_preprocess
    from ortlab.model.inspect import inspect_model
    from ortlab.transforms.quantize import quantize_static_model

    ds = load_image_folder(image_dir)
    inputs = inspect_model(src).inputs
    scales = {}
    for method in CalibrationMethod:
        q = QuantConfig(calibration_method=method, num_bins=512)
        out = tmp_path / f"{method.value}.onnx"
        quantize_static_model(src, out, q, CalibrationReader(ds, detect_preprocess(inputs[0]), inputs))
        scales[method] = activation_scales(out)
    assert len({tuple(sorted(s)) for s in scales.values()}) == 1 and len(scales[CalibrationMethod.MINMAX]) >= 4
    vectors = {m: np.array([s[k] for k in sorted(s)]) for m, s in scales.items()}
    methods = list(vectors)
    for i, m in enumerate(methods):
        for other in methods[i + 1:]:
            assert not np.allclose(vectors[m], vectors[other]), (m, other)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is applied on Linux only")
def test_a_memory_limit_turns_a_huge_input_into_a_clear_error(tmp_path, ws):
    from onnx import TensorProto, helper

    shape = [1, 3, 4000, 4000]  # an 89-byte model whose input is 192 MB per sample
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "big_input.onnx"))
    spec = RunSpec(str(tmp_path / "big_input.onnx"), Recipe(allow_random_data=True),
                   calibration=DataRef(random=64), verify_samples=64)
    handle = prepare.start_recipe(spec, workspace=ws, memory_gb=1.5)
    assert handle.wait(120) and handle.state == service.FAILED
    assert "needed more than 1.5 GB of memory" in str(handle.error)
    assert ws.history().list() == [] and not handle.run_dir.exists()
