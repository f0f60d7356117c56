"""Typed access to the per-browser-session state that follows the user between pages.

Every page reads and writes ``st.session_state`` only through these functions, so the keys live in one place.
Artifacts are typed ``Artifact`` records: runs loaded from the History DB and runs made in this session are the
same kind of object.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from ..artifact import Artifact
from ..config import PreprocessConfig, Recipe

if TYPE_CHECKING:
    from ..history import BenchmarkRecord

_P = "ortlab."
ORIGINAL = "original"


def _get(name: str, default: Any = None) -> Any:
    return st.session_state.get(_P + name, default)


def _set(name: str, value: Any) -> None:
    st.session_state[_P + name] = value


def _pop(name: str) -> None:
    st.session_state.pop(_P + name, None)


def initialized() -> bool:
    """Whether the first-open defaults were applied in this session."""
    return bool(_get("initialized"))


def set_initialized() -> None:
    """Remember that the first-open defaults were applied."""
    _set("initialized", True)


# -- model --------------------------------------------------------------------------------------------
def model_path() -> Path | None:
    """The .onnx file of the current model, or None before anything is selected."""
    p = _get("model_path")
    return Path(p) if p else None


def model_info():
    """The ``ModelInfo`` of the current model (or None)."""
    return _get("model_info")


def sample_name() -> str | None:
    """Name of the bundled sample in use, None for an uploaded model."""
    return _get("sample_name")


def model_label() -> str:
    """A short name for the current model, for headers and the sidebar."""
    return _get("model_label") or (model_path().name if model_path() else "no model")


def set_model(path: Path, info, *, sample: str | None, label: str) -> None:
    """Make ``path`` the current model; artifacts of other models stay listed, the compare pair resets."""
    _set("model_path", str(path))
    _set("model_info", info)
    _set("sample_name", sample)
    _set("model_label", label)
    _pop("compare_pair")
    _pop("cache")
    _pop("input_shapes")


# -- data ---------------------------------------------------------------------------------------------
def dataset():
    """The ``Dataset`` used for calibration and evaluation (or None)."""
    return _get("dataset")


def dataset_label() -> str:
    """A short description of the data in use, for headers and the sidebar."""
    return _get("dataset_label", "no data")


def eval_dataset():
    """The ``Dataset`` used to verify and compare (defaults to the calibration dataset)."""
    return _get("eval_dataset") or dataset()


def set_dataset(ds, label: str, eval_ds=None) -> None:
    """Use ``ds`` for calibration and ``eval_ds`` (default: ``ds``) for evaluation."""
    _set("dataset", ds)
    _set("eval_dataset", eval_ds)
    _set("dataset_label", label)


def data_refs() -> tuple[Any, Any]:
    """The (calibration, evaluation) ``runspec.DataRef`` of the data in use: where another process loads it."""
    refs = _get("data_refs")
    return tuple(refs) if refs else (None, None)


def set_data_refs(calibration, evaluation) -> None:
    """Remember where the calibration and evaluation data can be loaded from (``runspec.DataRef``)."""
    _set("data_refs", (calibration, evaluation))


def preprocess() -> PreprocessConfig | None:
    """The preprocessing applied to images (or None before one is known)."""
    return _get("preprocess")


def set_preprocess(cfg: PreprocessConfig) -> None:
    """Use ``cfg`` to turn images into model inputs."""
    _set("preprocess", cfg)


def input_shapes() -> dict[str, list[int]]:
    """The shapes the user set on the Data page, ``{input name: full shape}`` (for dims the model leaves open)."""
    return dict(_get("input_shapes") or {})


def set_input_shapes(shapes: dict[str, list[int]]) -> None:
    """Remember the user's ``{input name: shape}`` (an empty dict forgets them)."""
    _set("input_shapes", {k: [int(x) for x in v] for k, v in shapes.items()})


def data_settings() -> dict:
    """Sample count, stratification and seed chosen on the Data page."""
    return _get("data_settings", {"n": 0, "stratify": True, "seed": 0})


def set_data_settings(n: int, stratify: bool, seed: int) -> None:
    """Store the Data page's evaluation sample count, stratification and seed."""
    _set("data_settings", {"n": int(n), "stratify": bool(stratify), "seed": int(seed)})


# -- recipe -------------------------------------------------------------------------------------------
def recipe() -> Recipe:
    """The recipe last shown on the Recipe page (defaults to ``Recipe()``)."""
    return _get("recipe") or Recipe()


def set_recipe(r: Recipe) -> None:
    """Remember the recipe shown on the Recipe page."""
    _set("recipe", r)


# -- artifacts ----------------------------------------------------------------------------------------
def artifacts() -> list[Artifact]:
    """Artifacts made or loaded in this session, oldest first."""
    return list(_get("artifacts", []))


def add_artifact(a: Artifact) -> None:
    """Append an artifact; one already listed (same run id, or same model file) is replaced."""
    items = [x for x in artifacts() if not _same_artifact(x, a)]
    items.append(a)
    _set("artifacts", items)


def remove_artifact(run_id: int) -> None:
    """Forget the artifact of History run ``run_id`` in this session (after it was deleted)."""
    _set("artifacts", [x for x in artifacts() if x.run_id != run_id])


def _same_artifact(x: Artifact, y: Artifact) -> bool:
    if x.run_id is not None and x.run_id == y.run_id:
        return True
    return Path(x.model_path) == Path(y.model_path)


def compare_pair() -> tuple[str, str] | None:
    """The (reference, candidate) variant ids chosen on Compare."""
    pair = _get("compare_pair")
    return tuple(pair) if pair else None


def set_compare_pair(ref: str, cand: str) -> None:
    """Remember the (reference, candidate) variant ids chosen on Compare."""
    _set("compare_pair", (ref, cand))


# -- benchmark ----------------------------------------------------------------------------------------
def last_benchmark() -> BenchmarkRecord | None:
    """The last finished benchmark of this session (its variants, config and summaries)."""
    return _get("last_benchmark")


def set_last_benchmark(result: BenchmarkRecord | None) -> None:
    """Keep the result of the last finished benchmark (None forgets it)."""
    _set("last_benchmark", result)


# -- jobs and caches ----------------------------------------------------------------------------------
def job(kind: str):
    """The background job of ``kind`` ("recipe" or "bench") started in this session, or None."""
    return _get("job." + kind)


def set_job(kind: str, j) -> None:
    """Keep ``j`` as this session's job of ``kind`` (None forgets it)."""
    if j is None:
        _pop("job." + kind)
    else:
        _set("job." + kind, j)


def cache() -> dict:
    """A per-session dict for results that are costly to recompute (diffs, evaluations)."""
    c = _get("cache")
    if c is None:
        c = {}
        _set("cache", c)
    return c


def flash(message: str | None = None, level: str = "success") -> tuple[str, str] | None:
    """Store a one-shot message for the next page (with a message) or pop it (without)."""
    if message is not None:
        _set("flash", (level, message))
        return None
    out = _get("flash")
    _pop("flash")
    return out


# -- widget defaults ----------------------------------------------------------------------------------
def ensure_widget(key: str, value: Any) -> None:
    """Give widget ``key`` a value before it is drawn, unless it already has one (no value= needed then)."""
    if key not in st.session_state:
        st.session_state[key] = value


def set_widget(key: str, value: Any) -> None:
    """Set widget ``key`` before it is drawn in this run (e.g. clear a selection)."""
    st.session_state[key] = value


def widget(key: str, default: Any = None) -> Any:
    """The current value of widget ``key`` (``default`` before it was drawn)."""
    return st.session_state.get(key, default)


def ui(name: str, default: Any = None) -> Any:
    """Small page-local UI memory (e.g. which upload was already imported)."""
    return _get("ui." + name, default)


def set_ui(name: str, value: Any) -> None:
    """Store a small page-local UI value (see :func:`ui`)."""
    _set("ui." + name, value)


def clear_widgets(prefix: str) -> None:
    """Forget the values of every widget whose key starts with ``prefix`` (they redraw from defaults)."""
    for k in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefix)]:
        del st.session_state[k]


# -- per-node error overlay ---------------------------------------------------------------------------
# Key "ortlab.node_overlay": the last per-node analysis (Compare → Per-node error), for the graph-diff view.
# {"candidate": model path analysed, "label": what the values are, "values": {node name: SQNR dB}}.
def node_overlay() -> dict | None:
    """The per-node SQNR of the last analysis: ``{"candidate", "label", "values": {node name: dB}}`` or None."""
    return _get("node_overlay")


def set_node_overlay(candidate: str | Path, values: dict[str, float], label: str = "SQNR dB") -> None:
    """Remember ``{node name: SQNR dB}`` of the analysis of ``candidate`` (None values left out)."""
    _set("node_overlay", {"candidate": str(candidate), "label": label,
                          "values": {str(k): float(v) for k, v in values.items() if v is not None}})
