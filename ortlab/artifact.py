"""The result of one recipe run as a typed record, and its ``artifact.json`` file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .config import Recipe
from .errors import OrtlabError

MODEL_FILE = "model.onnx"
RECIPE_FILE = "recipe.json"
ARTIFACT_FILE = "artifact.json"


@dataclass
class Artifact:
    """The result of one recipe run: the optimized model, how it was made, and how it compares."""

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
    evaluation: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return Path(self.model_path).parent

    def to_dict(self) -> dict:
        """JSON-safe form (paths as strings, the recipe as a plain dict)."""
        return {
            "run_id": self.run_id, "model_path": str(self.model_path), "source_path": str(self.source_path),
            "source_sha256": self.source_sha256, "sha256": self.sha256, "recipe": self.recipe.to_dict(),
            "timings": dict(self.timings), "warnings": list(self.warnings), "providers": list(self.providers),
            "size_bytes": self.size_bytes, "source_size_bytes": self.source_size_bytes,
            "random_data": self.random_data, "created_at": self.created_at, "evaluation": self.evaluation,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Artifact:
        return cls(
            run_id=data.get("run_id"), model_path=Path(data["model_path"]), source_path=Path(data["source_path"]),
            source_sha256=data["source_sha256"], sha256=data["sha256"], recipe=Recipe.from_dict(data["recipe"]),
            timings=dict(data.get("timings", {})), warnings=list(data.get("warnings", [])),
            providers=list(data.get("providers", [])), size_bytes=int(data["size_bytes"]),
            source_size_bytes=int(data["source_size_bytes"]), random_data=bool(data.get("random_data", False)),
            created_at=data.get("created_at", ""), evaluation=data.get("evaluation"),
            notes=list(data.get("notes", [])),
        )

    def save(self) -> Path:
        """(Re)write ``artifact.json`` next to the model; returns its path."""
        path = self.dir / ARTIFACT_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True), encoding="utf-8")
        return path


def load_artifact(out_dir) -> Artifact:
    """Read an artifact folder written by :func:`run_recipe`."""
    path = Path(out_dir) / ARTIFACT_FILE
    try:
        return Artifact.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise OrtlabError(f"No {ARTIFACT_FILE} in {out_dir}: not an ortlab artifact folder.") from None
    except (json.JSONDecodeError, KeyError) as exc:
        raise OrtlabError(f"{path} is damaged ({exc}).") from None


def file_bytes(path: Path) -> int:
    """Bytes of the model file plus its external-data files (without checking or hashing the model again)."""
    import onnx

    from .model import external_data_files

    try:
        extra = external_data_files(onnx.load(str(path), load_external_data=False), path.parent).values()
    except (OrtlabError, OSError, ValueError):
        return path.stat().st_size
    return path.stat().st_size + sum(p.stat().st_size for p in set(extra))
