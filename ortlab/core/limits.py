"""Every size limit ortlab applies to what a person hands it, in one place.

The app serves one shared machine (the reference server: 24 GB of RAM for several people), and the Streamlit
server process must stay small (target: under 1.5 GB resident) whatever is uploaded, so each input that can
expand (a compressed array, a compressed image, a zip, a shape that is only declared) is checked against a
limit *before* it is expanded. Each limit is a module constant (the default, documented with why that value)
that ``$ORTLAB_LIMIT_<NAME>`` overrides, read at the time of the check (``limit("NAME")``), so tests and
operators can lower or raise it without editing code. The error that a limit raises names the limit, the value
that hit it and what to do.
"""

from __future__ import annotations

import os
import sys

from typing import Any

from ortlab.core.text import format_bytes
from ortlab.core.errors import DataError

ENV_PREFIX = "ORTLAB_LIMIT_"

TENSOR_FILE_MAX_BYTES = 512 * 2**20
"""Array bytes of one ``.npy``/``.npz`` after decompression (the sum over all arrays). Tensors are held in the
app's process (the Data page) and again in the run's child; 512 MiB is ~870 ImageNet-sized float32 samples, more
than calibration needs (100–500 samples), and keeps the server under its 1.5 GB target next to Streamlit."""

TENSOR_FILE_MAX_RATIO = 1000
"""Uncompressed / compressed size of any one ``.npz`` member. ``np.savez`` stores (ratio 1); real data under
``np.savez_compressed`` stays below ~50×, zero-padded token ids reach a few hundred. 1000× refuses deflated
zeros (≈1030×) while the byte cap above is the real bound."""

IMAGE_MAX_PIXELS = 50_000_000
"""Pixels (width × height, read from the header before decoding) of one image. 50 MP covers a 8000×6000
camera photo (≈150 MB decoded as RGB), and refuses the 13000×13000 (169 MP, ≈500 MB each) images that PIL
itself lets through with only a warning (its own error is at 179 MP)."""

IMAGE_ZIP_MAX_BYTES = 512 * 2**20
"""Bytes of all images in one image zip, after decompression. The images are held in the app's process; a
thousand-image calibration set of JPEGs is ~100 MB."""

ZIP_MAX_TOTAL_BYTES = 2 * 2**30
"""Bytes of all members of one zip after decompression (model zips are extracted to disk). An upload is at most
``server.maxUploadSize`` (1 GB) and real weights deflate by ≤ 1.2×, so 2 GiB admits any honest upload twice over
while refusing a crafted zip that would fill a shared disk (250 × 15 MiB = 3.9 GB). Larger models are imported
from a path on the machine, which copies files without a zip."""

GENERATED_INPUT_MAX_BYTES = 2 * 2**30
"""Bytes of the inputs generated for one batch (random data, benchmark feeds) over all inputs. The inputs are
only a part of what a run needs (activations come on top), so a feed above 2 GiB cannot finish within the run
memory limit anyway; refusing it up front gives a clear message instead of an out-of-memory failure."""

SERVER_MODEL_MAX_BYTES = 64 * 2**20
"""Bytes of the model files (the .onnx and its external data) that the app's server process reads itself for
Compare and History (model summary, graph diff); larger models are read in a one-shot child process
(``ortlab.model.isolated``), because reading takes several times the file's size. Uploads and imports are always read
in a child. 64 MiB keeps the server's share under ~350 MB; the child's start costs about a second."""

PREVIEW_MAX_SIDE = 256
"""Longest side of a preview thumbnail; previews are decoded reduced (JPEG draft mode), never kept full-size."""

PROFILE_MAX_RUNS = 20
"""``session.run`` calls (warm-up included) that ORT profiles per variant × batch size; profiling then stops.
ORT keeps every event in memory until the profile is written, and a short benchmark of a big model wrote
100–225 MB; 20 runs show the per-operator picture."""

PROFILE_MAX_BYTES = 50 * 10**6
"""Size of one profile JSON; a larger one is deleted (and the summary says why)."""

CALIBRATION_CACHE_MAX_BYTES = 256 * 2**20
"""Bytes the workspace's calibration cache (``<workspace>/calibration``) keeps; past it the entries used longest ago
go first. An entry holds one calibration's activation ranges (a few KB for a small CNN, a few MB for a large
transformer), so this keeps hundreds of calibrations."""

ROUNDING_CACHE_MAX_BYTES = 256 * 2**20
"""Bytes the workspace's kept GPTQ roundings and bias corrections (``<workspace>/rounding``) hold; past it the entries
used longest ago go first. A rounding holds one node's int8 weight (a YOLOv8n's 64 nodes: 3 MB together), a bias
correction one int64 per channel, so this keeps the fits of dozens of trials of a small CNN, or of a few of a 100 MB
model."""

RUN_MEMORY_MAX_GB = 8.0
"""Upper bound of the default memory limit of a recipe's or benchmark's child process; the default is
min(8 GB, 60 % of the machine's RAM) (``ortlab.runtime.child.memory_limit_gb``). ``$ORTLAB_RUN_MEMORY_GB`` sets it."""

RUN_MEMORY_FRACTION = 0.6
"""Share of the machine's RAM that the default child memory limit never exceeds."""


def limit(name: str) -> float:
    """The value of limit ``name`` (``$ORTLAB_LIMIT_<NAME>`` when set to a positive number, else the default)."""
    default = globals()[name]
    text = os.environ.get(ENV_PREFIX + name, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if value > 0:
            return type(default)(value)
    return default


def env_name(name: str) -> str:
    """The environment variable that overrides limit ``name``."""
    return ENV_PREFIX + name


def gb(n: float) -> str:
    """Bytes as a short size for messages (``format_bytes``)."""
    return format_bytes(n)


def check_generated_size(shapes: dict[str, tuple[list[int], Any]], batch: int, what: str = "Random input",
                         hint: str = "Give a smaller --shape or batch size.", error: type[Exception] | None = None
                         ) -> None:
    """Raise DataError when arrays of ``shapes`` (name → (dims, numpy dtype)) need more than
    ``limits.GENERATED_INPUT_MAX_BYTES`` together: checked before anything is allocated (``error`` is the
    error type raised)."""
    import numpy as np

    if error is None:

        error = DataError
    cap = int(limit("GENERATED_INPUT_MAX_BYTES"))
    total = 0
    for name, (dims, dtype) in shapes.items():
        count = 1
        for d in dims:
            count *= max(int(d), 0)
        nbytes = count * np.dtype(dtype).itemsize
        total += nbytes
        if total > cap:
            shown = "[" + ", ".join(str(int(d)) for d in dims) + "]"
            raise error(f"{what} '{name}' {shown} would need {gb(nbytes)} at batch {batch}"
                        f"{f' ({gb(total)} with the other inputs)' if total != nbytes else ''}; at most "
                        f"{gb(cap)} of generated inputs are accepted (generated input limit, "
                        f"{env_name('GENERATED_INPUT_MAX_BYTES')}). {hint}")


# -- the memory limit of a run's child process ---------------------------------------------------------------

ALLOC_FAILURES = ("bad_alloc", "Failed to allocate", "Unable to allocate", "MemoryError", "Cannot allocate memory",
                  "out of memory", "failed to map segment", "Failed to serialize proto")
"""Text in an error (ORT, numpy, the C++ runtime) that means an allocation failed."""


def physical_memory_bytes() -> int | None:
    """The machine's RAM in bytes, None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def default_run_memory_gb() -> float:
    """min(``RUN_MEMORY_MAX_GB``, ``RUN_MEMORY_FRACTION`` of the machine's RAM), in GB (2**30 bytes)."""
    ram = physical_memory_bytes()
    cap = float(RUN_MEMORY_MAX_GB)
    if ram:
        cap = min(cap, RUN_MEMORY_FRACTION * ram / 2**30)
    return round(cap, 1)


def memory_budget_bytes(fraction: float) -> int | None:
    """``fraction`` of the memory this process may use: its address-space limit (``RLIMIT_AS``) where one is set,
    else the machine's RAM (the smaller of the two); None where neither can be read."""
    known: list[int] = []
    ram = physical_memory_bytes()
    if ram:
        known.append(ram)
    if sys.platform.startswith("linux"):
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            known.append(int(soft))
    return int(fraction * min(known)) if known else None


def samples_per_run(most: int, sample_bytes: int, budget: int | None) -> int:
    """How many samples one session run may take, at most ``most`` and at least 1, so that their tensors
    (``sample_bytes`` a sample) and a copy of each — ONNX Runtime's and the caller's — stay within ``budget`` bytes
    (None: no budget)."""
    if budget is None or sample_bytes <= 0:
        return most
    return max(1, min(most, budget // (2 * sample_bytes)))


def apply_memory_limit(limit_gb: float | None) -> bool:
    """Limit this process's address space (``RLIMIT_AS``) to ``limit_gb`` GB; True when applied (Linux only).
    An allocation past it fails (``MemoryError``, ORT's "Failed to allocate") instead of growing the machine's
    memory use."""
    if not limit_gb or not sys.platform.startswith("linux"):
        return False
    import resource

    cap = int(float(limit_gb) * 2**30)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return True


def lacks_headroom(nbytes: int) -> bool:
    """True when this process cannot allocate ``nbytes`` more (under its ``RLIMIT_AS``): a parser that failed
    with little headroom left most likely ran out of memory, whatever its own message says."""
    try:
        bytearray(max(0, int(nbytes)))
    except MemoryError:
        return True
    return False


def is_alloc_failure(text: str) -> bool:
    """True when ``text`` (an error message or a log line) says an allocation failed."""
    return any(k in text for k in ALLOC_FAILURES)
