"""The CLI reads each model once per process, however many of its steps ask for the model's facts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ortlab import api
from ortlab.api import UsageError
from ortlab.cli import inputs
from ortlab.cli.common import preprocess_from_flags
from ortlab.cli.inputs import check_input_names

SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"


def count_child_reads(monkeypatch) -> list[str]:
    """The paths every later read in a child is asked for, in order."""
    reads: list[str] = []
    original = api.models.inspect_in_child

    def counting(path, *args, **kwargs):
        reads.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(api.models, "inspect_in_child", counting)
    return reads


@pytest.fixture
def child_reads(monkeypatch) -> Iterator[list[str]]:
    reads = count_child_reads(monkeypatch)
    with inputs.one_read_per_model():
        yield reads


def test_steps_of_one_command_share_one_read(child_reads, tmp_path, monkeypatch):
    model = tmp_path / "copy.onnx"
    shutil.copyfile(SAMPLE, model)
    monkeypatch.chdir(tmp_path)
    input_name = inputs.read_model(model).inputs[0].name
    pre = preprocess_from_flags(Path("copy.onnx"), None, {}, {input_name: [1, 1, 28, 28]})
    assert pre is not None and tuple(pre.size) == (28, 28)
    check_input_names([Path("./copy.onnx")], {}, {input_name: 1})
    with pytest.raises(UsageError, match="--input-value names sr, which none of the models takes"):
        check_input_names([model], {}, {"sr": 16000})
    assert child_reads == [str(model)]  # three spellings of one file, one read


def test_a_file_changed_since_is_read_again(child_reads, tmp_path):
    model = tmp_path / "m.onnx"
    shutil.copyfile(SAMPLE, model)
    first = inputs.read_model(model)
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 1_000_000_000))
    again = inputs.read_model(model)
    assert len(child_reads) == 2 and again.sha256 == first.sha256


def test_outside_a_command_each_ask_reads(monkeypatch, tmp_path):
    reads = count_child_reads(monkeypatch)
    inputs.read_model(SAMPLE)
    inputs.read_model(SAMPLE)
    assert len(reads) == 2  # no process-wide cache: a test, the app or a later command reads afresh
