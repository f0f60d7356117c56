"""What each model input receives: its concrete shape, batch axis and role, and where every dimension came from.

:func:`infer_specs` turns a model's inputs (names, dtypes, symbolic dims) plus what the run knows (the sample
manifest or preprocessing, the data, the user's ``{name: shape}`` overrides) into one :class:`InputSpec` per
input. Nothing is guessed silently: every dimension records its source (``model``, ``batch``, ``manifest``,
``preprocess``, ``data``, ``user`` or ``default`` with a reason), and a dimension nothing resolves raises a
:class:`DataError` that names the input, the dimension and how to set it (``--shape NAME=D0,D1,…``).

The same specs feed calibration, verification, random data and benchmarks (:func:`random_feed`).
No ONNX or ONNX Runtime import here: the app's pages use this module too.

Size: one concern, every way a dimension is resolved (model, sample, data, flags, defaults) and the message
for each that is not, kept together so the rules read in one place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ortlab.core import dtypes
from ortlab.core.errors import DataError, ShapeError
from ortlab.data.preprocess import detect_preprocess, shape_text, static_dim

ROLES = ("image", "token_ids", "mask", "state", "other")
SOURCES = ("model", "batch", "manifest", "preprocess", "data", "user", "default", "unresolved")
DEFAULT_SEQ_LEN = 128

_BATCH_NAMES = frozenset({"n", "b", "bs", "nb", "batch", "batch_size", "batchsize", "num_batch", "batch_dim"})
_STATE_RE = re.compile(r"(^|[^a-z0-9])(h0|c0|h_0|c_0|hx|cx|h_in|c_in|initial_h|initial_c|states?|hidden_in|"
                       r"[a-z0-9_]*_state|past[a-z0-9_.]*|cache[a-z0-9_.]*)$")
_MASK_RE = re.compile(r"mask|token_type|segment")
_IDS_RE = re.compile(r"(^|[^a-z])(input_ids|ids|token_ids|tokens|input_tokens)$|_ids$")


@dataclass(frozen=True)
class DimSpec:
    """One dimension of an input: its ``value`` (None while unresolved), the model's symbolic ``name`` for it
    (None when the model fixes it or leaves it unnamed) and where the value came from (``source``, with a
    ``reason`` for defaults)."""

    value: int | None
    name: str | None = None
    source: str = "model"
    reason: str = ""

    @property
    def symbolic(self) -> bool:
        return self.source != "model"

    def label(self) -> str:
        """``640 (height, user)``, ``3`` for a fixed dim, ``? (width)`` when unresolved."""
        value = "?" if self.value is None else str(self.value)
        if self.source == "model":
            return value
        bits = [b for b in (self.name, self.source) if b]
        return f"{value} ({', '.join(bits)})"


@dataclass(frozen=True)
class InputSpec:
    """A model input as it is fed: ``name``, ``dtype``, ``dims`` (resolved, with their sources), the
    ``batch_axis`` (None: the input has no batch axis and is fed as is, e.g. an RNN state in a model whose
    batch is fixed) and its ``role`` (image, token_ids, mask, state or other)."""

    name: str
    dtype: str
    dims: tuple[DimSpec, ...]
    batch_axis: int | None
    role: str

    @property
    def resolved(self) -> bool:
        return all(d.value is not None for d in self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        """The concrete shape (batch axis at its recorded value, 1 unless overridden)."""
        missing = [d for d in self.dims if d.value is None]
        if missing:
            raise unresolved_error([self])
        return tuple(int(d.value) for d in self.dims)  # type: ignore[arg-type]

    @property
    def batch_fixed(self) -> bool:
        """True when the model fixes the batch dimension."""
        return self.batch_axis is not None and self.dims[self.batch_axis].source == "model"

    @property
    def copies(self) -> int:
        """How many times one sample is repeated to fill the batch the model fixes (1: an open batch or none)."""
        return int(self.dims[self.batch_axis].value or 1) if self.batch_fixed else 1  # type: ignore[index]

    def at_batch(self, n: int) -> tuple[int, ...]:
        """The shape for a batch of ``n`` samples (an input without a batch axis keeps its shape); a batch the model
        fixes keeps its size: one sample fills it repeated (:attr:`copies`). DataError for several samples that do
        not fill a fixed batch."""
        shape = list(self.shape)
        if self.batch_axis is None:
            return tuple(shape)
        fixed = shape[self.batch_axis]
        if self.batch_fixed:
            if fixed != n and n != 1:
                raise DataError(f"Model input '{self.name}' has a fixed batch size of {fixed} (axis "
                                f"{self.batch_axis}); cannot feed {n} samples at once: it is fed one sample at a "
                                f"time, repeated to fill the batch.")
            return tuple(shape)
        shape[self.batch_axis] = n
        return tuple(shape)

    def model_shape(self) -> list[int | str]:
        """The shape as the model declares it: fixed sizes, else the symbolic names (``?`` when unnamed)."""
        return [d.value if d.source == "model" and d.value is not None else (d.name or "?") for d in self.dims]

    def describe(self) -> str:
        """One line: ``images float32 [1 (batch, batch), 3, 640 (height, user), 640 (width, user)] image``."""
        batch = "" if self.batch_axis is not None else ", no batch axis"
        return f"{self.name} {self.dtype} [{', '.join(d.label() for d in self.dims)}] {self.role}{batch}"


COMMON_SIZES = {"batch": (1, 4, 8, 16), "height": (224, 320, 640), "width": (224, 320, 640),
                "sequence": (128, 256, 512), "channels": (1, 3)}


def axis_meaning(spec: InputSpec, i: int) -> str:
    """What axis ``i`` of ``spec`` is: "batch", "channels", "height", "width" (image inputs), "sequence" (the
    axis after the batch of token ids and masks), else ""."""
    if spec.batch_axis == i:
        return "batch"
    if spec.role == "image":
        axes = _image_axes(spec.model_shape(), spec.dtype)
        if axes is not None and i in axes:
            return ("channels", "height", "width")[axes.index(i)]
    if spec.role in ("token_ids", "mask") and spec.batch_axis is not None and i == spec.batch_axis + 1:
        return "sequence"
    return ""


def axis_label(spec: InputSpec, i: int) -> str:
    """A dim's label by input and axis, never by the exporter's name: ``input x, axis 2 (height)``."""
    meaning = axis_meaning(spec, i)
    return f"input {spec.name}, axis {i}" + (f" ({meaning})" if meaning else "")


def suggested_sizes(spec: InputSpec, i: int) -> tuple[int, ...]:
    """Sizes to suggest for an open dim: the value another dim of the same meaning already has (a square image:
    width = height), then the common sizes of its kind."""
    meaning = axis_meaning(spec, i)
    same = [d.value for j, d in enumerate(spec.dims)
            if j != i and d.value is not None and meaning in ("height", "width")
            and axis_meaning(spec, j) in ("height", "width")]
    out = list(dict.fromkeys([*same, *COMMON_SIZES.get(meaning, ())]))
    return tuple(out)


# -- inference -------------------------------------------------------------------------------------------------


def _static(d: Any) -> int | None:
    return d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else None


def is_batch_name(name: Any) -> bool:
    """True for symbolic dim names that say "batch" (``batch``, ``batch_size``, ``N``, ``bs`` …)."""
    if not isinstance(name, str):
        return False
    low = name.strip().lower()
    return low in _BATCH_NAMES or "batch" in low


def _is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint") or dtype == "bool"


def _image_axes(shape: Sequence[Any], dtype: str) -> tuple[int, int, int] | None:
    """(channel axis, H axis, W axis) of an image-like rank-4 input, else None."""
    if len(shape) != 4 or dtype not in ("float32", "float16", "uint8", "float64"):
        return None
    c1, c3 = _static(shape[1]), _static(shape[3])
    if c1 in (1, 3):
        return 1, 2, 3
    if c3 in (1, 3):
        return 3, 1, 2
    if c1 is None and c3 is None:
        return 1, 2, 3
    return None


def _batch_axis(shape: Sequence[Any], name: str, others_batched: bool) -> int | None:
    if not shape:
        return None
    named = [i for i, d in enumerate(shape) if is_batch_name(d)]
    if named:
        return named[0]
    symbolic = [i for i, d in enumerate(shape) if _static(d) is None]
    if symbolic and symbolic[0] == 0 and not _is_size_axis(shape, 0):
        return 0
    if len(symbolic) == 1 and not _is_size_axis(shape, symbolic[0]):
        return symbolic[0]
    if len(symbolic) > 1 or symbolic == [0]:
        # several symbolic dims, none named like batch and the first not one: the user must say; or open only in
        # a first axis named as a size (a sequence model's [sequence_length, 576]): no batch, a sample is the input
        return None
    # fixed, or open only in a size: the first axis is the batch, unless another input has a real (symbolic) batch
    # axis or the input is a recurrent state
    if others_batched or _STATE_RE.search(name.lower()):
        return None
    return 0


_SIZE_NAME_RE = re.compile(r"width|height|length|len$|seq|time|frame|step|token|(^|[^a-z])(w|h)$")


def _is_size_axis(shape: Sequence[Any], i: int) -> bool:
    """Whether open axis ``i`` is a size, not a batch: named like one (``image_width``, ``seq_len``), or the height
    or width of a rank-4 image whose channels are fixed at 1 or 3 (``[1, 1, 64, W]``, a text-line recognizer)."""
    if isinstance(shape[i], str) and _SIZE_NAME_RE.search(shape[i].strip().lower()):
        return True
    return len(shape) == 4 and ((i in (2, 3) and _static(shape[1]) in (1, 3))
                                or (i in (1, 2) and _static(shape[3]) in (1, 3)))


def _role(name: str, dtype: str, shape: Sequence[Any], batch_axis: int | None, others_batched: bool) -> str:
    low = name.lower()
    if (_is_int(dtype) or dtype.startswith("float")) and _MASK_RE.search(low):
        return "mask"
    if _is_int(dtype) and dtype != "bool" and (_IDS_RE.search(low) or low in ("input", "x", "src")) \
            and len(shape) in (1, 2):
        return "token_ids"
    # a recurrent state by name (h0, initial_c, …_state), or an input left out of a batch the others have;
    # an input whose batch axis is not first but has no such name (an RNN's [seq, batch, features]) is data
    if _STATE_RE.search(low) or (batch_axis is None and others_batched and bool(shape)):
        return "state"
    if _image_axes(shape, dtype) is not None:
        return "image"
    return "other"


def _inputs_of(model_inputs: Any) -> list[Any]:
    return list(getattr(model_inputs, "inputs", model_inputs) or ())


def _shape_text(values: Iterable[Any]) -> str:
    return ",".join(str(v) for v in values)


def unresolved_error(specs: Sequence[InputSpec], misfits: Sequence[str] = ()) -> ShapeError:
    """The error for the unresolved dims of ``specs`` (a missing ``--shape``: a usage error, exit 2 in the CLI):
    each input, each dim (name, axis) and the flag; and ``misfits``, when the data's arrays could have set them
    but their samples do not fit (:func:`_tensor_misfits`), before the flag."""
    parts, hints = [], []
    for s in specs:
        missing = [(i, d) for i, d in enumerate(s.dims) if d.value is None]
        if not missing:
            continue
        names = ", ".join(f"'{d.name or '?'}' (axis {i})" for i, d in missing)
        parts.append(f"input '{s.name}' {s.model_shape()}: {names}")
        hints.append(f"--shape {s.name}=" + _shape_text(_hint_dims(s)))
    where = "the data's samples do not fit the model" if misfits else "neither the preprocessing nor the data set them"
    return ShapeError(f"The model leaves these input dimensions open and {where}: " + "; ".join(parts) + ". "
                      + "".join(f"{m} " for m in misfits) + "Give the shape: in the CLI " + " ".join(hints)
                      + " (H, W and D<axis> stand for the sizes to run at); in the app, on the Data page under "
                      "Input shapes.")


def sample_difference(array_shape: tuple, got: tuple, want: tuple) -> str:
    """Which axis of one sample differs (``got`` from the array, ``want`` from the model, ``None``/names for open
    dims) and what shape to save the array in."""
    def fits(a: tuple, b: tuple) -> bool:
        return len(a) == len(b) and all(static_dim(m) is None or m == x for m, x in zip(b, a))

    n = array_shape[0] if array_shape else 0
    if len(got) == len(want) + 1 and got[:1] == (1,) and fits(got[1:], want):
        return (f"The samples have an extra axis of size 1 that the model does not take: save the array as "
                f"{shape_text((n, *got[1:]))}.")
    if len(got) + 1 == len(want):
        for i in range(len(want)):
            if static_dim(want[i]) in (1, None) and fits(got[:i] + (1,) + got[i:], want):
                return (f"The samples lack the model's axis {i} of size 1: save the array as "
                        f"{shape_text((n, *got[:i], 1, *got[i:]))}.")
    if len(got) != len(want):
        return (f"A sample has {len(got)} axes, the model's {len(want)}: save the array as "
                f"[samples, {', '.join(str(d) if static_dim(d) is not None else '?' for d in want)}].")
    diffs = [f"axis {i}: got {a}, the model fixes {m}" for i, (a, m) in enumerate(zip(got, want))
             if static_dim(m) is not None and a != m]
    return "Per sample, " + "; ".join(diffs) + "."


def _hint_dims(spec: InputSpec) -> list[str]:
    """The dims of a suggested ``--shape``: the values known, 1 for an open batch, H and W for an image's open
    height and width (NCHW or NHWC), else ``D<axis>``; never the model's symbolic name (``P2O.DYNAMICDIMENSION.1``)."""
    dims = spec.dims
    chans = [i for i in (1, len(dims) - 1) if len(dims) == 4 and dims[i].value in (1, 3, 4)]
    spatial = (2, 3) if chans[:1] == [1] else (1, 2) if chans else ()
    out = []
    for i, d in enumerate(dims):
        if d.value is not None:
            out.append(str(d.value))
        elif i == spec.batch_axis or (i == 0 and len(dims) > 1):
            out.append("1")
        elif i in spatial:
            out.append("HW"[spatial.index(i)])
        else:
            out.append(f"D{i}")
    return out


def infer_specs(model_inputs: Any, preprocess: Any = None, dataset: Any = None,
                overrides: Mapping[str, Sequence[int]] | None = None, *, dims: Mapping[str, int] | None = None,
                batch: int = 1, strict: bool = True) -> list[InputSpec]:
    """One :class:`InputSpec` per model input.

    ``model_inputs``: a ``ModelInfo`` or a list of ``TensorInfo`` (name, dtype, shape with str = symbolic dim).
    ``preprocess``: the sample (its manifest's ``preprocess``) or a ``PreprocessConfig``: gives an image
    input's H, W and channels. ``dataset``: a ``data.Dataset``: tensors give their per-sample shapes, text its
    sequence length (default: the model's fixed length, else 128), images the preprocessing's size.
    ``overrides``: ``{input name: full shape}`` from the user (``--shape``). ``dims``: ``{dim name: size}``
    from the user. ``batch`` is the value recorded for batch axes. With ``strict`` (default) an unresolved dim
    raises DataError; otherwise it stays ``value=None`` (for showing the specs before they are complete).
    """
    infos = _inputs_of(model_inputs)
    given: dict[str, list[int]] = {str(k): [int(x) for x in v] for k, v in (overrides or {}).items()}
    names = [t.name for t in infos]
    unknown = [k for k in given if k not in names]
    if unknown:
        raise ShapeError(f"--shape names {', '.join(repr(k) for k in unknown)}, which the model does not take; "
                        f"its inputs are {', '.join(names) or 'none'}.")
    dims = {str(k): int(v) for k, v in (dims or {}).items()}
    pre_cfg, pre_source = _preprocess_source(preprocess, infos)
    kind = getattr(dataset, "kind", None)
    symbolic_batch = set()
    for t in infos:
        a = _batch_axis(tuple(t.shape), t.name, False)
        if a is not None and _static(tuple(t.shape)[a]) is None:
            symbolic_batch.add(t.name)
    specs: list[InputSpec] = []
    for t in infos:
        shape = tuple(t.shape)
        others = bool(symbolic_batch - {t.name})
        axis = _batch_axis(shape, t.name, others)
        role = _role(t.name, t.dtype, shape, axis, others)
        specs.append(_resolve(t, shape, axis, role, given.get(t.name), dims, pre_cfg, pre_source, dataset, kind,
                              batch))
    specs = _share_named(specs)
    specs = [_defaults(s, pre_cfg, pre_source, kind, infos) for s in specs]
    if strict and not all(s.resolved for s in specs):
        raise unresolved_error([s for s in specs if not s.resolved], _tensor_misfits(infos, specs, dataset))
    return specs


def _preprocess_source(preprocess: Any, infos: Sequence[Any]) -> tuple[Any, str]:
    if preprocess is None:
        return None, ""
    if hasattr(preprocess, "size") and hasattr(preprocess, "layout"):  # a PreprocessConfig
        cfg = preprocess
        if len(infos) == 1:

            try:
                detected = detect_preprocess(infos[0])
            except DataError:
                detected = None
            shape = tuple(infos[0].shape)
            hw_open = len(shape) == 4 and any(_static(d) is None for d in shape[1:])
            if detected is not None and cfg == detected and hw_open:
                return cfg, "default"  # nobody chose this size: it is detect_preprocess's fallback
        return cfg, "preprocess"
    cfg = getattr(preprocess, "preprocess", None)
    return (cfg, "manifest") if cfg is not None else (None, "")


def _resolve(t: Any, shape: tuple, axis: int | None, role: str, override: list[int] | None, dims: Mapping[str, int],
             pre_cfg: Any, pre_source: str, dataset: Any, kind: str | None, batch: int) -> InputSpec:
    if override is not None and len(override) != len(shape):
        raise ShapeError(f"--shape {t.name}={_shape_text(override)} has {len(override)} dimension(s) but input "
                        f"'{t.name}' has {len(shape)}: {[d if d is not None else '?' for d in shape]}.")
    out: list[DimSpec] = []
    image = _image_axes(shape, t.dtype) if role == "image" else None
    per_sample = _data_shape(t, axis, dataset, kind)
    seq_len = getattr(dataset, "seq_len", None) if kind == "text" and role in ("token_ids", "mask") else None
    for i, d in enumerate(shape):
        name = d if isinstance(d, str) else None
        fixed = _static(d)
        if fixed is not None and seq_len and i != axis and seq_len != fixed:
            raise DataError(f"The text's sequence length is {seq_len} but model input '{t.name}' takes exactly "
                            f"{fixed} tokens; set the sequence length to {fixed} (--seq-len {fixed}).")
        if fixed is not None:
            if override is not None and override[i] != fixed:
                raise ShapeError(f"--shape {t.name}={_shape_text(override)} sets axis {i} to {override[i]}, but the "
                                f"model fixes it to {fixed}.")
            out.append(DimSpec(fixed))
            continue
        if override is not None:
            if override[i] < 1:
                raise ShapeError(f"--shape {t.name}: every dimension must be at least 1, got {override[i]}.")
            out.append(DimSpec(override[i], name, "user"))
        elif i == axis:
            out.append(DimSpec(batch, name, "batch", "samples per run"))
        elif name is not None and name in dims:
            out.append(DimSpec(int(dims[name]), name, "user"))
        elif per_sample is not None:
            out.append(DimSpec(per_sample[i], name, "data"))
        elif seq_len:
            out.append(DimSpec(int(seq_len), name, "data", "the text's sequence length"))
        elif image is not None and pre_cfg is not None and pre_source != "default" and i in image:
            out.append(DimSpec(_image_dim(pre_cfg, image, i), name, pre_source))
        else:
            out.append(DimSpec(None, name, "unresolved"))
    return InputSpec(t.name, t.dtype, tuple(out), axis, role)


def _image_dim(cfg: Any, axes: tuple[int, int, int], i: int) -> int:
    c, h, _ = axes
    if i == c:
        return int(cfg.channels)
    return int(cfg.size[0] if i == h else cfg.size[1])


def _data_shape(t: Any, axis: int | None, dataset: Any, kind: str | None) -> list[int] | None:
    """The input's full shape from a tensor dataset (sample axis moved to the batch axis), else None."""
    if kind != "tensors":
        return None
    arr = _array_for(t.name, dataset)
    if arr is None or arr.ndim < 1:
        return None
    rest = list(arr.shape[1:])
    rank = len(tuple(t.shape))
    if axis is None:
        return rest if len(rest) == rank else None
    if len(rest) + 1 != rank:
        return None
    return [*rest[:axis], 1, *rest[axis:]]


def _array_for(name: str, dataset: Any) -> np.ndarray | None:
    """The array a tensor dataset holds for input ``name`` (a lone .npy's for any one input), else None."""
    arrays = getattr(dataset, "_tensors", {})
    return arrays.get(name, arrays.get("") if len(arrays) == 1 else None)


def _tensor_misfits(infos: Sequence[Any], specs: Sequence[InputSpec], dataset: Any) -> list[str]:
    """For each unresolved input that a tensor dataset holds an array for, whose samples could not set its open
    dims because their axes do not fit the model's (the batch axis left out): what differs, and the shape to save."""
    if getattr(dataset, "kind", None) != "tensors":
        return []
    by_name = {t.name: t for t in infos}
    out = []
    for s in specs:
        arr = _array_for(s.name, dataset)
        t = by_name.get(s.name)
        if s.resolved or arr is None or arr.ndim < 1 or t is None or _data_shape(t, s.batch_axis, dataset, "tensors"):
            continue
        shape = tuple(t.shape)
        axis = s.batch_axis
        want = shape if axis is None else shape[:axis] + shape[axis + 1:]
        got = tuple(arr.shape[1:])
        out.append(f"The data's array for '{s.name}' holds {arr.shape[0]} samples of shape {shape_text(got)} (its "
                   f"first axis counts samples), and the model takes samples of shape {shape_text(want)}"
                   f"{'' if axis is None else ' (its batch axis left out)'}. "
                   + sample_difference(tuple(arr.shape), got, want))
    return out


_PRIORITY = {"user": 4, "data": 3, "manifest": 2, "preprocess": 2, "default": 1, "unresolved": 0}


def _share_named(specs: list[InputSpec]) -> list[InputSpec]:
    """A symbolic name set in one input (e.g. ``sequence`` by ``--shape input_ids=…`` or by the data) sets it in
    the others too; the strongest source wins (user, then data, then the preprocessing, then a default)."""
    known: dict[str, DimSpec] = {}
    for s in specs:
        for i, d in enumerate(s.dims):
            usable = d.name and d.value is not None and d.source in _PRIORITY and i != s.batch_axis
            if usable and (d.name not in known or _PRIORITY[d.source] > _PRIORITY[known[d.name].source]):
                known[str(d.name)] = d
    if not known:
        return specs
    out = []
    for s in specs:
        dims = tuple(known[d.name] if d.name in known and i != s.batch_axis and d.source in _PRIORITY
                     and _PRIORITY[known[d.name].source] > _PRIORITY[d.source] else d for i, d in enumerate(s.dims))
        out.append(replace(s, dims=dims))
    return out


def _defaults(s: InputSpec, pre_cfg: Any, pre_source: str, kind: str | None, infos: Sequence[Any]) -> InputSpec:
    """Defaults that are stated, never silent: a text sequence length, the detected image size."""
    if s.resolved:
        return s
    dims = list(s.dims)
    if kind == "text" and s.role in ("token_ids", "mask"):
        for i, d in enumerate(dims):
            if d.value is None and i != s.batch_axis:
                dims[i] = DimSpec(DEFAULT_SEQ_LEN, d.name, "default",
                                  "text sequence length (the model leaves it open); set --seq-len")
    if kind == "images" and s.role == "image" and pre_cfg is not None and pre_source == "default":
        axes = _image_axes(tuple(s.model_shape()), s.dtype) or (1, 2, 3)
        for i, d in enumerate(dims):
            if d.value is None and i in axes:
                dims[i] = DimSpec(_image_dim(pre_cfg, axes, i), d.name, "default",
                                  f"the model's image size is dynamic; images are resized to "
                                  f"{pre_cfg.size[0]}×{pre_cfg.size[1]} (set the preprocessing size or --shape)")
    return replace(s, dims=tuple(dims))


# -- using specs ---------------------------------------------------------------------------------------------


def default_notes(specs: Sequence[InputSpec]) -> list[str]:
    """One note per input with defaulted dims, saying which and why, and per input whose batch the model fixes
    above 1, how it is filled."""
    notes = []
    for s in specs:
        for i, d in enumerate(s.dims):
            if d.source == "default":
                notes.append(f"Input '{s.name}' axis {i} ({d.name or '?'}) = {d.value}: {d.reason}.")
        if s.copies > 1:
            notes.append(f"Input '{s.name}' has a fixed batch of {s.copies}: each sample is fed as {s.copies} copies "
                         f"of itself, and each output with {s.copies} rows is read from the first.")
    return notes


def parse_shape(text: str) -> tuple[str, list[int]]:
    """``"images=1,3,640,640"`` → ``("images", [1, 3, 640, 640])``; DataError for anything else."""
    name, sep, rest = str(text).rpartition("=")
    if not sep or not name or not rest:
        raise ShapeError(f"--shape takes NAME=D0,D1,… (e.g. images=1,3,640,640), got {text!r}.")
    try:
        values = [int(x) for x in rest.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise ShapeError(f"--shape {text!r}: the dimensions must be whole numbers, e.g. {name}=1,3,640,640.") from None
    if not values or any(v < 1 for v in values):
        raise ShapeError(f"--shape {text!r}: give at least one dimension, each at least 1.")
    return name, values


def format_shape_arg(name: str, shape: Sequence[int]) -> str:
    """The ``--shape`` value for ``name`` at ``shape``."""
    return f"{name}={_shape_text(shape)}"


def fit_preprocess(cfg: Any, specs: Sequence[InputSpec]) -> Any:
    """``cfg`` with its size set to an image input's user-given H and W (so images are resized to them)."""
    if cfg is None:
        return cfg
    for s in specs:
        if s.role != "image":
            continue
        axes = _image_axes(tuple(s.model_shape()), s.dtype)
        if axes is None:
            continue
        _, h, w = axes
        if s.dims[h].source == "user" or s.dims[w].source == "user":
            size = (int(s.dims[h].value or cfg.size[0]), int(s.dims[w].value or cfg.size[1]))
            if tuple(cfg.size) != size:
                return replace(cfg, size=size)
    return cfg


def is_control_input(spec: InputSpec) -> bool:
    """An integer input that holds one value per run (a scalar such as a sample rate, a flag or a count, or a
    single element): it steers what the model computes (an ``If`` on it, a loop count), so no value made up at
    random stands for real use."""
    dtype = dtypes.to_numpy(spec.dtype)
    if dtype is None or np.dtype(dtype).kind not in "iu" or spec.role != "other":
        return False
    if any(d.value == 0 for d in spec.dims):
        return False  # an empty tensor holds no value to make up
    per_sample = [d.value for i, d in enumerate(spec.dims) if i != spec.batch_axis]
    return all(v == 1 for v in per_sample)


def control_input_error(spec: InputSpec) -> DataError:
    """The sentence that refuses to make up a value for a control input (:func:`is_control_input`)."""
    return DataError(f"{control_input_text(spec)} Give real data that holds it: an .npz with one array per input, "
                     f"'{spec.name}' among them (one value per sample); or, for random data, the value it takes: "
                     f"--input-value {spec.name}=VALUE.")


def control_input_text(spec: InputSpec) -> str:
    """Why no random value is made up for a control input (the first sentence of the errors that say so)."""
    what = f"an {spec.dtype} scalar" if not spec.dims else f"{spec.dtype} shaped {spec.model_shape()}"
    return (f"Model input '{spec.name}' is {what}: a control value (such as a sample rate, a flag or a count) that "
            f"decides what the model computes, so ortlab does not make one up at random.")


def resolve_feed(model_inputs: Any, preprocess: Any, dataset: Any, shapes: Mapping[str, Sequence[int]] | None,
                 manifest: Any = None) -> tuple[Any, list[InputSpec]]:
    """The preprocessing and the input specs that feed ``dataset`` (the one path of optimize, compare, analyze and
    tune): :func:`infer_specs` with the user's ``shapes``; when they give an image input's H and W, the
    preprocessing's size follows them (:func:`fit_preprocess`). ``manifest``: the sample whose manifest sets
    the dims when there is no preprocessing."""
    specs = infer_specs(model_inputs, preprocess if preprocess is not None else manifest, dataset, shapes)
    fitted = fit_preprocess(preprocess, specs)
    if fitted != preprocess:  # --shape gave an image input's size: images are resized to it
        return fitted, infer_specs(model_inputs, fitted, dataset, shapes)
    return preprocess, specs


def random_array(spec: InputSpec, rng: np.random.Generator, batch: int) -> np.ndarray:
    """Random data for one input at ``batch``: floats ~ N(0, 1), token ids in {0, 1}, masks of ones
    (token-type ids zeros), states zeros, other integers in {0, 1}. A control input
    (:func:`is_control_input`) raises :func:`control_input_error`: no value is made up for it."""
    shape = spec.at_batch(batch)
    dtype = dtypes.to_numpy(spec.dtype)
    if dtype is None:
        raise DataError(f"Model input '{spec.name}' takes {spec.dtype} values, which ortlab can neither make up nor "
                        "read from data files (they hold numbers: images, tensors, token ids): it runs models whose "
                        "inputs are numeric. Export the model's numeric part (e.g. after the text step) on its own.")
    if is_control_input(spec):
        raise control_input_error(spec)
    kind = np.dtype(dtype).kind
    if spec.role == "state":
        return np.zeros(shape, dtype=dtype)
    if spec.role == "mask":
        low = spec.name.lower()
        fill = 0 if ("type" in low or "segment" in low) else 1
        return np.full(shape, fill, dtype=dtype)
    if kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(0, 2, size=shape).astype(dtype)


def given_array(spec: InputSpec, value: float, batch: int) -> np.ndarray:
    """One input at ``batch`` holding ``value`` everywhere: a control input's value as a person gave it
    (``--input-value``), where :func:`random_array` would refuse to make one up."""
    return np.full(spec.at_batch(batch), value, dtype=dtypes.to_numpy(spec.dtype))


def random_feed(specs: Sequence[InputSpec], batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One feed of random data (:func:`random_array`) for every spec at ``batch``."""
    rng = np.random.default_rng(seed)
    return {s.name: random_array(s, rng, batch) for s in specs}


def stack(specs: Sequence[InputSpec], rows: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Join single-sample feeds (batch 1 each) along each input's batch axis (inputs without one: the first)."""
    out = {}
    for s in specs:
        parts = [r[s.name] for r in rows]
        if s.batch_axis is None or len(parts) == 1:
            out[s.name] = parts[0]
        else:
            out[s.name] = np.concatenate(parts, axis=s.batch_axis)
    return out
