"""OpenVINO's bf16 row: where the CPU runs bf16 natively (AVX-512 BF16 or AMX), ``--openvino`` adds a row of the
baseline compiled with the bf16 precision hint, named bf16, beside the f32 rows; elsewhere there is none (this
2-core AMD EPYC has AVX2 only: the real bf16 timing test skips and says so)."""

from __future__ import annotations

import pytest

from ortlab.runs.bench_service import timed_variants
from ortlab.runs.history import BenchVariant
from ortlab.runtime import hardware, openvino as ov
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencyRun
from tests.runtime.test_openvino import SAMPLE

BF16_CPU = hardware.CpuFeatures("x86", "Intel(R) Xeon(R) Platinum 8480+", avx2=True, avx512=True, vnni=True,
                                avx512_bf16=True, amx_bf16=True, source="test")
AVX2_CPU = hardware.CpuFeatures("x86", "AMD EPYC", avx2=True, source="test")
HAS_BF16 = ov.bf16_supported(hardware.real_cpu())  # OpenVINO compiles bf16 only where the CPU really has it


def _variants(tmp_path) -> list[BenchVariant]:
    return [BenchVariant("fp32", "fp32", str(tmp_path / "a.onnx")), BenchVariant("int8", "int8", str(tmp_path / "b.onnx"))]


def test_a_bf16_cpu_gets_a_bf16_row_of_the_baseline_beside_the_f32_rows(tmp_path):
    rows = timed_variants(_variants(tmp_path), BenchConfig(openvino=True), cpu=BF16_CPU)
    assert [(v.name, v.runtime) for v in rows] == [
        ("fp32", "onnxruntime"), ("int8", "onnxruntime"), ("fp32 · OpenVINO", "openvino"),
        ("int8 · OpenVINO", "openvino"), ("fp32 · OpenVINO bf16", "openvino-bf16")]
    assert ov.RUNTIME_PRECISION[rows[2].runtime] == "fp32" and ov.RUNTIME_PRECISION[rows[4].runtime] == "bf16"


def test_a_cpu_without_bf16_gets_no_bf16_row_and_no_openvino_rows_without_the_flag(tmp_path):
    rows = timed_variants(_variants(tmp_path), BenchConfig(openvino=True), cpu=AVX2_CPU)
    assert [v.runtime for v in rows] == ["onnxruntime", "onnxruntime", "openvino", "openvino"]
    assert [v.runtime for v in timed_variants(_variants(tmp_path), BenchConfig(), cpu=BF16_CPU)] == \
        ["onnxruntime", "onnxruntime"]


@pytest.mark.skipif(not HAS_BF16, reason=f"this CPU ({hardware.real_cpu().summary()}) has neither AVX-512 BF16 nor AMX "
                                         "bf16: OpenVINO would compile the bf16 row as f32, so there is no bf16 row here")
@pytest.mark.skipif(not ov.available(), reason="OpenVINO is not installed (pip install \"ortlab[openvino]\")")
def test_the_bf16_row_is_timed_compiled_in_bf16_where_the_cpu_has_it():
    run = LatencyRun(SAMPLE / "model.onnx", BenchConfig(runs=3, warmup=1), 1, "fp32 · OpenVINO bf16", None, None,
                     None, None, runtime=ov.RUNTIME_BF16)
    session, providers = run._open()
    assert providers == [ov.PROVIDER] and session.precision == "bf16"
    rows = timed_variants(_variants(SAMPLE), BenchConfig(openvino=True), cpu=hardware.real_cpu())
    assert rows[-1].runtime == ov.RUNTIME_BF16
