"""Timings are stored with the machine they came from and shown with it; a timing from another machine is
labelled so; every stored speed figure in History and the report carries its interval; a run tune timed is not
"not timed yet" in its report."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from ortlab.cli.history import benchmark_lines
from ortlab.runs.history import BenchmarkRecord, BenchVariant, History
from ortlab.runs.report import html_report
from ortlab.runs.stored_timing import record_pair_timing, report_timing
from ortlab.runs.tune_settings import TuneSettings
from ortlab.runs.tune_timing import TrialTiming
from ortlab.runtime.hardware import detect
from ortlab.runtime.machine import Machine, this_machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencySummary
from tests.ui.test_report import inputs

XEON = Machine("Intel(R) Xeon(R) Platinum 8480+", "x86", "AVX2, AVX-512, VNNI, AVX-512 BF16, AMX", 112, 0,
               ("onnxruntime 1.31.1",))


def _summary(variant: str, p50: float, rounds: list[float]) -> LatencySummary:
    return LatencySummary(variant, 1, 10 * len(rounds), p50, p50 * 1.1, p50 * 1.3, p50, 0.01, p50 * 0.9, p50 * 1.5,
                          1000 / p50, p50_low=p50 * 0.98, p50_high=p50 * 1.02, round_p50s=rounds)


def _pair() -> tuple[LatencySummary, LatencySummary]:
    ref = [2.0 + 0.01 * (i % 3) for i in range(12)]
    return _summary("reference", 2.0, ref), _summary("candidate", 1.0, [x / 2 for x in ref])


def test_this_machine_names_the_cpu_its_features_threads_and_runtime():
    m = this_machine(threads=1)
    assert m.cpu == detect().model_name and m.cores >= 1 and m.threads == 1
    assert m.runtimes[0].startswith("onnxruntime 1.") and ("AVX2" in m.isa) == detect().avx2
    assert m.summary().endswith("1 thread · " + m.runtimes[0])
    assert m.provenance().startswith("timed on this machine: ")
    assert XEON.provenance().startswith("timed on another machine: Intel(R) Xeon(R) Platinum 8480+ · AVX2, AVX-512")


def test_history_stores_the_machine_with_a_benchmark_and_reads_old_ones_without(tmp_path):
    h = History(tmp_path / "h.db")
    ref, cand = _pair()
    variants = [BenchVariant("reference", "reference", "a.onnx"), BenchVariant("candidate", "candidate", "b.onnx")]
    h.add_benchmark(variants, BenchConfig(), [ref, cand], origin="cli")  # as written before machines were stored
    h.add_benchmark(variants, BenchConfig(), [ref, cand], origin="cli", machine=XEON)
    new, old = h.list_benchmarks()
    assert isinstance(new, BenchmarkRecord) and isinstance(old, BenchmarkRecord)
    assert new.machine == XEON and old.machine is None
    lines = benchmark_lines(new)
    assert lines[0] == "reference@1 p50 2.000 ms (95% 1.960–2.040)"
    assert lines[1].startswith("candidate@1 p50 1.000 ms (95% 0.980–1.020), 2.00× vs reference (95% interval 2.00–2.00×, "
                               "12 interleaved rounds)")


def test_the_report_shows_a_tune_timing_with_its_interval_and_machine(tmp_path):
    artifact, ref_info, cand_info, diff, evaluation, _, _ = inputs()
    h = History(tmp_path / "h.db")
    assert report_timing(h, artifact).speed is None
    before = html_report(artifact, ref_info, cand_info, diff, evaluation, None)
    assert "not timed yet" in before
    # what tune keeps for a trial it timed against its source
    notes: list[str] = []
    timing = TrialTiming(str(artifact.source_path), TuneSettings(), SimpleNamespace(timing_machine=None),  # here
                         SimpleNamespace(history=lambda: h), notes.append)
    trial = SimpleNamespace(run_id=artifact.run_id, label="int8 static", model_path=artifact.model_path)
    timing.record(trial, BenchConfig(), [_pair()])  # type: ignore[arg-type]
    assert notes == []
    shown = report_timing(h, artifact)
    assert shown.speed is not None and shown.machine is not None and shown.machine.same_hardware(this_machine())
    page = html_report(artifact, ref_info, cand_info, diff, evaluation, shown.bench, speed=shown.speed,
                       machine=shown.machine)
    speed = page[page.index('<p class="speed">'):]
    speed = speed[:speed.index("</p>")]
    assert "not timed yet" not in page
    assert "1.00 ms p50 (95% interval 0.98–1.02" in speed and "2.00× faster" in speed
    assert "(95% interval 2.00–2.00×, 12 interleaved rounds)" in speed
    assert "timed on this machine: " in speed
    assert h.list_benchmarks()[0].origin == "tune"


def test_a_timing_from_another_machine_is_labelled_and_an_unpaired_one_says_why_it_has_no_interval(tmp_path):
    artifact, ref_info, cand_info, diff, evaluation, _, _ = inputs()
    h = History(tmp_path / "h.db")
    ref, cand = _pair()
    record_pair_timing(h, str(artifact.source_path), artifact.run_id, "int8", str(artifact.model_path), BenchConfig(),
                       [(dataclasses.replace(ref, round_p50s=[]), dataclasses.replace(cand, round_p50s=[]))])
    timing = report_timing(h, artifact)
    page = html_report(artifact, ref_info, cand_info, diff, evaluation, timing.bench, speed=timing.speed,
                       machine=XEON)
    assert "timed on another machine: Intel(R) Xeon(R) Platinum 8480+" in page
    assert "timed apart: no interval" in page
    assert "machine not recorded" in html_report(artifact, ref_info, cand_info, diff, evaluation, timing.bench,
                                                  speed=timing.speed)


def test_tune_keeps_a_trial_it_timed_on_the_one_clock_in_history(tmp_path):
    """The real path: the trial timed against its source by the pair timer (child processes, interleaved rounds)
    lands in History as a benchmark of origin "tune", with this machine, which the trial's report then finds."""
    from ortlab.runs.runspec import DataRef
    from ortlab.runs.tune import Trial, Tuner, TuneSettings
    from ortlab.runs.tune_policy import Stage
    from ortlab.runs.workspace import Workspace
    from ortlab.settings.config import Precision, Recipe
    from tests.support.models import conv_bn_model

    src, cand = conv_bn_model(tmp_path / "m.onnx"), conv_bn_model(tmp_path / "c.onnx", seed=1)
    ws = Workspace(tmp_path / "ws")
    tuner = Tuner(src, None, DataRef(random=4), workspace=ws, out_dir=tmp_path / "out",
                  settings=TuneSettings(budget_s=60, exclusion_steps=0, bench_s=0.5))
    t = Trial(1, "int8 static", Stage.SEARCH, Recipe(precision=Precision.INT8), model_path=str(cand), run_id=9)
    try:
        t = tuner.timing.time(t, tuner.budget.token)
    finally:
        tuner.release_timing()
    (rec,) = ws.history().list_benchmarks()
    assert isinstance(rec, BenchmarkRecord) and rec.origin == "tune" and rec.machine is not None
    assert rec.machine.same_hardware(this_machine())
    assert [(v.id, v.run_id) for v in rec.variants] == [("source", None), ("run", 9)]
    ref, run = rec.summaries
    assert len(ref.round_p50s) == len(run.round_p50s) > 0  # interleaved: the speed-up has its interval
    artifact = dataclasses.replace(inputs()[0], run_id=9, source_path=src)
    timing = report_timing(ws.history(), artifact)
    assert timing.speed == (ref, run)


def test_the_history_sentence_of_a_run_says_its_speed_interval_and_machine(tmp_path):
    artifact = inputs()[0]
    h = History(tmp_path / "h.db")
    assert report_timing(h, artifact).sentence().startswith("Speed: not timed yet")
    h.add_benchmark([BenchVariant("source", "source", str(artifact.source_path)),
                     BenchVariant("run", "int8", str(artifact.model_path), artifact.run_id)], BenchConfig(),
                    [dataclasses.replace(x, variant=v) for x, v in zip(_pair(), ("source", "run"))], machine=XEON)
    text = report_timing(h, artifact).sentence()
    assert text.startswith("Speed at batch 1: 1.00 ms p50 (95% interval 0.98–1.02) against 2.00 ms for the source: "
                           "2.00× faster (95% interval 2.00–2.00×, 12 interleaved rounds)")
    assert text.endswith("; timed on another machine: " + XEON.summary() + ".")


def test_a_speed_up_of_one_round_claims_no_interval():
    """One interleaved round has no spread to bound: the text says so instead of "(0.85–0.85×, 1 rounds)"."""
    from ortlab.runs.stored_timing import speed_interval_text
    from ortlab.timing.stats import SpeedUp

    one = SpeedUp(1, 1 / 0.85, 1 / 0.85, 1 / 0.85, 1, 10, 10, 0.0, 17.55, 20.56)
    assert speed_interval_text(one).startswith("(1 interleaved round: no interval;") and "–" not in one.text()
    assert "busy" not in speed_interval_text(one)  # noisy for want of rounds, not because of the machine
    assert one.text() == "0.85× (1 round: no interval)"
    many = dataclasses.replace(one, rounds=12, low=1 / 0.9, high=1 / 0.8)
    assert "12 interleaved rounds" in speed_interval_text(many) and "12 rounds" in many.text()
