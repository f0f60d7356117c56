"""File names inside a run's artifact folder: one place, read by every layer that opens such a folder."""

MODEL_FILE = "model.onnx"
RECIPE_FILE = "recipe.json"
QDQ_FILE = "model.qdq.onnx"  # static int8 QDQ: the quantized graph before optimization (ortlab analyze)
ARTIFACT_FILE = "artifact.json"
