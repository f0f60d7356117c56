"""Per-token outputs are compared on real tokens only (attention mask = 1), never on padding."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from tests.support.reference import nn_agreement

from ortlab.checks.evaluate import evaluate, session_inputs
from ortlab.checks.verdict import Level, judge
from ortlab.data.feeds import attention_mask, batch_inputs
from ortlab.data.loaders import load_text_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEQ = 32  # the fixture's sentences are 5-15 tokens: most positions are padding


def _text(seq: int = SEQ):
    return load_text_file(FIXTURES / "text_evaluation.txt", FIXTURES / "text_tokenizer.json", seq_len=seq)


def _outputs(path, ds) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
    """Every sample's outputs and attention mask, computed here without ortlab's comparison."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs, masks = [], []
    for i in range(len(ds)):
        feed = batch_inputs(ds, [i], None, session_inputs(sess))
        outs.append([np.asarray(o, dtype=np.float64) for o in sess.run(None, feed)])
        masks.append(feed["attention_mask"])
    return outs, masks


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _masked(ref_outs, cand_outs, masks, k: int) -> dict:
    """Output ``k``'s SQNR, cosine, per-sample cosines and nearest-neighbour agreement on the real tokens."""
    rows = [(r[k][0][m[0] == 1], c[k][0][m[0] == 1]) for r, c, m in zip(ref_outs, cand_outs, masks)]
    r_all = np.concatenate([r.ravel() for r, _ in rows])
    c_all = np.concatenate([c.ravel() for _, c in rows])
    per = [_cos(r.ravel(), c.ravel()) for r, c in rows]
    nn = nn_agreement(np.stack([r.mean(axis=0) for r, _ in rows]), np.stack([c.mean(axis=0) for _, c in rows]))
    return {"sqnr": 10 * math.log10(float(r_all @ r_all) / float((r_all - c_all) @ (r_all - c_all))),
            "cosine": _cos(r_all, c_all), "min_cos": min(per), "mean_cos": float(np.mean(per)), "nn": nn,
            "tokens": sum(len(r) for r, _ in rows), "signal": [float(np.sum(r * r)) for r, _ in rows],
            "noise": [float(np.sum((r - c) ** 2)) for r, c in rows]}


def test_attention_mask_is_found_by_name_values_and_shape():
    ones = np.ones((1, 8), dtype=np.int64)
    assert attention_mask({"input_ids": ones * 5, "attention_mask": ones}) is ones
    assert attention_mask({"token_type_ids": ones * 0, "input_ids": ones}) is None
    assert attention_mask({"attention_mask": ones * 2}) is None  # not 0/1: not a mask
    assert attention_mask({"mask": np.ones((1, 3, 8))}) is None  # not [batch, seq]


@pytest.fixture(scope="module")
def encoder_int8(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("enc") / "int8.onnx"
    quantize_dynamic(str(FIXTURES / "text_encoder.onnx"), str(out), weight_type=QuantType.QInt8)
    return out


def test_token_figures_match_masked_numpy_and_pooled_is_unchanged(encoder_int8):
    ds = _text()
    report = evaluate(FIXTURES / "text_encoder.onnx", encoder_int8, ds, None)
    ref, masks = _outputs(FIXTURES / "text_encoder.onnx", ds)
    cand, _ = _outputs(encoder_int8, ds)
    want = _masked(ref, cand, masks, 0)
    assert 0 < want["tokens"] < 0.6 * len(ds) * SEQ  # most positions are padding
    tokens, pooled = report.outputs
    assert tokens.name == "last_hidden_state"
    assert tokens.real_tokens == want["tokens"] and tokens.padding == len(ds) * SEQ - want["tokens"]
    assert tokens.sqnr_db == pytest.approx(want["sqnr"], abs=1e-3)
    assert tokens.cosine == pytest.approx(want["cosine"], abs=1e-6)
    assert tokens.sample_signal == pytest.approx(want["signal"], rel=1e-6)  # the SQNR interval's energies
    assert tokens.sample_noise == pytest.approx(want["noise"], rel=1e-6)
    emb = next(e for e in report.task.embeddings if e.output == "last_hidden_state")
    assert emb.min_cosine == pytest.approx(want["min_cos"], abs=1e-6)
    assert emb.mean_cosine == pytest.approx(want["mean_cos"], abs=1e-6)
    assert emb.nn_agreement == pytest.approx(want["nn"])
    assert emb.real_tokens == want["tokens"]
    # the pooled [batch, hidden] output is compared whole, as before
    r_p = np.concatenate([r[1].ravel() for r in ref])
    c_p = np.concatenate([c[1].ravel() for c in cand])
    assert pooled.real_tokens == 0 and pooled.padding == 0
    assert pooled.sqnr_db == pytest.approx(10 * math.log10(r_p @ r_p / ((r_p - c_p) @ (r_p - c_p))), abs=1e-3)
    verdict = judge(report)
    assert (f"last_hidden_state: compared on the {want['tokens']:,} real tokens; padding ignored"
            in " ".join(verdict.reasons))


def _embedding_model(path: Path, table: np.ndarray) -> Path:
    """last_hidden_state [batch, seq, D] = table[input_ids]; the attention mask is an input that changes nothing."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", table.shape[1]])
    # padding rows are whatever the table's pad row (id 0) holds
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["emb"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["m", "zero"], ["m0"]),
             helper.make_node("Unsqueeze", ["m0", "axes"], ["m3"]),
             helper.make_node("Add", ["emb", "m3"], ["last_hidden_state"])]
    graph = helper.make_graph(nodes, "emb", [ids, mask], [out], [
        numpy_helper.from_array(table.astype(np.float32), "table"),
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        numpy_helper.from_array(np.asarray([-1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_wild_padding_with_agreeing_real_tokens_is_not_broken(tmp_path):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(1000, 16))
    cand_table = table + 1e-3 * rng.normal(size=table.shape)  # real tokens agree closely
    cand_table[0] = -40 * table[0] + 100 * rng.normal(size=16)  # the pad row (id 0) differs wildly
    ref = _embedding_model(tmp_path / "ref.onnx", table)
    cand = _embedding_model(tmp_path / "cand.onnx", cand_table)
    ds = _text()
    report = evaluate(ref, cand, ds, None)
    ref_outs, masks = _outputs(ref, ds)
    cand_outs, _ = _outputs(cand, ds)
    whole_r = np.concatenate([r[0].ravel() for r in ref_outs])
    whole_c = np.concatenate([c[0].ravel() for c in cand_outs])
    assert _cos(whole_r, whole_c) < 0.5  # compared over every position, it would be broken
    want = _masked(ref_outs, cand_outs, masks, 0)
    out = report.outputs[0]
    assert out.sqnr_db == pytest.approx(want["sqnr"], abs=1e-3) and out.sqnr_db > 40
    assert out.cosine == pytest.approx(want["cosine"], abs=1e-9)
    verdict = judge(report)
    assert verdict.level == Level.OK, verdict.reasons
    assert any("padding ignored" in r for r in verdict.reasons)
