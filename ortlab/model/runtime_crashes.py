"""Graphs that crash this ONNX Runtime in native code (SIGSEGV): refused when the model is read, with how to rewrite
them, since no run, benchmark or deployment at ONNX Runtime's default optimization level survives them."""

from __future__ import annotations

from collections.abc import Iterable

import onnx
import onnxruntime as ort

from ortlab.core.text import one_line


def known_crash(nodes: Iterable[onnx.NodeProto]) -> str | None:
    """What among a model's ``nodes`` (subgraphs' included) crashes ONNX Runtime and what to do, or None. A
    LayerNormalization whose inputs end with an empty name ([X, Scale, ""]: no bias) crashes ORT 1.31's extended
    optimizations; [X, Scale] does not."""
    for node in nodes:
        if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx") and len(node.input) == 3 \
                and not node.input[2]:
            name = one_line(node.name or (node.output[0] if node.output else ""))
            return (f"LayerNormalization '{name}' names its bias input with an empty name ('' for no bias): "
                    f"ONNX Runtime {ort.__version__} crashes (SIGSEGV) when its extended graph optimizations meet "
                    "it, as every ortlab run, and a deployment at ONNX Runtime's default settings, would. An empty "
                    "name and an omitted input mean the same in ONNX: drop the empty name (with onnx in Python: "
                    "del node.input[2]) and import the model again.")
    return None
