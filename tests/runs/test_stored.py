"""Deleting imported models and uploaded data sets with their runs (issue 19, "Delete everything")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ortlab import api
from ortlab.data.samples import samples_root
from ortlab.model.importing import import_model
from ortlab.runs.artifact import Artifact
from ortlab.runs.history import BenchVariant
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.stored import DATA, MODEL, StoredItemError
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import BenchConfig, Recipe
from tests.support.models import conv_bn_model


def _run(ws: Workspace, source: Path, payload: int, data: Path | None = None) -> Artifact:
    """A recorded run of ``source`` whose folder holds ``payload`` bytes of model (and calibrated on ``data``)."""
    folder = ws.new_artifact_dir()
    (folder / "model.onnx").write_bytes(b"x" * payload)
    spec = RunSpec(model=str(source), recipe=Recipe(),
                   calibration=DataRef(path=str(data)) if data is not None else None)
    a = Artifact(run_id=None, model_path=folder / "model.onnx", source_path=source,
                 source_sha256=api.models.sha256_file_cached(source), sha256="b" * 64, recipe=Recipe(), timings={},
                 warnings=[], providers=["CPUExecutionProvider"], size_bytes=payload, source_size_bytes=1,
                 random_data=False, created_at="2025-01-01T00:00:00+00:00", spec=spec)
    return replace(a, run_id=ws.history().add(a))


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture
def ws_two_models(tmp_path):
    ws = Workspace(tmp_path / "ws")
    a = import_model(conv_bn_model(tmp_path / "a.onnx", seed=1), ws.models_dir)
    b = import_model(conv_bn_model(tmp_path / "b.onnx", seed=2), ws.models_dir)
    assert a.parent != b.parent
    runs_a = [_run(ws, a, 1000), _run(ws, a, 3000)]
    runs_b = [_run(ws, b, 500)]
    return ws, a, b, runs_a, runs_b


def test_deleting_a_model_deletes_its_runs_and_reports_the_bytes_freed(ws_two_models):
    ws, a, b, runs_a, runs_b = ws_two_models
    h = ws.history()
    bench = h.add_benchmark([BenchVariant("r", "r", str(runs_a[0].model_path), runs_a[0].run_id)], BenchConfig(), [])
    items = {i.folder: i for i in api.workspaces.stored_items(ws)}
    assert set(items) == {a.parent, b.parent}
    assert sorted(items[a.parent].run_ids) == sorted(r.run_id for r in runs_a)
    assert items[b.parent].run_ids == [runs_b[0].run_id]
    assert items[a.parent].size_bytes == _bytes(a.parent) and items[a.parent].name == a.name
    expected = _bytes(a.parent) + sum(_bytes(r.dir) for r in runs_a)  # the model's folder and both runs' folders
    before = ws.size_bytes()

    done = api.workspaces.delete_model(ws, a.parent)

    assert done.kind == MODEL and sorted(done.run_ids) == sorted(r.run_id for r in runs_a)
    assert done.freed_bytes == expected and expected > 4000
    assert before - ws.size_bytes() >= expected
    assert not a.parent.exists() and not any(r.dir.exists() for r in runs_a)
    assert [r.run_id for r in h.list()] == [runs_b[0].run_id]  # the other model's run is untouched
    assert runs_b[0].model_path.read_bytes() == b"x" * 500 and b.is_file()
    assert bench not in [x.id for x in h.list_benchmarks()]
    assert [i.folder for i in api.workspaces.stored_items(ws)] == [b.parent]
    with pytest.raises(StoredItemError, match="no model"):
        api.workspaces.delete_model(ws, a.parent)


def test_deleting_a_data_set_deletes_the_runs_that_used_it(tmp_path, ws_two_models):
    ws, a, _b, runs_a, runs_b = ws_two_models
    data = ws.root / "data" / "0123456789abcdef"
    (data / "calibration").mkdir(parents=True)
    (data / "calibration" / "data.npy").write_bytes(b"d" * 700)
    (data / "evaluation").mkdir()
    (data / "evaluation" / "data.npy").write_bytes(b"e" * 300)
    used = _run(ws, a, 200, data=data / "calibration" / "data.npy")
    item = next(i for i in api.workspaces.stored_items(ws) if i.kind == DATA)
    assert item.size_bytes == 1000 and item.run_ids == [used.run_id] and "data.npy" in item.name
    model_item = next(i for i in api.workspaces.stored_items(ws) if i.kind == MODEL and i.folder == a.parent)
    assert used.run_id in model_item.run_ids  # counted under both: it used that model and that data

    done = api.workspaces.delete_dataset(ws, data)
    assert done.run_ids == [used.run_id] and done.freed_bytes == 1000 + 200
    assert not data.exists() and not used.dir.exists() and a.is_file()
    assert sorted(r.run_id for r in ws.history().list()) == sorted(r.run_id for r in runs_a + runs_b)
    with pytest.raises(StoredItemError):  # a data set is not a model, and a model is not a data set
        api.workspaces.delete_dataset(ws, a.parent)


def test_paths_outside_the_workspace_links_and_samples_are_refused(tmp_path, ws_two_models):
    ws, a, *_ = ws_two_models
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "model.onnx").write_bytes(b"keep")
    link = ws.models_dir / "feedfacefeedface"
    link.symlink_to(outside, target_is_directory=True)
    sample = next(p for p in samples_root().iterdir() if p.is_dir())
    cases = [(outside, "not a model stored"), (link, "is a link"), (ws.models_dir / ".." / "artifacts", "not a model"),
             (ws.models_dir, "not a model"), (sample, "bundled sample"), (ws.root / "history.sqlite", "not a model")]
    for path, why in cases:
        with pytest.raises(StoredItemError, match=why):
            api.workspaces.delete_model(ws, path)
        with pytest.raises(StoredItemError):
            api.workspaces.delete_dataset(ws, path)
    assert (outside / "model.onnx").read_bytes() == b"keep" and link.is_symlink() and sample.is_dir()
    assert ws.db_path.is_file() and a.is_file() and len(ws.history().list()) == 3
    assert link not in [i.folder for i in api.workspaces.stored_items(ws)]  # a link is never listed as a stored model
