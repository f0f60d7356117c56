"""The set-up tells the truth: what ORT's pre-processing needs is installed, and the CLI is on the PATH."""

import subprocess
import sys
from pathlib import Path

import pytest

from ortlab.data import samples
from ortlab.transforms.quantize import preprocess_for_quantization


@pytest.mark.parametrize("sample", [s.name for s in samples.list_samples()])
def test_preprocessing_each_sample_keeps_symbolic_shape_inference(sample, tmp_path):
    model = samples.get_sample(sample).model_path
    warnings = preprocess_for_quantization(model, tmp_path / "pre.onnx")
    assert (tmp_path / "pre.onnx").stat().st_size > 0
    assert not [w for w in warnings if "skip_symbolic_shape" in w or "standard shape inference" in w], warnings


def test_ortlab_command_works_from_any_folder(tmp_path):
    exe = Path(sys.executable).parent / "ortlab"
    assert exe.is_file(), "the requirements install the project, so its console script sits beside python"
    out = subprocess.run([str(exe), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "optimize" in out.stdout and "bench" in out.stdout
