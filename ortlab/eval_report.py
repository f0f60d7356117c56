"""The typed result of comparing a candidate model with its reference (``evaluate.evaluate`` makes it).

Kept apart from ``evaluate`` so that reading stored results (``artifact.json``, the history) needs neither
ONNX Runtime nor numpy. SQNR of identical outputs is ``float('inf')`` (``OutputError.identical``);
``serial.to_plain`` writes it as the string "inf".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .serial import from_plain, to_plain

__all__ = ["EvalReport", "OutputError", "upgrade_v1"]


@dataclass
class OutputError:
    """Error of one output over all samples: max/mean |ref - cand|, cosine similarity, SQNR in dB."""

    name: str
    max_abs: float
    mean_abs: float
    cosine: float
    sqnr_db: float  # +inf when the outputs are identical

    @property
    def identical(self) -> bool:
        """True when the candidate's output equals the reference's exactly (SQNR is +inf)."""
        return self.sqnr_db == math.inf

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this record (non-finite numbers as "inf"/"-inf"/"nan")."""
        return to_plain(self)


@dataclass
class EvalReport:
    """Reference vs candidate over ``n_samples``; accuracies are None when not applicable."""

    n_samples: int
    outputs: list[OutputError]
    top1_accuracy_ref: float | None = None
    top1_accuracy_cand: float | None = None
    top5_accuracy_ref: float | None = None
    top5_accuracy_cand: float | None = None
    top1_agreement: float | None = None
    top5_containment: float | None = None
    per_class: list[dict[str, Any]] = field(default_factory=list)
    random_data: bool = False
    providers_ref: list[str] = field(default_factory=list)
    providers_cand: list[str] = field(default_factory=list)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # each input's shape as fed (one sample)

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this report (SQNR of identical outputs is "inf")."""
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        """``serial.from_plain``: reads :meth:`to_dict`'s form back, and the form written before schema 2."""
        return from_plain(cls, data)

    @staticmethod
    def _upgrade_plain(data: Any) -> Any:
        """``serial.from_plain`` calls this first: an evaluation written before schema 2 (``to_dict`` then wrote
        None for non-finite numbers and an ``identical`` flag per output) becomes today's form."""
        return upgrade_v1(data)


def upgrade_v1(data: Any) -> Any:
    """An evaluation written before schema 2 in today's form: each output's ``identical`` flag goes, and a
    None where a number must be becomes +inf (identical outputs' SQNR) or NaN."""
    if not isinstance(data, dict) or not isinstance(data.get("outputs"), list):
        return data
    outputs = []
    for o in data["outputs"]:
        if isinstance(o, dict):
            o = dict(o)
            identical = bool(o.pop("identical", False))
            for k in ("max_abs", "mean_abs", "cosine", "sqnr_db"):
                if k in o and o[k] is None:
                    o[k] = "inf" if k == "sqnr_db" and identical else "nan"
        outputs.append(o)
    return {**data, "outputs": outputs}
