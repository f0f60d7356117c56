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
