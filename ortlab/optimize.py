"""Graph optimization with ONNX Runtime's own optimizer (SessionOptions.optimized_model_filepath)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime as ort

from . import providers as P
from .config import OptLevel, Target
from .errors import ModelLoadError, OptimizationError
from .model import external_data_files, load_model
from .text import one_line

ALL_LEVEL_WARNING = ("Level 'all' wrote hardware-specific ops (e.g. com.microsoft.nchwc layouts): the saved model "
                     "only suits hardware like this machine's. Use 'extended' for a portable model.")
NO_GPU_WARNING = ("No working CUDA GPU here: the model was optimized for the CPU, so GPU-specific fusions could not "
                  "be applied. Optimize on a machine with a GPU, or let ORT optimize at load time there.")


@dataclass(frozen=True)
class OptimizeResult:
    """Where the optimized model went, how, and what a person should know about it."""

    path: Path
    level: OptLevel
    target: Target
    providers: list[str]
    warnings: list[str]
    seconds: float

    def to_dict(self) -> dict:
        return {"path": str(self.path), "level": self.level.value, "target": self.target.value,
                "providers": list(self.providers), "warnings": list(self.warnings), "seconds": self.seconds}


def optimize_providers(target: Target) -> list[str]:
    """Providers to optimize with: CUDA+CPU for gpu when CUDA really works (never TensorRT: its compiled
    nodes cannot be saved), else CPU."""
    if Target(target) == Target.GPU and P.CUDA in P.working_providers():
        return [P.CUDA, P.CPU]
    return [P.CPU]


def _check_output(path: Path, warnings: list[str]) -> None:
    """Full ONNX check; when that fails only because of contrib ops (com.microsoft*), fall back to a
    structural check and say so."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return
    except Exception as exc:
        full_error = one_line(exc)
    model = onnx.load_model(str(path), load_external_data=False)
    domains = {n.domain for n in model.graph.node} - {"", "ai.onnx"}
    if not domains:
        raise OptimizationError(f"ONNX Runtime wrote a model the ONNX checker rejects: {full_error}", step="optimize")
    try:
        onnx.checker.check_model(str(path), full_check=False)
    except Exception as exc:
        raise OptimizationError("ONNX Runtime wrote a model the ONNX checker rejects: "
                                f"{one_line(exc)}", step="optimize") from None
    warnings.append(f"Only the structural ONNX check was run: full checking (shape inference) does not know the "
                    f"ops of {', '.join(sorted(domains))}.")


def optimize_model(src, dst, level: OptLevel, target: Target = Target.CPU) -> OptimizeResult:
    """Optimize ``src`` at ``level`` with ONNX Runtime and save to ``dst`` (``src`` is never modified).

    gpu optimizes with CUDA only when CUDA really works here (else CPU, with a warning); level "all"
    adds the hardware-specific warning; "disabled" copies the graph through ORT unchanged. The result
    passes the ONNX checker (structural check only when contrib ops defeat full checking).
    """
    level, target = OptLevel(level), Target(target)
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise OptimizationError("The optimized model must go to a new file, not over the source.", step="optimize")
    try:
        source = load_model(src, check=True, load_external=False)
    except ModelLoadError as exc:
        exc.step = exc.step or "optimize"
        raise
    external = external_data_files(source, src.parent)
    del source
    dst.parent.mkdir(parents=True, exist_ok=True)
    for stale in (dst, dst.with_name(dst.name + ".data")):
        if stale.exists():
            stale.unlink()

    warnings: list[str] = []
    providers = optimize_providers(target)
    if target == Target.GPU and P.CUDA not in providers:
        warnings.append(NO_GPU_WARNING)
    so = P.session_options(opt_level=level)
    so.optimized_model_filepath = str(dst)
    if external:  # otherwise ORT's output would point at the source's weight file, relative to dst
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", dst.name + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    start = time.perf_counter()
    try:
        with P.quiet_native_stderr():
            sess = ort.InferenceSession(str(src), sess_options=so, providers=providers, enable_fallback=0)
    except Exception as exc:
        raise OptimizationError(f"ONNX Runtime could not optimize the model: {one_line(exc)}",
                                step="optimize") from None
    seconds = time.perf_counter() - start
    used = list(sess.get_providers())
    del sess
    if not dst.is_file():
        raise OptimizationError("ONNX Runtime did not write the optimized model.", step="optimize")
    _check_output(dst, warnings)
    if level == OptLevel.ALL:
        warnings.append(ALL_LEVEL_WARNING)
    return OptimizeResult(path=dst, level=level, target=target, providers=used, warnings=warnings, seconds=seconds)
