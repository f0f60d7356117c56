"""The Streamlit app driven end to end with AppTest on the real bundled sample (jobs run synchronously)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest
from ortlab.ui.session.actions import DEMO_RECIPE
from tests.support.app_session import APP, navigation_mode_like_the_server

pytestmark = pytest.mark.slow  # AppTest walks of the app on the real sample: the demo runs a recipe and a benchmark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_models" / "digits_cnn" / "model.onnx"
TIMEOUT = 120


@pytest.fixture(autouse=True)
def _server_like_navigation(monkeypatch):
    navigation_mode_like_the_server(monkeypatch)


def model_bytes(tmp_path) -> bytes:
    if SAMPLE.is_file():
        return SAMPLE.read_bytes()
    from tests.support.models import conv_bn_model

    return conv_bn_model(tmp_path / "conv.onnx").read_bytes()


def _with_ir_version(data: bytes, ir_version: int) -> bytes:
    import onnx

    m = onnx.load_from_string(data)
    m.ir_version = ir_version
    return m.SerializeToString()


def new_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def percent(text: str) -> float:
    return float(re.search(r"([\d.]+)%", text).group(1))


def _texts(block) -> list[str]:
    out = []
    for c in getattr(block, "children", {}).values():
        if getattr(c, "children", None):
            out += _texts(c)
        elif c.type in ("markdown", "caption", "alert", "info", "warning"):
            out.append(str(c.value))
    return out


def sidebar_text(at) -> str:
    return "\n".join(_texts(at.sidebar))


@pytest.fixture(scope="module")
def demo_app(tmp_path_factory):
    """One app session that ran the demo (shared by the tests that only look at its results)."""
    home = tmp_path_factory.mktemp("demo")
    mp = pytest.MonkeyPatch()
    mp.setenv("ORTLAB_HOME", str(home / "home"))
    mp.setenv("ORTLAB_SYNC_JOBS", "1")
    mp.chdir(home)
    navigation_mode_like_the_server(mp)
    at = new_app()
    at.button(key="demo_run").click().run()
    yield at, home / "home"
    mp.undo()


def test_a_page_opened_first_outside_the_router_reroutes_through_app_py(home, monkeypatch):
    """The first URL after a server start may run pages/history.py without app.py; it must still get the
    sidebar and the first-open defaults."""
    monkeypatch.undo()
    monkeypatch.setenv("ORTLAB_HOME", str(home))
    monkeypatch.setenv("ORTLAB_SYNC_JOBS", "1")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/history.py").run()
    assert not at.exception
    assert at.title[0].value.endswith("History")
    assert "**Model** · " in sidebar_text(at) and "Providers" in sidebar_text(at)


def test_every_page_opens_with_the_default_sample(home):
    at = new_app()
    assert at.title[0].value.endswith("Model")
    # the first view says in one line what ortlab does, right under the title
    assert at.caption[0].value.startswith("ortlab makes an ONNX model smaller and faster")
    assert "ok, degraded or broken" in at.caption[0].value
    m = metrics(at)
    assert m["Opset"] == "17" and m["Inputs / outputs"] == "1 / 1"
    assert int(m["Nodes"].replace(",", "")) > 5
    assert at.selectbox(key="sample_select").value == "digits_cnn"
    assert at.button(key="demo_run").proto.type == "primary"
    assert "CPU" in sidebar_text(at) and "digits_cnn" in sidebar_text(at)
    for page, title in [("pages/data.py", "Data"), ("pages/recipe.py", "Recipe"), ("pages/compare.py", "Compare"),
                        ("pages/benchmark.py", "Benchmark"), ("pages/history.py", "History")]:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title[0].value.endswith(title)
        assert not at.error, (page, [e.value for e in at.error])
    # the Data page shows the sample's images with their labels and what the model receives
    at.switch_page("pages/data.py").run()
    m = metrics(at)
    assert m["Batch size"] == "4" and m["dtype"] == "float32"
    assert "Input input · batch shape [4, 1, 32, 32]" in [c.value for c in at.caption]  # a caption: never wraps
    assert int(m["Calibration samples available"]) >= 10


def test_demo_lands_on_compare_with_everything_filled_in(demo_app):
    at, home = demo_app
    assert not at.exception
    assert at.title[0].value.endswith("Compare")
    # the verdict is shown once, in Compare's banner; the landing note says only what ran
    banners = [m.value for m in at.markdown if "ortlab-verdict" in m.value]
    assert len(banners) == 1
    assert not [a.value for a in [*at.success, *at.info, *at.warning, *at.error] if "verdict" in str(a.value).lower()]
    assert any(c.value.startswith("Ran ") and "its verdict is above" in c.value for c in at.caption)
    m = metrics(at)
    assert percent(m["Size ratio"]) < 40.0          # int8 weights: about a quarter of fp32
    assert percent(m["Top-1 reference"]) >= 90.0
    assert percent(m["Top-1 candidate"]) >= 85.0
    assert percent(m["Top-1 agreement"]) >= 85.0
    assert m["SQNR (worst output)"].endswith("dB")
    assert int(m["Removed nodes"]) > 0 and int(m["Added nodes"]) > 0
    assert any("QuantizeLinear" in str(c.value) or "Quantize" in str(c.value) for c in at.markdown) or \
        any("QuantizeLinear" in str(d.value) for d in at.dataframe)
    assert len(list((home / "artifacts").glob("*/model.onnx"))) == 1
    assert "Artifacts** · 1" in sidebar_text(at)
    # one name for the sample on every page: its title, never its file's name
    assert "Model** · Digits ResNet (ours)" in sidebar_text(at)
    assert at.selectbox(key="compare.ref").format_func(at.selectbox(key="compare.ref").value).endswith(
        "Digits ResNet (ours)")
    # Compare shows speed: a batch-1 timing of the pair, run in the background and recorded in History
    from ortlab.runs.history import BenchmarkRecord, History

    recs = [r for r in History(home / "history.sqlite").list_benchmarks() if isinstance(r, BenchmarkRecord)]
    assert len(recs) == 1 and recs[0].config.batch_sizes == (1,)
    from ortlab.timing.stats import of_summaries

    timed = {s.variant: s for s in recs[0].summaries}
    ref_id, cand_id = at.selectbox(key="compare.ref").value, at.selectbox(key="compare.cand").value
    assert metrics(at)["Latency b1 · candidate (p50)"] == f"{timed[cand_id].p50:.2f} ms"
    speed = of_summaries(timed[ref_id], timed[cand_id])  # the one statistic: the median of the rounds' ratios
    assert speed is not None and speed.paired
    assert metrics(at)["Speed-up (p50)"].startswith(f"{speed.speedup:.2f}×")
    # never a bare number: the card's delta is its interval or its caveat, its help the interval and the rounds
    card = next(m for m in at.metric if m.label == "Speed-up (p50)")
    lo, hi = speed.speedup_range
    interval = f"95% interval {lo:.2f}–{hi:.2f}×, {speed.rounds} rounds"
    # timed until settled (±10 % or 20 s): the caveat is that loop's ("noisy: the machine was busy" when still wide)
    from ortlab.timing.settle import settled

    caveat = settled(speed).caveat()
    assert card.delta == (f"{caveat} · {interval}" if caveat else interval) and card.help.startswith(interval)


def test_compare_glosses_its_jargon_in_help_tooltips(demo_app):
    """Issue 28 (10): SQNR, p50, near-tie flips and QDQ were shown with no plain gloss; each now has one in the
    help of the card, table column or select that shows it."""
    import json

    at, _ = demo_app
    helps = {m.label: m.proto.help for m in at.metric}
    assert "higher is closer" in helps["SQNR (worst output)"], helps
    assert any(label.endswith("(p50)") and "median latency" in h for label, h in helps.items()), helps
    assert "QuantizeLinear/DequantizeLinear" in at.selectbox(key="compare.cand").help
    columns = {}
    for df in at.dataframe:
        config = json.loads(df.proto.columns or "{}")
        columns.update({k.removeprefix("name:") if isinstance(k, str) else k: v.get("help")
                        for k, v in config.items() if isinstance(v, dict)})
    assert "almost tied" in (columns.get("metric") or ""), columns
    assert "higher is closer" in (columns.get("SQNR") or ""), columns


def test_the_demo_verifies_on_as_many_samples_as_the_cli_by_default(demo_app):
    """The app and the CLI judge the same recipe on the same number of samples (they were 64 and 32)."""
    from ortlab.cli.main import build_parser
    from ortlab.runs.artifact import load_artifact

    _, home = demo_app
    (model,) = (home / "artifacts").glob("*/model.onnx")
    app_n = load_artifact(model.parent).spec.verify_samples
    cli_n = build_parser().parse_args(["optimize", "model.onnx", "out.onnx"]).verify_samples
    assert app_n == cli_n == 64


def test_the_sidebar_counts_the_current_models_artifacts(demo_app):
    """The demo made one artifact of digits_cnn: another model has none of its own (the other's is named apart)."""
    at, _ = demo_app
    at.switch_page("pages/model.py").run()
    at.selectbox(key="sample_select").set_value("digits_attention").run()
    assert not at.exception
    assert "Artifacts** · 0 (+1 of other models)" in sidebar_text(at)
    at.selectbox(key="sample_select").set_value("digits_cnn").run()
    assert "Artifacts** · 1\n" in sidebar_text(at) + "\n" and "other models" not in sidebar_text(at)


def test_state_follows_between_pages_and_history_offers_downloads(demo_app):
    at, home = demo_app
    at.switch_page("pages/recipe.py").run()
    assert not at.exception
    runs = at.dataframe[-1].value
    assert len(runs) == 1 and "int8 static QDQ" in runs["recipe"].iloc[0]
    at.switch_page("pages/history.py").run()
    assert not at.exception
    listing = at.dataframe[0].value
    assert len(listing) == 1 and listing["model"].iloc[0] == "Digits ResNet (ours)"  # the sample's title
    keys = {b.key for b in at.download_button}
    assert {"history.dl_model", "history.dl_recipe", "history.dl_cli", "history.dl_report"} <= keys
    # a download does not rerun the page (its rerun could drop the deferred file before the browser asks for it)
    assert all(b.proto.ignore_rerun for b in at.download_button)
    # every file is made when its button is clicked and served only around that click, the recipe and the CLI
    # line too: bytes handed over with the page stayed at their /media URL for anyone (another user, no sign-in)
    deferred = {b.key for b in at.download_button if b.proto.deferred_file_id and not b.proto.url}
    assert deferred == {b.key for b in at.download_button}, [(b.key, b.proto.url) for b in at.download_button]
    assert "ortlab optimize" in at.code[0].value and "--quant-mode static" in at.code[0].value
    at.button(key="history.load").click().run()
    assert not at.exception
    assert at.title[0].value.endswith("Compare")
    assert percent(metrics(at)["Size ratio"]) < 40.0
    at.switch_page("pages/model.py").run()
    assert at.selectbox(key="sample_select").value == "digits_cnn"


def test_benchmark_runs_and_is_stored(demo_app):
    at, home = demo_app
    at.switch_page("pages/benchmark.py").run()
    assert not at.exception
    assert len(at.multiselect(key="bench.variants").value) == 2
    assert at.number_input(key="bench.duration_s").value == 3.0  # long enough to watch the chart grow
    at.number_input(key="bench.duration_s").set_value(0.0).run()
    at.number_input(key="bench.runs").set_value(15)
    at.number_input(key="bench.warmup").set_value(2)
    at.toggle(key="bench.memory").set_value(False)
    at.button(key="bench.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    final = at.dataframe[-1].value
    assert list(final["runs"]) == [15, 15]
    assert final["speedup (p50)"].iloc[0] == "baseline"
    assert final["IQR ms"].iloc[1] != "–" and "–" in final["p50 95% interval"].iloc[1]  # spreads shown
    from ortlab.runs.history import History

    stored = History(home / "history.sqlite").list_benchmarks()
    # the newest first; the one before it is Compare's batch-1 timing of the pair after the demo
    assert len(stored) == 2 and len(stored[0].summaries) == 2 and stored[1].config.batch_sizes == (1,)
    assert [v.id for v in stored[0].variants] == [s.variant for s in stored[0].summaries]
    # timed interleaved: both series in the same rounds (15 runs → 8 rounds of 2, the last of 1)
    assert [len(s.round_p50s) for s in stored[0].summaries] == [8, 8]


def test_benchmark_results_come_in_one_table_with_one_noise_note_and_the_live_chart_draws_one_batch_size(demo_app):
    """Issue 28: once the benchmark is done its numbers are in one table (the live table is gone), noise is said in
    at most one warning, and the per-run chart draws the first batch size with the others in its legend."""
    import json

    at, _ = demo_app
    at.switch_page("pages/benchmark.py").run()
    at.text_input(key="bench.batch_sizes").set_value("1, 2").run()
    at.number_input(key="bench.duration_s").set_value(0.0).run()
    at.number_input(key="bench.runs").set_value(12)
    at.number_input(key="bench.warmup").set_value(1)
    at.toggle(key="bench.memory").set_value(False)
    at.button(key="bench.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 4  # 2 variants × 2 batch sizes, once
    assert len(at.warning) <= 1, [w.value for w in at.warning]
    live = next(c for c in at.get("plotly_chart") if "bench_live" in c.proto.id)
    traces = json.loads(live.proto.spec)["data"]
    drawn = {t["legendgroup"] for t in traces if t.get("visible", True) is True}
    hidden = {t["legendgroup"] for t in traces if t.get("visible") == "legendonly"}
    assert drawn and all(g.endswith("@1") for g in drawn) and hidden and all(g.endswith("@2") for g in hidden)
    at.text_input(key="bench.batch_sizes").set_value("1").run()  # the tests after this one time batch 1 only


def test_benchmark_times_under_openvino_beside_onnx_runtime(demo_app, monkeypatch):
    at, home = demo_app
    from ortlab import api

    at.switch_page("pages/benchmark.py").run()
    at.number_input(key="bench.duration_s").set_value(0.0).run()
    at.number_input(key="bench.runs").set_value(10)
    at.toggle(key="bench.memory").set_value(False)
    at.toggle(key="bench.openvino").set_value(True)
    at.button(key="bench.run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    final = at.dataframe[-1].value
    ov = final[final["variant"].str.endswith("· OpenVINO")]
    bf16 = final[final["variant"].str.endswith("· OpenVINO bf16")]  # the baseline in bf16 where the CPU has it
    from ortlab.runtime import hardware, openvino

    n_bf16 = int(openvino.bf16_supported(hardware.detect()))
    assert len(final) == 4 + n_bf16 and len(ov) == 2 and list(ov["runs"]) == [10, 10] and len(bf16) == n_bf16
    assert any("OpenVINO CPU" in c.value for c in at.caption)
    monkeypatch.setattr(api.machine, "openvino_available", lambda: False)
    at.run()
    assert not [t for t in at.toggle if t.key == "bench.openvino"]
    assert any(api.machine.OPENVINO_INSTALL_HINT in c.value for c in at.caption)


def test_upload_a_model(home, tmp_path):
    at = new_app()
    data = model_bytes(tmp_path)
    at.file_uploader(key="model_upload").set_value(("my_model.onnx", data, "application/octet-stream")).run()
    assert not at.exception and not at.error
    assert at.subheader[0].value == "my_model.onnx"
    stored = list((home / "models").glob("*/*.onnx"))
    assert len(stored) == 1 and stored[0].read_bytes() == data
    assert at.selectbox(key="sample_select").value is None
    at.switch_page("pages/recipe.py").run()
    assert "my_model.onnx" in sidebar_text(at)


def test_an_upload_whose_name_has_a_nul_and_slashes_is_imported_under_a_clean_name(home, tmp_path):
    at = new_app()
    data = model_bytes(tmp_path)
    at.file_uploader(key="model_upload").set_value(("../evil\x00name\u202e.onnx", data, "")).run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert at.subheader[0].value.replace("\\", "") == "evil_name_.onnx"  # as shown: markdown escapes "_"
    (warning,) = [w.value for w in at.warning if "control characters or path separators" in w.value]
    assert "\n" not in warning and "\x00" not in warning and "evil_name_.onnx" in warning.replace("\\", "")
    stored = list((home / "models").glob("*/*.onnx"))
    assert len(stored) == 1 and stored[0].read_bytes() == data and "\x00" not in str(stored[0])
    assert at.file_uploader(key="model_upload")  # the uploader is still there
    at.file_uploader(key="model_upload").set_value(("second.onnx", model_bytes(tmp_path / "b"), "")).run()
    assert not at.exception and at.subheader[0].value == "second.onnx"


def test_an_upload_with_a_300_character_name_is_imported_under_a_shortened_name_that_keeps_onnx(home, tmp_path):
    """A name longer than 200 characters lost its ".onnx" when it was cut, and Streamlit stopped the page with
    "Invalid file extension"; the note said it had control characters."""
    at = new_app()
    data = model_bytes(tmp_path)
    at.file_uploader(key="model_upload").set_value(("m" * 295 + ".onnx", data, "")).run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert at.subheader[0].value == "m" * 195 + ".onnx"
    (warning,) = [w.value for w in at.warning if "300 characters long" in w.value]
    assert "control characters" not in warning and "\n" not in warning
    stored = list((home / "models").glob("*/*.onnx"))
    assert len(stored) == 1 and stored[0].read_bytes() == data


def test_the_model_page_reads_uploads_and_imports_only_in_a_child_process(home, tmp_path, no_parsing_here,
                                                                         monkeypatch):
    """Uploading (or importing from a path) validates and inspects the model in a child process: nothing in the
    server parses, checks or inspects it, and the page shows the child's summary."""
    from ortlab.model.inspect import inspect_model
    from ortlab.ui.session import actions
    from tests.support.models import conv_bn_model, matmul_model

    up, local = conv_bn_model(tmp_path / "conv.onnx"), matmul_model(tmp_path / "mm.onnx")
    nodes = [str(inspect_model(p).node_count) for p in (up, local)]
    monkeypatch.setattr(actions, "local_imports_allowed", lambda: True)  # the app listens on loopback only
    monkeypatch.setenv("ORTLAB_IMPORT_ROOTS", str(tmp_path))
    at = new_app()
    at.toggle(key="model_netron").set_value(False).run()  # Netron lists a small model's files by parsing it here
    calls = no_parsing_here()
    at.file_uploader(key="model_upload").set_value(("mine.onnx", up.read_bytes(), "")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.subheader[0].value == "mine.onnx" and metrics(at)["Nodes"] == nodes[0]
    at.text_input(key="model_local_path").set_value(str(local))
    next(b for b in at.button if b.label == "Import").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.subheader[0].value == "mm.onnx" and metrics(at)["Nodes"] == nodes[1]
    assert not calls


@pytest.mark.parametrize("name,make,message", [
    ("model.onnx", lambda b: b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, "not an ONNX model"),
    ("model.onnx", lambda b: b[: len(b) // 2], "truncated"),
    ("ir14.onnx", lambda b: _with_ir_version(b, 14), "IR version 14"),  # refused once stored, it was left there
])
def test_bad_upload_shows_the_engine_message_and_keeps_the_model(home, tmp_path, name, make, message):
    at = new_app()
    before = at.session_state["ortlab.model_path"]
    nodes = metrics(at)["Nodes"]
    at.file_uploader(key="model_upload").set_value((name, make(model_bytes(tmp_path)), "application/octet-stream"))
    at.run()
    assert not at.exception
    assert at.error and message in at.error[0].value, [e.value for e in at.error]
    assert "still selected" in at.error[0].value
    assert at.session_state["ortlab.model_path"] == before
    assert metrics(at)["Nodes"] == nodes
    assert not [p for p in (home / "models").rglob("*") if p.is_file()]  # a refused upload leaves nothing


def test_bad_zip_upload_is_refused(home):
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../evil.onnx", b"x" * 100)
    at = new_app()
    at.file_uploader(key="model_upload").set_value(("model.zip", buf.getvalue(), "application/zip")).run()
    assert not at.exception
    assert at.error and "Importing model.zip failed" in at.error[0].value
    assert at.selectbox(key="sample_select").value == "digits_cnn"


def test_recipe_int8_on_gpu_is_explained_and_cannot_run(home):
    at = new_app()
    at.switch_page("pages/recipe.py").run()
    assert not at.button(key="recipe.run").disabled
    at.radio(key="recipe.precision").set_value(at.radio(key="recipe.precision").options[2]).run()
    assert at.radio(key="recipe.quant.mode") is not None      # quantization knobs appear for int8 only
    at.radio(key="recipe.target").set_value(at.radio(key="recipe.target").options[1]).run()
    assert not at.exception
    assert any("TensorRT" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="recipe.run").disabled
    at.radio(key="recipe.target").set_value(at.radio(key="recipe.target").options[0]).run()
    assert not at.error and not at.button(key="recipe.run").disabled


def leaves(block):
    """Every element under an AppTest block, containers opened, in page order."""
    for c in getattr(block, "children", {}).values():
        if getattr(c, "children", None):
            yield from leaves(c)
        else:
            yield c


def test_int8_dynamic_with_nothing_to_quantize_says_so_before_the_run(home):
    at = new_app()
    at.switch_page("pages/recipe.py").run()
    at.radio(key="recipe.precision").set_value(at.radio(key="recipe.precision").options[2]).run()
    mode = at.radio(key="recipe.quant.mode")
    mode.set_value(next(v for v in (mode.value.__class__) if v.value == "dynamic")).run()
    assert not at.exception
    assert not any("Nothing to quantize" in w.value for w in at.warning)  # digits_cnn has one Gemm
    at.multiselect(key="recipe.quant.op_types_to_exclude").set_value(["Gemm"]).run()
    assert any("Nothing to quantize" in w.value and "MatMul" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    assert not any("This recipe is valid here" in s.value for s in at.success)


@pytest.mark.parametrize("cpu", ["avx2", "avx512-vnni"])
def test_the_recipe_page_says_what_a_run_would_of_full_range_u8s8_on_this_cpu(home, monkeypatch, cpu):
    """The page checks a recipe as a run of it here does: on x86 without VNNI, full-range U8S8 is a warning (and the
    recipe is not called valid), reduce-range on a note; with VNNI neither, and the CPU's caption says why."""
    monkeypatch.setenv("ORTLAB_CPU", cpu)
    at = new_app()
    at.switch_page("pages/recipe.py").run()
    at.radio(key="recipe.precision").set_value(at.radio(key="recipe.precision").options[2]).run()
    at.toggle(key="recipe.quant.reduce_range").set_value(False).run()
    assert not at.exception
    warned = [w.value for w in at.warning if "quant.reduce_range" in w.value]
    valid = any("This recipe is valid here" in s.value for s in at.success)
    if cpu == "avx2":
        assert len(warned) == 1 and "saturate" in warned[0] and not valid, warned
        at.toggle(key="recipe.quant.reduce_range").set_value(True).run()
        assert not [w for w in at.warning if "quant.reduce_range" in w.value]
        assert any("Reduce-range is on" in i.value for i in at.info), [i.value for i in at.info]
        assert any("This recipe is valid here" in s.value for s in at.success)
    else:
        assert not warned and valid
        assert any("This CPU:" in c.value for c in at.caption), [c.value for c in at.caption]


def test_recipe_page_runs_a_recipe_in_the_background_job(home):
    at = new_app()
    at.switch_page("pages/recipe.py").run()
    assert at.radio(key="recipe.precision").value.value == "fp32"
    assert not [r for r in at.radio if r.key.startswith("recipe.quant.")]   # int8 knobs hidden for fp32
    at.radio(key="recipe.opt_level").set_value(at.radio(key="recipe.opt_level").options[1]).run()   # basic
    at.button(key="recipe.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Finished fp32 · cpu · basic" in s.value for s in at.success), [s.value for s in at.success]
    # the run's panel is drawn right below "Run recipe", where the person clicked, not at the top of the page
    order = [(e.type, getattr(e, "key", None) or str(getattr(e, "value", ""))[:40]) for e in leaves(at.main)]
    run_at = next(i for i, (t, k) in enumerate(order) if k == "recipe.run")
    done_at = next(i for i, (t, k) in enumerate(order) if t == "success" and k.startswith("Finished fp32"))
    assert done_at > run_at, order
    runs = at.dataframe[-1].value
    assert len(runs) == 1 and runs["recipe"].iloc[0] == "fp32 · cpu · basic"
    assert runs["top-1"].iloc[0] != "–"
    from ortlab.runs.history import History

    assert [r.kind for r in History(home / "history.sqlite").list()] == ["fp32"]


def test_upload_images_as_a_zip_with_class_folders(home):
    import zipfile

    src = ROOT / "sample_models" / "digits_cnn" / "evaluation"
    files = sorted(src.glob("*/*.png"))[:40:4]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in files:
            zf.write(f, f"{f.parent.name}/{f.name}")
    at = new_app()
    at.switch_page("pages/data.py").run()
    at.radio(key="data.source").set_value("images").run()
    at.file_uploader(key="data_upload").set_value([("digits.zip", buf.getvalue(), "application/zip")]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert f"uploaded images ({len(files)})" in sidebar_text(at)
    # split into disjoint parts, every third sample of each class held out for evaluation
    from collections import Counter

    held_out = sum(n // 3 for n in Counter(f.parent.name for f in files).values())
    assert held_out >= 1 and f"{len(files) - held_out} to calibrate, {held_out} held out to evaluate" in \
        sidebar_text(at)
    assert metrics(at)["Calibration samples available"] == str(len(files) - held_out)
    assert metrics(at)["Evaluation samples available"] == str(held_out)
    assert len(at.get("image")) >= 1


def test_random_data_needs_the_checkbox_and_is_flagged_everywhere(home):
    at = new_app()
    at.switch_page("pages/data.py").run()
    at.radio(key="data.source").set_value("random").run()
    assert any("meaningless" in w.value for w in at.warning)
    assert "random" not in sidebar_text(at).split("Data")[1].split("\n")[0]     # not used until confirmed
    at.checkbox(key="data.random_ok").check().run()
    assert not at.exception
    assert "random (32)" in sidebar_text(at)
    at.switch_page("pages/recipe.py").run()
    assert any("RANDOM" in w.value for w in at.warning)


def graph_diff_args(at) -> dict:
    """The arguments the Compare page handed to the graph-diff component (Cytoscape.js, in the browser)."""
    import json

    found = [e for e in at.get("component_instance") if "graphdiff" in e.proto.component_name]
    assert len(found) == 1, [e.proto.component_name for e in at.get("component_instance")]
    return json.loads(found[0].proto.json_args)


def test_compare_focus_narrows_the_diff_graph(demo_app):
    def graph_nodes(a) -> int:  # boxes of the after pane (the candidate's graph)
        return sum(1 for e in graph_diff_args(a)["panes"]["after"]["elements"] if "source" not in e["data"])

    at, _ = demo_app
    at.switch_page("pages/compare.py").run()
    whole = graph_nodes(at)
    at.text_input(key="compare.focus").set_value("QLinearConv").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    focused = graph_nodes(at)
    assert 0 < focused < whole
    at.text_input(key="compare.focus").set_value("").run()


def test_compare_shows_one_count_of_changes_in_the_header_cards_and_graph(demo_app):
    """The "What changed" cards, the line above them and the graph view's header read the same numbers
    (GraphDiff.counts)."""
    at, _ = demo_app
    at.switch_page("pages/compare.py").run()
    m = metrics(at)
    cards = {k: int(m[f"{k.capitalize()} nodes"]) for k in ("removed", "added", "changed", "unchanged")}
    assert cards["removed"] > 0 and cards["added"] > 0
    header = graph_diff_args(at)["header"]
    line = next(str(c.value) for c in at.caption if str(c.value).startswith(f"{cards['removed']} removed"))
    assert line == header
    said = {k: int(re.search(rf"(\d+) {k}", header).group(1)) for k in cards}
    assert said == cards
    panes = graph_diff_args(at)["panes"]
    assert all(sum(1 for e in panes[side]["elements"] if "source" not in e["data"]) > 0 for side in ("before", "after"))


def test_upload_of_a_bundled_sample_keeps_its_manifest_preprocessing(home):
    from ortlab.data.samples import get_sample

    sample = get_sample("digits_cnn")
    at = new_app()
    at.file_uploader(key="model_upload").set_value(
        ("copy_of_digits.onnx", sample.model_path.read_bytes(), "application/octet-stream")).run()
    assert not at.exception and not at.error
    assert any("same weights as the bundled sample" in m.value for m in at.info)
    assert at.session_state[f"ortlab.m.{sample_sha(sample)}.preprocess"] == sample.preprocess
    assert not at.button(key="demo_run").disabled  # a copy of a sample: the demo runs with the sample's images


def sample_sha(sample) -> str:
    import hashlib

    return hashlib.sha256(sample.model_path.read_bytes()).hexdigest()


def test_upload_of_an_unknown_model_starts_without_data_and_without_the_demo(home, tmp_path):
    """State belongs to a model: the digits images are not carried over to another model, the demo (which
    needs a sample's images) is off and says why, and the digits choices are back when the sample is."""
    at = new_app()
    from tests.support.models import conv_bn_model

    data = conv_bn_model(tmp_path / "conv.onnx").read_bytes()
    at.file_uploader(key="model_upload").set_value(("mine.onnx", data, "")).run()
    assert not at.exception
    assert any("has no data yet" in m.value for m in at.info), [m.value for m in at.info]
    # no grey demo button that offers nothing: a note with the next steps, none of them the page it is on
    assert not [b for b in at.button if b.key == "demo_run"]
    assert any("bundled samples" in c.value and "on the Data page" in c.value and "on the Recipe page" in c.value
               for c in at.caption), [c.value for c in at.caption]
    assert "**Data** · no data" in sidebar_text(at)
    at.switch_page("pages/data.py").run()
    assert not at.exception and not at.success  # nothing is said to fit: there is no data yet
    assert any("No data selected yet" in m.value for m in at.info)
    at.switch_page("pages/recipe.py").run()
    assert not at.dataframe  # no runs of this model
    notes = [c.value for c in at.caption if "bundled samples" in c.value]
    assert notes and all("Recipe page" not in n and "run a recipe here" in n for n in notes), notes
    at.switch_page("pages/model.py").run()
    at.selectbox(key="sample_select").set_value("digits_cnn").run()
    assert "digits_cnn: calibration" in sidebar_text(at)
    assert not at.button(key="demo_run").disabled


def test_a_failed_upload_message_stays_with_its_model(home, tmp_path):
    at = new_app()
    bad = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    at.file_uploader(key="model_upload").set_value(("bad.onnx", bad, "application/octet-stream")).run()
    assert at.error
    at.selectbox(key="sample_select").set_value("efficientnet_lite0").run()
    assert not at.exception and not at.error, [e.value for e in at.error]


def test_benchmark_queue_message_is_gone_once_the_run_left_the_queue():
    from types import SimpleNamespace
    from typing import cast

    from ortlab.core.progress import ProgressEvent
    from ortlab.runs.service import Handle
    from ortlab.ui.jobs import progress_view

    shown = []
    job = SimpleNamespace(stages=["queued", "bench"], state="done",
                          progress={"queued": ProgressEvent("queued", 0, None, "Queued behind 1 benchmark."),
                                    "bench": ProgressEvent("bench", 1, 1, "")})
    import streamlit as st

    def progress(frac, text=""):
        shown.append(text)

    orig = st.progress
    st.progress = progress  # type: ignore[assignment]
    try:
        progress_view.draw_stages(cast("Handle", job))  # a stand-in with the fields draw_stages reads
    finally:
        st.progress = orig
    assert shown and not any("Queued behind" in t for t in shown), shown


def test_history_report_is_built_from_the_stored_run(demo_app):
    at, home = demo_app
    from ortlab.runs.artifact import Artifact
    from ortlab.runs.history import History
    from ortlab.ui.session.actions import run_report

    row = History(home / "history.sqlite").list()[0]
    assert isinstance(row, Artifact)
    html = run_report(row)
    assert row.sha256 in html and row.source_sha256 in html
    assert "QLinearConv" in html and "ortlab optimize" in html
    assert "<script src=\"http" not in html


def test_history_lists_an_unreadable_run_as_such_and_keeps_the_rest(demo_app):
    import sqlite3

    from ortlab.runs.history import History

    at, home = demo_app
    db = home / "history.sqlite"
    good = History(db).list()[0].run_id
    assert good is not None
    broken = History(db).add(History(db).get(good))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET artifact_json = json_set(artifact_json, '$.recipe.sparsity', 1) WHERE id = ?",
                     (broken,))
    conn.close()
    at.switch_page("pages/history.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert list(at.dataframe[0].value["run"]) == [str(good)]  # the column holds text: a search reads "search"
    assert any("cannot be read" in w.value for w in at.warning)
    why = at.dataframe[1].value
    assert list(why["run"]) == [broken] and "sparsity" in why["why"].iloc[0]
    assert at.selectbox(key="history.run").value == good
def test_the_demo_cli_line_reproduces_the_demo_and_both_show_in_history(demo_app, capsys):
    import json
    import shlex

    from ortlab.cli import main as cli
    from ortlab.runs.history import History
    from ortlab.model.inspect import sha256_file

    at, home = demo_app
    row = History(home / "history.sqlite").list()[-1]  # the demo run
    assert row.origin == "app"
    at.switch_page("pages/history.py").run()
    at.selectbox(key="history.run").set_value(row.run_id).run()
    shown = at.code[0].value
    # continued between options, the sample by its name with its own sets left to the CLI's default (issue 38)
    assert "--quant-mode static" in shown and str(home) not in shown and "--calibration" not in shown
    line = " ".join(x.rstrip(" \\").strip() for x in shown.split("\n")).replace('"$ORTLAB_HOME"', str(home))
    assert shlex.split(line)[2] == "digits_cnn", line
    capsys.readouterr()
    assert cli.main(shlex.split(line)[1:]) == 0, capsys.readouterr().err
    out = Path(shlex.split(line)[3])
    assert sha256_file(out) == row.sha256
    capsys.readouterr()
    assert cli.main(["history", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_origin = {r["origin"]: r for r in doc["runs"] if "reason" not in r}  # an earlier test left an unreadable row
    assert set(by_origin) == {"app", "cli"} and by_origin["cli"]["sha256"] == by_origin["app"]["sha256"]
    assert by_origin["app"]["recipe"] == by_origin["cli"]["recipe"] == DEMO_RECIPE.to_dict()
    assert by_origin["cli"]["size_bytes"] > 0


def test_the_verdict_comes_first_on_compare_and_shows_in_history_and_the_report(demo_app):
    at, home = demo_app
    at.switch_page("pages/compare.py").run()
    assert not at.exception
    shown = [c for c in leaves(at.main) if c.type not in ("markdown",) or "<style>" not in str(c.value)]
    assert shown[0].type == "title" and "Compare" in shown[0].value
    assert shown[1].type == "markdown" and "ortlab-verdict" in shown[1].value  # nothing comes before the verdict
    banner = shown[1].value
    assert "Verdict on #" in banner
    from ortlab.runs.artifact import Artifact
    from ortlab.runs.history import History
    from ortlab.ui.session.actions import run_report

    # the demo's run (the shared session may also hold runs other tests added, e.g. the demo's CLI line)
    run = next(r for r in History(home / "history.sqlite").list() if isinstance(r, Artifact) and r.origin == "app")
    assert run.verdict is not None and run.verdict.level.value in banner.lower()
    # a stricter policy in the Compare form re-judges the stored evaluation at once
    at.number_input(key="verdict.min_sqnr_db").set_value(150.0).run()
    assert not at.exception
    banner = next(m.value for m in at.markdown if "ortlab-verdict" in m.value)
    assert "ortlab-verdict-broken" in banner and "SQNR" in banner
    at.switch_page("pages/history.py").run()
    listing = at.dataframe[0].value
    assert listing.columns[0] == "run" and listing["verdict"].iloc[0].endswith(run.verdict.level.value)
    assert any("ortlab-verdict" in m.value for m in at.markdown)
    html = run_report(run)
    assert 'id="verdict"' in html and f"verdict-{run.verdict.level.value}" in html
    # the report has the speed Compare measured, and no warning about ortlab's own output
    assert "Speed at batch 1:" in html and " ms p50" in html
    assert "already uses ONNX Runtime contrib ops" not in html
def test_text_data_and_input_shapes_on_the_data_and_model_pages(home, tmp_path):
    from tests.data.test_inputs import TEXT, make_tokenizer, text_model

    model = text_model(tmp_path / "text.onnx").read_bytes()
    tok = make_tokenizer(tmp_path / "tokenizer.json").read_bytes()
    at = new_app()
    at.file_uploader(key="model_upload").set_value(("bert_like.onnx", model, "application/octet-stream")).run()
    assert not at.exception
    at.switch_page("pages/data.py").run()
    sha = at.session_state["ortlab.model_info"].sha256[:8]
    seq_key = f"shape.{sha}.input_ids.1"
    assert at.number_input(key=seq_key).value is None  # open until the data or the user says
    assert any("Set every open dim of 'input" in w.value for w in at.warning)
    at.radio(key="data.source").set_value("text").run()
    at.number_input(key="data.seq_len").set_value(20).run()
    at.file_uploader(key="text_upload").set_value(("lines.txt", "\n".join(TEXT).encode(), "text/plain")).run()
    at.file_uploader(key="tokenizer_upload").set_value(("tokenizer.json", tok, "application/json")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert f"lines.txt ({len(TEXT)})" in sidebar_text(at)
    assert at.number_input(key=seq_key).value == 20  # from the data
    at.number_input(key=seq_key).set_value(33).run()
    assert not at.exception
    full_sha = at.session_state["ortlab.model_info"].sha256
    assert at.session_state[f"ortlab.m.{full_sha}.input_shapes"] == {"input_ids": [1, 33]}  # this model's own
    assert at.number_input(key=f"shape.{sha}.attention_mask.1").value == 33
    at.switch_page("pages/model.py").run()
    table = next(d.value for d in at.dataframe if "shape used" in d.value.columns)
    assert list(table["input"]) == ["input_ids", "attention_mask"]
    assert list(table["shape used"]) == ["[1, 33]", "[1, 33]"]
    assert any(c.value.startswith("input_ids: ") and "user" in c.value for c in at.caption)  # where it came from


def test_the_first_card_on_compare_is_the_figure_that_decided_the_verdict(demo_app):
    """The demo's classifier is decided by its confident top-1 flips: that card comes before SQNR and sizes."""
    at, home = demo_app
    at.switch_page("pages/compare.py").run()
    at.number_input(key="verdict.min_sqnr_db").set_value(10.0).run()  # the default policy (another test changes it)
    assert not at.exception
    from ortlab.runs.history import History

    run = History(home / "history.sqlite").list()[0]
    assert run.verdict is not None and run.verdict.deciding == "logits: confident top-1 flips"
    first = at.metric[0]
    assert first.label == run.verdict.deciding and first.value == run.verdict.deciding_text
    labels = [m.label for m in at.metric]
    assert labels.index("SQNR (worst output)") > 0 and labels.index("Reference size") > 0
    # a policy under which SQNR breaks it: SQNR decided, so SQNR is the first card (and not repeated)
    at.number_input(key="verdict.min_sqnr_db").set_value(150.0).run()
    assert at.metric[0].label == "logits: SQNR" and "SQNR (worst output)" not in [m.label for m in at.metric]
    at.number_input(key="verdict.min_sqnr_db").set_value(10.0).run()


def test_a_model_with_its_weights_in_constant_nodes_shows_them_and_its_shapes_uncut(home, tmp_path):
    """PP-OCR style: no initializers, the weights in Constant nodes; open dims with the exporter's long names."""
    import json

    from ortlab.core.text import format_bytes
    from tests.support.models import constant_weights_model

    at = new_app()
    data = constant_weights_model(tmp_path / "ppocr.onnx").read_bytes()
    at.file_uploader(key="model_upload").set_value(("ppocr.onnx", data, "")).run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    weights = next(d.value for d in at.dataframe if "stored in" in d.value.columns)
    constant = (8 * 3 * 3 * 3 + 8) * 4  # the Conv's weight and bias, float32
    assert weights.to_dict("records") == [{"dtype": "float", "stored in": "Constant nodes",
                                           "bytes": format_bytes(constant)}]
    assert any(f"stored in Constant nodes ({format_bytes(constant)})" in c.value for c in at.caption)
    io = next(d for d in at.dataframe if "shape" in d.value.columns)
    shape = io.value["shape"][0]
    assert "p2o.DynamicDimension.1" in shape
    width = json.loads(io.proto.columns)["shape"]["width"]
    assert width >= 8 * len(shape)  # as wide as the longest shape: never cut
    # the input-shapes table says where each open dim came from by axis, not by the exporter's name
    # (a sentence under the table: as a column it ran past the page's width, issue 38)
    shapes = next(d.value for d in at.dataframe if "model shape" in d.value.columns)
    assert "from" not in shapes.columns
    said = next(c.value for c in at.caption if "axis 0 (batch)" in c.value)
    assert "axis 0 (batch): batch" in said and "axis 2 (height): unresolved" in said
    assert "p2o" not in said and "p2o.DynamicDimension.1" in shapes["model shape"][0]


def test_the_per_node_caption_names_the_real_number_of_evaluation_samples(demo_app):
    at, home = demo_app
    at.switch_page("pages/compare.py").run()
    from ortlab.runs.history import History

    from ortlab.runs.artifact import Artifact

    run = History(home / "history.sqlite").list()[0]
    assert isinstance(run, Artifact) and run.evaluation is not None
    n = min(32, run.evaluation.n_samples)
    caption = next(c.value for c in at.caption if "evaluation samples" in c.value and "quantized node" in c.value)
    assert f"on {n} evaluation samples" in caption, (n, caption)
    # a run verified on 14 samples (the case) is analysed on those 14, not "32"
    from dataclasses import replace

    from ortlab.ui.views.node_errors import sample_count_text

    assert sample_count_text(replace(run, evaluation=replace(run.evaluation, n_samples=14))) == "14"


def test_open_dims_are_labelled_by_input_and_axis_with_suggested_sizes(home, tmp_path):
    """An exporter's dim names ("p2o.DynamicDimension.1") go to the help; the label says input, axis and meaning."""
    from tests.support.models import constant_weights_model

    at = new_app()
    data = constant_weights_model(tmp_path / "ppocr.onnx").read_bytes()
    at.file_uploader(key="model_upload").set_value(("ppocr.onnx", data, "")).run()
    at.switch_page("pages/data.py").run()
    assert not at.exception, [e.value for e in at.exception]
    fields = {n.label: n for n in at.number_input if n.key and n.key.startswith("shape.")}
    assert list(fields) == ["input x, axis 0 (batch)", "input x, axis 1 (channels)", "input x, axis 2 (height)",
                            "input x, axis 3 (width)"], list(fields)
    assert not any("p2o" in label for label in fields)
    height = fields["input x, axis 2 (height)"]
    assert "p2o.DynamicDimension.1" in height.help and "224, 320, 640" in height.help
    assert "p2o.DynamicDimension" not in fields["input x, axis 1 (channels)"].help  # the model fixes it: no name
    assert height.value is None and height.proto.placeholder == "e.g. 224, 320, 640"
    assert any("axis 2 (height): e.g. 224, 320, 640" in w.value for w in at.warning), [w.value for w in at.warning]


def test_a_fresh_session_opens_compare_on_the_latest_run_and_a_reload_keeps_the_pair(demo_app):
    """Issue 28: a new browser session (a reload is one) over a workspace with runs shows the newest run on Compare,
    not "Nothing to compare yet"; the pair viewed last on Compare is kept in the workspace, so a reload returns."""
    import dataclasses
    import shutil

    from ortlab.runs.artifact import Artifact
    from ortlab.runs.history import History

    _, home = demo_app
    history = History(home / "history.sqlite")
    first = history.list()[-1]
    assert isinstance(first, Artifact)
    # a second run (a copy of the demo's files): the newest
    folder = Path(first.model_path).parent
    copy = folder.with_name(folder.name + "-copy")
    shutil.copytree(folder, copy)
    newest = history.add(dataclasses.replace(first, run_id=None, model_path=copy / Path(first.model_path).name))
    (home / "compare_pair.json").unlink(missing_ok=True)  # the demo session's own pair: not this test's
    fresh = new_app()
    fresh.switch_page("pages/compare.py").run()
    assert not fresh.exception, [e.value for e in fresh.exception]
    assert not any("Nothing to compare yet" in i.value for i in fresh.info)
    assert fresh.selectbox(key="compare.cand").value == f"run{newest}"
    assert fresh.selectbox(key="compare.ref").value == "original"
    assert "Artifacts** · 1" in sidebar_text(fresh)
    # said so (issue 37: a newcomer took it for the bundled sample, with "no data")
    assert f"Reopened from History: run {newest}, the newest run in this workspace" in sidebar_text(fresh)
    # another pair viewed there: a reload (a new session) opens that pair
    fresh.switch_page("pages/history.py").run()
    fresh.selectbox(key="history.run").set_value(first.run_id).run()
    fresh.button(key="history.load").click().run()  # the older run joins the session: Compare offers both
    at = fresh
    at.switch_page("pages/compare.py").run()
    ids = at.selectbox(key="compare.ref").options
    at.selectbox(key="compare.ref").set_value(f"run{newest}").run()
    at.selectbox(key="compare.cand").set_value(f"run{first.run_id}").run()
    assert not at.exception, [e.value for e in at.exception]
    reload = new_app()
    reload.switch_page("pages/compare.py").run()
    assert not reload.exception, [e.value for e in reload.exception]
    assert (reload.selectbox(key="compare.ref").value, reload.selectbox(key="compare.cand").value) == \
        (f"run{newest}", f"run{first.run_id}"), ids
    assert f"Reopened from History: run {first.run_id}, the pair viewed last" in sidebar_text(reload)
    history.delete(newest)
    shutil.rmtree(copy)
    (home / "compare_pair.json").unlink(missing_ok=True)


def test_a_preset_picked_on_the_data_page_is_applied(home):
    """Issue 28: picking a preset applied the sample's name as the preset (an error on a sample, nothing on an
    upload): the form now shows the preset's values, e.g. ImageNet's centre crop and mean/std."""
    at = new_app()
    at.switch_page("pages/data.py").run()
    assert not [w for w in at.warning if "This is the bundled sample" in w.value]
    at.selectbox(key="data.preset").set_value("imagenet").run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    # the values that now differ from the sample's manifest are named, with where they came from
    warned = [w.value for w in at.warning if "This is the bundled sample" in w.value]
    assert len(warned) == 1 and "(preset imagenet)" in warned[0], [w.value for w in at.warning]
    widgets = {w.key: w.value for kind in ("selectbox", "radio", "text_input", "segmented_control")
               for w in at.get(kind) if getattr(w, "key", None)}
    assert widgets["pre.resize_mode"].value == "center_crop" and widgets["pre.scale"].value == "0-1"
    assert widgets["pre.channel_order"].value == "RGB"


def test_the_data_page_offers_the_yolo_preset_for_a_detector_and_credits_its_values(home):
    """Issue 28 (7): an uploaded YOLO-shaped detector (1×3×640×640 in, anchors × 4+classes out) is offered the YOLO
    preset from its shapes; choosing it sets letterbox, credited to the preset (not "you"), and the note about the
    detected preprocessing names the offer instead of contradicting the page."""
    at = new_app()
    detector = ROOT / "tests" / "fixtures" / "yolo_detector.onnx"
    at.file_uploader(key="model_upload").set_value(("detector.onnx", detector.read_bytes(), "")).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data.source").set_value("images").run()
    photos = sorted((ROOT / "sample_models" / "efficientnet_lite0" / "evaluation").rglob("*.jpg"))[:3]
    at.file_uploader(key="data_upload").set_value([(p.name, p.read_bytes(), "image/jpeg") for p in photos]).run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    offers = [m.value.replace("\\", "") for m in at.info if "YOLO (Ultralytics)" in m.value]
    assert offers and "[1, 3, 640, 640]" in offers[0], [m.value for m in at.info]
    assert all("size unknown" not in w.value for w in at.warning)
    at.button(key="data.use_suggested_preset").click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert at.selectbox(key="data.preset").value == "yolo"
    widgets = {w.key: w.value for kind in ("selectbox", "radio", "segmented_control")
               for w in at.get(kind) if getattr(w, "key", None)}
    assert widgets["pre.resize_mode"].value == "letterbox", widgets
    sources = {row["setting"]: row["from"] for row in at.dataframe[-1].value.to_dict("records")}
    assert sources["resize letterbox"] == "preset yolo", sources  # not "you"
    assert sources["size 640×640"] == "detected from a fixed input shape", sources
    assert not [m for m in at.info if "YOLO (Ultralytics)" in m.value]  # chosen: no longer offered


def _open_size_detector(path):
    """A YOLO-shaped detector whose input leaves batch, height and width open: images [batch, 3, height, width] →
    output0 [1, 22, 2100] (4 box + 18 classes on the stride 8/16/32 grids of a 320×320 input)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((22, 3, 1, 1)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 22, 1], np.int64), "shape")
    size = numpy_helper.from_array(np.array([1, 22, 2100], np.int64), "size")
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], axes=[2, 3], keepdims=1),
             helper.make_node("Conv", ["m", "w"], ["c"]),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("Expand", ["r", "size"], ["output0"])]
    graph = helper.make_graph(nodes, "open_yolo", [helper.make_tensor_value_info(
        "images", TensorProto.FLOAT, ["batch", 3, "height", "width"])], [helper.make_tensor_value_info(
        "output0", TensorProto.FLOAT, [1, 22, 2100])], [w, shape, size])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_the_yolo_preset_for_an_open_input_applies_its_size_in_one_click(home, tmp_path):
    """Issue 38 (5): [batch, 3, height, width] in, [1, 22, 2100] out: the YOLO preset is offered, one click applies
    it with its size (320×320 from the 2100 anchors, no red "size open" error), and "Stratified by class" is off for
    unlabelled photos."""
    at = new_app()
    detector = _open_size_detector(tmp_path / "open.onnx")
    at.file_uploader(key="model_upload").set_value(("open.onnx", detector.read_bytes(), "")).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data.source").set_value("images").run()
    photos = sorted((ROOT / "sample_models" / "efficientnet_lite0" / "evaluation").rglob("*.jpg"))[:3]
    at.file_uploader(key="data_upload").set_value([(p.name, p.read_bytes(), "image/jpeg") for p in photos]).run()
    assert not at.exception, [e.value for e in at.exception]
    offers = [m.value.replace("\\", "") for m in at.info if "YOLO (Ultralytics)" in m.value]
    assert offers and "[batch, 3, height, width]" in offers[0] and "320×320" in offers[0], [m.value for m in at.info]
    toggle = at.toggle(key="data.stratify")
    assert toggle.value is False and toggle.proto.disabled  # unlabelled photos: nothing to balance
    at.button(key="data.use_suggested_preset").click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert at.selectbox(key="data.preset").value == "yolo"
    sources = {row["setting"]: row["from"] for row in at.dataframe[-1].value.to_dict("records")}
    assert sources["size 320×320"] == "preset yolo: the 2100 anchors of 'output0'", sources
    assert sources["resize letterbox"] == "preset yolo", sources
    assert any("This data fits the model" in m.value for m in at.success)


def test_the_detected_preprocessing_note_never_claims_an_open_size(monkeypatch):
    """Issue 28 (7): a yellow "detected from the model input (size, …)" beside a red "size unknown" box: the note
    claims the size only when the model fixes it."""
    from types import SimpleNamespace

    from ortlab.model.inspect import TensorInfo
    from ortlab.ui.session.actions import detected_preprocess_note

    out = [TensorInfo("output0", "float32", (1, 84, 8400))]
    fixed = detected_preprocess_note(SimpleNamespace(inputs=[TensorInfo("images", "float32", (1, 3, 640, 640))],
                                                     outputs=out))
    assert "(size, layout" in fixed and "YOLO (Ultralytics) preset" in fixed
    open_ = detected_preprocess_note(SimpleNamespace(inputs=[TensorInfo("images", "float32", (1, 3, "h", "w"))],
                                                     outputs=out))
    assert "size" not in open_.split(")")[0] and "height and width open" in open_, open_
    width = detected_preprocess_note(SimpleNamespace(inputs=[TensorInfo("input1", "float32", (1, 1, 64, "w"))],
                                                     outputs=[TensorInfo("387", "float32", (1, "seqlen"))]))
    assert "The model leaves its width open (its height is 64): give it below." in width, width
