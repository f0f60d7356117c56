"""ortlab.core.serial: the one converter between typed results and JSON, and the typed results through SQLite."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

import numpy as np
import pytest

from ortlab.runs.artifact import Artifact, load_artifact
from ortlab.timing.bench import LatencySummary
from ortlab.settings.config import BenchConfig, Precision, PreprocessConfig, QuantConfig, QuantMode, Recipe
from ortlab.model.diff import GraphDiff
from ortlab.core.errors import RecipeError
from ortlab.checks.eval_report import EvalReport, OutputError
from ortlab.runs.history import BenchmarkRecord, BenchVariant, History
from ortlab.core.serial import PlainDataError, dumps, from_plain, loads, to_plain


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    name: str
    value: float


@dataclass
class Outer:
    colour: Colour
    path: Path
    pair: tuple[int, int]
    many: tuple[str, ...]
    inners: list[Inner]
    by_name: dict[str, Inner]
    counts: dict[str, int]
    maybe: Inner | None = None
    score: float | None = None
    flags: list[bool] = field(default_factory=list)


def evaluation() -> EvalReport:
    return EvalReport(
        n_samples=8, outputs=[OutputError("logits", 0.0, 0.0, 1.0, math.inf),
                              OutputError("aux", 0.5, 0.1, 0.9, -math.inf)],
        top1_accuracy_ref=0.875, top1_accuracy_cand=0.75, top1_agreement=0.875, top5_containment=1.0,
        per_class=[{"class": "cat", "n": 4, "ref_acc": 1.0, "cand_acc": 0.75}], random_data=True,
        providers_ref=["CPUExecutionProvider"], providers_cand=["CPUExecutionProvider"])


def artifact(evaluation_: EvalReport | None = None) -> Artifact:
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.STATIC, op_types=("Conv", "MatMul")))
    return Artifact(run_id=None, model_path=Path("/ws/a/model.onnx"), source_path=Path("/m/src.onnx"),
                    source_sha256="a" * 64, sha256="b" * 64, recipe=recipe, timings={"quantize": 1.5},
                    warnings=["w"], providers=["CPUExecutionProvider"], size_bytes=10, source_size_bytes=40,
                    random_data=False, created_at="2026-01-02T03:04:05+00:00", evaluation=evaluation_,
                    notes=["n"])


def summary(variant: str = "original", batch: int = 1, p50: float = 1.0) -> LatencySummary:
    return LatencySummary(variant, batch, 10, p50, p50 * 1.2, p50 * 1.5, p50, 0.1, p50 * 0.9, p50 * 2,
                          batch * 1000 / p50, None, ["CPUExecutionProvider"], None)


def diff() -> GraphDiff:
    return GraphDiff(op_deltas=[{"key": "Conv", "domain": "", "op_type": "Conv", "before": 2, "after": 0,
                                 "delta": -2}], removed=[{"name": "c0", "op_type": "Conv"}], added=[], changed=[],
                     unchanged_count=3, initializer_bytes_before={"float32": 400},
                     initializer_bytes_after={"int8": 100}, fusions=["Conv+Relu → FusedConv ×1"], notes=["x"])


def same(a, b) -> bool:
    """Equal, where NaN equals NaN (compare the plain forms, which write NaN as "nan")."""
    return to_plain(a) == to_plain(b)


def test_nested_types_round_trip_through_json():
    obj = Outer(Colour.BLUE, Path("/a/b.onnx"), (3, 4), ("x", "y"), [Inner("i", 1.5)], {"k": Inner("j", -math.inf)},
                {"float32": 12}, maybe=Inner("m", math.nan), score=None, flags=[True, False])
    text = dumps(obj)
    assert "Infinity" not in text and "NaN" not in text
    plain = json.loads(text)
    assert plain["colour"] == "blue" and plain["path"] == "/a/b.onnx" and plain["pair"] == [3, 4]
    assert plain["by_name"]["k"]["value"] == "-inf" and plain["maybe"]["value"] == "nan"
    back = from_plain(Outer, loads(text))
    assert same(back, obj) and back.colour is Colour.BLUE and isinstance(back.path, Path)
    assert back.pair == (3, 4) and back.many == ("x", "y") and math.isnan(back.maybe.value)


def test_numpy_scalars_and_arrays_become_plain():
    assert to_plain({"a": np.float32(1.5), "b": np.int64(3), "c": np.array([1.0, np.inf]), "d": np.bool_(True)}) == \
        {"a": 1.5, "b": 3, "c": [1.0, "inf"], "d": True}


def test_bad_data_says_which_field():
    with pytest.raises(PlainDataError, match=r"inners\[0\]\.value must be a number; got 'x'"):
        from_plain(Outer, {"colour": "red", "path": "/p", "pair": [1, 2], "many": [], "counts": {},
                           "inners": [{"name": "a", "value": "x"}], "by_name": {}})
    with pytest.raises(PlainDataError, match="colour must be one of red, blue; got 'green'"):
        from_plain(Colour, "green", where="colour")
    with pytest.raises(PlainDataError, match="lacks"):
        from_plain(Inner, {"name": "a"})
    with pytest.raises(PlainDataError, match="Unknown setting"):
        from_plain(Inner, {"name": "a", "value": 1, "other": 2})
    with pytest.raises(PlainDataError, match="pair must have 2 values"):
        from_plain(Outer, {"colour": "red", "path": "/p", "pair": [1], "many": [], "inners": [], "by_name": {},
                           "counts": {}})


def test_recipes_keep_their_error_messages():
    with pytest.raises(RecipeError, match="quant.mode must be one of static, dynamic; got 'x'"):
        Recipe.from_dict({"quant": {"mode": "x"}})
    assert Recipe.from_dict({"quant": {"op_types": "Conv, MatMul"}}).quant.op_types == ("Conv", "MatMul")


@pytest.mark.parametrize("make", [
    lambda: artifact(evaluation()), lambda: artifact(None), evaluation, lambda: summary(), diff,
    lambda: Recipe(precision=Precision.FP16, keep_io_types=False), lambda: PreprocessConfig(size=(28, 28)),
    lambda: BenchConfig(batch_sizes=(1, 8), duration_s=0.5),
    lambda: BenchmarkRecord(3, "2026-01-01", [BenchVariant("original", "orig", "/m.onnx", None),
                                              BenchVariant("run1", "#1", "/a.onnx", 1)],
                            BenchConfig(), [summary(), summary("run1", 1, math.inf)]),
])
def test_every_typed_result_round_trips(make):
    obj = make()
    back = from_plain(type(obj), loads(dumps(obj)))
    assert type(back) is type(obj) and same(back, obj)


def test_artifact_json_has_a_schema_version_and_old_files_still_read(tmp_path):
    art = replace(artifact(evaluation()), model_path=tmp_path / "model.onnx")
    path = art.save()
    assert json.loads(path.read_text())["schema_version"] == 2
    assert same(load_artifact(tmp_path), art)
    # schema 1: no version, the evaluation wrote None for non-finite numbers with "identical" beside the SQNR
    old = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("schema_version", "notes", "timings")}
    old["evaluation"]["outputs"] = [
        {"name": "logits", "max_abs": 0.0, "mean_abs": 0.0, "cosine": 1.0, "sqnr_db": None, "identical": True},
        {"name": "aux", "max_abs": 0.5, "mean_abs": 0.1, "cosine": 0.9, "sqnr_db": None, "identical": False}]
    path.write_text(json.dumps(old))
    back = load_artifact(tmp_path)
    assert back.notes == [] and back.timings == {}
    assert back.evaluation.outputs[0].identical and back.evaluation.outputs[0].sqnr_db == math.inf
    assert math.isnan(back.evaluation.outputs[1].sqnr_db)
    path.write_text(json.dumps({**old, "schema_version": 99}))
    with pytest.raises(Exception, match="schema version 99"):
        load_artifact(tmp_path)


def test_typed_results_round_trip_through_sqlite(tmp_path):
    h = History(tmp_path / "h.sqlite")
    art = artifact(evaluation())
    run_id = h.add(art)
    got = History(tmp_path / "h.sqlite").get(run_id)
    assert got.run_id == run_id and same(got, replace(art, run_id=run_id))
    summaries = [summary(), summary("run1", 8, 0.25)]
    bid = h.add_benchmark([BenchVariant("original", "orig", "/m.onnx"), BenchVariant("run1", "#1", "/a.onnx", run_id)],
                          BenchConfig(batch_sizes=(1, 8)), summaries, created_at="2026-02-03T00:00:00+00:00")
    [record] = h.list_benchmarks()
    assert record == BenchmarkRecord(bid, "2026-02-03T00:00:00+00:00",
                                     [BenchVariant("original", "orig", "/m.onnx"),
                                      BenchVariant("run1", "#1", "/a.onnx", run_id)],
                                     BenchConfig(batch_sizes=(1, 8)), summaries)
    assert record.names() == {"original": "orig", "run1": "#1"}
