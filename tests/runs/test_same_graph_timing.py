"""Identical graphs share one measurement: Compare's speed of a pair is the stored timing of the same two graphs
(same sha256) at batch 1 on the same hardware, whatever their files are called; a timing of other bytes, or one from
another machine, is not taken for them."""

from __future__ import annotations

import dataclasses
import shutil

from ortlab.runs.history import BenchVariant, History
from ortlab.runs.stored_timing import TimedModel, latest_pair
from ortlab.runtime.machine import this_machine
from ortlab.settings.config import BenchConfig
from ortlab.timing.bench import LatencySummary
from tests.support.models import conv_bn_model


def _summary(variant: str, p50: float) -> LatencySummary:
    rounds = [p50 * (1 + 0.01 * (i % 3)) for i in range(12)]
    return LatencySummary(variant, 1, 36, p50, p50 * 1.1, p50 * 1.3, p50, 0.01, p50 * 0.9, p50 * 1.5, 1000 / p50,
                          round_p50s=rounds)


def test_a_copy_of_a_timed_pair_reuses_its_measurement_on_this_machine_only(tmp_path):
    ref, cand = conv_bn_model(tmp_path / "ref.onnx", seed=1), conv_bn_model(tmp_path / "cand.onnx", seed=2)
    other = conv_bn_model(tmp_path / "other.onnx", seed=3)  # the same size, other weights
    h = History(tmp_path / "history.sqlite")
    here = this_machine()
    bench = h.add_benchmark([BenchVariant("r", "r", str(ref)), BenchVariant("c", "c", str(cand))], BenchConfig(),
                            [_summary("r", 4.0), _summary("c", 2.0)], machine=here)
    (tmp_path / "copies").mkdir()
    ref2, cand2 = (shutil.copy(p, tmp_path / "copies" / p.name) for p in (ref, cand))
    pair = latest_pair(h, TimedModel(None, str(ref2)), TimedModel(17, str(cand2)))  # the copies, one as a run
    assert pair is not None and pair.bench_id == bench and pair.speedup == 2.0
    assert latest_pair(h, TimedModel(None, str(ref2)), TimedModel(None, str(other))) is None  # other bytes
    elsewhere = dataclasses.replace(here, cpu="Some Other CPU", cores=here.cores + 64)
    assert latest_pair(h, TimedModel(None, str(ref2)), TimedModel(None, str(cand2)), here=elsewhere) is None
    # the very files are still found from any machine, labelled with the machine that timed them
    assert latest_pair(h, TimedModel(None, str(ref)), TimedModel(None, str(cand)), here=elsewhere) is not None
