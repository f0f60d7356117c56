"""File names inside a run's artifact folder: one place, read by every layer that opens such a folder."""

from pathlib import Path

MODEL_FILE = "model.onnx"
RECIPE_FILE = "recipe.json"
QDQ_FILE = "model.qdq.onnx"  # static int8 QDQ: the quantized graph before optimization (ortlab analyze)
ARTIFACT_FILE = "artifact.json"


def qdq_path(model_path: str | Path) -> Path:
    """Where the QDQ graph of the int8 model at ``model_path`` is kept: ``model.onnx`` → ``model.qdq.onnx``
    (:data:`QDQ_FILE`), ``out.onnx`` → ``out.qdq.onnx``; for a QDQ file itself, the file."""
    p = Path(model_path)
    if p.name.endswith(".qdq.onnx"):
        return p
    stem = p.name[:-len(".onnx")] if p.name.endswith(".onnx") else p.name
    return p.with_name(f"{stem}.qdq.onnx")
