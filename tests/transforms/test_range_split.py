"""Range-split on a YOLOv8-style detector whose last Concat joins box pixels (0..640) with scores (0..1).

With range-split off, the default static int8 recipe crushes every score (one int8 scale of ≈ 2.5 for the
joined tensor) and the result is judged broken. With it on (the default), that Concat stays float, a note names
it with both ranges, the verdict is no longer broken and the detections agree with fp32 far better. The flagged
node is checked against ranges computed here with plain onnxruntime + numpy; a model with no such node (the
digits CNN) gets no exclusion.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tests.support.reference import photo_parts
from PIL import Image

from ortlab.checks.analyze import analyze
from ortlab.cli import main as cli
from ortlab.data.loaders import load_image_folder
from ortlab.transforms.range_split import JOINING_OPS, find_range_splits, width

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "yolov8_detector.onnx"
DIGITS = ROOT / "sample_models" / "digits_cnn"
N_IMAGES = 8
CONCAT = "/model.22/Concat_5"
THRESHOLD = 0.3
F1_GAIN = 0.8  # measured: anchor-level F1 vs fp32 0.00 with range-split off, 0.96 with it on (8 photos, 7.2% changed)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, Path]:
    return photo_parts(tmp_path_factory.mktemp("range_split_photos"), N_IMAGES)


def _feed(folder: Path) -> list[np.ndarray]:
    return [np.asarray(Image.open(f).convert("RGB").resize((640, 640)), np.float32).transpose(2, 0, 1)[None] / 255
            for f in sorted(folder.glob("*.jpg"))]


def _run(photos, tmp_path, capsys, *flags) -> tuple[dict, str]:
    """Static int8 of the fixture; its head's known-pattern scope (which holds the final Concat) is off, so that
    range-split alone decides that Concat."""
    dst = tmp_path / "out.onnx"
    code = cli.main(["optimize", str(FIXTURE), str(dst), "--precision", "int8", "--no-known-patterns", *flags,
                     "--calibration", str(photos["calibration"]), "--eval", str(photos["evaluation"]),
                     "--verify-samples", "32", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), str(dst)


def _f1(candidate: str, images: list[np.ndarray]) -> float:
    """Anchor-level F1 of the candidate's detections (best class score > 0.3) against the fp32 model's."""
    ref = ort.InferenceSession(str(FIXTURE), providers=["CPUExecutionProvider"])
    cand = ort.InferenceSession(candidate, providers=["CPUExecutionProvider"])
    tp = n_ref = n_cand = 0
    for x in images:
        r = ref.run(None, {"images": x})[0][0][4:].max(axis=0) > THRESHOLD
        c = cand.run(None, {"images": x})[0][0][4:].max(axis=0) > THRESHOLD
        tp += int(np.count_nonzero(r & c))
        n_ref += int(np.count_nonzero(r))
        n_cand += int(np.count_nonzero(c))
    assert n_ref > 0  # the fixture detects something on these photos
    return 2 * tp / (n_ref + n_cand)


def test_the_fixture_joins_pixels_and_scores_in_its_last_concat():
    model = onnx.load(str(FIXTURE))
    last = model.graph.node[-1]
    assert last.op_type == "Concat" and last.name == CONCAT and list(last.output) == ["output0"]
    assert FIXTURE.stat().st_size < 1_000_000


@pytest.mark.slow
def test_range_split_keeps_the_concat_and_the_detector_is_no_longer_broken(photos, tmp_path, capsys):
    images = _feed(photos["evaluation"])
    off, off_path = _run(photos, tmp_path / "off", capsys, "--no-range-split")
    assert off["verdict"]["level"] == "broken"
    assert off["recipe"]["quant"]["range_split"] is False
    assert not any("range-split" in n for n in off["notes"])
    f1_off = _f1(off_path, images)

    on, on_path = _run(photos, tmp_path / "on", capsys)
    assert on["recipe"]["quant"]["range_split"] is True
    kept = [n for n in on["notes"] if "(range-split)" in n]
    assert len(kept) == 1, on["notes"]
    m = re.fullmatch(r"Kept (\S+) \(Concat\) in float: its inputs range (-?[\d.]+)\.\.([\d.]+) and (-?[\d.]+)\.\.([\d.]+) "
                     r"\((\d+)×\), one int8 scale would crush the smaller \(range-split\)\.", kept[0])
    assert m is not None, kept[0]
    assert m.group(1) == CONCAT
    assert 600 < float(m.group(3)) < 700 and 0.5 < float(m.group(5)) <= 1.0 and int(m.group(6)) > 100
    assert on["verdict"]["level"] != "broken", on["verdict"]
    assert on["coverage"]["quantized"]["Concat"] == off["coverage"]["quantized"]["Concat"] - 1
    f1_on = _f1(on_path, images)
    assert f1_on >= f1_off + F1_GAIN, (f1_off, f1_on)
    changed = [b["changed_fraction"] for b in on["evaluation"]["task"]["boxes"]]
    changed_off = [b["changed_fraction"] for b in off["evaluation"]["task"]["boxes"]]
    assert changed[0] < 0.2 < changed_off[0]


def test_an_independent_range_computation_flags_the_same_node(photos):
    """Min/max of every joining node's activation inputs over the calibration photos, with onnxruntime + numpy."""
    model = onnx.shape_inference.infer_shapes(onnx.load(str(FIXTURE)))
    g = model.graph
    consts = {t.name for t in g.initializer}
    floats = {v.name for v in list(g.value_info) + list(g.output) if v.type.tensor_type.elem_type == 1}
    joins = [n for n in g.node if n.op_type in JOINING_OPS]
    names = sorted({i for n in joins for i in n.input if i in floats and i not in consts})
    for name in names:
        if name not in {o.name for o in g.output}:
            g.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    lo = {k: np.inf for k in names}
    hi = {k: -np.inf for k in names}
    for x in _feed(photos["calibration"]):
        for k, v in zip(names, sess.run(names, {"images": x})):
            lo[k], hi[k] = min(lo[k], float(v.min())), max(hi[k], float(v.max()))
    flagged = []
    for n in joins:
        widths = [width((lo[i], hi[i])) for i in n.input if i in lo]
        if len(widths) >= 2 and max(widths) > 100 * min(widths):
            flagged.append(n.name)
    assert flagged == [CONCAT]
    ranges = {k: (lo[k], hi[k]) for k in names}
    assert [s.node for s in find_range_splits(onnx.load(str(FIXTURE)), ranges)] == [CONCAT]


def test_a_model_without_mixed_ranges_gets_no_exclusion(tmp_path, capsys):
    dst = tmp_path / "digits.onnx"
    code = cli.main(["optimize", str(DIGITS / "model.onnx"), str(dst), "--precision", "int8",
                     "--calibration", str(DIGITS / "calibration"), "--eval", str(DIGITS / "evaluation"),
                     "--verify-samples", "16", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    art = json.loads(out.out)
    assert art["recipe"]["quant"]["range_split"] is True
    assert not any("range-split" in n for n in art["notes"]), art["notes"]



@pytest.mark.slow
def test_analysis_scored_per_output_group_ranks_the_concat_first(photos, tmp_path, capsys):
    """Whole-tensor SQNR hides the crushed scores behind the box pixels (the Concat ranked 23rd of 31 that way);
    scored by its worst output group (scores), it ranks among the top 3."""
    out = tmp_path / "off"
    code = cli.main(["optimize", str(FIXTURE), str(out), "--precision", "int8", "--no-range-split", "--no-known-patterns",
                     "--calibration", str(photos["calibration"]), "--eval", str(photos["evaluation"]),
                     "--verify-samples", "8", "--json"])
    capsys.readouterr()
    assert code == 0
    res = analyze(FIXTURE, out, load_image_folder(photos["evaluation"]), None)
    assert list(res.groups) == ["output0 [1, 12, 8400]"]
    node = next(e for e in res.nodes if e.name == CONCAT)
    assert node.rank <= 3 and node.group == "scores", [(e.rank, e.name, e.group) for e in res.nodes[:5]]
    assert node.group_sqnr_db["scores"] < 5 < 30 < node.group_sqnr_db["boxes"]
    assert node.local_sqnr_db is not None and node.local_sqnr_db > 30  # what the whole tensor said
    whole = sorted(res.nodes, key=lambda e: e.local_sqnr_db if e.local_sqnr_db is not None else e.sqnr_db)
    assert [e.name for e in whole].index(CONCAT) >= 3
    assert all(e.group is None for e in res.nodes if e.name != CONCAT)
