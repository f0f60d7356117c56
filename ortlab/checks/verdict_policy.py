"""How an evaluation becomes a verdict (:class:`VerdictPolicy`): every bar the verdict holds a result to, and the
task settings the evaluation itself uses (:mod:`ortlab.checks.verdict` applies it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ortlab.checks.eval_report import Task
from ortlab.settings.config import setting

__all__ = ["VerdictPolicy"]


@dataclass(frozen=True)
class VerdictPolicy:
    """How an evaluation becomes a verdict, and the task settings the evaluation itself uses."""

    task: Task = setting(Task.AUTO, "What the model's outputs mean: auto infers it from the outputs (and labels); "
                         "classification, dense_map (heat maps, segmentation), boxes (YOLO-style), embedding, generic.",
                         label="Task")
    margin: float = setting(0.1, "A top-1 flip is a near-tie (not counted against the model) when the reference's "
                            "softmax margin between its top-1 and top-2 classes is below this.",
                            label="Near-tie margin", min=0.0, max=1.0, step=0.01)
    threshold: float = setting(0.3, "Decision threshold of dense maps and detection scores (probabilities; "
                               "logit outputs are passed through a sigmoid first).",
                               label="Decision threshold", min=0.0, max=1.0, step=0.05)
    min_sqnr_db: float = setting(10.0, "Broken when any float output's SQNR is below this (dB).",
                                 label="Min SQNR (dB)", min=-100.0, max=200.0, step=1.0, flag="--min-sqnr-db")
    min_cosine: float = setting(0.9, "Broken when any float output's cosine similarity is below this; degraded "
                                "when one embedding sample's is.", label="Min cosine", min=-1.0, max=1.0,
                                step=0.01)
    max_confident_flips: float = setting(0.01, "Degraded when confident top-1 flips (or differing integer "
                                         "elements) exceed this share of the samples.",
                                         label="Max confident flips", min=0.0, max=1.0, step=0.01)
    broken_confident_flips: float = setting(0.05, "Broken when confident top-1 flips (or differing integer "
                                            "elements) exceed this share.", label="Broken confident flips",
                                            min=0.0, max=1.0, step=0.01)
    max_crossing: float = setting(0.01, "Degraded when more than this share of a dense map's elements cross the "
                                  "decision threshold.", label="Max threshold crossings", min=0.0, max=1.0,
                                  step=0.01)
    broken_crossing: float = setting(0.05, "Broken when more than this share of a dense map's elements cross the "
                                     "decision threshold.", label="Broken threshold crossings", min=0.0, max=1.0,
                                     step=0.01)
    min_det_f1: float = setting(0.95, "Degraded when the F1 of the candidate's detections against the reference's "
                                "(matched by class and IoU ≥ 0.5) is below this.", label="Min detection F1",
                                min=0.0, max=1.0, step=0.01)
    broken_det_f1: float = setting(0.8, "Broken when the F1 of the candidate's detections against the reference's "
                                   "is below this, at the decision threshold or above a score of 0.5 (there with at "
                                   "least 30 reference detections).", label="Broken detection F1", min=0.0, max=1.0,
                                   step=0.01)
    max_changed_strings: float = setting(0.02, "Degraded when more than this share of decoded strings (CTC "
                                         "recognizers) differ from the reference's.", label="Max changed strings",
                                         min=0.0, max=1.0, step=0.01)
    broken_changed_strings: float = setting(0.1, "Broken when more than this share of decoded strings differ "
                                            "from the reference's.", label="Broken changed strings", min=0.0,
                                            max=1.0, step=0.01)
    min_nn_agreement: float = setting(0.9, "Degraded when fewer embedding samples than this keep their nearest "
                                      "neighbour.", label="Min NN agreement", min=0.0, max=1.0, step=0.01,
                                      flag="--min-nn-agreement")
    broken_nn_agreement: float = setting(0.7, "Broken when fewer embedding samples than this keep their nearest "
                                         "neighbour.", label="Broken NN agreement", min=0.0, max=1.0, step=0.01,
                                         flag="--broken-nn-agreement")

    def problems(self) -> list[str]:
        """What makes this policy inconsistent (empty when fine)."""
        out = []
        for lo, hi in (("max_confident_flips", "broken_confident_flips"), ("max_crossing", "broken_crossing"),
                       ("max_changed_strings", "broken_changed_strings"), ("broken_det_f1", "min_det_f1"),
                       ("broken_nn_agreement", "min_nn_agreement")):
            if getattr(self, lo) > getattr(self, hi):
                out.append(f"{lo} ({getattr(self, lo)}) must not exceed {hi} ({getattr(self, hi)}).")
        return out

    @staticmethod
    def _upgrade_plain(data: Any) -> Any:
        """A policy stored before detections were matched: its anchor-change thresholds are gone (detectors are
        graded by the F1 of matched detections)."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("max_box_changes", "broken_box_changes")}
        return data
