"""Load, validate and inspect ONNX models (importing an upload or a zip into the workspace: :mod:`ortlab.model.importing`).

Every failure a person can cause (wrong file, truncated upload, invalid graph, missing or unsafe
external data, unsafe zip) raises ``ModelLoadError`` or ``ExternalDataError`` with one clear line.

Size: loading, the byte-level diagnosis of files protobuf refuses, external data and inspection share the
parsing helpers; importing lives in :mod:`ortlab.model.importing`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from collections.abc import Iterator

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from ortlab.core.errors import ExternalDataError, ModelLoadError
from ortlab.core import dtypes
from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.core.text import one_line
from ortlab.runtime import providers
from ortlab.settings.config import OptLevel
from ortlab.model import declared_types, graphs
from ortlab.model.runtime_crashes import known_crash
from ortlab.model.other_formats import other_format

PROTOBUF_LIMIT = 2**31 - 1          # a single protobuf message cannot be larger than this

_NOT_ONNX = ("This file is not an ONNX model (could not parse it as ONNX protobuf). "
             "Upload a .onnx file exported from your framework.")


@dataclass(frozen=True)
class TensorInfo:
    """A graph input or output: name, element type and shape (str = symbolic dim, None = unknown)."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class ModelInfo:
    """What a person wants to know about a model before changing it."""

    path: str
    file_bytes: int
    total_bytes: int
    sha256: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    producer_version: str
    graph_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    node_count: int
    op_counts: dict[tuple[str, str], int]
    param_count: int
    initializer_bytes: dict[str, int]
    has_external_data: bool
    warnings: tuple[str, ...]
    subgraph_node_count: int = 0   # of node_count, the nodes inside If/Loop/Scan bodies
    constant_params: int = 0       # of param_count, the values of float tensors held in Constant nodes
    constant_bytes: int = 0        # bytes of those tensors (not in initializer_bytes)

    def to_dict(self) -> dict:
        """JSON-safe dict; op_counts keys become ``op_key(domain, op_type)``."""
        d = asdict(self)
        d["inputs"] = [t.to_dict() for t in self.inputs]
        d["outputs"] = [t.to_dict() for t in self.outputs]
        d["op_counts"] = {op_key(dom, op): n for (dom, op), n in self.op_counts.items()}
        d["warnings"] = list(self.warnings)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelInfo:
        """The inverse of :meth:`to_dict`."""
        def tensors(items) -> tuple[TensorInfo, ...]:
            return tuple(TensorInfo(t["name"], t["dtype"], tuple(t["shape"])) for t in items)

        ops: dict[tuple[str, str], int] = {}
        for key, n in d["op_counts"].items():
            domain, _, op = key.rpartition("::")
            ops[(domain, op)] = int(n)
        return cls(**{**d, "inputs": tensors(d["inputs"]), "outputs": tensors(d["outputs"]), "op_counts": ops,
                      "warnings": tuple(d["warnings"])})


# the inputs of each weighted op type that hold its weights (the ones ORT quantizes only when stored as tensors)
WEIGHT_INPUTS = {"MatMul": (1,), "Gemm": (1,), "Conv": (1,), "ConvTranspose": (1,), "LSTM": (1, 2), "GRU": (1, 2),
                 "RNN": (1, 2), "Attention": (1,)}


def op_key(domain: str, op_type: str) -> str:
    """``"Conv"`` for ai.onnx ops, ``"com.microsoft::FusedConv"`` for other domains."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def sha256_file(path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file_cached(path) -> str:
    """:func:`sha256_file`, remembered per (path, mtime, size): a file is read again only once it changed."""
    st = os.stat(path)
    return _sha256_of(str(path), st.st_mtime_ns, st.st_size)


def model_identity(path) -> str:
    """The sha256 of the model file and of each external-data file it names: two models with the same identity are
    the same model, byte for byte."""
    files = sorted({str(f) for f in external_data_files(path).values()})
    if not files:
        return sha256_file_cached(path)
    h = hashlib.sha256(sha256_file_cached(path).encode())
    for f in files:
        h.update(sha256_file_cached(f).encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _sha256_of(path: str, mtime_ns: int, size: int) -> str:
    return sha256_file(path)


# -- parsing ------------------------------------------------------------------------------------------

def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise EOFError
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _model_field_wire_types() -> dict[int, int]:
    fd = onnx.ModelProto.DESCRIPTOR.fields
    # protobuf FieldDescriptor types: 9 string, 11 message, 12 bytes → length-delimited (2); ints → varint (0)
    return {f.number: (2 if f.type in (9, 11, 12) else 0) for f in fd}


PROTOBUF_NESTING_LIMIT = 100  # upb's default recursion limit: deeper messages are refused when parsed
NESTING_SCAN_MAX_BYTES = 64 * 2**20  # the nesting is measured (in Python) only in files up to this size


def _nesting_depth(data: bytes, limit: int = PROTOBUF_NESTING_LIMIT) -> int:
    """How deeply well-formed messages nest in ``data`` (a length-delimited field counts as a message when its
    bytes read as fields to the end), measured up to ``limit + 1``."""

    def walk(start: int, end: int, depth: int) -> int:
        best, pos = depth, start
        while pos < end:
            tag, pos = _read_varint(data, pos)
            wire = tag & 7
            if tag >> 3 == 0:
                raise ValueError("field number 0")
            if wire == 0:
                _, pos = _read_varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, pos = _read_varint(data, pos)
                if pos + length > end:
                    raise ValueError("length past the end")
                if length and best <= limit:
                    try:
                        best = max(best, walk(pos, pos + length, depth + 1))
                    except (ValueError, EOFError):
                        pass  # bytes or a string, not a message
                pos += length
            else:
                raise ValueError("group or unknown wire type")
        if pos != end:
            raise ValueError("past the end")
        return best

    try:
        return walk(0, len(data), 0)
    except (ValueError, EOFError, RecursionError):
        return 0


def _diagnose_bytes(data: bytes) -> str:
    """Why ``data`` failed to parse: walks the top-level protobuf fields of a ModelProto."""
    known = other_format(data[:16])
    if known is not None:
        return known
    wire_types = _model_field_wire_types()
    pos, fields_seen = 0, 0
    try:
        while pos < len(data):
            tag, pos = _read_varint(data, pos)
            number, wire = tag >> 3, tag & 7
            if wire_types.get(number) != wire:
                break
            if wire == 0:
                _, pos = _read_varint(data, pos)
            else:
                length, pos = _read_varint(data, pos)
                if pos + length > len(data):
                    if fields_seen:
                        return (f"The file is truncated: a part of the model claims {length:,} bytes but only "
                                f"{len(data) - pos:,} remain. Upload the complete file again.")
                    break
                pos += length
            fields_seen += 1
        else:
            if fields_seen and len(data) <= NESTING_SCAN_MAX_BYTES and _nesting_depth(data) > PROTOBUF_NESTING_LIMIT:
                return ("The model nests subgraphs (If/Loop/Scan bodies) too deeply: it exceeds protobuf's nesting "
                        f"limit of {PROTOBUF_NESTING_LIMIT}, so no ONNX tool can read it. Export it with less deeply "
                        "nested control flow.")
            if fields_seen:
                return "The file is truncated or corrupt (its last field is cut off). Upload the complete file again."
    except EOFError:
        if fields_seen:
            return "The file is truncated (it ends in the middle of a field). Upload the complete file again."
    except ValueError:
        pass
    return _NOT_ONNX


def _parse(data: bytes) -> onnx.ModelProto:
    if not data:
        raise ModelLoadError("The file is empty (0 bytes). Upload a .onnx file exported from your framework.")
    if len(data) > PROTOBUF_LIMIT:
        raise ModelLoadError(f"The .onnx file is {len(data) / 2**30:.1f} GiB; a single ONNX protobuf cannot exceed "
                             "2 GiB. Save the weights as external data and upload a .zip with both files.")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):  # DecodeError (upb) or RuntimeError, by protobuf backend
        raise ModelLoadError(_diagnose_bytes(data)) from None
    if not model.HasField("graph") or model.ir_version <= 0:
        known = other_format(data[:16])
        if known is not None:
            raise ModelLoadError(known)
        raise ModelLoadError("This file parses as protobuf but is not an ONNX model (it has no graph or no IR "
                             "version). Upload a .onnx file exported from your framework.")
    return model


# -- external data -----------------------------------------------------------------------------------

def _graph_tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for g in attr.graphs:
                yield from _graph_tensors(g)


def _external_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    return [t for t in _graph_tensors(model.graph) if t.data_location == TensorProto.EXTERNAL]


def _external_entries(tensor: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def external_data_files(model: onnx.ModelProto | str | os.PathLike, base_dir=None) -> dict[str, Path]:
    """Validate every external-data reference and return location → resolved path.

    ``model`` is a parsed model (its external data looked for in ``base_dir``) or the path of a .onnx file
    (read without its external data; ``base_dir`` defaults to the file's folder). Raises
    ``ExternalDataError`` for locations that are absolute, contain ``..``, resolve outside ``base_dir``
    (symlinks included), are missing, or are shorter than the bytes the model claims.
    """
    if not isinstance(model, onnx.ModelProto):
        path = Path(model)
        return external_data_files(load_model(path, check=False, load_external=False),
                                   path.parent if base_dir is None else base_dir)
    tensors = _external_tensors(model)
    if not tensors:
        return {}
    if base_dir is None:
        first = _external_entries(tensors[0]).get("location", "?")
        raise ExternalDataError(f"The model keeps its weights in external file '{first}', but only the .onnx bytes "
                                "were given. Upload a .zip containing the .onnx and its weight files.")
    root = Path(base_dir).resolve()
    files: dict[str, Path] = {}
    needed: dict[str, int] = {}
    for t in tensors:
        info = _external_entries(t)
        loc = info.get("location", "")
        if not loc:
            raise ExternalDataError(f"Tensor '{t.name}' is marked as external data but names no file.")
        if loc not in files:
            norm = loc.replace("\\", "/")
            parts = PurePosixPath(norm).parts
            if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm) or ".." in parts or "\x00" in norm:
                raise ExternalDataError(f"External data location '{loc}' of tensor '{t.name}' points outside the "
                                        "model's folder; only files in the model's folder are allowed.")
            resolved = (root / norm).resolve()
            if resolved != root and root not in resolved.parents:
                raise ExternalDataError(f"External data file '{loc}' resolves outside the model's folder "
                                        "(a symlink?); only files in the model's folder are allowed.")
            if not resolved.is_file():
                raise ExternalDataError(f"External data file '{loc}' is missing next to the model. Put it in the "
                                        "model's folder (or upload a .zip with the .onnx and its weight files).")
            files[loc] = resolved
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if "length" in info else tensor_nbytes(t)
        except ValueError:
            raise ExternalDataError(f"Tensor '{t.name}' has a malformed external-data offset or length.") from None
        if length is not None:
            needed[loc] = max(needed.get(loc, 0), offset + length)
    for loc, end in needed.items():
        size = files[loc].stat().st_size
        if end > size:
            raise ExternalDataError(f"External data file '{loc}' has {size:,} bytes but the model needs {end:,}; "
                                    "the file is truncated or belongs to another model.")
    return files


def _utf8_name(path) -> bool:
    try:
        str(path).encode("utf-8")
        return True
    except UnicodeEncodeError:  # undecodable bytes of the file system's name, kept as surrogates
        return False


# -- loading ------------------------------------------------------------------------------------------

_CONTRADICTS = " The file contradicts itself: export it again, or correct the declared type or shape."


def _check(model: onnx.ModelProto, path: Path | None, has_external: bool) -> None:
    if path is not None and not _utf8_name(path):
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise ModelLoadError(f"The file name '{Path(shown).name}' is not valid UTF-8, and ONNX's checker opens files "
                             "by UTF-8 names only. Rename the file (and its folder, if needed) with plain characters "
                             "and try again.")
    try:
        if path is not None:  # the checker reads the file itself: no serialized copy of the parsed model
            onnx.checker.check_model(str(path), full_check=True)
        else:
            onnx.checker.check_model(model, full_check=True)
    except ONNX_ERRORS + (OSError,) as exc:  # the C++ checker can raise plain RuntimeError/ValueError too
        text = one_line(exc)
        found = declared_types.contradicted_declarations(model, text) if declared_types.is_contradiction(text) else []
        if found:
            raise ModelLoadError(f"invalid model: {'; '.join(found)} (ONNX's checker: {text}).{_CONTRADICTS}") from None
        raise ModelLoadError(f"invalid model: {text}") from None


def load_model(path_or_bytes, *, base_dir=None, check=True, load_external=True, weights=True) -> onnx.ModelProto:
    """Parse a model from a path or bytes, validate external data, run the full ONNX checker.

    ``base_dir`` is where external data lives (defaults to the file's folder; required for bytes
    that reference external data). ``load_external=False`` leaves external tensors on disk.
    ``weights=False`` returns the structure only (:func:`drop_weight_bytes`), dropped as soon as a file is
    parsed (its checker reads the file itself), so that at most two copies of the file are ever held.
    """
    path: Path | None = None
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
    else:
        path = Path(path_or_bytes)
        if not path.is_file():
            raise ModelLoadError(f"Model file '{path}' does not exist or is not a file.")
        size = path.stat().st_size
        if size > PROTOBUF_LIMIT:
            raise ModelLoadError(f"'{path.name}' is {size / 2**30:.1f} GiB; a single ONNX protobuf cannot exceed "
                                 "2 GiB. Save the weights as external data next to the .onnx file.")
        data = path.read_bytes()
        if base_dir is None:
            base_dir = path.parent
    model = _parse(data)
    del data
    if not weights and path is not None:
        model = drop_weight_bytes(model)
    files = external_data_files(model, base_dir)
    if check and (path is not None or not files):
        _check(model, path, bool(files))
    if files and (load_external or (check and path is None)):
        # bytes have no file for the checker to resolve external data against: check them in memory
        loaded = model if load_external else onnx.ModelProto.FromString(model.SerializeToString())
        try:
            onnx.external_data_helper.load_external_data_for_model(loaded, str(base_dir))
        except ONNX_ERRORS + (OSError,) as exc:
            raise ExternalDataError(f"Could not read external data: {one_line(exc)}") from None
        if check and path is None:
            _check(loaded, None, False)
    return model if weights else drop_weight_bytes(model)


# -- inspection ---------------------------------------------------------------------------------------

def tensor_nbytes(t: TensorProto) -> int | None:
    """Bytes of a tensor's values (int4 packed two to a byte); None for a data type numpy has no size for."""
    n = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    if t.data_type == TensorProto.STRING:
        return sum(len(s) for s in t.string_data)
    try:
        item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError):  # a data type numpy has no item size for
        return None
    if t.data_type in (TensorProto.INT4, TensorProto.UINT4):
        return (n + 1) // 2
    return n * item


def _tensor_info(vi: onnx.ValueInfoProto) -> TensorInfo:
    tt = vi.type
    kind = tt.WhichOneof("value")
    if kind != "tensor_type":
        return TensorInfo(vi.name, kind.replace("_type", "") if kind else "unknown", ())
    shape: list[int | str | None] = []
    if tt.tensor_type.HasField("shape"):
        for d in tt.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                shape.append(d.dim_param)
            else:
                shape.append(None)
    return TensorInfo(vi.name, dtypes.from_onnx(tt.tensor_type.elem_type), tuple(shape))


STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def _is_contrib(domain: str) -> bool:
    return domain == "com.microsoft" or domain.startswith("com.microsoft.")


def _custom_ops(op_counts) -> list[tuple[str, str]]:
    """The (domain, op type) keys of ``op_counts`` outside ai.onnx, ai.onnx.ml and com.microsoft."""
    return [(d, op) for d, op in op_counts if d not in STANDARD_DOMAINS and not _is_contrib(d)]


def check_source_runs(path: Path, info: ModelInfo) -> None:
    """ONNX Runtime loads the model at ``path`` (``info``: what :func:`inspect_model` read) on the CPU, kernels
    included, before a recipe works on it: an op it has no kernel for at the model's opset, an attribute its kernel
    refuses, an opset still under development. ``ModelLoadError`` with ORT's reason otherwise."""
    try:
        _check_runtime_loads(path, _custom_ops(info.op_counts))
    except ModelLoadError as exc:
        raise ModelLoadError(f"{exc.message.rstrip('. ')}. ortlab's recipes start from a model ONNX Runtime runs "
                             "as it is.", step="validate") from None


def _check_runtime_loads(path: Path, custom: list[tuple[str, str]]) -> None:
    """Ops outside ai.onnx, ai.onnx.ml and com.microsoft (``custom``), or an opset older than ONNX Runtime's oldest
    kernels: ONNX Runtime must load the model (with the registered custom-op libraries), else the upload is refused
    with the ops and their domains named, or the old op and how to convert it."""

    try:
        providers.create_session(path, options=providers.session_options(opt_level=OptLevel.DISABLED))
    except ModelLoadError as exc:
        if "has no kernel for" in exc.message and custom and "this model's opset is older" not in exc.message:
            ops = sorted(set(custom))
            raise ModelLoadError(providers.unknown_op_sentence(ops)) from None
        raise


_INT8_CONSTANTS = "int8 quantization moves them into initializers first."
_INT8_OPSET = "int8 per-channel quantization converts it to 13 first."
_OPEN_DIMS = "Input dimensions without a number or a name"


def run_warnings(warnings, int8: bool) -> list[str]:
    """The inspection warnings that hold for a recipe run: the int8 advice on Constant-node weights only for int8
    runs; never the old-opset advice (an int8 run's quantize step says the conversion it did, once) nor the open
    input dims (a run resolves them from the data or --shape, or stops and says so)."""
    return [w for w in warnings if not w.startswith(_OPEN_DIMS) and not w.endswith(_INT8_OPSET)
            and (int8 or not w.endswith(_INT8_CONSTANTS))]


def _runtime_verdict(path: Path, checker_error: ModelLoadError) -> str:
    """ONNX Runtime judges a model the ONNX checker rejects (e.g. the LayerNormalization it fuses into an opset-12
    graph): the note to show when ORT loads it; ``checker_error`` again when ORT cannot load it either."""

    try:
        providers.create_session(path, options=providers.session_options(opt_level=OptLevel.DISABLED))
    except ModelLoadError:
        raise checker_error from None
    said = checker_error.message.removeprefix("invalid model: ").removesuffix(_CONTRADICTS).rstrip(".")
    return (f"The ONNX checker rejects this model ({said}); "
            "ONNX Runtime loads it, so it is used as it is.")


_VALUE_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def drop_weight_bytes(model: onnx.ModelProto, over: int = 1 << 20) -> onnx.ModelProto:
    """``model`` without the values of its initializers (subgraphs included) that take more than ``over`` bytes;
    names, types and dims stay. For reading a model's structure (shape inference, a graph diff), which never needs
    the values of tensors that big, without holding or copying its weights. The values are cleared in ``model``
    and a compact copy is returned: protobuf (upb) frees a message's memory only with the whole message, so the
    caller drops ``model`` to get the memory back."""

    dropped = False
    for g in graphs.walk_graphs(model.graph):
        for t in g.initializer:
            # its size from dims and type: reading raw_data or ByteSize() would copy the bytes
            if t.data_location != TensorProto.EXTERNAL and (tensor_nbytes(t) or 0) > over:
                for name in _VALUE_FIELDS:
                    t.ClearField(name)
                dropped = True
    if not dropped:
        return model
    compact = onnx.ModelProto()
    compact.CopyFrom(model)
    return compact


def _outputs(g: onnx.GraphProto, inferred: onnx.GraphProto) -> list[TensorInfo]:
    """The graph outputs as inferred, or as declared where inference left an output's shape empty."""
    declared_out = {v.name: v for v in g.output}
    outputs = []
    for v in inferred.output:
        info = _tensor_info(v)
        if not info.shape and v.name in declared_out:
            info = _tensor_info(declared_out[v.name])
        outputs.append(info)
    return outputs


def _initializer_params(g: onnx.GraphProto) -> tuple[int, Counter[str]]:
    """The parameters the initializers (sparse ones and subgraphs' included) hold, and their bytes per dtype."""
    param_count = 0
    init_bytes: Counter[str] = Counter()
    for sub in graphs.walk_graphs(g):
        for t in sub.initializer:
            param_count += int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
            init_bytes[dtypes.from_onnx(t.data_type)] += tensor_nbytes(t) or 0
        for st in sub.sparse_initializer:
            param_count += int(np.prod(st.values.dims, dtype=np.int64)) if st.values.dims else 1
            init_bytes[dtypes.from_onnx(st.values.data_type)] += tensor_nbytes(st.values) or 0
    return param_count, init_bytes


def inspect_model(path) -> ModelInfo:
    """Validate a model file and summarise it.

    ``node_count`` and ``op_counts`` include the nodes inside If/Loop/Scan bodies (``subgraph_node_count`` says
    how many). ``param_count`` covers initializers (subgraphs included) and float tensors held in Constant nodes
    (``constant_params``); ``initializer_bytes`` covers initializers, ``constant_bytes`` the Constant tensors.
    Raises ``ModelLoadError`` for a model this ONNX Runtime cannot read: an IR version newer than it reads, or
    ops of a custom domain that no registered custom-op library implements.
    """

    path = Path(path)
    checker_note = None
    # shape inference copies the model twice, and nothing here needs the values of big weights (only dims)
    try:
        model = load_model(path, check=True, load_external=False, weights=False)
    except ModelLoadError as exc:
        if not exc.message.startswith("invalid model:"):
            raise
        model = load_model(path, check=False, load_external=False, weights=False)
        too_new = providers.ir_version_problem(int(model.ir_version))  # before the checker's "higher than mine"
        if too_new:
            raise ModelLoadError(too_new) from None
        checker_note = _runtime_verdict(path, exc)
    problem = providers.ir_version_problem(int(model.ir_version))
    if problem:
        raise ModelLoadError(problem)
    files = external_data_files(model, path.parent)
    g = model.graph
    warnings: list[str] = [checker_note] if checker_note else []
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except ONNX_ERRORS:
        inferred = g
        warnings.append("ONNX shape inference failed; output shapes are as declared in the file.")
    init_names = {t.name for t in g.initializer}
    inputs = tuple(_tensor_info(v) for v in g.input if v.name not in init_names)
    outputs = _outputs(g, inferred)
    nodes = list(graphs.walk_nodes(g))
    crash = known_crash(at.node for at in nodes)
    if crash:
        raise ModelLoadError(crash)
    op_counts = Counter((at.node.domain if at.node.domain != "ai.onnx" else "", at.node.op_type) for at in nodes)
    in_subgraphs = sum(1 for at in nodes if at.in_subgraph)
    param_count, init_bytes = _initializer_params(g)
    constants = list(graphs.constant_weights(g))
    constant_params = sum(int(np.prod(t.dims, dtype=np.int64)) for t in constants)
    constant_bytes = sum(tensor_nbytes(t) or 0 for t in constants)
    param_count += constant_params
    if in_subgraphs:
        warnings.append(f"The model has control-flow subgraphs (If/Loop/Scan): {in_subgraphs} of its {len(nodes)} "
                        "nodes are in subgraphs (included in the node and op counts).")
    if constant_params:
        warnings.append(f"{constant_params:,} of the {param_count:,} parameters ({len(constants)} tensors) are held "
                        "in Constant nodes rather than initializers (included in the parameter count); "
                        + _INT8_CONSTANTS)
    unknown = [t.name for t in inputs if any(d is None for d in t.shape)]
    if unknown:
        warnings.append(f"{_OPEN_DIMS} ({', '.join(unknown)}) are taken from the data, "
                        "else they must be given: --shape NAME=D0,D1,… in the CLI, Input shapes on the Data page.")
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): int(o.version) for o in model.opset_import}
    if opsets.get("", 99) < 13:
        warnings.append(f"Opset {opsets['']} is older than 13; {_INT8_OPSET}")
    contrib = sorted({d for d, _ in op_counts if _is_contrib(d)})
    if contrib:
        warnings.append(f"The model already uses ONNX Runtime contrib ops ({', '.join(contrib)}); it may have been "
                        "optimized for a specific runtime.")
    custom = _custom_ops(op_counts)
    if custom or opsets.get("", providers.OLDEST_OPSET) < providers.OLDEST_OPSET:
        _check_runtime_loads(path, custom)
    if custom:
        warnings.append("The model uses custom-domain ops ("
                        + ", ".join(f"{op} ({d})" for d, op in sorted(set(custom)))
                        + "); ONNX Runtime loads them from the registered custom-op libraries.")
    file_bytes = path.stat().st_size
    return ModelInfo(
        path=str(path), file_bytes=file_bytes,
        total_bytes=file_bytes + sum(p.stat().st_size for p in set(files.values())),
        sha256=sha256_file(path), ir_version=int(model.ir_version), opsets=opsets,
        producer=model.producer_name, producer_version=model.producer_version, graph_name=g.name,
        inputs=inputs, outputs=tuple(outputs), node_count=len(nodes), op_counts=dict(op_counts),
        param_count=param_count, initializer_bytes=dict(init_bytes), has_external_data=bool(files),
        warnings=tuple(warnings), subgraph_node_count=in_subgraphs, constant_params=constant_params,
        constant_bytes=constant_bytes,
    )
