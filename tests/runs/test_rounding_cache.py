"""GPTQ roundings and bias corrections of single nodes are kept in the workspace and reused by a later run whose node
has the same key (ortlab.runs.rounding_cache); a file that cannot be trusted is ignored, the folder is bounded."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

from ortlab.data.loaders import load_image_folder
from ortlab.runs import prepare, service
from ortlab.runs.calibration_cache import CalibrationCache
from ortlab.runs.in_process import run_recipe
from ortlab.runs.rounding_cache import RoundingCache
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.workspace import Workspace
from ortlab.settings.config import Precision, QuantConfig, Recipe
from ortlab.transforms.bias_memo import NodeBias
from ortlab.transforms.rounding_memo import NodeRounding

from tests.support.models import conv_bn_model, random_image_folder

STATIC = Recipe(precision=Precision.INT8, quant=QuantConfig(calibration_samples=12, bias_correction=False))
REUSED_WORDS = "reused from an earlier run"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("src") / "conv.onnx")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return random_image_folder(tmp_path_factory.mktemp("images"), per_class=2)


def _gptq_note(notes) -> str:
    [note] = [n for n in notes if n.startswith("GPTQ weight rounding")]
    return note


def test_a_second_run_reuses_every_node_s_rounding_and_writes_the_same_model(src, image_dir, tmp_path):
    kept = CalibrationCache.in_workspace(tmp_path / "ws")
    first = run_recipe(src, STATIC, tmp_path / "a", load_image_folder(image_dir), verify_samples=0,
                       calibrations=kept)
    rounding = RoundingCache.beside(kept.folder)
    assert rounding.folder == tmp_path / "ws" / "rounding"
    files = sorted(rounding.folder.glob("*.npz"))
    assert len(files) == 4 and REUSED_WORDS not in _gptq_note(first.notes)  # three Convs and the Gemm
    second = run_recipe(src, STATIC, tmp_path / "b", load_image_folder(image_dir), verify_samples=0,
                        calibrations=kept)
    assert "(4 node(s) reused from an earlier run" in _gptq_note(second.notes)
    assert second.sha256 == first.sha256
    assert sorted(rounding.folder.glob("*.npz")) == files


def test_a_child_run_keeps_its_roundings_in_its_workspace(src, image_dir, tmp_path):
    ws = Workspace(tmp_path / "ws")
    spec = RunSpec(str(src), STATIC, calibration=DataRef(path=str(image_dir)), verify_samples=0)
    notes = []
    for _ in range(2):
        handle = prepare.start_recipe(spec, workspace=ws)
        handle.wait()
        assert handle.state == service.DONE, handle.error
        notes.append(_gptq_note(handle.result.notes))
    assert len(list((ws.root / "rounding").glob("*.npz"))) == 4
    assert REUSED_WORDS not in notes[0] and REUSED_WORDS in notes[1]


def test_an_outcome_comes_back_as_it_was_kept(tmp_path):
    cache = RoundingCache(tmp_path / "rounding")
    q = np.array([[1, -2], [3, 127]], np.int8)
    cache.put("a", NodeRounding(q, 0.5))
    cache.put("b", NodeRounding(None, 1.25, ""))
    cache.put("c", NodeRounding(None, 1.0, "inputs not finite on some calibration sample"))
    a, b, c = cache.get("a"), cache.get("b"), cache.get("c")
    assert a is not None and a.integers is not None and a.ratio == 0.5
    assert np.array_equal(a.integers, q) and a.integers.dtype == np.int8
    assert b == NodeRounding(None, 1.25, "")
    assert c is not None and c.why == "inputs not finite on some calibration sample"
    assert cache.get("missing") is None


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize("damage", [
    b"", b"not a zip",
    _npz(key=np.array("other"), ratio=np.array(0.5), why=np.array(""), rounded=np.array(True),
         integers=np.zeros(2, np.int8)),  # another key's file under this name
    _npz(key=np.array("k"), ratio=np.array(0.5), why=np.array(""), rounded=np.array(True),
         integers=np.zeros(2, np.float32)),  # not integers
    _npz(key=np.array("k"), ratio=np.array(np.nan), why=np.array(""), rounded=np.array(False),
         integers=np.zeros(0, np.int8)),
    _npz(key=np.array("k"), ratio=np.array(0.5)),  # fields missing
    _npz(key=np.array("k"), ratio=np.array(0.5), why=np.array(""), rounded=np.array(True),
         integers=np.array([object()], dtype=object)),  # a pickle: never loaded
])
def test_a_file_that_cannot_be_trusted_is_ignored(damage, tmp_path):
    cache = RoundingCache(tmp_path / "rounding")
    cache.folder.mkdir()
    (cache.folder / "k.npz").write_bytes(damage)
    assert cache.get("k") is None


def test_a_bias_correction_comes_back_as_it_was_kept(tmp_path):
    cache = RoundingCache(tmp_path / "rounding")
    shift = np.array([3, -1, 0, 2**40], np.int64)
    cache.put_bias("a", NodeBias(shift, True, 0.5, 0.25))
    cache.put_bias("b", NodeBias(np.zeros(2, np.int64), False, 0.1, 0.3))
    a, b = cache.get_bias("a"), cache.get_bias("b")
    assert a is not None and np.array_equal(a.shift, shift) and a.shift.dtype == np.int64
    assert (a.applied, a.before, a.after) == (True, 0.5, 0.25)
    assert b is not None and (b.applied, b.before, b.after) == (False, 0.1, 0.3)
    assert cache.get("a") is None and cache.get_bias("missing") is None  # a bias is not a rounding


@pytest.mark.parametrize("damage", [
    b"", b"not a zip",
    _npz(key=np.array("other"), shift=np.zeros(2, np.int64), applied=np.array(True), before=np.array(1.0),
         after=np.array(0.5)),  # another key's file under this name
    _npz(key=np.array("k"), shift=np.zeros(2, np.float32), applied=np.array(True), before=np.array(1.0),
         after=np.array(0.5)),  # not integers
    _npz(key=np.array("k"), shift=np.zeros((2, 2), np.int64), applied=np.array(True), before=np.array(1.0),
         after=np.array(0.5)),  # not one value per channel
    _npz(key=np.array("k"), shift=np.zeros(2, np.int64), applied=np.array(True), before=np.array(np.inf),
         after=np.array(0.5)),
    _npz(key=np.array("k"), ratio=np.array(0.5), why=np.array(""), rounded=np.array(True),
         integers=np.zeros(2, np.int8)),  # a rounding, not a bias
])
def test_a_bias_file_that_cannot_be_trusted_is_ignored(damage, tmp_path):
    cache = RoundingCache(tmp_path / "rounding")
    cache.folder.mkdir()
    (cache.folder / "k.npz").write_bytes(damage)
    assert cache.get_bias("k") is None


def test_the_folder_is_bounded_and_removes_the_entries_used_longest_ago(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTLAB_LIMIT_ROUNDING_CACHE_MAX_BYTES", str(10**9))
    cache = RoundingCache(tmp_path / "rounding")
    assert cache.max_bytes == 10**9
    for i, key in enumerate(("a", "b", "c")):
        cache.put(key, NodeRounding(np.zeros(1000, np.int8), 0.9))
        os.utime(cache.folder / f"{key}.npz", (1_000_000 + i, 1_000_000 + i))
    size = (cache.folder / "a.npz").stat().st_size
    assert cache.get("a") is not None  # used now: "b" is the one used longest ago
    cache.max_bytes = 2 * size + size // 2
    cache.put("d", NodeRounding(np.ones(1000, np.int8), 0.8))
    assert sorted(p.name for p in cache.folder.iterdir()) == ["a.npz", "d.npz"]


def test_an_unwritable_folder_only_loses_the_reuse(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would be")
    cache = RoundingCache(blocked / "rounding")
    cache.put("a", NodeRounding(np.zeros(3, np.int8), 0.5))
    assert cache.get("a") is None


def test_a_cluster_trial_ships_the_kept_calibrations_and_roundings_both_ways(tmp_path):
    from ortlab.runs.calibration_cache import CachedCalibration
    from ortlab.runs.trial_on_node import keep_new_results, pack_kept

    here, node = tmp_path / "here", tmp_path / "node"
    assert pack_kept(here) is None  # nothing kept yet: nothing shipped
    CalibrationCache.in_workspace(here).put("cal", CachedCalibration('{"x": [0.0, 1.0]}'))
    RoundingCache(here / "rounding").put("node1", NodeRounding(np.array([1, 2], np.int8), 0.7))
    (here / "rounding" / "stray.txt").write_text("not kept")
    blob = pack_kept(here)
    assert blob is not None
    assert sorted(zipfile.ZipFile(io.BytesIO(blob)).namelist()) == ["calibration/cal.json", "rounding/node1.npz"]
    keep_new_results(blob, node)
    got = RoundingCache(node / "rounding").get("node1")
    assert got is not None and got.ratio == 0.7 and CalibrationCache.in_workspace(node).get("cal") is not None
    RoundingCache(here / "rounding").put("older", NodeRounding(None, 1.0))
    os.utime(here / "rounding" / "older.npz", (1_000_000, 1_000_000))
    since = (here / "rounding" / "node1.npz").stat().st_mtime
    names = zipfile.ZipFile(io.BytesIO(pack_kept(here, roundings_since=since) or b"")).namelist()
    assert sorted(names) == ["calibration/cal.json", "rounding/node1.npz"]  # a search ships its own roundings
    (node / "rounding" / "node1.npz").write_bytes(b"changed here")
    keep_new_results(blob, node)  # a file already kept stays as it is
    assert (node / "rounding" / "node1.npz").read_bytes() == b"changed here"


def test_a_returned_zip_writes_nothing_but_kept_results_into_their_folders(tmp_path):
    from ortlab.runs.trial_on_node import keep_new_results

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in ("../evil.json", "calibration/../../evil.json", "rounding/sub/c.npz", "other/d.json",
                     "rounding/e.json", "calibration/.hidden.json", "evil.npz", "rounding/ok.npz"):
            zf.writestr(name, b"x")
    root = tmp_path / "ws" / "inner"
    keep_new_results(buf.getvalue(), root)
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["ws/inner/rounding/ok.npz"]
