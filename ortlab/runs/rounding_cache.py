"""GPTQ roundings and bias corrections of single nodes kept in the workspace (``<workspace>/rounding/``), so that a
later run or tune trial whose node has the same key (:mod:`ortlab.transforms.rounding_memo`: its input computed the
same way, its weights, the samples, the settings and versions; :mod:`ortlab.transforms.bias_memo` for a bias) reuses
the node's integers or bias shift instead of fitting them again.

Each key has one ``.npz`` file (numpy's own format, read without pickle), written atomically. A file that cannot be
read, or does not hold what it should, is ignored: the node is fitted again and its file written anew. Nothing here
ever fails a run. The folder is bounded (``limits.ROUNDING_CACHE_MAX_BYTES``,
``$ORTLAB_LIMIT_ROUNDING_CACHE_MAX_BYTES``) as the kept calibrations are (:mod:`ortlab.runs.kept_folder`).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from ortlab.core import limits
from ortlab.runs import outputs
from ortlab.runs.kept_folder import KeptFolder
from ortlab.transforms.bias_memo import NodeBias
from ortlab.transforms.rounding_memo import NodeRounding

FOLDER = "rounding"  # under the workspace root
_INTEGER_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


class RoundingCache(KeptFolder):
    """The node roundings and bias corrections kept in ``folder`` (``<workspace>/rounding``), one ``.npz`` file per
    key."""

    suffix = ".npz"

    def __init__(self, folder, max_bytes: int | None = None) -> None:
        super().__init__(folder, limits.limit("ROUNDING_CACHE_MAX_BYTES") if max_bytes is None else max_bytes)

    @classmethod
    def beside(cls, calibrations_folder) -> RoundingCache:
        """The roundings kept beside a run's kept calibrations (``<workspace>/calibration`` → ``<workspace>/rounding``)."""
        return cls(Path(calibrations_folder).parent / FOLDER)

    def get(self, key: str) -> NodeRounding | None:
        """The outcome stored under ``key``; None when there is none or its file cannot be read or trusted."""
        try:
            with np.load(self._file(key), allow_pickle=False) as data:
                if str(data["key"]) != key:
                    return None
                ratio, why = float(data["ratio"]), str(data["why"])
                integers = data["integers"] if bool(data["rounded"]) else None
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):
            return None
        if (integers is not None and integers.dtype not in _INTEGER_TYPES) or not np.isfinite(ratio):
            return None
        self.touch(key)
        return NodeRounding(integers, ratio, why)

    def put(self, key: str, value: NodeRounding) -> None:
        """Store ``value`` under ``key`` (atomically); a workspace that cannot be written only loses the reuse."""
        buf = io.BytesIO()
        integers = value.integers if value.integers is not None else np.zeros(0, np.int8)
        np.savez(buf, key=np.array(key), ratio=np.array(value.ratio), why=np.array(value.why),
                 rounded=np.array(value.integers is not None), integers=integers)
        self._write(key, buf.getvalue())

    def get_bias(self, key: str) -> NodeBias | None:
        """The bias correction stored under ``key``; None when there is none or its file cannot be read or trusted."""
        try:
            with np.load(self._file(key), allow_pickle=False) as data:
                if str(data["key"]) != key:
                    return None
                shift, applied = data["shift"], bool(data["applied"])
                before, after = float(data["before"]), float(data["after"])
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):
            return None
        if shift.dtype != np.int64 or shift.ndim != 1 or not (np.isfinite(before) and np.isfinite(after)):
            return None
        self.touch(key)
        return NodeBias(shift, applied, before, after)

    def put_bias(self, key: str, value: NodeBias) -> None:
        """Store ``value`` under ``key`` (atomically); a workspace that cannot be written only loses the reuse."""
        buf = io.BytesIO()
        np.savez(buf, key=np.array(key), shift=np.asarray(value.shift, np.int64), applied=np.array(value.applied),
                 before=np.array(value.before), after=np.array(value.after))
        self._write(key, buf.getvalue())

    def _write(self, key: str, data: bytes) -> None:
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            outputs.write_bytes_atomic(self._file(key), data)
        except OSError:
            return
        self.prune(keep=key)
