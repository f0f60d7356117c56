"""GPTQ's outcome for one node, and the key under which it may be kept and reused.

A node's outcome (:func:`ortlab.transforms.weight_rounding.round_model`) depends only on what is in its key: how the
QDQ model computes the node's input (:func:`ortlab.model.tensor_digest.tensor_digests`: the ops, weights and ranges
upstream, whatever the rest of the graph holds), its int8 weight with its scales, zero points and float rows, its
layout, the calibration samples in their fitting/held-back order, the step's settings and the versions of ONNX
Runtime (which computes the inputs) and numpy (which sums them). A tune trial that keeps a decision head in float
changes no other node's key, so its other nodes reuse the default's integers instead of fitting them again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import onnxruntime

from ortlab.core.digest import array_digest, feeds_digest
from ortlab.model.tensor_digest import tensor_digests

if TYPE_CHECKING:
    import onnx

FORMAT = 1  # the outcome's meaning and the fit's algorithm; part of every key


@dataclass(frozen=True)
class NodeRounding:
    """One node's outcome: GPTQ's ``integers`` (the initializer's shape and type; None: nearest rounding kept), their
    held-back output error as a fraction of nearest rounding's (``ratio``) and why GPTQ could not run (``why``, ""
    where it ran)."""

    integers: np.ndarray | None
    ratio: float
    why: str = ""

    def fits(self, q0: np.ndarray) -> bool:
        """Whether the integers can stand in for ``q0`` (same shape and type)."""
        return self.integers is None or (self.integers.shape == q0.shape and self.integers.dtype == q0.dtype)


class KeyedTarget(Protocol):
    """A node to round, a dataclass (:class:`ortlab.transforms.weight_rounding.RoundingTarget`): its ``name``, the
    ``activation`` its kernel reads, its int8 ``weight`` initializer; every other field decides its outcome too."""

    @property
    def name(self) -> str: ...

    @property
    def activation(self) -> str: ...

    @property
    def weight(self) -> str: ...


def _identity(t: KeyedTarget) -> dict[str, Any]:
    """The target's fields besides its name, input and weight (arrays as digests)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(t):  # type: ignore[arg-type]
        if f.name not in ("name", "activation", "weight"):
            value = getattr(t, f.name)
            out[f.name] = array_digest(value) if isinstance(value, np.ndarray) else value
    return out


class RoundingMemo(Protocol):
    """Where node outcomes are kept (:class:`ortlab.runs.rounding_cache.RoundingCache`)."""

    def get(self, key: str) -> NodeRounding | None: ...

    def put(self, key: str, value: NodeRounding) -> None: ...


def samples_digest(samples: Sequence[Mapping[str, np.ndarray]], parts: Sequence[int]) -> str:
    """The digest of the samples in their order with the part (fitting or held back) each belongs to."""
    return hashlib.sha256(f"{feeds_digest(samples)}|{list(parts)}".encode()).hexdigest()


def step_key(fields: Mapping[str, object]) -> str:
    """A fitted outcome's key: sha256 of ``fields`` (what decides the outcome) with the versions of ONNX Runtime
    (which computes the step's inputs) and numpy (which sums them), as canonical JSON."""
    text = json.dumps({**fields, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}, sort_keys=True,
                      default=list)
    return hashlib.sha256(text.encode()).hexdigest()


def node_keys(qdq: onnx.ModelProto, targets: Sequence[KeyedTarget], samples: str,
              settings: Mapping[str, object]) -> dict[str, str]:
    """The key of each target of ``qdq`` (by node name) for the samples with digest ``samples`` and the step's
    ``settings``."""
    digests = tensor_digests(qdq)
    base = {"format": FORMAT, "samples": samples, "settings": dict(settings)}
    return {t.name: step_key({**base, "input": digests.get(t.activation, t.activation), "weight": digests[t.weight],
                              "node": _identity(t)}) for t in targets}


class StepMemo:
    """One step's lookups in a memo (None: nothing is looked up or kept): the keys of the targets looked up so far,
    under the samples' digest and the step's settings."""

    def __init__(self, memo: RoundingMemo | None, samples: str, settings: Mapping[str, object]) -> None:
        self.memo, self.samples, self.settings = memo, samples, settings
        self.keys: dict[str, str] = {}

    def look_up(self, qdq: onnx.ModelProto, chunk: Sequence[KeyedTarget]) -> dict[str, NodeRounding]:
        """The kept outcomes of the targets of ``chunk`` in ``qdq`` as it is now, by node name."""
        if self.memo is None:
            return {}
        self.keys.update(node_keys(qdq, chunk, self.samples, self.settings))
        found = {t.name: self.memo.get(self.keys[t.name]) for t in chunk}
        return {name: node for name, node in found.items() if node is not None}

    def keep(self, name: str, node: NodeRounding) -> None:
        """Keep the outcome of the target ``name`` (looked up before)."""
        if self.memo is not None:
            self.memo.put(self.keys[name], node)
