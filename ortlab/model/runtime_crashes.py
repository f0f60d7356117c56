"""Graphs that crash this ONNX Runtime in native code (SIGSEGV): refused when the model is read, with how to rewrite
them, since no run, benchmark or deployment at ONNX Runtime's default optimization level survives them."""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnxruntime as ort

from ortlab.core.text import one_line


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The nodes of ``graph`` and of its If/Loop/Scan bodies (this module stays below ``graphs`` in the layering)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _nodes(sub)


def known_crash(model: onnx.ModelProto) -> str | None:
    """What in ``model`` crashes ONNX Runtime and what to do, or None. A LayerNormalization whose inputs end with an
    empty name ([X, Scale, ""]: no bias) crashes ORT 1.31's extended optimizations; [X, Scale] does not."""
    for node in _nodes(model.graph):
        if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx") and len(node.input) == 3 \
                and not node.input[2]:
            name = one_line(node.name or (node.output[0] if node.output else ""))
            return (f"LayerNormalization '{name}' names its bias input with an empty name ('' for no bias): "
                    f"ONNX Runtime {ort.__version__} crashes (SIGSEGV) when its extended graph optimizations meet "
                    "it, as every ortlab run, and a deployment at ONNX Runtime's default settings, would. An empty "
                    "name and an omitted input mean the same in ONNX: drop the empty name (with onnx in Python: "
                    "del node.input[2]) and import the model again.")
    return None
