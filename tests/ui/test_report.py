"""The self-contained HTML report."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import dataclasses
from pathlib import Path
from typing import Any

from ortlab.runs.artifact import Artifact
from ortlab.timing.bench import LatencySummary
from ortlab.settings.config import Precision, QuantConfig, QuantMode, Recipe, recipe_cli_line
from ortlab.model.diff import GraphDiff
from ortlab.checks.eval_report import EvalReport
from ortlab.core.serial import from_plain
from ortlab.ui.views.report import html_report

REF_SHA = "a" * 63 + "1"
CAND_SHA = "b" * 63 + "2"
FUSION = "Conv+BatchNormalization+Relu → FusedConv ×3"


class Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts += 1
        for name, value in attrs:
            if name in ("src", "href", "action", "data") and value:
                self.refs.append((tag, name, value))


def inputs(random_data: bool = False):
    recipe = Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.STATIC, calibration_samples=50))
    artifact = Artifact(
        run_id=7, model_path=Path("/ws/artifacts/7/model.onnx"), source_path=Path("/ws/models/abc/model.onnx"),
        source_sha256=REF_SHA, sha256=CAND_SHA, recipe=recipe,
        timings={"quantize": 1.25, "optimize": 0.5}, warnings=["Only 50 calibration samples <fine>"],
        providers=["CPUExecutionProvider"], size_bytes=1_234_567, source_size_bytes=4_938_268,
        random_data=random_data, created_at="2026-11-21T10:00:00+00:00", evaluation=None,
    )
    ref = {"path": str(artifact.source_path), "sha256": REF_SHA, "total_bytes": 4_938_268, "node_count": 53,
           "param_count": 1_234_000, "opsets": {"": 17}, "warnings": []}
    cand = {"path": str(artifact.model_path), "sha256": CAND_SHA, "total_bytes": 1_234_567, "node_count": 88,
            "param_count": 1_234_000, "opsets": {"": 17, "com.microsoft": 1}, "warnings": []}
    diff_fields: dict[str, Any] = {
        "op_deltas": [
            {"key": "BatchNormalization", "domain": "", "op_type": "BatchNormalization", "before": 3, "after": 0, "delta": -3},
            {"key": "com.microsoft::FusedConv", "domain": "com.microsoft", "op_type": "FusedConv", "before": 0, "after": 3, "delta": 3},
            {"key": "QuantizeLinear", "domain": "", "op_type": "QuantizeLinear", "before": 0, "after": 17, "delta": 17},
            {"key": "Gemm", "domain": "", "op_type": "Gemm", "before": 1, "after": 1, "delta": 0},
        ],
        "removed": [{"name": "bn0"}] * 3, "added": [{"name": "q"}] * 20, "changed": [], "unchanged_count": 12,
        "initializer_bytes_before": {"float32": 4_900_000}, "initializer_bytes_after": {"int8": 1_225_000},
        "fusions": [FUSION],
    }
    diff = GraphDiff(**diff_fields)
    evaluation = from_plain(EvalReport, {
        "n_samples": 32, "top1_accuracy_ref": 0.96875, "top1_accuracy_cand": 0.9375, "top5_accuracy_ref": None,
        "top5_accuracy_cand": None, "top1_agreement": 0.90625, "top5_containment": 1.0,
        "outputs": [{"name": "logits", "max_abs": 0.0123, "mean_abs": 0.00456, "cosine": 0.999871, "sqnr_db": 31.42}],
        "per_class": [{"class": "cat", "n": 16, "ref_acc": 1.0, "cand_acc": 0.9375}],
        "random_data": random_data, "providers_ref": ["CPUExecutionProvider"], "providers_cand": ["CPUExecutionProvider"],
    })
    bench_rows: list[dict[str, Any]] = [
        {"variant": "reference", "batch_size": 1, "n": 100, "p50": 1.234, "p90": 1.5, "p99": 2.25, "mean": 1.3,
         "std": 0.1, "min": 1.0, "max": 2.5, "throughput_per_s": 810.4, "peak_rss_mb": 55.5,
         "providers": ["CPUExecutionProvider"]},
        {"variant": "int8", "batch_size": 1, "n": 100, "p50": 0.612, "p90": 0.7, "p99": 0.9, "mean": 0.65,
         "std": 0.05, "min": 0.5, "max": 1.0, "throughput_per_s": 1633.9, "peak_rss_mb": None,
         "providers": ["CPUExecutionProvider"]}]
    bench = [LatencySummary(**b) for b in bench_rows]
    return artifact, ref, cand, diff, evaluation, bench, recipe


def test_report_is_self_contained_and_complete():
    artifact, ref, cand, diff, evaluation, bench, recipe = inputs()
    page = html_report(artifact, ref, cand, diff, evaluation, bench)
    parser = Refs()
    parser.feed(page)
    assert parser.scripts >= 3  # plotly.js once + one per figure (op deltas, latency)
    external = [r for r in parser.refs if re.match(r"^\s*(https?:)?//", r[2])]
    assert external == []
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=[\"']?(https?:)?//", page)
    assert page.count("plotly.js v") == 1 or page.count("* plotly.js") == 1  # library inlined exactly once
    assert REF_SHA in page and CAND_SHA in page
    assert FUSION in page
    assert recipe_cli_line(recipe) in page
    assert '"calibration_samples": 50' in page
    # sizes, deltas, accuracy, errors, benchmark
    for text in ("4.94 MB (4,938,268 bytes)", "1.23 MB (1,234,567 bytes)", "0.250×", "com.microsoft::FusedConv",
                 ">-3<", ">+17<", "96.88%", "93.75%", "90.62%", "100.00%", "0.0123", "0.0046", "0.999871",
                 "31.42", "1.234", "0.612", "1633.9", "55.5", "3 nodes removed, 20 added, 0 changed, 12 unchanged"):
        assert text in page, text
    assert "Only 50 calibration samples &lt;fine&gt;" in page
    assert "Build / optimize</td><td>CPUExecutionProvider" in page
    assert "Benchmark — int8 (bs 1)</td><td>CPUExecutionProvider" in page
    assert "RANDOM DATA" not in page


def test_random_data_is_flagged_and_optional_parts_may_be_missing():
    artifact, ref, cand, diff, evaluation, _, _ = inputs(random_data=True)
    page = html_report(artifact, ref, cand, diff, evaluation, None)
    assert page.index("RANDOM DATA") < page.index("<h2>Models</h2>")
    assert "Benchmark (ms)" not in page
    empty = GraphDiff([], [], [], [], 0, {}, {}, [])
    bare = html_report(dataclasses.replace(artifact, random_data=False), ref, cand, empty, None, None)
    assert "Not evaluated." in bare and "No fusions detected." in bare
    assert "plotly" not in bare.lower()  # no figures → no library


def test_the_report_lists_only_the_opset_domains_the_nodes_use():
    """Issue 28 (10): an exporter's imports of ai.onnx.training or org.pytorch.aten, used by no node, alarmed a
    reader of the report's Models table; they are counted, not listed."""
    artifact, ref, cand, diff, evaluation, bench, _ = inputs()
    ref = {**ref, "opsets": {"": 17, "ai.onnx.training": 1, "org.pytorch.aten": 1, "ai.onnx.ml": 3},
           "op_counts": {"Conv": 3, "BatchNormalization": 3}}
    cand = {**cand, "opsets": {"": 17, "com.microsoft": 1, "ai.onnx.training": 1},
            "op_counts": {"Conv": 3, "com.microsoft::QLinearAdd": 1}}
    page = html_report(artifact, ref, cand, diff, evaluation, bench)
    row = re.search(r"<td>Opsets</td><td>(.*?)</td><td>(.*?)</td>", page)
    assert row is not None
    assert row.group(1) == "ai.onnx 17 (+3 more imported, used by no node)", row.group(1)
    assert row.group(2) == "ai.onnx 17, com.microsoft 1 (+1 more imported, used by no node)", row.group(2)
    assert "ai.onnx.training" not in page and "org.pytorch.aten" not in page
