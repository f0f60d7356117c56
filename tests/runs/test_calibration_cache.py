"""Calibrated ranges are kept in the workspace and reused by a later run with the same model, data and calibration
settings (ortlab.runs.calibration_cache); the stages' labels are defined once, by the engine's plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ortlab.runs import prepare
import ortlab.transforms.quantize as quantize_module
from ortlab.data.loaders import load_image_folder
from ortlab.runs import pipeline, service
from ortlab.runs.calibration_cache import REUSED, CachedCalibration, CalibrationCache
from ortlab.runs.pipeline import plan
from ortlab.runs.in_process import run_recipe
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import CalibrationMethod, OptLevel, Precision, QuantConfig, QuantFormat, QuantMode, Recipe

from tests.support.models import conv_bn_model, random_image_folder

STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=12))  # bias correction on (QDQ)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("src") / "conv.onnx")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("images"), per_class=2)


@pytest.fixture()
def calibrations(monkeypatch) -> list[str]:
    """Every call of ONNX Runtime's calibrator (``create_calibrator``) in this process, by model path."""
    calls: list[str] = []
    original = quantize_module.create_calibrator

    def counting(model, *args, **kwargs):
        calls.append(str(model))
        return original(model, *args, **kwargs)

    monkeypatch.setattr(quantize_module, "create_calibrator", counting)
    return calls


@pytest.fixture()
def kept(tmp_path) -> CalibrationCache:
    """A workspace's calibration folder."""
    return CalibrationCache.in_workspace(tmp_path / "ws")


def _run(src, recipe, out, images, kept, preprocess=None, verify_samples=0):
    return run_recipe(src, recipe, out, load_image_folder(images), preprocess, verify_samples=verify_samples,
                      calibrations=kept)


def _files(kept: CalibrationCache) -> list[Path]:
    return sorted(kept.folder.glob("*.json"))


def test_a_second_run_with_the_same_model_data_and_method_reuses_the_calibration(src, image_dir, tmp_path, kept,
                                                                                  calibrations):
    first = _run(src, STATIC, tmp_path / "a", image_dir, kept, verify_samples=4)
    assert len(calibrations) == 1 and len(_files(kept)) == 1 and REUSED not in first.notes
    second = _run(src, STATIC, tmp_path / "b", image_dir, kept, verify_samples=4)
    assert len(calibrations) == 1  # ORT's calibrator did not run again
    assert REUSED in second.notes
    assert second.sha256 == first.sha256  # the same ranges: the same model, byte for byte
    assert second.warnings == first.warnings
    assert "bias_correction" in second.timings  # bias correction still had the calibration samples
    assert any(n.startswith("Bias correction (Nagel") for n in second.notes)
    assert (tmp_path / "b" / "model.qdq.onnx").is_file()


def test_without_a_cache_every_run_calibrates(src, image_dir, tmp_path, calibrations):
    _run(src, STATIC, tmp_path / "a", image_dir, None)
    art = _run(src, STATIC, tmp_path / "b", image_dir, None)
    assert len(calibrations) == 2 and REUSED not in art.notes


def test_settings_that_do_not_change_the_ranges_still_reuse_them(src, image_dir, tmp_path, kept, calibrations):
    _run(src, STATIC, tmp_path / "a", image_dir, kept)
    other = replace(STATIC, opt_level=OptLevel.BASIC, quant=replace(STATIC.quant, bias_correction=False,
                                                                     per_channel=not STATIC.quant.per_channel))
    art = _run(src, other, tmp_path / "b", image_dir, kept)
    assert len(calibrations) == 1 and REUSED in art.notes


@pytest.mark.parametrize("change", [
    {"calibration_method": CalibrationMethod.PERCENTILE},
    {"symmetric_activation": True},
    {"calibration_samples": 8},  # other samples drawn
    {"seed": 3},  # other samples drawn
    {"preprocess": False},  # another model calibrated (not the pre-processed one)
])
def test_a_changed_method_option_or_data_calibrates_again(change, src, image_dir, tmp_path, kept, calibrations):
    _run(src, STATIC, tmp_path / "a", image_dir, kept)
    art = _run(src, replace(STATIC, quant=replace(STATIC.quant, **change)), tmp_path / "b", image_dir, kept)
    assert len(calibrations) == 2 and REUSED not in art.notes
    assert len(_files(kept)) == 2


def test_other_preprocessing_of_the_same_images_calibrates_again(src, image_dir, tmp_path, kept, calibrations):
    from ortlab.settings.config import PreprocessConfig

    base = PreprocessConfig(size=(32, 32))
    _run(src, STATIC, tmp_path / "a", image_dir, kept, base)
    art = _run(src, STATIC, tmp_path / "b", image_dir, kept, replace(base, mean=(0.5, 0.5, 0.5)))
    assert len(calibrations) == 2 and REUSED not in art.notes


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"key": "other", "ranges": "{}"}', b'{"ranges": 3}',
                                    b'["a list"]'])
def test_a_corrupt_cache_file_is_ignored(damage, src, image_dir, tmp_path, kept, calibrations):
    first = _run(src, STATIC, tmp_path / "a", image_dir, kept)
    [entry] = _files(kept)
    entry.write_bytes(damage)
    second = _run(src, STATIC, tmp_path / "b", image_dir, kept)
    assert len(calibrations) == 2 and REUSED not in second.notes  # calibrated again, no crash
    assert second.sha256 == first.sha256
    assert kept.get(entry.stem) is not None  # and written anew
    third = _run(src, STATIC, tmp_path / "c", image_dir, kept)
    assert len(calibrations) == 2 and REUSED in third.notes


def test_an_unwritable_cache_does_not_fail_the_run(src, image_dir, tmp_path, calibrations):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the workspace folder would be")
    art = _run(src, STATIC, tmp_path / "a", image_dir, CalibrationCache.in_workspace(blocked))
    assert art.model_path.is_file() and len(calibrations) == 1


def test_a_child_run_keeps_its_calibration_in_its_workspace(src, image_dir, tmp_path):
    ws = Workspace(tmp_path / "ws")
    spec = RunSpec(str(src), STATIC, calibration=DataRef(path=str(image_dir)), verify_samples=0)
    results = []
    for _ in range(2):
        handle = prepare.start_recipe(spec, workspace=ws)
        handle.wait()
        assert handle.state == service.DONE, handle.error
        results.append(handle.result)
    assert len(list((ws.root / "calibration").glob("*.json"))) == 1
    assert REUSED not in results[0].notes and REUSED in results[1].notes
    assert results[0].sha256 == results[1].sha256


def test_stage_labels_are_defined_once_by_the_engine():
    from ortlab.ui.jobs import progress_view

    recipes = [Recipe(), Recipe(precision=Precision.FP16), STATIC,
               Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC)),
               Recipe(precision=Precision.INT8, quant=QuantConfig(quant_format=QuantFormat.QOPERATOR))]
    for recipe in recipes:
        for stage in plan(recipe):
            assert progress_view.STAGE_TITLES[stage.name] == stage.label
    source = Path(progress_view.__file__).read_text(encoding="utf-8")
    assert not any(f'"{s.label}"' in source for s in pipeline.STAGES)  # no copy of a label in the view


def _entry(cache: CalibrationCache, key: str, when: float) -> Path:
    """Store a 1000-byte-ish entry under ``key`` and date its file ``when`` (seconds since the epoch)."""
    import os

    cache.put(key, CachedCalibration('{"x": [0.0, 1.0]}' + " " * 900, ("a warning",)))
    path = cache.folder / f"{key}.json"
    os.utime(path, (when, when))
    return path


def test_the_cache_is_bounded_and_removes_the_entries_used_longest_ago(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration", max_bytes=10**9)
    paths = {k: _entry(cache, k, 1_000_000 + i * 100) for i, k in enumerate(("a", "b", "c", "d"))}
    size = paths["a"].stat().st_size
    assert cache.get("a") is not None  # a reuse makes "a" the newest: "b" is now the one used longest ago
    cache.max_bytes = 2 * size + size // 2
    removed = cache.prune()
    assert sorted(p.name for p in removed) == ["b.json", "c.json"]
    assert sorted(p.name for p in cache.folder.iterdir()) == ["a.json", "d.json"]
    assert cache.get("b") is None and cache.get("d").ranges.startswith('{"x"')


def test_a_write_prunes_but_never_the_entry_it_wrote(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTLAB_LIMIT_CALIBRATION_CACHE_MAX_BYTES", "1500")  # room for one entry
    cache = CalibrationCache.in_workspace(tmp_path)
    assert cache.max_bytes == 1500
    _entry(cache, "old", 2_000_000)
    _entry(cache, "new", 1_000_000)  # dated older than "old", but just written: it stays, "old" goes
    assert [p.name for p in cache.folder.iterdir()] == ["new.json"]
    tiny = CalibrationCache(tmp_path / "calibration", max_bytes=1)
    tiny.put("bigger", CachedCalibration("{}"))
    assert [p.name for p in tiny.folder.iterdir()] == ["bigger.json"]
