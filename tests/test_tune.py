"""The recipe search: Pareto front, greedy keep-in-float steps, and a tiny real search on digits_cnn."""

from __future__ import annotations

import json
import math
import time
from typing import ClassVar

from ortlab.settings.config import OptLevel, Precision, QuantConfig, QuantMode, Recipe, Target
from ortlab.checks.eval_report import BoxesMetrics, EvalReport, OutputError, Task, TaskMetrics
from ortlab.checks.verdict import Level, VerdictPolicy, judge
from ortlab.runs.runspec import DataRef
from ortlab.runs.tune import (TRIALS_FILE, Trial, Tuner, TuneSettings, pareto_front, search_space, sqnr_policy,
                         verdict_policy)


def test_pareto_front_on_a_table():
    # (cost to minimise, quality to maximise)
    table = [
        (1.0, 30.0),   # 0 front: the most accurate
        (0.5, 20.0),   # 1 front
        (0.6, 19.0),   # 2 dominated by 1
        (0.3, 10.0),   # 3 front: the fastest
        (0.5, 20.0),   # 4 equal to 1: both on the front
        (None, 40.0),  # 5 failed: never on the front
        (0.4, math.inf),  # 6 identical outputs and fast: dominates 1, 2, 4 and 0
        (0.3, 5.0),    # 7 dominated by 3 (same cost, worse)
    ]
    assert pareto_front(table) == [False, False, False, True, False, False, True, False]
    assert pareto_front(table[:5]) == [True, True, False, True, True]
    assert pareto_front([]) == []


def test_policies():
    good = EvalReport(8, [OutputError("y", 0.1, 0.01, 0.999, 25.0)])
    bad = EvalReport(8, [OutputError("y", 1.0, 0.1, 0.99, 15.0)])
    assert sqnr_policy(20)(good).accept and not sqnr_policy(20)(bad).accept
    assert not sqnr_policy(20)(None).accept
    low_agree = EvalReport(8, [OutputError("y", 0.1, 0.01, 0.999, 25.0)], top1_agreement=0.5)
    assert not sqnr_policy(20, min_top1_agreement=0.9)(low_agree).accept
    v = verdict_policy(min_sqnr_db=20)
    assert v(good).accept and not v(bad).accept and "SQNR" in v(bad).reason
    # one verdict: the bar never relabels it; 15 dB is "ok" under optimize's policy, below this search's bar
    assert vars(v)["verdict_policy"] == VerdictPolicy() and vars(v)["bar_db"] == 20
    assert v(bad).level == "ok" and v(bad).reason == "ok, below this search's bar of 20 dB (worst output SQNR 15.0 dB)"
    assert judge(bad, VerdictPolicy()).level == Level.OK
    worse = EvalReport(8, [OutputError("y", 1.0, 0.1, 0.99, 5.0)])
    assert v(worse).level == "broken" and v(worse).reason == judge(worse, VerdictPolicy()).headline


def test_search_space_is_valid_and_varied():
    from ortlab.settings.config import validate_recipe
    from ortlab.runtime.hardware import parse_cpuinfo

    cpu = search_space(Target.CPU, parse_cpuinfo("flags : sse2 avx avx2 avx512f avx512bw avx512_vnni"),
                       model_ops=("Conv", "Gemm"))
    assert len(cpu) >= 15
    assert not [r for r in cpu if any(f.level == "error" for f in validate_recipe(r))]
    quants = {r.quant for r in cpu if r.precision == Precision.INT8}
    assert len(quants) >= 15
    assert {q.mode for q in quants} == {QuantMode.STATIC, QuantMode.DYNAMIC}
    assert len({(q.calibration_method, q.percentile) for q in quants}) >= 5
    assert {r.opt_level for r in cpu} >= {OptLevel.EXTENDED, OptLevel.ALL}
    no_vnni = search_space(Target.CPU, parse_cpuinfo("flags : sse2 avx avx2"))
    assert no_vnni[0].quant.reduce_range
    conv_only = search_space(Target.CPU, parse_cpuinfo("flags : sse2 avx2 avx512_vnni"), model_ops=("Conv",))
    assert all(r.quant.mode != QuantMode.DYNAMIC for r in conv_only)
    gpu = search_space(Target.GPU)
    assert {r.keep_io_types for r in gpu if r.precision == Precision.FP16} == {True, False}


class _FakeTuner(Tuner):
    """Greedy keep-in-float with canned measurements: SQNR by the set of nodes kept in float."""

    SQNR: ClassVar[dict[tuple[str, ...], float]] = {(): 15.0, ("a",): 17.0, ("a", "b"): 16.0, ("a", "c"): 21.0, ("a", "c", "d"): 25.0}

    def __init__(self, tmp_path, **kw):
        super().__init__(tmp_path / "m.onnx", None, DataRef(random=4), workspace=object(),
                         settings=TuneSettings(budget_s=60, exclusion_steps=kw.pop("steps", 6)), **kw)
        self._start = time.monotonic()
        self.analysed = 0

    def _analyze(self, analyze_fn, trial):
        self.analysed += 1
        return ["a", "b", "c", "d"]

    def _trial(self, recipe, stage, note=""):
        key = tuple(sorted(recipe.quant.nodes_to_exclude))
        sqnr = self.SQNR.get(key, 10.0)
        t = Trial(len(self.trials_done) + 1, recipe.name, stage, recipe, sqnr_db=sqnr, accepted=sqnr >= 20,
                  relative_latency=0.5, cost=0.5, note=note, model_path="x")
        self.trials_done.append(t)
        return t


def test_greedy_exclusion_keeps_only_steps_that_help(tmp_path):
    tuner = _FakeTuner(tmp_path, policy=sqnr_policy(20))
    base = Trial(1, "int8 static", "search", Recipe(precision=Precision.INT8), sqnr_db=15.0, relative_latency=0.5,
                 cost=0.5, model_path="x")
    tuner.trials_done.append(base)
    tuner._exclusion_base = lambda dynamic=False: base  # type: ignore[method-assign]
    steps = list(tuner._exclusions())
    notes = [(t.recipe.quant.nodes_to_exclude, t.note.split(": ")[1].split(" ")[0]) for t in steps]
    # a helps (kept), b hurts (dropped), c helps and reaches the bar: stop there
    assert notes == [(("a",), "kept"), (("a", "b"), "dropped"), (("a", "c"), "kept")]
    assert steps[-1].accepted and "+4.0 dB" in steps[-1].note


def test_greedy_exclusion_respects_the_step_limit(tmp_path):
    tuner = _FakeTuner(tmp_path, policy=sqnr_policy(30), steps=2)
    base = Trial(1, "int8 static", "search", Recipe(precision=Precision.INT8), sqnr_db=15.0, relative_latency=0.5,
                 cost=0.5, model_path="x")
    tuner.trials_done.append(base)
    tuner._exclusion_base = lambda dynamic=False: base  # type: ignore[method-assign]
    assert len(list(tuner._exclusions())) == 2


class _FakeInt16Tuner(_FakeTuner):
    """Greedy 16-bit weights with canned measurements: SQNR by the set of nodes given 16-bit weights."""

    SQNR: ClassVar[dict[tuple[str, ...], float]] = {
        (): 15.0, ("a", "c", "d", "e"): 14.0, ("f", "g", "h", "i"): 17.0, ("f", "g", "h", "i", "j", "k"): 21.0}

    def _analyze(self, analyze_fn, trial):
        return ["a", "act", "c", "d", "e", "f", "g", "h", "i", "j", "k"]

    @staticmethod
    def _weighted_nodes(trial):
        return {"a", "c", "d", "e", "f", "g", "h", "i", "j", "k"}  # "act" has no weight

    def _trial(self, recipe, stage, note=""):
        key = tuple(sorted(recipe.quant.int16_weight_nodes))
        sqnr = self.SQNR.get(key, 10.0)
        t = Trial(len(self.trials_done) + 1, recipe.name, stage, recipe, sqnr_db=sqnr, accepted=sqnr >= 20,
                  relative_latency=0.9, cost=0.9, note=note, model_path="x")
        self.trials_done.append(t)
        return t


def test_greedy_int16_weights_grow_by_chunks_of_weighted_nodes_and_keep_only_gains(tmp_path):
    from ortlab.runs.tune import INT16_STEP

    tuner = _FakeInt16Tuner(tmp_path, policy=sqnr_policy(20))
    base = Trial(1, "int8 static", "search", Recipe(precision=Precision.INT8), sqnr_db=15.0, relative_latency=0.5,
                 cost=0.5, model_path="x")
    tuner.trials_done.append(base)
    tuner._exclusion_base = lambda dynamic=False: base  # type: ignore[method-assign]
    steps = list(tuner._int16_weights())
    assert INT16_STEP == 4 and [t.stage for t in steps] == ["int16"] * 3
    got = [(t.recipe.quant.int16_weight_nodes, t.note.split(": ")[1].split(" ")[0]) for t in steps]
    # the first chunk (weighted nodes only) hurts: dropped; the second helps: kept; the third builds on the second
    assert got == [(("a", "c", "d", "e"), "dropped"), (("f", "g", "h", "i"), "kept"),
                   (("f", "g", "h", "i", "j", "k"), "kept")]
    assert steps[-1].accepted and steps[-1].recipe.quant.nodes_to_exclude == ()
    assert "int16 weights 6" in steps[-1].label


def test_int16_weight_nodes_in_a_recipe_run_write_int16_weights(tmp_path):
    """A recipe with int16_weight_nodes, run by the pipeline on digits_cnn: the QDQ model holds that node's
    weight as int16 and every other weight as int8."""
    import onnx
    from onnx import TensorProto

    from ortlab.runs.pipeline import run_recipe
    from ortlab.data.samples import get_sample

    s = get_sample("digits_cnn")
    q = onnx.load(str(run_recipe(s.model_path, Recipe(precision=Precision.INT8), tmp_path / "a", s.calibration_data(),
                                 s.preprocess, verify_samples=0).model_path.parent / "model.qdq.onnx"))
    convs = [n for n in q.graph.node if n.op_type == "Conv"]
    name = convs[1].name
    art = run_recipe(s.model_path, Recipe(precision=Precision.INT8, quant=QuantConfig(int16_weight_nodes=(name,))),
                     tmp_path / "b", s.calibration_data(), s.preprocess, verify_samples=0)
    m = onnx.load(str(art.model_path.parent / "model.qdq.onnx"))
    inits = {i.name: i.data_type for i in m.graph.initializer}
    producers = {n.output[0]: n for n in m.graph.node}
    types = {n.name: inits.get(producers[n.input[1]].input[0]) for n in m.graph.node if n.op_type == "Conv"}
    assert types[name] == TensorProto.INT16
    assert {t for n, t in types.items() if n != name} == {TensorProto.INT8}


def test_a_tiny_search_on_digits_records_trials_and_writes_the_files(tmp_path):
    from ortlab.runs.history import History
    from ortlab.data.samples import get_sample
    from ortlab.runs.workspace import Workspace

    s = get_sample("digits_cnn")
    ws = Workspace(tmp_path / "ws")
    recipes = [Recipe(precision=Precision.INT8, name="int8 static", opt_level=OptLevel.EXTENDED),
               Recipe(precision=Precision.INT8, name="int8 per-tensor",
                      quant=QuantConfig(per_channel=False)),
               Recipe(precision=Precision.FP32, opt_level=OptLevel.ALL, name="fp32 all")]
    tuner = Tuner(s.model_path, DataRef(sample=s.name, set="calibration"),
                  DataRef(sample=s.name, set="evaluation", count=16), sample=s.name, workspace=ws,
                  out_dir=tmp_path / "out", recipes=recipes,
                  settings=TuneSettings(budget_s=120, bench_s=0.2, exclusion_steps=0, verify_samples=16))
    seen = []
    for t in tuner.trials():
        seen.append(t.index)
        assert t.status == "done", t.error
    r = tuner.result
    assert r is not None and len(r.trials) == 3 and seen == [1, 2, 3]
    assert r.best is not None and r.accepted and r.best.accepted
    assert r.cli_line.startswith("ortlab optimize ") and r.sentence
    flags = pareto_front([(t.cost, t.sqnr_db) for t in r.trials])
    assert [t.pareto for t in r.trials] == flags and any(flags)
    fp32 = r.trials[2]
    assert fp32.sqnr_db == math.inf and fp32.pareto  # identical outputs are always on the front
    runs = History(ws.db_path).list()
    assert {a.run_id for a in runs} == {t.run_id for t in r.trials}
    assert all(a.origin == "tune" for a in runs)
    for t in r.trials:  # timed interleaved with the source: the p50 ratio, with its interval
        (sp,) = t.speed
        assert sp.n >= 10 and sp.low <= sp.ratio <= sp.high
        assert math.isclose(sp.ratio, sp.candidate_p50_ms / sp.reference_p50_ms)
        assert math.isclose(t.relative_latency, sp.ratio)
    assert r.best.level == "ok" and r.written == str(tmp_path / "out" / "model.onnx")
    data = json.loads((tmp_path / "out" / TRIALS_FILE).read_text())
    assert [t["label"] for t in data["trials"]] == ["int8 static", "int8 per-tensor", "fp32 all"]
    assert {"recipe", "verdict", "sqnr_db", "p50_ms", "size_bytes", "pareto", "accepted"} <= set(data["trials"][0])
    assert (tmp_path / "out" / "model.onnx").is_file()
    assert Recipe.from_json((tmp_path / "out" / "recipe.json").read_text()) == r.best.recipe


def test_cancel_stops_the_search(tmp_path):
    from ortlab.data.samples import get_sample
    from ortlab.runs.workspace import Workspace

    s = get_sample("digits_cnn")
    tuner = Tuner(s.model_path, DataRef(sample=s.name, set="calibration"),
                  DataRef(sample=s.name, set="evaluation", count=8), sample=s.name,
                  workspace=Workspace(tmp_path / "ws"), settings=TuneSettings(budget_s=120, bench_s=0.2))
    it = tuner.trials()
    first = next(it)
    tuner.cancel()
    rest = list(it)
    assert first.index == 1 and rest == []
    assert tuner.result is not None and tuner.result.cancelled and len(tuner.result.trials) == 1


def test_cli_analyze_and_tune(tmp_path, capsys):
    from ortlab.cli.main import main
    from ortlab.cli.tune import batch_sizes
    from ortlab.data.samples import get_sample

    assert batch_sizes([1, 32, 1, 8]) == (1, 32, 8)
    s = get_sample("digits_cnn")
    out = tmp_path / "tuned"
    assert main(["tune", str(s.model_path), "--budget", "120", "--max-trials", "2", "--exclusion-steps", "0",
                 "--bench-seconds", "0.2", "--verify-samples", "8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "#1" in text and "#2" in text and "ortlab optimize" in text
    data = json.loads((out / TRIALS_FILE).read_text())
    assert len(data["trials"]) == 2 and (out / "model.onnx").is_file()
    run_dir = out / "trials" / "01"
    assert main(["analyze", str(s.model_path), str(run_dir), "--data", str(s.evaluation_dir), "--n", "8",
                 "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["n_samples"] == 8 and plain["nodes"][0]["rank"] == 1 and plain["qdq"]
    assert main(["analyze", str(s.model_path), str(run_dir), "--data", str(s.evaluation_dir), "--n", "8"]) == 0
    assert "local dB" in capsys.readouterr().out
    assert main(["tune", str(s.model_path), "--budget", "0", "--out", str(out)]) == 2
