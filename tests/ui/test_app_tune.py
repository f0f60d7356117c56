"""AppTest of Compare's per-node error section (analyse, keep nodes in float, re-run, compare), the Tune page
and History's portable QDQ download, on the bundled digits_cnn sample (jobs run synchronously)."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("streamlit")

from ortlab.runs.tune_policy import Stage, Trial, TuneResult
from ortlab.settings.config import Recipe
from ortlab.ui.views import tune_view as tv
from tests.support.app_session import started_app
from tests.ui.test_app import graph_diff_args as _graph_args

pytestmark = pytest.mark.slow  # AppTest of the per-node analysis and of Tune on the digits sample

TIMEOUT = 300


@pytest.fixture
def app(home, monkeypatch):
    return started_app(monkeypatch, TIMEOUT)


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _texts(at) -> str:
    return "\n".join(str(x.value) for kind in ("markdown", "caption", "info", "warning", "success")
                     for x in at.get(kind))


def _figure(at, key: str) -> dict:
    chart = next(c for c in at.get("plotly_chart") if key in c.proto.id)
    return json.loads(chart.proto.spec)


def test_per_node_error_keep_in_float_rerun_and_history_qdq_download(app):
    at = app
    at.button(key="demo_run").click().run()
    _ok(at)
    assert at.title[0].value.endswith("Compare")
    # the overlay toggle is there before the analysis, disabled with its reason (issue 38: it appeared only after)
    toggle = at.radio(key="compare.overlay_mode")
    assert toggle.disabled and "once the Per-node error tab has run its analysis" in toggle.help, toggle.help
    at.button(key="node_errors.analyse").click().run()
    _ok(at)
    assert not at.radio(key="compare.overlay_mode").disabled
    editors = at.data_editor
    assert len(editors) == 1
    table = editors[0].value
    assert len(table) >= 3 and {"node", "op", "local SQNR dB", "accumulated SQNR dB", "keep in float"} <= set(table)
    overlay = at.session_state["ortlab.node_overlay"]
    assert overlay["values"] and overlay["candidate"].endswith("model.qdq.onnx")
    # ranked by accumulated SQNR first, by what each node adds alone on request
    acc = [float(x) for x in table["accumulated SQNR dB"]]
    assert acc == sorted(acc)
    worst = str(table["node"][0])
    assert f"Worst accumulated error: {worst} " in _texts(at)
    # the overlay is on the verdict policy's absolute scale, with the numbers in its legend
    args = _graph_args(at)
    bands = [b["text"] for b in args["overlay"]["bands"]]
    assert bands == ["≥ 20 dB (ok)", "10–20 dB", "< 10 dB (broken bar)"]
    assert args["overlay"]["label"] == "accumulated SQNR"
    fills = {e["data"]["id"]: e["data"]["value_color"] for e in args["panes"]["after"]["elements"]
             if "value" in e["data"] and "group" not in e["data"]}
    for e in args["panes"]["after"]["elements"]:
        d = e["data"]
        if d["id"] in fills:
            want = "#f08080" if d["value"] < 10 else "#ffcc66" if d["value"] < 20 else "#a6dba0"
            assert fills[d["id"]] == want, d
    at.radio(key="compare.overlay_mode").set_value("added by the node").run()
    assert _graph_args(at)["overlay"]["label"] == "SQNR added by the node (local)"
    at.radio(key="node_errors.sort").set_value("added by the node").run()
    local = [float(x) for x in at.data_editor[0].value["local SQNR dB"] if x == x]
    assert local == sorted(local)
    at.radio(key="node_errors.sort").set_value("accumulated").run()
    table = at.data_editor[0].value
    node = str(table["node"][0])
    at.session_state[editors[0].key] = {"edited_rows": {0: {"keep in float": True}}, "added_rows": [],
                                        "deleted_rows": []}
    at.run()  # the ticked box enables the button
    at.button(key="node_errors.rerun").click().run()
    _ok(at)
    arts = at.session_state["ortlab.artifacts"]
    assert len(arts) == 2
    assert arts[0].recipe.quant.nodes_to_exclude == ()
    assert arts[1].recipe.quant.nodes_to_exclude == (node,)
    # the re-run's name says what changed
    first, second = arts[0].run_id, arts[1].run_id
    assert arts[1].recipe.label() == f"#{first} + 1 node kept in float"
    names = list(at.selectbox(key="compare.cand").options)
    assert f"#{second} = #{first} + 1 node kept in float" in names
    cmp_table = next(d.value for d in at.dataframe if "metric" in d.value.columns and "verdict" in list(d.value["metric"]))
    assert list(cmp_table["metric"])[:3] == ["verdict", "logits SQNR (worst output)", "top-1 agreement"]
    assert "latency b1 p50" in list(cmp_table["metric"])
    before, after = (c for c in cmp_table.columns if c != "metric")
    assert cmp_table[before][0].strip() and cmp_table[after][0].strip() and cmp_table[after][0] != "–"
    assert f"Keeping {node} in float" in _texts(at)

    at.switch_page("pages/history.py").run()
    _ok(at)
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels[0] == "⬇ Model (QDQ, portable)" and labels[1] == "⬇ ORT-only model"
    helps = [b.proto.help for b in at.get("download_button")]
    assert "TensorRT, OpenVINO" in helps[0] and "for ONNX Runtime only" in helps[1]


def test_tune_page_fills_the_pareto_chart_and_recommends(app, home):
    at = app
    at.switch_page("pages/tune.py").run()
    _ok(at)
    assert at.title[0].value.endswith("Tune")
    at.number_input(key="tune.budget").set_value(240)
    at.number_input(key="tune.max_trials").set_value(2)
    at.number_input(key="tune.bench_s").set_value(0.2)
    at.number_input(key="tune.steps").set_value(0)
    next(b for b in at.button if "Start tuning" in b.label).click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    fig = _figure(at, "tune_chart")
    points = sum(len(tr.get("x") or []) for tr in fig["data"])
    assert points >= 2
    assert any(tr.get("name") == "Pareto front" and tr.get("x") for tr in fig["data"])
    text = _texts(at)
    assert "recipe the policy accepts" in text or "passes the accuracy policy" in text \
        or "is the pick of 2 trials" in text or "No accepted recipe is clearly faster" in text \
        or "at least as fast as the fp32 source" in text  # under load int8 digits can time slower than fp32
    assert "1 trials" not in text and ".." not in text
    task = at.session_state["ortlab.job.tune"]
    result = task.result
    best = result.best
    # the chart's y-axis is the measure that decides (digits: no confident flip), with its interval
    assert fig["layout"]["yaxis"]["title"]["text"] == "no confident flip (95% interval)"
    assert "recommended: trial" not in " ".join(str(tr.get("name")) for tr in fig["data"]) or result.accepted
    assert f"The budget bought {result.bought()}" in text
    if best is None:  # every finished trial timed slower than fp32 (a loaded machine): never recommended, said so
        assert any(n.startswith("Never recommended") for n in result.notes) and "Never recommended" in text
    else:  # the pick's line as Recipe and History write it: the sample by name, no server path, continued
        [line] = [c.value for c in at.code if "ortlab optimize" in c.value]
        assert line.startswith("ortlab optimize digits_cnn OUT.onnx") and str(home.parent) not in line, line
        assert max(len(x) for x in line.split("\n")) <= 88, line
    if best is not None and best.speedup is not None and best.speedup < 1.0:
        claims = text.replace("No accepted recipe is clearly faster than", "")  # the page's honest "not faster"
        assert "faster than" not in claims and "fastest" not in claims
    # the trials table says which History run each trial recorded
    table = at.dataframe[0].value
    assert "trial" in table and "History run" in table
    assert [str(r) for r in table["History run"]] == [f"#{t.run_id}" for t in result.trials]

    if best is not None:  # a pick whose own verdict is on the edge: its interval and the samples that would settle it
        edge = "on the edge: the 95% interval 0.0%–49.0% (Wilson, 4 samples); about 381 would settle it"
        task.result = dataclasses.replace(result, best=dataclasses.replace(best, edge=edge), claim_settle=None)
        at.run()
        assert not at.exception and "about 381 would settle it" in _texts(at)
        task.result = result

    # a cancelled search ends in a neutral "Stopped after N trials", no error element, controls enabled again
    task.result = dataclasses.replace(result, cancelled=True)
    task.state = "cancelled"
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    n = len(result.trials)
    assert any(f"Stopped after {n} trial" in i.value for i in at.info), [i.value for i in at.info]
    assert not at.number_input(key="tune.budget").disabled


class _RunningSearch:
    """A search still running, as the page sees it (the real one runs synchronously under tests)."""

    def __init__(self, choice):
        self.meta = {"choice": choice, "model": "m"}
        self.items: list = []
        self.done = self.cancelled = False
        self.elapsed = 9.0
        self.cpu_used = 16.0
        self.state = "running"

    def drain(self):
        return []


def test_the_tune_form_shows_the_running_searchs_settings_and_keeps_them_afterwards(app):
    """Issue 28: while a search of 60 s runs, the greyed form says 60, not the default 300 (a widget redrawn
    disabled can lose its value); afterwards it keeps the settings of the search that ran."""
    at = app
    at.switch_page("pages/tune.py").run()
    _ok(at)
    choice = tv.TuneChoice(objective="size", budget_cpu_s=60.0, min_sqnr_db=25.0, max_trials=3, bench_s=0.5,
                           exclusion_steps=2)
    at.session_state["tune.budget"] = 300  # what the form showed in the browser: the default again
    at.session_state["ortlab.job.tune"] = _RunningSearch(choice)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    budget = at.number_input(key="tune.budget")
    assert budget.disabled and budget.value == 60
    assert at.selectbox(key="tune.objective").value == "size"
    assert (at.number_input(key="tune.min_sqnr").value, at.number_input(key="tune.max_trials").value,
            at.number_input(key="tune.bench_s").value, at.number_input(key="tune.steps").value) == (25.0, 3, 0.5, 2)
    assert any("16 CPU s of 60 CPU s" in str(p.proto) for p in at.get("progress"))  # the budget's own measure
    assert "CPU seconds" in budget.label and "busy machine" in budget.help
    task = at.session_state["ortlab.job.tune"]
    task.done, task.state, task.result, task.error = True, "failed", None, None
    at.run()
    assert not at.number_input(key="tune.budget").disabled and at.number_input(key="tune.budget").value == 60


def test_the_pareto_chart_rings_the_recommended_trial_and_draws_circles_over_stars():
    import plotly.io as pio

    a, b, c = (dataclasses.replace(_trial(i, s, db), pareto=p) for i, s, db, p in
               ((1, 1.8, 30.0, True), (2, 1.8, 30.0, False), (3, 1.2, 35.0, True)))
    fig = tv.pareto_figure([a, b, c], "latency", recommended=a)
    names = [t.name for t in fig.data]
    assert names == ["Pareto front", "other trials", "recommended: trial 1"]  # circles drawn after the stars
    ring = fig.data[2]
    assert (round(ring.x[0], 6), ring.y[0]) == (1.8, 30.0) and ring.marker.symbol == "circle-open"
    assert all("trial %{customdata[1]}" in t.hovertemplate for t in fig.data)
    assert "recommended" not in " ".join(str(t.name) for t in tv.pareto_figure([a, b, c], "latency").data)
    pio.to_json(fig)  # a valid figure
    twin = dataclasses.replace(_trial(4, 1.8, 30.0), same_as=1)  # the same model as trial 1: trial 1's point
    assert sum(len(t.x) for t in tv.pareto_figure([a, b, c, twin], "latency").data) == 3
    cols = tv.trial_columns()
    shown = [c for c in cols.values() if c is not None and not c.get("hidden")]
    assert sum(c["width"] for c in shown) <= 820 and set(cols) == set(tv.trial_rows([a])[0])


def _trial(index: int, speedup: float, sqnr: float, accepted: bool = True) -> Trial:
    return Trial(index=index, label=f"int8 static #{index}", stage=Stage.SEARCH, recipe=Recipe(), accepted=accepted,
                 verdict="ok" if accepted else "broken", sqnr_db=sqnr, relative_latency=1.0 / speedup,
                 cost=1.0 / speedup, run_id=index + 7)


def _result(best: Trial, *trials: Trial, accepted: bool = True, cancelled: bool = False) -> TuneResult:
    return TuneResult("m.onnx", "latency", "cpu", "verdict OK", "cpu", [1], {"1": 1.0}, [best, *trials], best,
                      accepted, "engine sentence", "", 3.0, cancelled)


def test_tune_headline_never_calls_a_slower_recipe_faster_and_cancel_is_neutral():
    slow = _trial(4, 0.98, 35.0)
    level, text = tv.headline(_result(slow))
    assert level == "warning" and "faster than the fp32" in text and "0.98×" in text
    assert "fastest" not in text and "No accepted recipe is clearly faster" in text
    fast = _trial(2, 1.84, 31.0)
    level, text = tv.headline(_result(fast, slow))
    assert level == "success" and "1.84× faster than the fp32 source" in text and "of 2 trials" in text
    level, text = tv.headline(_result(fast, accepted=True, cancelled=True))
    assert level == "info" and text.startswith("Stopped after 1 trial.") and "trial 2" in text
    level, text = tv.headline(_result(slow, accepted=False, cancelled=True))
    assert level == "info" and "Best so far" not in text and "No finished trial passed" in text
    level, text = tv.headline(None, [])
    assert (level, text) == ("info", "Stopped after 0 trials.")


def test_tune_headline_when_nothing_is_recommended_gives_the_engine_reason():
    slow = _trial(1, 0.5, 35.0)
    r = dataclasses.replace(_result(slow), best=None, accepted=False,
                            sentence="No trial of 1 is both usable by the verdict and at least as fast as the fp32 "
                                     "source; nothing is recommended and no model was written.")
    level, text = tv.headline(r)
    assert level == "warning" and text == r.sentence  # not "No trial finished"


def test_tune_headline_when_no_trial_finished_gives_the_engine_count_and_stage():
    r = dataclasses.replace(_result(_trial(1, 1.5, 30.0)), best=None, accepted=False, trials=[],
                            sentence="No trial finished: 1 started and was stopped when the time budget of 300 s ran "
                                     "out, 290 s into it, in stage 3 of 6 (calibrate: calibration sample 37/100); "
                                     "give 1200 s or more.")
    assert tv.headline(r) == ("warning", r.sentence)  # not "No trial finished (0 trials started)"


def test_the_chart_draws_the_deciding_measure_with_its_interval_and_nothing_before_a_trial():
    a, b = (dataclasses.replace(_trial(i, s, db), task_measure="detection F1", task_value=v, task_low=lo,
                                task_high=hi, evidence="120 reference detections in 200 samples")
            for i, s, db, (v, lo, hi) in ((1, 1.9, 32.6, (0.80, 0.70, 0.88)), (2, 2.1, 28.0, (0.95, 0.90, 0.98))))
    fig = tv.pareto_figure([a, b], "latency")
    assert fig.layout.yaxis.title.text == "detection F1 (95% interval)"  # not the worst output's SQNR (32.6 dB)
    ys = [y for tr in fig.data for y in (tr.y or ())]
    assert sorted(ys) == [0.80, 0.95]
    below = sorted(round(x, 6) for tr in fig.data if tr.y for x in tr.error_y.arrayminus)
    above = sorted(round(x, 6) for tr in fig.data if tr.y for x in tr.error_y.array)
    assert below == [0.05, 0.10] and above == [0.03, 0.08]  # each trial's interval as a bar
    assert any("120 reference detections" in str(row) for tr in fig.data for row in (tr.customdata or ()))
    rows = tv.trial_rows([a, b])  # the table: the measure with its interval (fits its column), the evidence apart
    assert rows[0]["task"] == "0.800 (0.700–0.880)"
    assert rows[0]["evidence"] == "detection F1: 120 reference detections in 200 samples"
    # plain tensors: SQNR stays the axis
    c = _trial(3, 1.5, 30.0)
    assert tv.pareto_figure([c], "latency").layout.yaxis.title.text == "SQNR of the worst output (dB)"
    assert not tv.has_points([], "latency") and tv.has_points([c], "latency")


def test_progress_past_the_budget_says_what_runs_instead_of_more_seconds_than_the_budget():
    assert tv.progress(16.0, 60.0, 2) == (16 / 60, "16 s of 60 s · 2 trials finished")
    share, text = tv.progress(164.0, 150.0, 3)
    assert share == 1.0 and "164 s of 150 s" not in text and "budget of 150 s spent" in text and "14 s over" in text
    assert tv.progress(16.0, 600.0, 1, cpu=True)[1] == "16 CPU s of 600 CPU s · 1 trial finished"


def test_the_page_budget_is_the_engines_cpu_budget():
    """Issue 36 (6): the page's budget is CPU seconds like ortlab tune's (600 by default); on a cluster, wall."""
    from ortlab import api

    assert tv.TuneChoice().budget_cpu_s == api.tuning.DEFAULT_CPU_BUDGET_S == 600.0
    assert api.tuning.budget_limits(600.0) == api.tuning.default_budget(False) == (3600.0, 600.0)
    assert api.tuning.budget_limits(1200.0) == (7200.0, 1200.0) and api.tuning.budget_limits(90.0, ray=True) == (90.0, None)


def test_the_headline_of_a_decided_search_states_the_held_out_claim_and_is_no_success_on_the_edge():
    best = dataclasses.replace(_trial(1, 2.0, 30.0), task_measure="detection F1", task_value=0.96, task_low=0.92,
                               task_high=0.98)
    r = dataclasses.replace(_result(best), baseline_index=1, claim=0.955, claim_low=0.90, claim_high=0.985,
                            claim_evidence="100 reference detections in 100 samples", claim_word="on the edge",
                            chosen_on="chosen on 200 samples, confirmed on 100 held out")
    level, text = tv.headline(r)
    assert level == "warning" and "the default" in text and "0.955 (95% interval 0.900–0.985), on the edge" in text
    assert "On 100 reference detections in 100 samples it was not chosen on" in text
    level, text = tv.headline(dataclasses.replace(r, claim_low=0.955, claim_word="ok"))
    assert level == "success" and "fastest" not in text
