"""Each output group's SQNR card carries its own flag against the verdict's SQNR bar: a detector's score channels
at 9.4 dB (below the 10 dB broken bar) are flagged on the card that shows them, the box channels above it are not."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _cards(score_db: float) -> None:
    from ortlab.checks.verdict import judge
    from ortlab.ui.views import cards
    from tests.checks.test_verdict_uncertainty import _detector

    ev = _detector(60, 61, 61, score_db)
    cards.eval_cards(ev, "reference", "candidate", judge(ev), 10.0)


def _metrics(score_db: float) -> dict[str, tuple[str, str]]:
    at = AppTest.from_function(_cards, args=(score_db,))
    at.run(timeout=60)
    assert not at.exception
    return {m.label: (m.value, m.proto.delta) for m in at.metric}


def test_a_score_group_below_the_bar_carries_the_flag_on_its_card():
    cards = _metrics(9.4)
    assert cards["output0 scores: SQNR"] == ("9.4 dB", "-0.6 dB below the 10 dB bar")  # it decided: shown first
    assert cards["Box SQNR (output0)"] == ("35.0 dB", "")
    assert "Score SQNR (output0)" not in cards  # not shown twice


def test_groups_above_the_bar_carry_no_flag():
    cards = _metrics(14.0)
    assert cards["Score SQNR (output0)"] == ("14.0 dB", "") and cards["Box SQNR (output0)"] == ("35.0 dB", "")
    assert cards["output0: detections F1 vs reference"][0] == "0.98"


def _evaluation(**task):
    from ortlab.checks.eval_report import EvalReport
    from ortlab.core.serial import from_plain

    return from_plain(EvalReport, {
        "n_samples": 16, "top1_accuracy_ref": None, "top1_accuracy_cand": None, "top5_accuracy_ref": None,
        "top5_accuracy_cand": None, "top1_agreement": None, "top5_containment": None, "outputs": [],
        "per_class": [], "random_data": False, "providers_ref": ["CPUExecutionProvider"],
        "providers_cand": ["CPUExecutionProvider"], "task": {"inferred": True, "why": "test", **task}})


def test_a_detector_run_shows_its_f1_and_score_sqnr_where_top1_says_nothing():
    """Issue 28 (10): History's detector row showed "–" for its metric; it shows the F1 against the reference and
    the score channels' SQNR (an OCR recognizer its changed strings, an encoder its cosine)."""
    from ortlab.ui.session.actions import task_metric_text

    boxes = _evaluation(task="boxes", boxes=[{"output": "output0", "threshold": 0.25, "scale": "probabilities",
                                              "changed_fraction": 0.01, "ref_detections": 3.0,
                                              "cand_detections": 3.0, "matched": 46, "ref_total": 50,
                                              "cand_total": 50, "score_sqnr_db": 24.13}])
    assert task_metric_text(boxes) == "F1 0.920 · score SQNR 24.1 dB"
    quiet = _evaluation(task="boxes", boxes=[{"output": "output0", "threshold": 0.25, "scale": "probabilities",
                                              "changed_fraction": 0.0, "ref_detections": 0.0,
                                              "cand_detections": 0.0, "score_sqnr_db": 72.1}])
    assert task_metric_text(quiet) == "no detections · score SQNR 72.1 dB"
    ocr = _evaluation(task="sequence", sequences=[{"output": "out", "n_samples": 64, "changed": 3, "edits": 4,
                                                    "ref_chars": 500}])
    assert task_metric_text(ocr) == "3/64 strings changed"
    assert task_metric_text(None) == "–"
