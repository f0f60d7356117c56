"""Calibrated activation ranges kept in the workspace, so that a later run or tune trial with the same model, data
and calibration settings reuses them instead of calibrating again.

A key is the sha256 of what changes the ranges: the model the calibration reads (after pre-processing; its external
data included), the feeds the calibration samples become (input names, dtypes, shapes and bytes: after sampling,
preprocessing and the input shapes), ONNX Runtime's calibrator arguments for the method and its options
(:func:`ortlab.transforms.quantize.calibration_settings`) and ONNX Runtime's version. Each key has one JSON file under
``<workspace>/calibration/``, written atomically. A file that cannot be read, or does not hold what it should, is
ignored: the run calibrates again and writes it anew. Nothing here ever fails a run.

The folder is bounded (``limits.CALIBRATION_CACHE_MAX_BYTES``, ``$ORTLAB_LIMIT_CALIBRATION_CACHE_MAX_BYTES``): each
write removes the entries used longest ago (by modification time; a reuse touches its file) until the rest fit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from ortlab.core import digest, limits
from ortlab.model.inspect import external_data_files
from ortlab.runs import outputs
from ortlab.runs.kept_folder import KeptFolder

FOLDER = "calibration"  # under the workspace root
FORMAT = 1  # the entry's layout; part of the key, so an old layout is never read
REUSED = "Calibration reused from an earlier run (same model, data and method)."


@dataclass(frozen=True)
class CachedCalibration:
    """One calibration: ``ranges``, the text of ONNX Runtime's calibration cache (``calibration.json``) exactly as
    the calibration wrote it, and the ``warnings`` the calibration gave (a reuse repeats them)."""

    ranges: str
    warnings: tuple[str, ...] = ()


def _update_file(h: Any, path: Path) -> None:
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)


def model_digest(model: Path) -> str:
    """sha256 of the model file and its external-data files (by name, in order)."""
    h = hashlib.sha256()
    _update_file(h, Path(model))
    for name, path in sorted(external_data_files(model).items()):
        h.update(name.encode())
        _update_file(h, path)
    return h.hexdigest()


def feeds_digest(next_feed: Callable[[], dict[str, np.ndarray] | None]) -> str:
    """sha256 of every feed ``next_feed`` returns until None (a calibration reader's ``get_next``): each input's
    name, dtype, shape and bytes."""
    return digest.feeds_digest(iter(next_feed, None))


def calibration_key(model: str, data: str, settings: str) -> str:
    """The cache key of a calibration of the model with digest ``model`` on the feeds with digest ``data`` with the
    calibrator ``settings``."""
    text = json.dumps({"format": FORMAT, "onnxruntime": onnxruntime.__version__, "model": model, "data": data,
                       "settings": settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class CalibrationCache(KeptFolder):
    """The calibrations kept in ``folder`` (``<workspace>/calibration``), one JSON file per key."""

    def __init__(self, folder, max_bytes: int | None = None) -> None:
        super().__init__(folder, limits.limit("CALIBRATION_CACHE_MAX_BYTES") if max_bytes is None else max_bytes)

    @classmethod
    def in_workspace(cls, root) -> CalibrationCache:
        """The cache of the workspace at ``root`` (``Workspace.root``: the run service hands it to each run)."""
        return cls(Path(root) / FOLDER)

    def get(self, key: str) -> CachedCalibration | None:
        """The calibration stored under ``key``; None when there is none or its file cannot be read or trusted."""
        try:
            data = json.loads(self._file(key).read_text(encoding="utf-8"))
            ranges, warnings = data["ranges"], data.get("warnings", [])
            if data.get("key") != key or not isinstance(ranges, str) or not isinstance(json.loads(ranges), dict):
                return None
            if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
                return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        self.touch(key)
        return CachedCalibration(ranges, tuple(warnings))

    def put(self, key: str, entry: CachedCalibration) -> None:
        """Store ``entry`` under ``key`` (atomically); a workspace that cannot be written only loses the reuse."""
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            outputs.write_text_atomic(self._file(key), json.dumps(
                {"key": key, "ranges": entry.ranges, "warnings": list(entry.warnings)}))
        except OSError:
            return
        self.prune(keep=key)
