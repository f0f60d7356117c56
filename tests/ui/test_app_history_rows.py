"""History reads one line per thing the person did: a tune search is one row (its trials behind an expander), and
a detector's run details show its task's own figures, not "Top-1 –"."""

from __future__ import annotations

from dataclasses import replace

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
    trials = [replace(t, origin="tune", notes=[*t.notes, RECOMMENDED_NOTE] if k == 2 else t.notes)
              for k, t in enumerate(trials)]
    for t in trials:
        h.update(t)
    at = _history(ws, model)
    table = at.dataframe[0].value  # the model's table (its search's trials come after, in the expander)
    assert len(table) == 2, table  # the run by hand and the search, not five rows
    recipes = list(table["recipe"])
    rec = trials[2]
    assert recipes[0] == f"pick of 4: #{rec.run_id} {rec.recipe.label()}", recipes
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
    run = replace(run, evaluation=_evaluation(task="boxes", boxes=[{
        "output": "output0", "threshold": 0.25, "scale": "probabilities", "changed_fraction": 0.01,
        "ref_detections": 3.0, "cand_detections": 3.0, "matched": 46, "ref_total": 50, "cand_total": 50,
        "score_sqnr_db": 24.13}]))
    ws.history().update(run)
    at = _history(ws, model)
    cards = {m.label: m.value for m in at.metric}
    assert cards.get("Detection F1 vs fp32") == "0.920" and cards.get("Score SQNR") == "24.1 dB", cards
    assert "Top-1 (candidate)" not in cards and "Agreement" not in cards
    assert _shown_width(at.dataframe[0]) <= 818  # the task metric whole at 1280 px (issue 38: it was cut)


def _shown_width(frame) -> int:
    """The summed widths of a table's shown columns (those the column menu hides left out)."""
    import json

    config = json.loads(frame.proto.columns)
    return sum(config[c]["width"] for c in frame.proto.column_order if not config.get(c, {}).get("hidden"))


def _boxes_with_samples(matched: list[int]):
    """A detector's evaluation with its per-sample record: one reference detection per sample, found or not."""
    n = len(matched)
    return _evaluation(task="boxes", boxes=[{
        "output": "output0", "threshold": 0.25, "scale": "probabilities", "changed_fraction": 0.01,
        "ref_detections": 1.0, "cand_detections": 1.0, "matched": sum(matched), "ref_total": n, "cand_total": n,
        "score_sqnr_db": 24.13, "sample_matched": matched, "sample_ref": [1] * n, "sample_cand": [1] * n}])


def test_tune_rows_carry_the_task_measure_with_its_interval_and_evidence(home, tmp_path):
    """Issue 36 (5): History's rows of a tune search and its trials show the measure the search decided by, with
    its 95% interval and what it rests on (as the Tune page did), beside the verdict where 1280 px shows it."""
    from ortlab.runs.trial_measure import stored_trial_measure

    ws = Workspace(home)
    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    by_hand = _run(ws, model, 2000)
    trials = [_run(ws, model, 1000 + k) for k in range(2)]
    h = ws.history()
    by_hand = replace(by_hand, evaluation=_boxes_with_samples([1] * 60))
    h.update(by_hand)
    trials = [replace(t, origin="tune", evaluation=_boxes_with_samples([1] * 50 + [0, 1] * 5),  # 60 samples: 40
                      notes=[*t.notes, RECOMMENDED_NOTE] if k == 1 else t.notes)    # chosen on, 20 held out
              for k, t in enumerate(trials)]
    for t in trials:
        h.update(t)
    m = stored_trial_measure(trials[1].evaluation)
    assert m is not None and m.low is not None and m.value is not None and m.high is not None
    assert m.low < m.value < m.high and m.evidence.endswith(" samples")
    assert m.evidence != stored_trial_measure(trials[1].evaluation, trial=False).evidence  # chosen-on part only
    at = _history(ws, model)
    table = at.dataframe[0].value
    cells = dict(zip(table["run"], table["task (95%)"]))
    want = f"{m.value:.3f} ({m.low:.3f}–{m.high:.3f}) · {m.evidence.split(' in ')[0].replace('reference ', 'ref. ')}"
    assert cells["search"] == want, cells
    assert cells[str(by_hand.run_id)].startswith("1.000 (") and "60 ref. detections" in cells[str(by_hand.run_id)]
    [trials_box] = [e for e in at.expander if e.label.startswith("Trials of the tune search")]
    [listed] = [d.value for d in trials_box.dataframe]
    assert list(listed["task (95%)"]) == [want, want]
    # the column sits beside the verdict, and the shown columns fit the main column at 1280 px (about 820 px)
    proto = at.dataframe[0].proto
    import json

    config = json.loads(proto.columns)
    assert config["task (95%)"]["label"] == "detection F1 (95%)", config["task (95%)"]
    shown = [c for c in proto.column_order if not config.get(c, {}).get("hidden")]
    assert shown[:4] == ["run", "time", "verdict", "task (95%)"], shown
    assert _shown_width(at.dataframe[0]) <= 820, {c: config[c].get("width") for c in shown}
