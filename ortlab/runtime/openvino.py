"""Timing under OpenVINO's CPU runtime, the optional extra ``pip install "ortlab[openvino]"``.

OpenVINO reads plain ONNX, including QDQ int8 graphs, but not ORT's own optimized graphs (QLinearConv,
com.microsoft ops). So an int8 static run is timed under OpenVINO from its portable QDQ file
(:data:`ortlab.core.layout.QDQ_FILE`), everything else from the model itself.

No network: ``import openvino`` also imports its model-conversion tools, which send usage telemetry to Google
Analytics from a forked process unless the user opted out. :func:`_openvino` imports it with the
``openvino_telemetry`` package blocked, so the tools fall back to their own no-op stub.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ortlab.core.errors import BenchmarkError
from ortlab.core.layout import MODEL_FILE, QDQ_FILE
from ortlab.core.text import one_line

RUNTIME = "openvino"
RUNTIME_BF16 = "openvino-bf16"  # the same runtime compiled with the bf16 precision hint (a row of its own)
RUNTIME_PRECISION = {RUNTIME: "fp32", RUNTIME_BF16: "bf16"}  # a benchmark variant's runtime -> compiled precision
PROVIDER = "OpenVINO CPU"  # how its rows name what ran
# OpenVINO's CPU plugin picks bf16 by default where the CPU has AVX-512 BF16 or AMX: a row meant as fp32 says so.
PRECISIONS = {"fp32": "f32", "bf16": "bf16"}  # our precision name -> INFERENCE_PRECISION_HINT
INSTALL_HINT = 'Install the extra to time models under OpenVINO too: pip install "ortlab[openvino]".'


def available() -> bool:
    """True when the ``openvino`` package can be imported."""
    return importlib.util.find_spec("openvino") is not None


def _openvino() -> Any:
    """The ``openvino`` module, imported without its telemetry (see the module's docstring)."""
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]  # None: "import fails"
    import openvino

    return openvino


def portable_model(path: str | Path) -> Path:
    """The file OpenVINO should time for ``path``: the QDQ model beside an int8 static artifact's
    ``model.onnx``, else ``path`` itself."""
    p = Path(path)
    qdq = p.with_name(QDQ_FILE)
    return qdq if p.name == MODEL_FILE and qdq.is_file() else p


def _ort_type(elem_type: int) -> str:
    from onnx import TensorProto

    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def _graph_inputs(path: Path) -> list[SimpleNamespace]:
    """The model's inputs as ORT describes them (``name``, ``type`` "tensor(float)", ``shape`` with str = symbolic),
    so the benchmark's input generation serves both runtimes."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        out.append(SimpleNamespace(name=vi.name, type=_ort_type(tt.elem_type), shape=shape))
    return out


def compiled_precision(compiled: Any) -> str:
    """The inference precision a compiled OpenVINO model reports: "fp32", "bf16", "fp16", or OpenVINO's own name."""
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    name = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    return {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}.get(name, name)


def bf16_supported(cpu: Any) -> bool:
    """True when ``cpu`` (:class:`ortlab.runtime.hardware` CPU features) runs bf16 natively (AVX-512 BF16 or AMX)."""
    return bool(getattr(cpu, "avx512_bf16", False) or getattr(cpu, "amx_bf16", False))


class OpenVinoSession:
    """An OpenVINO compiled model with the two methods the timing loop calls on an ORT session, compiled at
    ``precision`` ("fp32" or "bf16"); :attr:`precision` is the precision the compiled model reports back."""

    def __init__(self, path: str | Path, precision: str = "fp32") -> None:
        if precision not in PRECISIONS:
            raise BenchmarkError(f"OpenVINO precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
        if not available():
            raise BenchmarkError(f"OpenVINO is not installed. {INSTALL_HINT}")
        ov = _openvino()

        self.path = Path(path)
        self._inputs = _graph_inputs(self.path)
        try:
            core = ov.Core()
            self._compiled = core.compile_model(core.read_model(str(self.path)), "CPU",
                                                {"INFERENCE_PRECISION_HINT": PRECISIONS[precision]})
        except (RuntimeError, ValueError, TypeError, OSError) as exc:  # OpenVINO's bindings raise RuntimeError
            raise BenchmarkError(f"OpenVINO cannot read {self.path.name}: {one_line(exc)}. It reads plain ONNX and "
                                 f"QDQ int8 files, not ORT-only graphs (QLinearConv, com.microsoft ops).") from exc
        self.precision = compiled_precision(self._compiled)
        self._request = self._compiled.create_infer_request()
        self._outputs = list(self._compiled.outputs)

    def get_inputs(self) -> list[SimpleNamespace]:
        return self._inputs

    def get_outputs(self) -> list[SimpleNamespace]:
        """The model's outputs (``name``), in its order, as ORT's session lists them."""
        import onnx

        graph = onnx.load(str(self.path), load_external_data=False).graph
        return [SimpleNamespace(name=o.name) for o in graph.output]

    def run(self, output_names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Infer once (synchronously) and return the outputs ``output_names`` names (None: every output), in the
        model's order."""
        result = self._request.infer(feeds)
        values = [np.asarray(result[o]) for o in self._outputs]
        if not output_names:
            return values
        order = [o.name for o in self.get_outputs()]
        return [values[order.index(n)] for n in output_names]
