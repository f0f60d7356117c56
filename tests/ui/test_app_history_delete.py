"""Issue 38 (9): deleting a History run names the benchmarks deleted with it (their numbers and what they timed),
before (in the confirmation) and after (in the message); "deleted 2 benchmarks" said not which."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from ortlab.model.importing import import_model
from ortlab.runs.history import BenchVariant
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import BenchConfig
from ortlab.ui.session.inert import md
from tests.runs.test_stored import _run
from tests.support.app_session import started_app
from tests.support.models import conv_bn_model
from tests.ui.test_app import TIMEOUT


def test_deleting_a_run_names_the_benchmarks_that_timed_it(home, tmp_path, monkeypatch):
    ws = Workspace(home)
    model = import_model(conv_bn_model(tmp_path / "mine.onnx", seed=3), ws.models_dir)
    run, other = _run(ws, model, 1000), _run(ws, model, 900)
    h = ws.history()
    pair = h.add_benchmark([BenchVariant("original", "original · mine.onnx", str(model)),
                            BenchVariant(f"run{run.run_id}", f"#{run.run_id} fp32 · extended", str(run.model_path),
                                         run.run_id)], BenchConfig(batch_sizes=(1, 8)), [])
    alone = h.add_benchmark([BenchVariant(f"run{run.run_id}", f"#{run.run_id} fp32 · extended",
                                          str(run.model_path), run.run_id)], BenchConfig(), [])
    kept = h.add_benchmark([BenchVariant(f"run{other.run_id}", "other", str(other.model_path), other.run_id)],
                           BenchConfig(), [])
    at = started_app(monkeypatch, TIMEOUT)
    at.switch_page("pages/history.py").run()
    at.selectbox(key="history.run").set_value(run.run_id).run()
    at.button(key="history.delete").click().run()
    [ask] = [w.value for w in at.warning if "cannot be undone" in w.value]
    assert "the 2 benchmarks that timed it" in ask, ask
    assert md(f"benchmark #{pair} of ") in ask and md(f": original · mine.onnx vs #{run.run_id} fp32 · extended, "
                                                     "batch sizes 1, 8") in ask, ask
    assert md(f"benchmark #{alone} of ") in ask and f"benchmark #{kept}" not in ask
    at.button(key="history.delete_yes").click().run()
    assert not at.exception, [e.value for e in at.exception]
    [done] = [s.value for s in at.success if "Deleted run" in s.value]
    assert md(f"Deleted run #{run.run_id} and the 2 benchmarks that timed it (benchmark #{pair} of ") in done, done
    assert md(f"benchmark #{alone} of ") in done and md(", batch size 1)") in done, done
    assert [b.id for b in h.list_benchmarks()] == [kept]
