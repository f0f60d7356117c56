"""Per-node error analysis: a node whose quantization is deliberately broken ranks first, and local error is
told apart from accumulated error; the optimization-level parity check."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ortlab.checks.analyze import QDQ_FILE, analyze, resolve_candidate
from ortlab.settings.config import Precision, Recipe
from ortlab.checks.parity import check_parity
from ortlab.runs.in_process import run_recipe
from ortlab.runtime.hardware import advised_recipe
from ortlab.data.samples import get_sample
from tests.support.models import conv_bn_model


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    s = get_sample("digits_cnn")
    out = tmp_path_factory.mktemp("digits_int8")
    # this CPU's advised int8 (reduce-range without VNNI): full-range U8S8 saturates there, and every node would look bad
    run_recipe(s.model_path, advised_recipe(Recipe(precision=Precision.INT8)), out, s.calibration_data(), s.preprocess,
               verify_samples=8, verify_dataset=s.evaluation_data())
    return s, out


def _break_output_scale(src, dst, factor=200.0) -> str:
    """Multiply the output scale of one mid-graph quantized Conv by ``factor``: its output is quantized far too
    coarsely. Returns the node's name."""
    m = onnx.load(str(src))
    g = m.graph
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    convs = [n for n in g.node if n.op_type == "Conv"
             and any(c.op_type == "QuantizeLinear" for c in consumers.get(n.output[0], []))]
    victim = convs[len(convs) // 2]
    q = next(c for c in consumers[victim.output[0]] if c.op_type == "QuantizeLinear")
    dq = next(c for c in consumers[q.output[0]] if c.op_type == "DequantizeLinear")
    for init in g.initializer:
        if init.name in (q.input[1], dq.input[1]):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(m, str(dst))
    return victim.name


def test_the_pipeline_keeps_the_qdq_model_and_resolve_finds_it(digits_run):
    _, out = digits_run
    assert (out / QDQ_FILE).is_file() and (out / "model.onnx").is_file()
    assert resolve_candidate(out) == out / QDQ_FILE
    assert resolve_candidate(out / "model.onnx") == out / QDQ_FILE


def test_a_broken_node_ranks_first_and_local_differs_from_accumulated(digits_run, tmp_path):
    s, out = digits_run
    broken = tmp_path / "broken.onnx"
    victim = _break_output_scale(out / QDQ_FILE, broken)
    result = analyze(s.model_path, broken, s.evaluation_data(), s.preprocess, n=16, chunk=8)
    assert result.qdq and result.n_samples == 16 and result.seconds > 0
    # the broken tensor is the victim's output and its consumer's input: both nodes' quantized forms read it
    m = onnx.load(str(broken))
    victim_out = next(n.output[0] for n in m.graph.node if n.name == victim)
    qout = {n.output[0] for n in m.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] == f"{victim_out}_QuantizeLinear_Output"}
    readers = {n.name for n in m.graph.node if set(n.input) & qout}
    top = {e.name for e in result.nodes[:1 + len(readers)]}
    assert top == {victim} | readers, [(e.name, e.local_sqnr_db) for e in result.nodes]
    assert all(e.local_sqnr_db is not None and e.local_sqnr_db < 15 for e in result.nodes[:len(top)])
    assert all(e.local_sqnr_db is not None and e.local_sqnr_db > 20 for e in result.nodes[len(top):])
    ranks = [e.rank for e in result.nodes]
    assert ranks == list(range(1, len(ranks) + 1))
    locals_ = [e.local_sqnr_db for e in result.nodes if e.local_sqnr_db is not None]  # all, asserted above
    assert locals_ == sorted(locals_)
    # downstream nodes inherit the error (accumulated) but add little themselves (local)
    inherited = [e for e in result.nodes[1:] if e.local_sqnr_db is not None and e.sqnr_db < 15
                 and e.local_sqnr_db > e.sqnr_db + 10]
    assert inherited, [(e.name, e.sqnr_db, e.local_sqnr_db) for e in result.nodes]
    assert all(e.added_db is not None for e in inherited)
    # the healthy model: no node that bad
    healthy = analyze(s.model_path, out, s.evaluation_data(), s.preprocess, n=16)
    assert min(e.local_sqnr_db for e in healthy.nodes if e.local_sqnr_db is not None) > 20
    assert {e.name for e in healthy.nodes} == {e.name for e in result.nodes}
    plain = healthy.to_dict()
    assert plain["nodes"][0]["name"] == healthy.nodes[0].name


def test_samples_whose_exposed_tensors_pass_the_memory_budget_run_one_at_a_time(digits_run, monkeypatch):
    """PP-OCRv6's 640×640 detector exposes 1.5 GB of tensors a sample: 8 a run took 16 GB. With a budget smaller
    than one sample's, each run takes one sample, and every figure is the same as in runs of 8."""
    from ortlab.checks import analyze as analyze_module

    s, out = digits_run
    whole = analyze(s.model_path, out, s.evaluation_data(), s.preprocess, n=16, chunk=8)
    runs: list[int] = []
    monkeypatch.setattr(analyze_module, "memory_budget_bytes", lambda share: 1)
    tight = analyze(s.model_path, out, s.evaluation_data(), s.preprocess, n=16, chunk=8,
                    reporter=lambda e: runs.append(e.done))
    assert runs == list(range(1, 17))  # one sample a run
    # batched kernels round a little apart: nodes whose figures tie within that may swap places in the ranking
    t, w = {e.name: e for e in tight.nodes}, {e.name: e for e in whole.nodes}
    assert sorted(t) == sorted(w)
    assert [t[n].sqnr_db for n in w] == pytest.approx([w[n].sqnr_db for n in w], abs=1e-3)
    assert [t[n].local_sqnr_db for n in w] == pytest.approx([w[n].local_sqnr_db for n in w], abs=1e-3)


def test_a_float_candidate_gets_accumulated_errors_only(tmp_path):
    from ortlab.data.dataset import random_dataset

    ref = conv_bn_model(tmp_path / "a.onnx", seed=0)
    same = conv_bn_model(tmp_path / "b.onnx", seed=0)
    result = analyze(ref, same, random_dataset(4), None, n=4)
    assert not result.qdq and result.nodes
    assert all(e.local_sqnr_db is None and math.isinf(e.sqnr_db) for e in result.nodes)


def test_parity_flags_a_model_that_computes_something_else(tmp_path):
    from ortlab.data.dataset import random_dataset

    a = conv_bn_model(tmp_path / "a.onnx", seed=0)
    b = conv_bn_model(tmp_path / "b.onnx", seed=1)
    ds = random_dataset(4)
    ok = check_parity(a, a, ds, None, Recipe())
    assert ok.ok and ok.relative < 1e-3 and ok.n_samples == 4
    bad = check_parity(a, b, ds, None, Recipe())
    assert not bad.ok and "differs" in bad.message and bad.output == "logits"


def test_a_later_run_into_the_same_folder_removes_a_stale_qdq_model(tmp_path):
    s = get_sample("digits_cnn")
    out = tmp_path / "run"
    # this CPU's advised int8 (reduce-range without VNNI): full-range U8S8 saturates there, and every node would look bad
    run_recipe(s.model_path, advised_recipe(Recipe(precision=Precision.INT8)), out, s.calibration_data(), s.preprocess, verify_samples=0)
    assert (out / QDQ_FILE).is_file()
    run_recipe(s.model_path, Recipe(), out, verify_samples=0)
    assert not (out / QDQ_FILE).exists() and resolve_candidate(out) == out / "model.onnx"


@pytest.mark.slow
def test_analyze_finds_the_qdq_graph_of_an_int8_file_and_of_a_folder(tmp_path, capsys):
    """``optimize M out.onnx --precision int8`` keeps the QDQ graph beside it as ``out.qdq.onnx``; analyze reads
    it from the file form as from the folder form, with the same ranking; a later fp32 run into the same file
    removes the stale QDQ graph."""
    import json as _json

    import onnx as _onnx

    from ortlab.cli.main import main as _main
    from ortlab.data.samples import get_sample

    s = get_sample("digits_cnn")
    common = ["--calibration", str(s.calibration_dir), "--eval", str(s.evaluation_dir), "--verify-samples", "8"]
    out_file, out_dir = tmp_path / "out.onnx", tmp_path / "run"
    assert _main(["optimize", str(s.model_path), str(out_file), "--precision", "int8", *common]) == 0
    assert _main(["optimize", str(s.model_path), str(out_dir), "--precision", "int8", *common]) == 0
    capsys.readouterr()
    qdq = tmp_path / "out.qdq.onnx"
    assert qdq.is_file() and (out_dir / "model.qdq.onnx").is_file()
    ops = {n.op_type for n in _onnx.load(str(qdq)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    ranks = []
    for cand in (out_file, out_dir):
        assert _main(["analyze", str(s.model_path), str(cand), "--data", str(s.evaluation_dir), "--n", "8",
                      "--json"]) == 0
        plain = _json.loads(capsys.readouterr().out)
        assert plain["qdq"] and plain["nodes"] and plain["candidate"].endswith(".qdq.onnx")
        ranks.append([n["name"] for n in plain["nodes"]])
    assert ranks[0] == ranks[1]
    assert _main(["optimize", str(s.model_path), str(out_file), "--precision", "fp32", *common]) == 0
    assert not qdq.exists()
