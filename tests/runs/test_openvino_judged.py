"""OpenVINO rows judged on the task metric: each OpenVINO row's outputs against ONNX Runtime fp32 on the same images,
with the verdict's task metric, in the precision OpenVINO really compiled it in. This CPU has no bf16, so the f32
row is judged here with real OpenVINO; the bf16 test skips where the CPU has neither AVX-512 BF16 nor AMX."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from ortlab.checks.evaluate import evaluate
from ortlab.checks.verdict import judge
from ortlab.cli import main as cli
from ortlab.data.samples import get_sample
from ortlab.runs.history import BenchVariant
from ortlab.runs.runtime_judge import judge_runtime_rows
from ortlab.runtime import hardware, openvino as ov

pytestmark = pytest.mark.skipif(not ov.available(), reason="OpenVINO is not installed (pip install \"ortlab[openvino]\")")
HAS_BF16 = ov.bf16_supported(hardware.real_cpu())  # OpenVINO compiles bf16 only where the CPU really has it
N = 24


def _independent_flips(sample, n: int) -> tuple[int, int]:
    """Top-1 flips of OpenVINO f32 against ORT fp32 on the images evaluate picks, computed with the two runtimes'
    own APIs."""
    from ortlab.checks.evaluate import _pick
    from ortlab.data.feeds import batch_inputs
    from ortlab.checks.evaluate import session_inputs

    ds = _pick(sample.evaluation_data(), n)
    sess = ort.InferenceSession(str(sample.model_path), providers=["CPUExecutionProvider"])
    core = ov._openvino().Core()
    compiled = core.compile_model(core.read_model(str(sample.model_path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    flips = 0
    for i in range(len(ds)):
        feed = batch_inputs(ds, [i], sample.preprocess, session_inputs(sess), None)
        a = sess.run(None, feed)[0]
        b = np.asarray(compiled.create_infer_request().infer(feed)[compiled.outputs[0]])
        flips += int(np.argmax(a) != np.argmax(b))
    return flips, len(ds)


def test_the_f32_openvino_row_is_judged_with_the_verdicts_task_metric():
    s = get_sample("digits_cnn")
    report = evaluate(s.model_path, s.model_path, s.evaluation_data(), s.preprocess, n=N, candidate_runtime=ov.RUNTIME)
    assert report.providers_cand == [f"{ov.PROVIDER} (fp32)"] and report.n_samples == N
    flips, n = _independent_flips(s, N)
    assert n == N and report.top1_agreement == pytest.approx(1 - flips / n)
    verdict = judge(report)
    assert verdict.deciding and verdict.deciding_text  # the same task metric as a run's verdict
    variants = [BenchVariant("fp32", "fp32", str(s.model_path)),
                BenchVariant("fp32 · OpenVINO", "fp32 · OpenVINO", str(s.model_path), runtime=ov.RUNTIME)]
    (j,) = judge_runtime_rows(variants, s.evaluation_data(), s.preprocess, n=N)
    assert (j.variant, j.precision, j.level, j.samples) == ("fp32 · OpenVINO", "fp32", verdict.level.value, N)
    assert j.cell() == (f"{verdict.level.value.upper()} in fp32 · {verdict.deciding} {verdict.deciding_text} on {N} "
                        "samples")


@pytest.mark.slow
def test_bench_openvino_shows_the_judgement_in_the_row(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTLAB_HOME", str(tmp_path / "home"))
    args = ["bench", "digits_cnn", "--openvino", "--duration", "0", "--runs", "5", "--warmup", "1",
            "--judge-samples", str(N)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("model.onnx · OpenVINO"))
    assert row.rstrip().endswith(f"on {N} samples") and " in fp32 · " in row
    assert "under ORT (task metric)" in out and "judged     each OpenVINO row" in out
    assert cli.main([*args, "--json"]) == 0
    judged = json.loads(capsys.readouterr().out)["judged"]
    # the f32 row, and the bf16 row where ortlab sees a CPU with bf16 ($ORTLAB_CPU may say so), in the precision
    # OpenVINO really compiled (f32 on a CPU without bf16 kernels)
    assert len(judged) == 1 + ov.bf16_supported(hardware.detect()), judged
    j = judged[0]
    assert j["precision"] == "fp32" and j["samples"] == N and j["level"] in ("ok", "degraded", "broken")
    assert all(k["samples"] == N and k["precision"] in ("fp32", "bf16") for k in judged[1:])
    assert cli.main([*args[:-2], "--judge-samples", "0"]) == 0
    assert "task metric" not in capsys.readouterr().out


@pytest.mark.skipif(not HAS_BF16, reason=f"this CPU ({hardware.real_cpu().summary()}) has neither AVX-512 BF16 nor AMX "
                                         "bf16: OpenVINO would compile the bf16 row as f32, so there is no bf16 row to "
                                         "judge here")
def test_the_bf16_row_is_judged_in_bf16_where_the_cpu_has_it():
    s = get_sample("digits_cnn")
    variants = [BenchVariant("fp32", "fp32", str(s.model_path)),
                BenchVariant("fp32 · OpenVINO bf16", "fp32 · OpenVINO bf16", str(s.model_path), runtime=ov.RUNTIME_BF16)]
    (j,) = judge_runtime_rows(variants, s.evaluation_data(), s.preprocess, n=N)
    assert j.precision == "bf16" and j.samples == N and j.level and j.deciding_text
