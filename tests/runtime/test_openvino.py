"""Timing under OpenVINO (the optional extra ortlab[openvino], installed in the test environment): rows beside
ONNX Runtime's with the runtime named, an int8 run timed from its portable QDQ file, outputs that agree with
ORT's, an ORT-only graph refused in one sentence, no network, and the install hint when the extra is absent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ortlab.cli import main as cli
from ortlab.runtime import hardware
from ortlab.runtime import openvino as openvino_runtime
from ortlab.timing import bench
from ortlab.settings.config import BenchConfig
from ortlab.core.errors import BenchmarkError
from ortlab.runs.workspace import Workspace

SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn"


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def int8_run(tmp_path_factory):
    """An int8 static run of the digits sample: ``model.onnx`` (ORT's graph) beside ``model.qdq.onnx``."""
    out = tmp_path_factory.mktemp("ov") / "int8"
    code = cli.main(["optimize", str(SAMPLE / "model.onnx"), str(out), "--precision", "int8",
                     "--calibration", str(SAMPLE / "calibration"), "--calibration-samples", "40",
                     "--eval", str(SAMPLE / "evaluation"), "--verify-samples", "40"])
    assert code == 0
    return out


@pytest.mark.slow
def test_bench_times_each_model_under_openvino_too_from_the_portable_file(int8_run, capsys):
    src = SAMPLE / "model.onnx"
    code, out, _ = run(["bench", src, int8_run / "model.onnx", "--openvino", "--batch-sizes", "1", "4",
                        "--runs", "20", "--warmup", "2", "--json"], capsys)
    assert code == 0, out
    res = json.loads(out)["results"]
    ort_rows = [r for r in res if "· OpenVINO" not in r["variant"]]
    ov_rows = [r for r in res if r["variant"].endswith("· OpenVINO")]
    bf16_rows = [r for r in res if r["variant"].endswith("· OpenVINO bf16")]
    assert len(ort_rows) == len(ov_rows) == 4
    # a CPU ortlab sees with bf16 (AVX-512 BF16 or AMX; $ORTLAB_CPU may say so) adds the source compiled in bf16
    assert sorted(r["batch_size"] for r in bf16_rows) == (
        [1, 4] if openvino_runtime.bf16_supported(hardware.detect()) else []), [r["variant"] for r in res]
    assert all(r["providers"] == [openvino_runtime.PROVIDER] for r in bf16_rows)
    assert all(r["providers"] == [openvino_runtime.PROVIDER] and 0 < r["p50"] <= r["p99"] and r["n"] == 20
               for r in ov_rows)
    assert all("OpenVINO CPU" not in r["providers"] for r in ort_rows)
    assert sorted((r["batch_size"], tuple(r["input_shapes"]["input"])) for r in ov_rows) == [
        (1, (1, 1, 32, 32)), (1, (1, 1, 32, 32)), (4, (4, 1, 32, 32)), (4, (4, 1, 32, 32))]
    record = Workspace().history().list_benchmarks()[0]
    timed = {v.id: v for v in record.variants}
    ov_int8 = next(v for v in timed.values() if v.runtime == "openvino" and "int8" in v.id)
    assert Path(ov_int8.path).name == "model.qdq.onnx"  # OpenVINO cannot read ORT's own int8 graph
    assert next(v for v in timed.values() if v.runtime == "openvino" and "int8" not in v.id).path == str(src)
    code, out, _ = run(["bench", src, "--openvino", "--runs", "5", "--warmup", "1"], capsys)
    assert code == 0 and "OpenVINO CPU" in out and "· OpenVINO" in out


def test_openvino_runs_the_qdq_model_like_onnx_runtime(int8_run):
    qdq = int8_run / "model.qdq.onnx"
    rng = np.random.default_rng(0)
    x = rng.random((16, 1, 32, 32), dtype=np.float32)
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    want = session.run(None, {"input": x})[0]
    got = openvino_runtime.OpenVinoSession(qdq).run(None, {"input": x})[0]
    assert got.shape == want.shape
    noise = float(np.sum((got - want) ** 2))
    sqnr = 10 * np.log10(float(np.sum(want ** 2)) / max(noise, 1e-30))
    assert sqnr > 20, sqnr  # both run int8 kernels on the same scales: rounding differs, the result does not
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.9


def test_an_ort_only_graph_is_refused_in_one_sentence(int8_run):
    with pytest.raises(BenchmarkError) as err:
        openvino_runtime.OpenVinoSession(int8_run / "model.onnx")
    message = err.value.message
    assert message.startswith("OpenVINO cannot read model.onnx") and "QDQ" in message and "\n" not in message


NETWORK_AUDIT = r"""
import json, sys
events = []
def hook(event, args):
    if event in ("os.fork", "socket.connect", "socket.getaddrinfo", "urllib.Request", "http.client.connect"):
        events.append(event)
sys.addaudithook(hook)
from ortlab.timing.bench import latency_samples
from ortlab.settings.config import BenchConfig
run = latency_samples(sys.argv[1], BenchConfig(runs=5, warmup=1), 1, runtime="openvino")
n = len(list(run))
import time; time.sleep(1.0)  # openvino's telemetry sends from a thread after the import
print(json.dumps({"n": n, "providers": run.providers, "events": events}))
"""


def test_timing_under_openvino_sends_no_telemetry(int8_run):
    """``import openvino`` sends usage telemetry (a forked process posts to Google Analytics) unless blocked; a
    fresh interpreter (the import happens once per process) times a model and must open no socket nor fork."""
    out = subprocess.run([sys.executable, "-c", NETWORK_AUDIT, str(int8_run / "model.qdq.onnx")],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["n"] == 5 and got["providers"] == [openvino_runtime.PROVIDER]
    assert got["events"] == []


def test_without_the_extra_the_cli_and_the_settings_say_how_to_add_it(monkeypatch, capsys):
    monkeypatch.setattr(openvino_runtime, "available", lambda: False)
    assert bench.config_problems(BenchConfig(openvino=True)) == [f"OpenVINO is not installed. {openvino_runtime.INSTALL_HINT}"]
    code, out, err = run(["bench", SAMPLE / "model.onnx", "--openvino", "--runs", "3"], capsys)
    assert code != 0
    assert 'pip install "ortlab[openvino]"' in out + err and "Traceback" not in out + err
    with pytest.raises(BenchmarkError, match=r'pip install "ortlab\[openvino\]"'):
        openvino_runtime.OpenVinoSession(SAMPLE / "model.onnx")


def test_portable_model_is_the_qdq_file_only_beside_an_artifact_model(int8_run, tmp_path):
    assert openvino_runtime.portable_model(int8_run / "model.onnx") == int8_run / "model.qdq.onnx"
    other = tmp_path / "model.onnx"
    other.write_bytes(b"")
    assert openvino_runtime.portable_model(other) == other
    assert openvino_runtime.portable_model(SAMPLE / "model.onnx") == SAMPLE / "model.onnx"


def _compile_configs(monkeypatch):
    """The config of every ``compile_model`` call, recorded while the real call goes on."""
    ov = openvino_runtime._openvino()
    seen: list = []
    real_core = ov.Core

    class Core:
        def __init__(self) -> None:
            self._core = real_core()

        def read_model(self, *args):
            return self._core.read_model(*args)

        def compile_model(self, model, device=None, config=None):
            seen.append(dict(config or {}))
            return self._core.compile_model(model, device, config or {})

    monkeypatch.setattr(ov, "Core", Core)
    return seen


def test_an_fp32_row_is_compiled_at_f32_whatever_the_cpu_would_pick(monkeypatch):
    # OpenVINO's CPU default is bf16 where the CPU has AVX-512 BF16/AMX; the hint makes an fp32 row fp32 there too
    seen = _compile_configs(monkeypatch)
    session = openvino_runtime.OpenVinoSession(SAMPLE / "model.onnx")
    assert seen == [{"INFERENCE_PRECISION_HINT": "f32"}]
    assert session.precision == "fp32"
    assert openvino_runtime.compiled_precision(session._compiled) == "fp32"


def test_an_unknown_openvino_precision_is_refused_in_one_sentence():
    with pytest.raises(BenchmarkError, match="must be one of fp32, bf16"):
        openvino_runtime.OpenVinoSession(SAMPLE / "model.onnx", precision="int4")


@pytest.mark.skipif(not openvino_runtime.bf16_supported(hardware.real_cpu()),
                    reason="this CPU has neither AVX-512 BF16 nor AMX bf16: OpenVINO compiles bf16 as f32 here")
def test_a_bf16_row_is_compiled_and_reported_as_bf16_where_the_cpu_has_it():
    session = openvino_runtime.OpenVinoSession(SAMPLE / "model.onnx", precision="bf16")
    assert session.precision == "bf16"
