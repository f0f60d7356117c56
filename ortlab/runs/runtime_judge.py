"""A benchmark's OpenVINO rows judged like a run: each row's model, run under OpenVINO in the precision the row
names (f32, or bf16 where the CPU has it), against the ONNX Runtime fp32 baseline on the same samples, with the task
metric the verdict uses (:func:`ortlab.checks.evaluate.evaluate` and :func:`ortlab.checks.verdict.judge`: top-1
flips for a classifier, F1 for a detector, SQNR otherwise). ``ortlab bench --openvino`` shows it in the row, so a
bf16 row reads "OpenVINO bf16: 1.77×, OK · F1 0.993" on a machine that has bf16."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortlab.checks.evaluate import evaluate
from ortlab.checks.verdict import VerdictPolicy, judge
from ortlab.core.errors import OrtlabError
from ortlab.data.dataset import Dataset
from ortlab.runs.history import BenchVariant
from ortlab.runtime import openvino as ov
from ortlab.settings.config import PreprocessConfig


@dataclass(frozen=True)
class RuntimeJudgement:
    """One OpenVINO row against the ORT fp32 baseline: ``variant`` (its benchmark id), the ``precision`` OpenVINO
    compiled it in, the verdict's ``level`` ("ok", "degraded", "broken"), its ``deciding`` figure and
    ``deciding_text``, the ``samples`` judged, and ``error`` when it could not be judged."""

    variant: str
    precision: str = ""
    level: str = ""
    deciding: str = ""
    deciding_text: str = ""
    headline: str = ""
    samples: int = 0
    error: str = ""

    def cell(self) -> str:
        """The table cell: "OK in fp32 · logits: confident top-1 flips 0/64 (0.0%) on 64 samples", or why it was not
        judged."""
        if self.error:
            return f"not judged: {self.error}"
        what = f"{self.deciding} {self.deciding_text}".strip()
        return f"{self.level.upper()} in {self.precision} · {what} on {self.samples} samples"


def judge_runtime_rows(variants: Sequence[BenchVariant], dataset: Dataset, preprocess: PreprocessConfig | None, *,
                       policy: VerdictPolicy | None = None, n: int | None = None) -> list[RuntimeJudgement]:
    """Judge every OpenVINO variant of a benchmark (``variants``, as :func:`ortlab.runs.bench_service.timed_variants`
    made them; the first ONNX Runtime one is the baseline) on ``dataset`` (at most ``n`` samples) with ``policy``."""
    policy = policy or VerdictPolicy()
    ort = [v for v in variants if v.runtime == "onnxruntime"]
    if not ort:
        return []
    baseline = ort[0].path
    out = []
    for v in variants:
        if v.runtime not in ov.RUNTIME_PRECISION:
            continue
        try:
            report = evaluate(baseline, v.path, dataset, preprocess, n=n, policy=policy, candidate_runtime=v.runtime)
        except OrtlabError as exc:
            out.append(RuntimeJudgement(v.id, ov.RUNTIME_PRECISION[v.runtime], error=exc.message))
            continue
        verdict = judge(report, policy)
        compiled = report.providers_cand[0].rpartition("(")[2].rstrip(")") if report.providers_cand else ""
        out.append(RuntimeJudgement(v.id, compiled, verdict.level.value, verdict.deciding, verdict.deciding_text,
                                    verdict.headline, report.n_samples))
    return out
