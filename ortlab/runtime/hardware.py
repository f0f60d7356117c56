"""What this CPU can do for int8, and the quantization defaults and notes that follow from it.

Integer dot-product instructions decide whether int8 is fast and which int8 flavour: x86 with VNNI
(``avx512_vnni`` or ``avx_vnni``) runs U8S8 (uint8 activations, int8 weights) at full speed; x86 without VNNI
multiplies u8×s8 with ``vpmaddubsw``, whose 16-bit intermediate sums can saturate, so 7-bit weights
(``reduce_range``) are safer there; Arm with ``asimddp`` (dotprod) and TensorRT prefer S8S8. Detection reads the
flags of ``/proc/cpuinfo`` (Linux, x86 and Arm); elsewhere only the architecture is known.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ortlab.settings.config import CpuInt8, QuantType, Recipe, Target

TWO_GB = 2 * 1024**3  # protobuf's limit: a larger model must keep its weights in external data files
_X86 = ("x86_64", "amd64", "i386", "i686", "x86")
_ARM = ("aarch64", "arm64", "armv8l", "armv8", "arm")


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's architecture and the SIMD features that matter for int8 kernels."""

    arch: str  # "x86", "arm" or "other"
    model_name: str = ""
    avx2: bool = False
    avx512: bool = False  # avx512f + avx512bw (ORT's AVX-512 int8 kernels)
    vnni: bool = False  # avx512_vnni or avx_vnni
    dotprod: bool = False  # Arm asimddp
    i8mm: bool = False  # Arm int8 matrix multiply
    amx_tile: bool = False  # x86 Advanced Matrix Extensions: tile registers
    amx_bf16: bool = False  # AMX bfloat16 tile multiply
    amx_int8: bool = False  # AMX int8 tile multiply
    avx512_bf16: bool = False  # AVX-512 bfloat16 dot products
    source: str = "unknown"  # where the flags came from
    flags: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def int8_dot_product(self) -> bool:
        """The CPU has integer dot-product instructions (VNNI on x86, dotprod on Arm)."""
        return self.vnni or self.dotprod

    def summary(self) -> str:
        """One line: e.g. ``x86 · AVX-512, VNNI (int8 dot product)``."""
        if self.arch == "x86":
            feats = [n for n, ok in (("AVX2", self.avx2), ("AVX-512", self.avx512), ("VNNI", self.vnni),
                                     ("AVX-512 BF16", self.avx512_bf16)) if ok]
            amx = [n for n, ok in (("tile", self.amx_tile), ("bf16", self.amx_bf16), ("int8", self.amx_int8)) if ok]
            if amx:
                feats.append(f"AMX ({', '.join(amx)})")
        elif self.arch == "arm":
            feats = [n for n, ok in (("dotprod", self.dotprod), ("i8mm", self.i8mm)) if ok]
        else:
            feats = []
        dot = "int8 dot product" if self.int8_dot_product else "no int8 dot product"
        if self.source == "unknown":
            dot = "int8 features unknown"
        name = f" ({self.model_name})" if self.model_name else ""
        told = f" (as set by {self.source})" if self.source.startswith("$") else ""
        return f"{self.arch}{name} · {', '.join(feats) or 'no SIMD flags read'} · {dot}{told}"


def _arch(machine: str) -> str:
    m = machine.lower()
    if m in _X86:
        return "x86"
    if m in _ARM or m.startswith("arm"):
        return "arm"
    return "other"


def parse_cpuinfo(text: str, machine: str | None = None) -> CpuFeatures:
    """Features from the text of ``/proc/cpuinfo`` (x86 ``flags`` or Arm ``Features`` lines). ``machine``
    (``platform.machine()`` by default) decides the architecture when the text does not."""
    flags: set[str] = set()
    model = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("flags", "features"):
            flags.update(value.split())
        elif key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
    if "asimd" in flags or "asimddp" in flags:
        arch = "arm"
    elif "sse2" in flags or "avx" in flags:
        arch = "x86"
    else:
        arch = _arch(machine if machine is not None else platform.machine())
    return CpuFeatures(
        arch=arch, model_name=model, avx2="avx2" in flags, avx512={"avx512f", "avx512bw"} <= flags,
        vnni=bool({"avx512_vnni", "avx_vnni", "avx512vnni"} & flags), dotprod="asimddp" in flags,
        i8mm="i8mm" in flags, amx_tile="amx_tile" in flags, amx_bf16="amx_bf16" in flags,
        amx_int8="amx_int8" in flags, avx512_bf16="avx512_bf16" in flags,
        source="/proc/cpuinfo" if flags else "unknown", flags=tuple(sorted(flags)))


CPU_VAR = "ORTLAB_CPU"  # the CPU features ortlab plans for, in place of this machine's (tests, docs, a deployment CPU)
# Named CPU kinds for $ORTLAB_CPU, as /proc/cpuinfo flags: the kinds this project's machines have had.
CPU_PROFILES: dict[str, tuple[str, ...]] = {
    "avx2": ("sse2", "avx", "avx2", "fma"),
    "avx512-vnni": ("sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"),
    "avx512-vnni-bf16": ("sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"),
    "amx": ("sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
            "amx_bf16", "amx_int8"),
}


def cpu_profile(value: str) -> CpuFeatures:
    """The features ``value`` names: one of :data:`CPU_PROFILES` (``avx2``, ``avx512-vnni``, ``avx512-vnni-bf16``,
    ``amx``) or /proc/cpuinfo flags separated by commas or spaces (``avx2,avx512_vnni``). The model name stays this
    machine's (timings still run here); ``source`` says the features were set."""
    name = value.strip().lower()
    flags = CPU_PROFILES.get(name) or tuple(f for f in name.replace(",", " ").split() if f)
    if not flags:
        raise ValueError(f"${CPU_VAR} is empty: name a CPU kind ({', '.join(CPU_PROFILES)}) or its flags")
    f = parse_cpuinfo(f"model name\t: {real_cpu().model_name}\nflags\t\t: {' '.join(flags)}\n")
    label = name if name in CPU_PROFILES else ",".join(flags)
    return dataclasses.replace(f, source=f"${CPU_VAR}={label}")


def detect() -> CpuFeatures:
    """The CPU features ortlab plans int8 and bf16 for: ``$ORTLAB_CPU`` (:func:`cpu_profile`) when set, else this
    machine's (:func:`real_cpu`). Tests and the docs' examples set it to run as on another kind of CPU; what the
    kernels really do (numerics, speed) is still this machine's."""
    value = os.environ.get(CPU_VAR, "").strip()
    return cpu_profile(value) if value else real_cpu()


@functools.lru_cache(maxsize=1)
def real_cpu() -> CpuFeatures:
    """This machine's CPU features (read once), whatever ``$ORTLAB_CPU`` says."""
    path = Path("/proc/cpuinfo")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    if text:
        return parse_cpuinfo(text)
    return CpuFeatures(arch=_arch(platform.machine()))


@dataclass(frozen=True)
class HardwareAdvice:
    """Quantization defaults for a CPU and target (``activation_type``, ``weight_type``, ``reduce_range``) and
    notes that say why."""

    activation_type: QuantType
    weight_type: QuantType
    reduce_range: bool
    notes: tuple[str, ...] = ()

    def quant_overrides(self) -> dict[str, object]:
        """Field → value for ``QuantConfig`` (``dataclasses.replace(q, **advice.quant_overrides())``)."""
        return {"activation_type": self.activation_type, "weight_type": self.weight_type,
                "reduce_range": self.reduce_range}


def advise(features: CpuFeatures | None = None, target: Target = Target.CPU,
           model_bytes: int | None = None) -> HardwareAdvice:
    """The int8 defaults for ``features`` (default: this CPU) and ``target``: U8S8 on x86 (reduce-range when
    there is no VNNI), S8S8 on Arm and for TensorRT; plus a note when a model over 2 GB needs external data."""
    f = features if features is not None else detect()
    notes: list[str] = []
    if Target(target) == Target.GPU:
        act, red = QuantType.INT8, False
        notes.append("GPU int8 runs through TensorRT, which takes symmetric int8 (S8S8) QDQ models.")
    elif f.arch == "arm":
        act, red = QuantType.INT8, False
        notes.append("Arm CPU: S8S8 (int8 activations and weights) is ONNX Runtime's fast path"
                     + (" and this CPU has dot-product instructions (asimddp)." if f.dotprod else
                        "; this CPU has no dot-product instructions (asimddp), so int8 gains less."))
    elif f.arch == "x86":
        act = QuantType.UINT8
        red = not f.vnni and f.source != "unknown"
        if f.vnni:
            notes.append("x86 with VNNI: U8S8 (uint8 activations, int8 weights) uses the int8 dot-product "
                         "instructions at full 8-bit range.")
        elif f.source == "unknown":
            notes.append("x86 CPU features unknown: U8S8 is the usual fast path; turn on reduce-range if the CPU "
                         "has no VNNI.")
        else:
            notes.append("x86 without VNNI: U8S8 multiplies through 16-bit sums that can saturate; weights are "
                         "reduced to 7 bits (reduce-range) to avoid overflow, at a small accuracy cost.")
    else:
        act, red = QuantType.UINT8, False
        notes.append("Unknown CPU architecture: U8S8 is ONNX Runtime's default int8 flavour.")
    note = external_data_note(model_bytes)
    if note:
        notes.append(note)
    return HardwareAdvice(act, QuantType.INT8, red, tuple(notes))


def advised_recipe(recipe: Recipe | None = None, features: CpuFeatures | None = None,
                   given: Collection[str] = ()) -> Recipe:
    """``recipe`` (default ``Recipe()``) with the int8 defaults of ``features`` (default: this CPU) in its
    quantization settings (:meth:`Recipe.with_int8_flavour`), except the dotted paths in ``given``
    (``quant.reduce_range``: the settings a person chose). The default recipe of the app: on x86 without VNNI it has
    reduce-range on, where full-range U8S8 weights saturate ORT's 16-bit sums (digits_cnn: 10 dB instead of
    30 dB). A recipe for a GPU target is returned unchanged (tune searches TensorRT's flavour there)."""
    return (recipe if recipe is not None else Recipe()).with_int8_flavour(advise(features, Target.CPU), given)


def cpu_int8(features: CpuFeatures | None = None) -> CpuInt8:
    """What ``features`` (default: this CPU) mean for a recipe's int8 flavour, for the recipe's validation
    (:func:`ortlab.runs.prepare.validate_recipe`): U8S8 saturates on x86 without VNNI."""
    f = features if features is not None else detect()
    advice = advise(f)
    return CpuInt8(saturates_u8s8=f.arch == "x86" and advice.reduce_range, name=f.model_name or "this CPU",
                   why=advice.notes[0] if advice.notes else "")


def external_data_note(model_bytes: int | None) -> str | None:
    """A note when a model of ``model_bytes`` is over protobuf's 2 GB limit, else None."""
    if model_bytes is None or model_bytes <= TWO_GB:
        return None
    return (f"The model is {model_bytes / 1024**3:.1f} GB, over protobuf's 2 GB limit: it must be saved with its "
            "weights in external data files (model.onnx + .data) beside it, and copied together.")
