"""Typed access to the per-browser-session state that follows the user between pages.

Every page reads and writes ``st.session_state`` only through these functions, so the keys live in one place.
Artifacts are typed ``Artifact`` records: runs loaded from the History DB and runs made in this session are the
same kind of object.

What belongs to a model lives under that model's sha256 (:func:`model_key`): the data chosen for it, its
preprocessing, the Compare pair, the benchmark job and its results, one-shot messages. Changing the model never
shows another model's numbers; coming back to a model finds its own choices again. The artifacts of every model
stay in one list (each knows its source's sha256); pages ask :mod:`ortlab.ui.session.actions` for the current model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from ortlab.api import Artifact
from ortlab.api import PreprocessConfig, Recipe
from ortlab import api

if TYPE_CHECKING:
    from ortlab.api import BenchmarkRecord

_P = "ortlab."
ORIGINAL = "original"


def _get(name: str, default: Any = None) -> Any:
    return st.session_state.get(_P + name, default)


def _set(name: str, value: Any) -> None:
    st.session_state[_P + name] = value


def _pop(name: str) -> None:
    st.session_state.pop(_P + name, None)


def model_key() -> str:
    """The sha256 of the current model ("none" before one is chosen): what per-model state is stored under."""
    info = _get("model_info")
    return getattr(info, "sha256", None) or "none"


def _mget(name: str, default: Any = None) -> Any:
    return _get(f"m.{model_key()}.{name}", default)


def _mset(name: str, value: Any) -> None:
    _set(f"m.{model_key()}.{name}", value)


def _mpop(name: str) -> None:
    _pop(f"m.{model_key()}.{name}")


# widgets whose values belong to the model on screen: drawn again from that model's state after a change
MODEL_WIDGET_PREFIXES = ("data.", "pre.", "compare.", "bench.variants")


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
    label = _get("model_label")
    if label:
        return label
    path = model_path()
    return path.name if path else "no model"


def set_model(path: Path, info, *, sample: str | None, label: str) -> None:
    """Make ``path`` the current model. Its data, pair, benchmark and messages are its own (see
    :func:`model_key`); when the model changes, the widgets that showed the previous model's choices are reset
    and a failed or cancelled run's message (about the previous model) is dropped."""
    changed = model_key() != (getattr(info, "sha256", None) or "none")
    _set("model_path", str(path))
    _set("model_info", info)
    _set("sample_name", sample)
    _set("model_label", label)
    _pop("cache")
    if changed:
        for prefix in MODEL_WIDGET_PREFIXES:
            clear_widgets(prefix)
        drop_finished_failure()


def enter_page(name: str) -> None:
    """Called by app.py before each page runs: a failed or cancelled run's message stays on the page (and
    model) where it appeared, and is dropped when the user goes elsewhere."""
    if _get("page") != name:
        _set("page", name)
        drop_finished_failure()


def current_page() -> str | None:
    """The page app.py last entered (its title)."""
    return _get("page")


def drop_finished_failure() -> None:
    """Forget this session's recipe job when it ended failed or cancelled (its message was shown)."""
    j = _get("job.recipe")
    if j is not None and j.done and getattr(j, "state", None) in ("failed", "cancelled"):
        _pop("job.recipe")


# -- data ---------------------------------------------------------------------------------------------
def dataset():
    """The ``Dataset`` used for calibration and evaluation (or None)."""
    return _mget("dataset")


def dataset_label() -> str:
    """A short description of the data in use, for headers and the sidebar."""
    return _mget("dataset_label", "no data")


def eval_dataset():
    """The ``Dataset`` used to verify and compare (defaults to the calibration dataset)."""
    return _mget("eval_dataset") or dataset()


def set_dataset(ds, label: str, eval_ds=None) -> None:
    """Use ``ds`` for calibration and ``eval_ds`` (default: ``ds``) for evaluation."""
    _mset("dataset", ds)
    _mset("eval_dataset", eval_ds)
    _mset("dataset_label", label)


def data_refs() -> tuple[Any, Any]:
    """The (calibration, evaluation) ``runspec.DataRef`` of the data in use: where another process loads it."""
    refs = _mget("data_refs")
    return tuple(refs) if refs else (None, None)


def set_data_refs(calibration, evaluation) -> None:
    """Remember where the calibration and evaluation data can be loaded from (``runspec.DataRef``)."""
    _mset("data_refs", (calibration, evaluation))


def preprocess() -> PreprocessConfig | None:
    """The preprocessing applied to images (or None before one is known)."""
    return _mget("preprocess")


def set_preprocess(cfg: PreprocessConfig | None) -> None:
    """Use ``cfg`` to turn images into model inputs (None: none chosen yet, the policy decides)."""
    _mset("preprocess", cfg)


def input_shapes() -> dict[str, list[int]]:
    """The shapes the user set on the Data page, ``{input name: full shape}`` (for dims the model leaves open)."""
    return dict(_mget("input_shapes") or {})


def set_input_shapes(shapes: dict[str, list[int]]) -> None:
    """Remember the user's ``{input name: shape}`` (an empty dict forgets them)."""
    _mset("input_shapes", {k: [int(x) for x in v] for k, v in shapes.items()})


def data_settings() -> dict:
    """Sample count, stratification and seed chosen on the Data page."""
    return _mget("data_settings", {"n": 0, "stratify": True, "seed": 0})


def set_data_settings(n: int, stratify: bool, seed: int) -> None:
    """Store the Data page's evaluation sample count, stratification and seed."""
    _mset("data_settings", {"n": int(n), "stratify": bool(stratify), "seed": int(seed)})


# -- recipe -------------------------------------------------------------------------------------------
def recipe() -> Recipe:
    """The recipe last shown on the Recipe page (defaults to ``Recipe()`` with this CPU's int8 advice)."""
    return _get("recipe") or api.recipes.advised_recipe()


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
    pair = _mget("compare_pair")
    return tuple(pair) if pair else None


def set_compare_pair(ref: str, cand: str, model: str | None = None) -> None:
    """Remember the (reference, candidate) variant ids chosen on Compare for the current model (or for the
    model whose sha256 is ``model``)."""
    _set(f"m.{model or model_key()}.compare_pair", (ref, cand))


# -- benchmark ----------------------------------------------------------------------------------------
def last_benchmark() -> BenchmarkRecord | None:
    """The last finished benchmark of this session (its variants, config and summaries)."""
    return _mget("last_benchmark")


def set_last_benchmark(result: BenchmarkRecord | None) -> None:
    """Keep the result of the last finished benchmark (None forgets it)."""
    _mset("last_benchmark", result)


# -- jobs and caches ----------------------------------------------------------------------------------
def job(kind: str):
    """The background job of ``kind`` started in this session, or None: the recipe job (one per session,
    whichever model it runs on: its ``meta["model_sha"]`` says which), or the current model's benchmark."""
    return _mget("job.bench") if kind == "bench" else _get("job." + kind)


def set_job(kind: str, j) -> None:
    """Keep ``j`` as this session's job of ``kind`` (None forgets it); a benchmark belongs to the current model."""
    put, pop = (_mset, _mpop) if kind == "bench" else (_set, _pop)
    if j is None:
        pop("job." + kind)
    else:
        put("job." + kind, j)


def cache() -> dict:
    """A per-session dict for results that are costly to recompute (diffs, evaluations)."""
    c = _get("cache")
    if c is None:
        c = {}
        _set("cache", c)
    return c


def flash(message: str | None = None, level: str = "success") -> tuple[str, str] | None:
    """Store a one-shot message for the next page (with a message) or pop it (without). A message belongs to
    the model that was current when it was stored: it is never shown with another model (one stored before any
    model was open, e.g. at start-up, is shown with the first)."""
    if message is not None:
        _set("flash", (level, message, model_key()))
        return None
    out = _get("flash")
    _pop("flash")
    if not out or out[2] not in ("none", model_key()):  # stored before any model was open: for every model
        return None
    return out[0], out[1]


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


def set_node_overlay(candidate: str | Path, values: dict[str, float], label: str = "SQNR dB",
                     local: dict[str, float] | None = None) -> None:
    """Remember ``{node name: SQNR dB}`` of the analysis of ``candidate`` (None values left out): ``values`` the
    accumulated SQNR, ``local`` what each node adds alone."""
    def clean(d: dict[str, float]) -> dict[str, float]:
        return {str(k): float(v) for k, v in d.items() if v is not None}

    _set("node_overlay", {"candidate": str(candidate), "label": label, "values": clean(values),
                          "local": clean(local or {})})
