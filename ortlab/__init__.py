"""ortlab: make ONNX models smaller and faster with ONNX Runtime, and show why it is safe to ship.

The engine (this package minus ``ortlab.ui``) depends on onnx, onnxruntime, numpy and pillow only.
"""

__version__ = "0.1.0"
