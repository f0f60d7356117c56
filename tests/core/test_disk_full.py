"""A full disk is named in one line: before a run (free space checked), and when a write meets ENOSPC."""

from __future__ import annotations

import errno
import shutil
from collections import namedtuple

import pytest

from ortlab.runs import prepare
from ortlab.core import disk
from ortlab.core.disk import DiskFullError
from ortlab.runs import recipe_child, service
from ortlab.runs.runspec import RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import OptLevel, Recipe
from tests.support.models import conv_bn_model

Usage = namedtuple("Usage", "total used free")


def test_a_run_is_refused_before_it_starts_when_the_workspace_disk_is_nearly_full(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "home")
    src = conv_bn_model(tmp_path / "src.onnx")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 3_000_000, 3_000_000))
    with pytest.raises(DiskFullError) as err:
        prepare.start_recipe(RunSpec(str(src), Recipe(opt_level=OptLevel.BASIC)), workspace=ws)
    msg = err.value.message
    assert msg.startswith("The workspace disk is full (3.00 MB free at ") and f"{ws.root}'s volume" in msg
    assert msg.endswith("delete runs or models on History.") and "\n" not in msg
    assert list(ws.artifacts_dir.iterdir()) == []  # nothing was started


def test_enospc_in_a_writer_becomes_the_one_line(tmp_path, monkeypatch):
    from ortlab.ui.session.guard import error_message

    def full_writer(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "/srv/ortlab/models/.upload-1-x")

    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 12_000, 12_000))
    try:
        full_writer()
    except OSError as exc:
        level, text = error_message("Importing big.onnx", exc)
    assert level == "error"
    assert text.startswith("Importing big.onnx failed: The workspace disk is full (12.00 kB free at ")
    assert "Unexpected" not in text and "No space left" not in text
    # wrapped in an engine error (raised from the OSError) it is recognised too
    try:
        try:
            full_writer()
        except OSError as inner:
            raise service.OrtlabError("ONNX Runtime could not optimize the model: write failed") from inner
    except service.OrtlabError as exc:
        assert disk.is_disk_full(exc)
    assert not disk.is_disk_full(ValueError("bad shape"))


def test_a_run_that_meets_a_full_disk_says_so(tmp_path, monkeypatch):
    """ONNX Runtime says only "Protobuf serialization failed" when its write meets a full disk: with almost
    nothing free at the workspace's volume, the run's error names the full disk instead."""
    ws = Workspace(tmp_path / "home")
    src = conv_bn_model(tmp_path / "src.onnx")
    exc = service.OrtlabError("ONNX Runtime could not optimize the model: Protobuf serialization failed")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 1000, 1000))
    assert recipe_child._out_of_space(exc, ws.root)
    assert disk.disk_full_message(ws.root) == (f"The workspace disk is full (1.00 kB free at {ws.root}'s volume); "
                                               "delete runs or models on History.")
    monkeypatch.undo()
    assert not recipe_child._out_of_space(exc, ws.root)  # plenty free: the error is ONNX Runtime's own
    assert src.is_file()
