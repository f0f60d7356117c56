"""What a model receives from a dataset: batches of preprocessed images, tensors or tokenized text shaped by
the input specs, and whether a dataset fits a model at all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

import numpy as np

from ortlab.settings.config import Layout, PreprocessConfig
from ortlab.core.errors import DataError
from ortlab.core import dtypes, limits

if TYPE_CHECKING:  # TensorInfo is only used for its .name / .dtype / .shape
    from ortlab.model.inspect import TensorInfo

from ortlab.data.dataset import Dataset
from ortlab.data.inputs import (InputSpec, given_array, infer_specs, is_control_input, random_array,
                                sample_difference, stack)
from ortlab.data.preprocess import shape_text, static_dim, detect_preprocess, preprocess_image


def _one_input(model_inputs: Sequence[TensorInfo]) -> None:
    """DataError unless the model has one input: images feed one input only."""
    if len(model_inputs) != 1:
        names = ", ".join(f"{t.name} {shape_text(tuple(t.shape))}" for t in model_inputs)
        raise DataError(f"Images can feed a model with one input; this model has {len(model_inputs)} ({names}). "
                        f"Use an .npz file with one array per input.")


def check_image_input(cfg: PreprocessConfig, model_inputs: Sequence[TensorInfo]) -> TensorInfo:
    """The single image input of the model, after checking ``cfg`` produces what it expects."""
    _one_input(model_inputs)
    info = model_inputs[0]
    expected = detect_preprocess(info)  # raises when the input is not image-shaped
    shape = tuple(info.shape)
    c_axis, hw = (1, shape[2:4]) if cfg.layout == Layout.NCHW else (3, shape[1:3])
    want = f"the model expects {shape_text(shape)} ({expected.layout.value}, {expected.channels} channel(s))"
    if static_dim(shape[c_axis]) not in (None, cfg.channels):
        raise DataError(f"Preprocessing makes {cfg.channels}-channel {cfg.layout.value} images but {want}; "
                        f"set channels to {expected.channels} and layout to {expected.layout.value}.")
    for got, dim in zip(cfg.size, hw):
        if static_dim(dim) is not None and dim != got:
            raise DataError(f"Preprocessing resizes to {cfg.size[0]}×{cfg.size[1]} but {want}; "
                            f"set size to {expected.size[0]}×{expected.size[1]}.")
    if cfg.dtype != info.dtype:
        raise DataError(f"Preprocessing produces {cfg.dtype} but model input '{info.name}' is {info.dtype}; "
                        f"set dtype to {info.dtype}.")
    return info


def _cast_like(arr: np.ndarray, info: TensorInfo, what: str) -> np.ndarray:
    target = dtypes.to_numpy(info.dtype)
    if target is None:
        raise DataError(f"Model input '{info.name}' has type {info.dtype}, which ortlab cannot feed.")
    kind_ok = (arr.dtype.kind == "f") == (np.dtype(target).kind == "f") or arr.dtype.kind == "b"
    if not kind_ok:
        raise DataError(f"{what} is {arr.dtype} but model input '{info.name}' is {info.dtype}; "
                        f"save the array as {info.dtype}.")
    return arr.astype(target, copy=False)


def _per_sample(info: TensorInfo, spec: InputSpec | None) -> tuple[tuple[Any, ...], str]:
    """The model's dims of one sample (the batch axis left out) and a word on where the batch axis is."""
    shape = tuple(info.shape)
    axis = spec.batch_axis if spec is not None else (0 if shape else None)
    if axis is None:
        return shape, "no batch axis: each sample is the whole input"
    rest = shape[:axis] + shape[axis + 1:]
    return rest, "first axis = samples" if axis == 0 else f"first axis = samples, fed on the model's axis {axis}"


def check_tensor_inputs(ds: Dataset, model_inputs: Sequence[TensorInfo],
                        specs: Sequence[InputSpec] | None = None) -> None:
    """Raise DataError unless the dataset's arrays match the model inputs' names, ranks and static dims
    (the sample axis of an array is the first; the model's batch axis may be another, see ``specs``)."""
    expected = ", ".join(f"{t.name} {shape_text(t.shape)}" for t in model_inputs)
    by_name = {s.name: s for s in specs or ()}
    arrays = ds.tensors
    if "" in arrays:
        if len(model_inputs) != 1:
            raise DataError(f"A .npy file feeds one input, but the model has {len(model_inputs)} ({expected}); "
                            f"use an .npz with one array per input name.")
        pairs = [(model_inputs[0], arrays[""], "The .npy array")]
    else:
        names = [t.name for t in model_inputs]
        missing = [n for n in names if n not in arrays]
        extra = [k for k in arrays if k not in names]
        if missing or extra:
            raise DataError(f"The .npz keys ({', '.join(arrays) or 'none'}) must be the model's input names "
                            f"({', '.join(names)}).")
        pairs = [(t, arrays[t.name], f"Array '{t.name}'") for t in model_inputs]
    for info, arr, what in pairs:
        per_sample = arr.shape[1:]
        model_rest, where = _per_sample(info, by_name.get(info.name))
        if len(per_sample) != len(model_rest) or any(
            static_dim(m) is not None and m != a for m, a in zip(model_rest, per_sample)
        ):
            raise DataError(f"{what} has shape {shape_text(arr.shape)}: {arr.shape[0]} samples of shape "
                            f"{shape_text(per_sample)} (its first axis counts samples), but model input "
                            f"'{info.name}' {shape_text(info.shape)} takes samples of shape {shape_text(model_rest)} "
                            f"({where}). {sample_difference(tuple(arr.shape), tuple(per_sample), tuple(model_rest))}")
        _cast_like(arr[:0], info, what)


def _specs(ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
           specs: Sequence[InputSpec] | None) -> list[InputSpec]:

    return list(specs) if specs is not None else infer_specs(model_inputs, cfg, ds)


def _text_feed(ds: Dataset, indices: Sequence[int], specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """input_ids / attention_mask / token_type_ids (whichever the model takes) at the specs' sequence length;
    states get zeros."""

    n = len(indices)
    text_specs = [s for s in specs if s.role in ("token_ids", "mask")]
    if not any(s.role == "token_ids" for s in specs):
        names = ", ".join(f"{s.name} ({s.role})" for s in specs)
        raise DataError(f"Text data feeds token ids, but no model input looks like one ({names}); name it "
                        f"input_ids, or use an .npz file with one array per input.")
    others = [s for s in specs if s.role not in ("token_ids", "mask", "state")]
    if others:
        raise DataError(f"Text data gives input_ids, attention_mask and token_type_ids; model input "
                        f"'{others[0].name}' ({others[0].role}) needs other data: use an .npz with one array per input.")
    rows = [ds.samples[i].row for i in indices]
    feed: dict[str, np.ndarray] = {}
    for s in text_specs:
        shape = s.at_batch(n)
        seq_axes = [i for i in range(len(shape)) if i != s.batch_axis]
        if len(seq_axes) != 1:
            raise DataError(f"Model input '{s.name}' has shape {list(shape)}; text feeds [batch, sequence] inputs.")
        length = shape[seq_axes[0]]
        ids, mask, types = ds.encoded(length)
        low = s.name.lower()
        src = ids if s.role == "token_ids" else (types if ("type" in low or "segment" in low) else mask)
        arr = src[rows]
        if s.batch_axis is None:
            if n != 1:
                raise DataError(f"Model input '{s.name}' has no batch axis; feed one sample at a time.")
            arr = arr[0]
        elif s.batch_axis != 0:
            arr = arr.T
        info_dtype = dtypes.to_numpy(s.dtype)
        feed[s.name] = arr.astype(info_dtype if info_dtype is not None else np.int64)
    rng = np.random.default_rng(0)
    for s in specs:
        if s.role == "state":
            feed[s.name] = random_array(s, rng, n)
    return feed


def sample_copies(ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
                  specs: Sequence[InputSpec] | None = None) -> int:
    """How many copies of one sample :func:`batch_inputs` feeds: the batch size the model fixes (each sample is
    repeated to fill it), 1 for an open batch."""
    if ds.kind == "images" and cfg is None and len(model_inputs) == 1:
        cfg = detect_preprocess(model_inputs[0])
    return max((s.copies for s in _specs(ds, cfg, model_inputs, specs)), default=1)


def first_copy(arrays: Sequence[Any], copies: int) -> list[Any]:
    """Each array of a run on one sample repeated ``copies`` times, cut to its first copy: an array whose first
    axis has ``copies`` entries keeps the first (as a batch of one); others are kept whole."""
    if copies <= 1:
        return list(arrays)
    return [a[:1] if isinstance(a, np.ndarray) and a.ndim and a.shape[0] == copies else a for a in arrays]


def _fill_fixed_batch(feed: dict[str, np.ndarray], specs: Sequence[InputSpec], n: int) -> dict[str, np.ndarray]:
    """One sample repeated along each input's batch axis to the size the model fixes (``n`` samples given)."""
    for s in specs:
        arr = feed.get(s.name)
        if n == 1 and s.copies > 1 and arr is not None and arr.shape[s.batch_axis] == 1:  # type: ignore[index]
            feed[s.name] = np.repeat(arr, s.copies, axis=s.batch_axis)
    return feed


def batch_inputs(ds: Dataset, indices: Sequence[int], cfg: PreprocessConfig | None,
                 model_inputs: Sequence[TensorInfo], specs: Sequence[InputSpec] | None = None) -> dict[str, np.ndarray]:
    """Model feed for the samples at ``indices``, stacked on each input's batch axis (``specs``: the inputs'
    resolved shapes, :func:`ortlab.data.inputs.infer_specs`; inferred from the model, ``cfg`` and ``ds`` when None).
    A batch the model fixes is filled with copies of the one sample given (:func:`sample_copies`)."""

    if not indices:
        raise DataError("No samples selected.")
    if ds.kind == "images":
        if cfg is None:
            _one_input(model_inputs)
            cfg = detect_preprocess(model_inputs[0])
        info = check_image_input(cfg, model_inputs)
        image_specs = _specs(ds, cfg, model_inputs, specs)
        for s in image_specs:
            s.at_batch(len(indices))
        feed = {info.name: np.stack([preprocess_image(ds.load_image(i), cfg) for i in indices])}
        return _fill_fixed_batch(feed, image_specs, len(indices))
    specs = _specs(ds, cfg, model_inputs, specs)
    return _fill_fixed_batch(_feed_of(ds, indices, model_inputs, specs), specs, len(indices))


def _feed_of(ds: Dataset, indices: Sequence[int], model_inputs: Sequence[TensorInfo],
             specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """The feed of a dataset of tensors, text or random data (:func:`batch_inputs`)."""
    for s in specs:
        s.at_batch(len(indices))  # a fixed batch of another size raises here
    if ds.kind == "tensors":
        check_tensor_inputs(ds, model_inputs, specs)
        rows = [ds.samples[i].row for i in indices]
        infos = {t.name: t for t in model_inputs}
        out = {}
        for s in specs:
            key = "" if "" in ds.tensors else s.name
            what = "The .npy array" if key == "" else f"Array '{s.name}'"
            arr = _cast_like(ds.tensors[key][rows], infos[s.name], what)
            if s.batch_axis is None:
                if len(rows) != 1:
                    raise DataError(f"Model input '{s.name}' has no batch axis; feed one sample at a time.")
                arr = arr[0]
            elif s.batch_axis != 0:
                arr = np.moveaxis(arr, 0, s.batch_axis)
            out[s.name] = np.ascontiguousarray(arr) if arr.ndim else np.asarray(arr)  # ascontiguousarray makes 0-d 1-d
        return out
    if ds.kind == "text":
        return _text_feed(ds, indices, specs)
    if ds.kind == "random":
        n = len(indices)
        limits.check_generated_size({s.name: (list(s.at_batch(n)), dtypes.to_numpy(s.dtype) or np.uint8)
                                     for s in specs}, n)
        feeds = []
        for i in indices:
            rng = np.random.default_rng([ds.seed, int(ds.samples[i].index or 0)])
            feeds.append({s.name: given_array(s, ds.control[s.name], 1) if s.name in ds.control
                          else random_array(s, rng, 1) for s in specs})
        return stack(specs, feeds)
    raise DataError(f"Unknown dataset kind {ds.kind!r}.")


def control_values(ds: Dataset | None, model_inputs: Sequence[TensorInfo]) -> dict[str, float]:
    """The value each control input (``inputs.is_control_input``, e.g. a sample rate) has in the first sample of a
    tensor dataset: what a benchmark feeds instead of making one up. Empty for other data."""

    if ds is None or ds.kind != "tensors" or not len(ds):
        return {}
    specs = infer_specs(model_inputs, None, ds, strict=False)
    out: dict[str, float] = {}
    for s in specs:
        arr = ds.tensors.get(s.name)
        if is_control_input(s) and arr is not None and arr.size:
            value = arr[ds.samples[0].index or 0].reshape(-1)[0].item()
            out[s.name] = value
    return out


def check_fits(ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
               specs: Sequence[InputSpec] | None = None) -> None:
    """Cheap up-front check (no decoding) that ``ds`` with ``cfg`` can feed the model; raises DataError
    (also when an input's shape cannot be resolved)."""
    if len(ds) == 0:
        raise DataError("The dataset is empty.")
    if ds.kind == "images":
        if cfg is None:
            _one_input(model_inputs)
            cfg = detect_preprocess(model_inputs[0])
        check_image_input(cfg, model_inputs)
        return
    specs = _specs(ds, cfg, model_inputs, specs)
    if ds.kind == "tensors":
        check_tensor_inputs(ds, model_inputs, specs)
    elif ds.kind == "text":
        _text_feed(ds, [0], specs)


def attention_mask(feed: dict[str, np.ndarray]) -> np.ndarray | None:
    """The feed's attention mask: the first [batch, seq] input whose name says mask (not a token-type or segment
    input) and whose values are all 0 or 1; None when there is none. Per-token outputs are compared where it is 1
    (real tokens), never on padding."""
    for name, arr in feed.items():
        low = name.lower()
        if "mask" not in low or "type" in low or "segment" in low:
            continue
        a = np.asarray(arr)
        if a.ndim == 2 and a.dtype.kind in "biuf" and a.size and bool(np.isin(a, (0, 1)).all()):
            return a
    return None
