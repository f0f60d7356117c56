"""Bias correction's outcome for one node, and the key under which it may be kept and reused.

A node's correction (:func:`ortlab.transforms.bias_correction.correct_model`) depends only on what is in its key: how
the QDQ model computes the node's output as the step reaches it (:func:`ortlab.model.tensor_digest.tensor_digests`:
the ops, weights, ranges and the biases corrected before it upstream, and its own weight and bias), how the float
model computes the output it is corrected towards, the calibration samples in their fitting/held-back order, the
step's settings and the versions of ONNX Runtime and numpy. A tune trial that keeps a decision head in float changes
no other node's key, so those nodes take the default's correction without running the models again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ortlab.core.digest import array_digest
from ortlab.model.tensor_digest import initializer_digests, tensor_digests
from ortlab.transforms.rounding_memo import samples_digest, step_key

if TYPE_CHECKING:
    import onnx

FORMAT = 1  # the outcome's meaning and the correction's algorithm; part of every key


@dataclass(frozen=True)
class NodeBias:
    """One node's outcome: the int32 ``shift`` measured for each output channel (int64), whether it lowered the
    node's held-back error and so was applied (``applied``), and that error without and with it (``before``,
    ``after``)."""

    shift: np.ndarray
    applied: bool
    before: float
    after: float

    def fits(self, channels: int) -> bool:
        """Whether the shift can stand for a bias of ``channels`` channels."""
        return self.shift.shape == (channels,) and self.shift.dtype == np.int64


class BiasMemo(Protocol):
    """Where node outcomes are kept (:class:`ortlab.runs.rounding_cache.RoundingCache`)."""

    def get_bias(self, key: str) -> NodeBias | None: ...

    def put_bias(self, key: str, value: NodeBias) -> None: ...


class BiasSteps:
    """One bias-correction step's lookups in a memo: the float model's tensor digests, the QDQ model's initializer
    digests (kept up to date as biases change), the samples' digest and the step's settings."""

    def __init__(self, memo: BiasMemo, fp32: onnx.ModelProto, qdq: onnx.ModelProto,
                 samples: Sequence[Mapping[str, np.ndarray]], parts: Sequence[int],
                 settings: Mapping[str, object]) -> None:
        """``samples`` are the step's, ``parts`` says of each whether it is fitted on (0) or held back (1)."""
        self.memo = memo
        self.reference = tensor_digests(fp32)
        self.initializers = initializer_digests(qdq)
        self.base = {"step": "bias_correction", "format": FORMAT, "samples": samples_digest(samples, parts),
                     "settings": dict(settings)}
        self.keys: dict[str, str] = {}

    def look_up(self, qdq: onnx.ModelProto, name: str, qdq_output: str, fp32_output: str,
                scale: np.ndarray) -> NodeBias | None:
        """The kept outcome of node ``name`` of ``qdq`` as it is now (its output ``qdq_output`` corrected towards
        the float model's ``fp32_output``, its bias scale ``scale``)."""
        output = tensor_digests(qdq, self.initializers)[qdq_output]
        self.keys[name] = step_key({**self.base, "output": output, "scale": array_digest(np.asarray(scale)),
                                    "reference": self.reference.get(fp32_output, fp32_output)})
        return self.memo.get_bias(self.keys[name])

    def keep(self, name: str, outcome: NodeBias) -> None:
        """Keep the outcome of node ``name`` (looked up before)."""
        self.memo.put_bias(self.keys[name], outcome)

    def changed(self, qdq: onnx.ModelProto, initializer: str) -> None:
        """The initializer ``initializer`` of ``qdq`` was changed (a corrected bias)."""
        self.initializers.update(initializer_digests(qdq, {initializer}))
