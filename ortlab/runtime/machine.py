"""The machine a timing came from: CPU model, the ISA features that decide int8/bf16 speed, cores, the threads the
timing used, and the runtime and its version. Stored with every benchmark, so a speed-up is never read as this
machine's when another machine measured it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

from ortlab.runtime.hardware import CpuFeatures, real_cpu
from ortlab.runtime.threads import thread_limit

__all__ = ["Machine", "this_machine"]


@dataclass(frozen=True)
class Machine:
    """Where a timing ran. ``isa``: the SIMD features that matter (e.g. "AVX2, AVX-512, VNNI"); ``threads``: the
    intra-op threads asked for (0: the runtime's default); ``runtimes``: "onnxruntime 1.31.1" (and OpenVINO's when
    it timed too)."""

    cpu: str
    arch: str
    isa: str
    cores: int
    threads: int = 0
    runtimes: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line, e.g. "AMD EPYC 7B13 · AVX2 · 2 cores · 1 thread · onnxruntime 1.31.1"."""
        threads = "default threads" if not self.threads else f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        return " · ".join(x for x in (self.cpu or self.arch, self.isa or "no SIMD flags read",
                                      f"{self.cores} cores", threads, ", ".join(self.runtimes)) if x)

    def same_hardware(self, other: Machine) -> bool:
        """The same CPU, features, core count and runtime versions (threads are a setting of the timing)."""
        return (self.cpu, self.arch, self.isa, self.cores, self.runtimes) == \
            (other.cpu, other.arch, other.isa, other.cores, other.runtimes)

    def provenance(self, here: Machine | None = None) -> str:
        """"timed on this machine: …" or "timed on another machine: …" against ``here`` (default: this one)."""
        here = here if here is not None else this_machine(self.threads, openvino=len(self.runtimes) > 1)
        where = "this machine" if self.same_hardware(here) else "another machine"
        return f"timed on {where}: {self.summary()}"


def _isa(f: CpuFeatures) -> str:
    feats = [n for n, ok in (("AVX2", f.avx2), ("AVX-512", f.avx512), ("VNNI", f.vnni), ("AVX-512 BF16", f.avx512_bf16),
                             ("AMX", f.amx_tile), ("dotprod", f.dotprod), ("i8mm", f.i8mm)) if ok]
    return ", ".join(feats)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _ort_version() -> str:
    for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml"):
        v = _version(dist)
        if v:
            return v
    return "?"


def this_machine(threads: int = 0, openvino: bool = False) -> Machine:
    """This machine as a timing records it (``threads``: the timing's setting, else ``$ORTLAB_THREADS``'s cap;
    ``openvino``: OpenVINO's version too)."""
    f = real_cpu()  # where the timing really ran, whatever $ORTLAB_CPU plans for
    runtimes = [f"onnxruntime {_ort_version()}"]
    if openvino:
        runtimes.append(f"openvino {_version('openvino') or '?'}")
    return Machine(f.model_name, f.arch, _isa(f), os.cpu_count() or 0, int(threads) or thread_limit(), tuple(runtimes))
