"""The CLI's preprocessing as a command computes it from its parsed flags, for tests that parse a command line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ortlab.cli.common import preprocess_from_flags
from ortlab.cli.inputs import parse_shapes
from ortlab.settings.config import PreprocessConfig
from ortlab.settings.flags import given_values


def preprocess_of(ns: argparse.Namespace | Any, model_path: Path, sample: Any = None) -> PreprocessConfig | None:
    """What ``optimize``/``compare`` pass to the run: ``preprocess_from_flags`` of ``ns``'s preprocessing flags,
    ``--shape`` and ``--preset``."""
    return preprocess_from_flags(model_path, sample, given_values(PreprocessConfig, ns),
                                 parse_shapes(getattr(ns, "shape", None)), getattr(ns, "preset", None))
