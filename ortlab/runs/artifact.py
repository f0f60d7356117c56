"""The result of one recipe run as a typed record, and its ``artifact.json`` file.

``artifact.json`` holds ``serial.to_plain(artifact)`` plus ``schema_version`` (:data:`SCHEMA_VERSION`). Files
written before versions existed (schema 1: no ``schema_version``, an evaluation with None for non-finite
numbers) are read too.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortlab.settings.config import Precision, Recipe
from ortlab.transforms.coverage import QuantCoverage
from ortlab.core.errors import OrtlabError
from ortlab.core.layout import ARTIFACT_FILE
from ortlab.checks.eval_report import EvalReport
from ortlab.timing.stats import ResultSpeed
from ortlab.runs.runspec import RunSpec
from ortlab.core.serial import PlainDataError, dumps, from_plain, loads, to_plain
from ortlab.checks.verdict import Verdict
from ortlab.model.inspect import external_data_files

SCHEMA_VERSION = 2  # of artifact.json and of an artifact's plain form; 1 = files without a version

# fields that schema-1 readers filled in when they were missing
_V1_DEFAULTS: dict[str, Any] = {"run_id": None, "timings": {}, "warnings": [], "providers": [], "random_data": False,
                                "created_at": "", "evaluation": None, "notes": []}


@dataclass(frozen=True)
class Artifact:
    """The result of one recipe run: the optimized model, how it was made, and how it compares.

    ``run_id`` is the History id once stored (None before, or for a folder written outside a workspace)."""

    run_id: int | None
    model_path: Path
    source_path: Path
    source_sha256: str
    sha256: str
    recipe: Recipe
    timings: dict[str, float]
    warnings: list[str]
    providers: list[str]
    size_bytes: int
    source_size_bytes: int
    random_data: bool
    created_at: str
    evaluation: EvalReport | None = None
    notes: list[str] = field(default_factory=list)
    origin: str = ""  # "app" or "cli": where the run was started ("" when unknown)
    spec: RunSpec | None = None  # what made it, runnable again (None for runs recorded before run specs)
    verdict: Verdict | None = None  # ok/degraded/broken/unknown with reasons (None for runs recorded before verdicts)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # each input's shape as fed (one sample)
    coverage: QuantCoverage | None = None  # int8 runs: what was really quantized (None for other precisions)
    speed: ResultSpeed | None = None  # timed against its source after the verdict (None: not timed)

    @property
    def dir(self) -> Path:
        return Path(self.model_path).parent

    @property
    def source_name(self) -> str:
        """The file name of the source model."""
        return Path(self.source_path).name

    @property
    def kind(self) -> str:
        """``fp32``, ``fp16``, ``int8-static`` or ``int8-dynamic``."""
        if self.recipe.precision == Precision.INT8:
            return f"int8-{self.recipe.quant.mode.value}"
        return self.recipe.precision.value

    @property
    def size_ratio(self) -> float:
        """The model's size as a share of the source's."""
        return self.size_bytes / max(1, self.source_size_bytes)

    @property
    def total_seconds(self) -> float:
        """Seconds of every stage together."""
        return float(sum(self.timings.values()))

    def to_dict(self) -> dict:
        """``serial.to_plain`` of this artifact with its ``schema_version``."""
        return {**to_plain(self), "schema_version": SCHEMA_VERSION}

    @classmethod
    def from_dict(cls, data: dict) -> Artifact:
        """Read :meth:`to_dict`'s form (any schema version up to :data:`SCHEMA_VERSION`);
        ``PlainDataError`` (or ``RecipeError`` for a bad recipe) when it does not fit."""
        return from_plain(cls, data)

    @staticmethod
    def _upgrade_plain(data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        version = data.pop("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise PlainDataError(f"The artifact has schema version {version!r}; this ortlab reads up to "
                                 f"{SCHEMA_VERSION}. Update ortlab to read it.")
        if version < 2:
            data = {**{k: v for k, v in _V1_DEFAULTS.items() if k not in data}, **data}
        return data

    def save(self) -> Path:
        """(Re)write ``artifact.json`` next to the model through a temp file and ``os.replace`` (readers never
        see half a file); returns its path."""
        path = self.dir / ARTIFACT_FILE
        fd, tmp = tempfile.mkstemp(prefix=".artifact-", suffix=".json", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(dumps(self.to_dict(), indent=2))
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)  # left only when the write failed: replaced away otherwise
        return path


def load_artifact(out_dir) -> Artifact:
    """Read an artifact folder written by :func:`run_recipe`."""
    path = Path(out_dir) / ARTIFACT_FILE
    try:
        return Artifact.from_dict(loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise OrtlabError(f"No {ARTIFACT_FILE} in {out_dir}: not an ortlab artifact folder.") from None
    except ValueError as exc:  # invalid JSON
        raise OrtlabError(f"{path} is damaged ({exc}).") from None
    except OrtlabError as exc:
        raise OrtlabError(f"{path} is damaged ({exc.message}).") from None


def artifact_sample(out_dir) -> str | None:
    """The bundled sample's name the artifact folder ``out_dir`` was made from (its ``artifact.json`` run spec),
    or None: no sample, no ``artifact.json``, or one that cannot be read."""
    try:
        spec = loads((Path(out_dir) / ARTIFACT_FILE).read_text(encoding="utf-8")).get("spec")
    except (OSError, ValueError, AttributeError):
        return None
    sample = spec.get("sample") if isinstance(spec, dict) else None
    return sample if isinstance(sample, str) and sample else None


def file_bytes(path: Path) -> int:
    """Bytes of the model file plus its external-data files (without checking or hashing the model again)."""
    import onnx

    try:
        extra = external_data_files(onnx.load(str(path), load_external_data=False), path.parent).values()
    except (OrtlabError, OSError, ValueError):
        return path.stat().st_size
    return path.stat().st_size + sum(p.stat().st_size for p in set(extra))
