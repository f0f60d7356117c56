"""History reads one line per thing the person did: a tune search is one row (its trials behind an expander), and
a detector's run details show its task's own figures, not "Top-1 –"."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from ortlab.runs.tune import RECOMMENDED_NOTE
from ortlab.model.importing import import_model
from ortlab.runs.workspace import Workspace
from tests.runs.test_stored import _run
from tests.support.models import conv_bn_model
from tests.ui.test_app import APP, TIMEOUT, _server_like_navigation  # noqa: F401 (an autouse fixture)
from tests.ui.test_group_cards import _evaluation


def _history(ws: Workspace, model) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.file_uploader(key="model_upload").set_value(("mine.onnx", model.read_bytes(), "")).run()
    at.switch_page("pages/history.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_tune_search_is_one_row_with_its_trial_count_and_recommended_trial(home, tmp_path):
    """Issue 28 (10): a tune search's trials filled History with near-identical rows."""
    ws = Workspace(home)
    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    by_hand = _run(ws, model, 2000)
    trials = [_run(ws, model, 1000 + k) for k in range(4)]
    h = ws.history()
    for k, t in enumerate(trials):
        t.origin = "tune"
        if k == 2:
            t.notes.append(RECOMMENDED_NOTE)
        h.update(t)
    at = _history(ws, model)
    table = at.dataframe[0].value  # the model's table (its search's trials come after, in the expander)
    assert len(table) == 2, table  # the run by hand and the search, not five rows
    recipes = list(table["recipe"])
    rec = trials[2]
    assert recipes[0] == f"{rec.recipe.label()} · tune's pick #{rec.run_id} of 4", recipes
    # the search's row is not numbered like its trial (issue 38: both read "3"); its pick is named in the recipe
    assert list(table["run"]) == ["search", str(by_hand.run_id)]
    [trials_box] = [e for e in at.expander if e.label.startswith("Trials of the tune search")]
    assert trials_box.label.endswith("(4)")
    [listed] = [d.value for d in trials_box.dataframe]
    assert set(listed["run"]) == {t.run_id for t in trials} and len(listed) == 4
    assert any("· 2 runs" in m.value for m in at.markdown)  # the model's heading counts what was done


def test_a_detector_runs_details_show_its_f1_and_score_sqnr_not_top1(home, tmp_path):
    """Issue 28 (10): the run's detail cards read "Top-1 (candidate) –" and "Agreement –" for a detector."""
    ws = Workspace(home)
    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    run = _run(ws, model, 2000)
    run.evaluation = _evaluation(task="boxes", boxes=[{
        "output": "output0", "threshold": 0.25, "scale": "probabilities", "changed_fraction": 0.01,
        "ref_detections": 3.0, "cand_detections": 3.0, "matched": 46, "ref_total": 50, "cand_total": 50,
        "score_sqnr_db": 24.13}])
    ws.history().update(run)
    at = _history(ws, model)
    cards = {m.label: m.value for m in at.metric}
    assert cards.get("Detection F1 vs fp32") == "0.920" and cards.get("Score SQNR") == "24.1 dB", cards
    assert "Top-1 (candidate)" not in cards and "Agreement" not in cards
