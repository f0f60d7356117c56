"""Issue 38 (7): a new browser session reopens the last run with the data it was made with (a data set stored in
the workspace), and History names a stored data set by what it was made from, not by its digest."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("streamlit")

from ortlab import api
from ortlab.model.importing import import_model
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import PreprocessConfig, Recipe
from tests.data.test_data import png_bytes
from tests.runs.test_stored import _run
from tests.support.app_session import started_app
from tests.support.models import conv_bn_model
from tests.ui.test_app import TIMEOUT, sidebar_text

LABEL = "uploaded images (9) from photos.zip"


def _stored_run(ws: Workspace, tmp_path):
    """A History run of an imported model that calibrated and evaluated on an uploaded data set stored as the Data
    page stores one (split, written under data/<digest>/, with its about.json)."""
    import dataclasses

    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    ds = api.data.load_image_files([(f"p{i}.png", png_bytes((20 * i, 10, 30))) for i in range(9)])
    cal, ev = api.data.split_dataset(ds)
    folder = ws.root / "data" / api.data.dataset_digest(ds)[:16]
    cal_path, ev_path = api.data.write_dataset(cal, folder / "calibration"), api.data.write_dataset(ev, folder / "evaluation")
    api.data.write_about(folder, LABEL, ds, {"calibration": len(cal), "evaluation": len(ev)})
    run = _run(ws, model, 1500)
    pre = PreprocessConfig(size=(32, 32))
    run = dataclasses.replace(run, spec=RunSpec(
        model=str(model), recipe=Recipe(), calibration=DataRef(path=str(cal_path)),
        evaluation=DataRef(path=str(ev_path), count=2, stratify=False, seed=5), preprocess=pre, verify_samples=2))
    ws.history().update(run)
    return run, folder, dataclasses.replace(pre), (len(cal), len(ev))


def test_a_new_session_reopens_the_last_run_with_its_stored_data(home, tmp_path, monkeypatch):
    ws = Workspace(home)
    run, folder, pre, (n_cal, n_ev) = _stored_run(ws, tmp_path)
    at = started_app(monkeypatch, TIMEOUT)  # a new browser session
    side = sidebar_text(at)
    assert f"Reopened from History: run {run.run_id}, the newest run in this workspace, with the data it was made " \
           "with." in side, side
    assert f"**Data** · {LABEL}: {n_cal} to calibrate, {n_ev} held out to evaluate" in side, side
    at.switch_page("pages/data.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(h.value.startswith("Data in use: uploaded images (9)") for h in at.subheader)
    assert at.number_input(key="data.n").value == 2 and at.number_input(key="data.seed").value == 5
    assert at.metric[0].value == str(n_cal) and at.metric[1].value == str(n_ev)
    assert not at.error, [e.value for e in at.error]  # the run's size is the preprocessing's, no "size open" error
    assert at.session_state[f"ortlab.m.{run.source_sha256}.preprocess"] == pre
    cal_ref, ev_ref = at.session_state[f"ortlab.m.{run.source_sha256}.data_refs"]
    assert cal_ref == run.spec.calibration and ev_ref.path == run.spec.evaluation.path and ev_ref.count is None

    # History names the stored set by what it was made from, and says what Delete removes
    at.switch_page("pages/history.py").run()
    assert not at.exception, [e.value for e in at.exception]
    [row] = [m.value for m in at.markdown if "on disk" in m.value and "Data set" in m.value]
    assert "uploaded images (9) from photos.zip · 9 images (6 to calibrate, 3 to evaluate)" in row, row
    assert f"data/{folder.name}" in row and "· 1 run" in row
    assert any("Delete removes" in c.value and "runs made from it" in c.value for c in at.caption)


def test_a_new_session_says_in_one_line_when_the_runs_data_is_gone(home, tmp_path, monkeypatch):
    ws = Workspace(home)
    run, folder, *_ = _stored_run(ws, tmp_path)
    shutil.rmtree(folder)
    at = started_app(monkeypatch, TIMEOUT)
    side = sidebar_text(at)
    assert f"Reopened from History: run {run.run_id}, the newest run in this workspace, without its data (its data " \
           "set was deleted from the workspace: the Data page picks data)." in side, side
    assert "**Data** · no data" in side
