"""Bundled sample models: each ``sample_models/<name>/manifest.json`` describes a model, its labels,
preprocessing, data folders and the reference figure measured on that data.

The root is ``sample_models/`` next to the package, or ``$ORTLAB_SAMPLES`` when set.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ortlab.settings.config import PreprocessConfig
from ortlab.data.dataset import Dataset
from ortlab.data.loaders import load_image_folder
from ortlab.core.errors import DataError, ModelLoadError, OrtlabError
from ortlab.model.inspect import sha256_file_cached
from ortlab.model.inspect import sha256_file

DEFAULT_SAMPLE = "digits_cnn"
_REQUIRED = ("name", "model", "preprocess")


@dataclass(frozen=True)
class SampleModel:
    """One bundled sample; paths are absolute."""

    name: str
    title: str
    description: str
    license: str
    attribution: str
    dir: Path
    model_path: Path
    labels: list[str]
    preprocess: PreprocessConfig
    calibration_dir: Path | None
    evaluation_dir: Path | None
    evaluation_labeled: bool
    reference: dict
    data_notes: str
    task: str = "classification"
    extra: dict = field(default_factory=dict, compare=False)

    def calibration_data(self) -> Dataset:
        """The bundled calibration images (labeled when they sit in class folders)."""
        return self._images(self.calibration_dir, "calibration")

    def evaluation_data(self) -> Dataset:
        """The bundled evaluation images, labeled with the manifest's labels when ``evaluation_labeled``."""
        return self._images(self.evaluation_dir, "evaluation", labeled=self.evaluation_labeled)

    def _images(self, folder: Path | None, what: str, labeled: bool = True) -> Dataset:
        if folder is None:
            raise DataError(f"Sample '{self.name}' has no {what} data.")
        return load_image_folder(folder, class_names=self.labels if labeled and self.labels else None)


def samples_root() -> Path:
    """Where sample manifests are read from ($ORTLAB_SAMPLES or the repo's sample_models/)."""
    env = os.environ.get("ORTLAB_SAMPLES")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "sample_models"


def _bad(where: Path, message: str) -> DataError:
    return DataError(f"Sample manifest {where}: {message}")


def load_manifest(path) -> SampleModel:
    """Read one ``manifest.json``; raises DataError (or ModelLoadError for a missing model) naming the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _bad(path, "file not found.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(path, f"not valid JSON ({exc}).") from None
    if not isinstance(data, dict):
        raise _bad(path, "must be a JSON object.")
    missing = [k for k in _REQUIRED if not data.get(k)]
    if missing:
        raise _bad(path, f"missing required key(s) {', '.join(missing)}.")
    base = path.parent

    def resolve(key: str, must_exist: bool = True) -> Path | None:
        value = data.get(key)
        if not value:
            return None
        if not isinstance(value, str):
            raise _bad(path, f"'{key}' must be a path relative to the manifest's folder.")
        p = (base / value).resolve()
        if must_exist and not p.exists():
            raise _bad(path, f"'{key}' points to {value}, which does not exist.")
        return p

    model_path = (base / str(data["model"])).resolve()
    if not model_path.is_file():
        raise ModelLoadError(f"Sample '{data['name']}': model file {data['model']} is missing next to {path}.")
    labels: list[str] = []
    labels_path = resolve("labels")
    if labels_path is not None:
        labels = [ln.strip() for ln in labels_path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not isinstance(data["preprocess"], dict):
        raise _bad(path, "'preprocess' must be an object.")
    try:
        pre = PreprocessConfig.from_dict(data["preprocess"])
    except OrtlabError as exc:
        raise _bad(path, f"preprocess: {exc.message}") from None
    problems = pre.problems()
    if problems:
        raise _bad(path, "preprocess: " + " ".join(problems))
    reference = data.get("reference") or {}
    if not isinstance(reference, dict):
        raise _bad(path, "'reference' must be an object.")
    known = {"name", "title", "description", "license", "attribution", "model", "task", "labels", "preprocess",
             "calibration_dir", "evaluation_dir", "evaluation_labeled", "reference", "data_notes"}
    return SampleModel(
        name=str(data["name"]), title=str(data.get("title") or data["name"]),
        description=str(data.get("description", "")), license=str(data.get("license", "")),
        attribution=str(data.get("attribution", "")), dir=base.resolve(), model_path=model_path, labels=labels,
        preprocess=pre, calibration_dir=resolve("calibration_dir"), evaluation_dir=resolve("evaluation_dir"),
        evaluation_labeled=bool(data.get("evaluation_labeled", False)), reference=reference,
        data_notes=str(data.get("data_notes", "")), task=str(data.get("task", "classification")),
        extra={k: v for k, v in data.items() if k not in known},
    )


def list_samples(root=None, *, skip_broken: bool = False) -> list[SampleModel]:
    """Every sample under ``root`` (default :func:`samples_root`), sorted by name. A broken manifest raises,
    unless ``skip_broken``."""
    root = Path(root) if root is not None else samples_root()
    if not root.is_dir():
        return []
    out = []
    for manifest in sorted(root.glob("*/manifest.json")):
        try:
            out.append(load_manifest(manifest))
        except OrtlabError:
            if not skip_broken:
                raise
    return sorted(out, key=lambda s: s.name)


def get_sample(name: str, root=None) -> SampleModel:
    """The sample called ``name``; DataError listing the available ones when there is none."""
    samples = list_samples(root, skip_broken=True)
    for s in samples:
        if s.name == name:
            return s
    folder = (Path(root) if root is not None else samples_root()) / name / "manifest.json"
    if folder.is_file():
        return load_manifest(folder)  # raises the manifest's own problem
    names = ", ".join(s.name for s in samples) or "none"
    raise DataError(f"No sample model named '{name}' (available: {names}).")


def default_sample(root=None) -> SampleModel:
    """The sample a first-time user sees: digits_cnn when present, else the first one."""
    samples = list_samples(root, skip_broken=True)
    if not samples:
        raise DataError(f"No sample models found in {Path(root) if root is not None else samples_root()}.")
    return next((s for s in samples if s.name == DEFAULT_SAMPLE), samples[0])


def find_by_path(model_path, root=None) -> SampleModel | None:
    """The bundled sample whose model file is ``model_path`` (the same file, however the path is written)."""
    resolved = Path(model_path).resolve()
    return next((s for s in list_samples(root, skip_broken=True) if Path(s.model_path).resolve() == resolved), None)


def find_by_sha256(sha256: str, root=None) -> SampleModel | None:
    """The bundled sample whose model file has this sha256 (an upload of a sample keeps its manifest)."""
    for sample in list_samples(root, skip_broken=True):
        path = Path(sample.model_path)
        if path.is_file() and sha256_file_cached(path) == sha256:
            return sample
    return None


def find_for_model(model_path, sha256: str | None = None) -> SampleModel | None:
    """The bundled sample whose model is ``model_path`` (the same file, or the same bytes elsewhere), or None.
    ``sha256``: the model's hash when the caller already has it (the file is then not read again)."""
    try:
        same = find_by_path(model_path)
        if same is not None:
            return same
        size = Path(model_path).stat().st_size
        if not any(s.model_path.stat().st_size == size for s in list_samples(skip_broken=True)):
            return None  # no sample can have the same bytes: skip hashing the model
        return find_by_sha256(sha256 or sha256_file(model_path))
    except (OrtlabError, OSError):
        return None
