"""The recipes a tune search tries, most promising first for this CPU, without two that do the same.

The space comes from the settings' own metadata (as Olive's ``search_defaults``): each field's ``search`` lists the
values tried for it (:class:`ortlab.settings.config.Try`), one setting away from a starting recipe; a field without
``search`` is never varied. What is decided here: the starting recipe (this CPU's int8 flavour, or fp16 on GPU), and
that dynamic int8 is tried only on models with ops it quantizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ortlab.settings.config import (
    CalibrationMethod, OptLevel, Precision, QuantConfig, Recipe, Target, Try, replace,
)
from ortlab.runtime.hardware import advise, detect

# the op types dynamic int8 quantizes: a model with none of them gains nothing from it
DYNAMIC_OPS = frozenset({"MatMul", "Gemm", "Attention", "LSTM", "GRU"})
ENCODER_FIRST = -100  # the order of the dynamic trial for an encoder: before the static starting recipe
DETECTOR_SECOND = 0.5  # a detector's full-range twin of a reduce-range start: right after it (order 0)
DETECTOR_PERCENTILE_LAST = 10_000  # a detector's Percentile trials: after every other trial
DETECTOR_PERCENTILE_NOTE = (
    "Percentile calibration runs last for a YOLO-style detector (known patterns): it clips the ranges of the box and "
    "score channels, and scored detection F1 vs fp32 0.55–0.85 on a YOLOv8n in every search (MinMax: 0.96).")


# -- the search space ------------------------------------------------------------------------------------------


def _meets(cfg: Any, when: Mapping[str, Sequence[Any]] | None) -> bool:
    """Whether ``cfg``'s fields hold one of the allowed values of each sibling a ``when`` metadata names."""
    return all(str(getattr(getattr(cfg, k), "value", getattr(cfg, k))) in [str(v) for v in allowed]
               for k, allowed in (when or {}).items())


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]


def _defaults_where_unmet(cfg: Any) -> Any:
    """``cfg`` with every field that does not matter under its other fields (its ``when`` metadata is not met, e.g.
    calibration settings of a dynamic recipe, or the QuantConfig of an fp32 one) put back to its default; nested
    configs alike."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if not _meets(cfg, f.metadata.get("when")):
            changes[f.name] = _default(f)
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _defaults_where_unmet(value)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _effective(cfg: Any) -> Any:
    """``cfg`` (a QuantConfig) with the fields that cannot matter reset (:func:`_defaults_where_unmet`) and op types
    made explicit."""
    out = _defaults_where_unmet(cfg)
    return replace(out, op_types=tuple(sorted(out.effective_op_types())))


def effective_recipe(r: Recipe) -> Recipe:
    """What ``r`` really does: no name, and quantization settings that cannot matter reset (fp32/fp16 recipes ignore
    the whole QuantConfig). Two recipes with equal effective recipes produce the same model."""
    q = _effective(r.quant) if r.precision == Precision.INT8 else QuantConfig()
    return replace(r, name="", quant=q)


def dedupe(recipes: Sequence[Recipe]) -> tuple[list[Recipe], list[str]]:
    """``recipes`` without those whose :func:`effective_recipe` equals an earlier one's, and a note per dropped one."""
    seen: dict[Recipe, str] = {}
    out: list[Recipe] = []
    notes: list[str] = []
    for r in recipes:
        key = effective_recipe(r)
        if key in seen:
            notes.append(f"Skipped {r.name or r.label()}: the same recipe as {seen[key]}.")
            continue
        seen[key] = r.name or r.label()
        out.append(r)
    return out, notes


def searched_fields(cls: type = Recipe, prefix: str = "") -> Iterator[tuple[str, Try]]:
    """(dotted field path, :class:`Try`) for every ``search`` entry of ``cls``'s fields and its nested configs'."""
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        for t in f.metadata.get("search", ()):
            yield path, t
        default = _default(f)
        if dataclasses.is_dataclass(default):
            yield from searched_fields(type(default), path + ".")


def _applies(recipe: Recipe, path: str) -> bool:
    """Whether the field at ``path`` matters in ``recipe``: its ``when`` and those of the configs holding it are met."""
    obj: Any = recipe
    for name in path.split("."):
        f = next(f for f in dataclasses.fields(obj) if f.name == name)
        if not _meets(obj, f.metadata.get("when")):
            return False
        obj = getattr(obj, name)
    return True


def trial(start: Recipe, path: str, t: Try) -> Recipe | None:
    """``start`` with the field at ``path`` set to ``t.value`` and ``t.also`` set beside it, the fields that then do
    not matter reset to their defaults, named after ``t``; None where the field does not matter in that recipe."""
    parent = path.rpartition(".")[0]
    changes = {path: t.value, **{(parent + "." if parent else "") + k: v for k, v in t.also.items()}}
    recipe = replace(start, **changes)
    if not _applies(recipe, path):
        return None
    recipe = _defaults_where_unmet(recipe)
    return replace(recipe, name=f"{recipe.precision.value} {t.name}" if t.name else "")


def search_space(target: Target = Target.CPU, features: Any = None, opt_level: OptLevel = OptLevel.EXTENDED,
                 model_ops: Sequence[str] = (), objective: str = "latency", encoder: bool = False,
                 detector: bool = False) -> list[Recipe]:
    """The recipes to try, most promising first for this CPU (``features``: :func:`ortlab.runtime.hardware.detect`),
    without duplicates (:func:`dedupe`): the starting recipe (int8 static in this CPU's flavour; gpu: fp16 with kept
    I/O types), then one trial per ``search`` entry of the settings' metadata that applies to ``target``,
    ``objective`` and the model's ops (``model_ops``), in the entries' ``order``. Dynamic int8 is left out for a model
    with none of the ops it quantizes (:data:`DYNAMIC_OPS`). For an ``encoder`` (attention and no Conv,
    :func:`ortlab.model.patterns.is_encoder`) dynamic int8, its known answer, comes first. A ``detector`` (a
    YOLO-style head, :func:`ortlab.model.patterns.is_detector`) starts without bias correction, as its default run
    does (:data:`ortlab.model.patterns.DETECTOR_BIAS_NOTE`), and where this CPU reduces range (no VNNI) its
    full-range twin comes second: on nudenet's YOLOv8n (AVX2, stem in float) F1 vs fp32 0.95 with 8-bit weights,
    0.93 with 7-bit ones; its Percentile calibration trials come last (:data:`DETECTOR_PERCENTILE_NOTE`)."""

    if Target(target) == Target.GPU:
        start = Recipe(precision=Precision.FP16, target=Target.GPU, opt_level=opt_level, keep_io_types=True)
    else:
        adv = advise(features if features is not None else detect(), target)
        start = Recipe(precision=Precision.INT8, target=Target.CPU, opt_level=opt_level, name="int8 static",
                       quant=QuantConfig(activation_type=adv.activation_type, weight_type=adv.weight_type,
                                         reduce_range=adv.reduce_range, bias_correction=not detector))
    ops = set(model_ops)
    ordered: list[tuple[float, Recipe]] = [(0, start)]
    for path, t in searched_fields():
        if (t.target != Target(target) or t.objective not in (None, objective)
                or (t.ops and not ops & set(t.ops))):
            continue
        recipe = trial(start, path, t)
        if recipe is not None:
            first = encoder and path == "quant.mode" and recipe.quant.is_dynamic
            second = (detector and path == "quant.reduce_range" and start.quant.reduce_range
                      and t.value is False)
            last = detector and recipe.quant.calibration_method == CalibrationMethod.PERCENTILE
            ordered.append((ENCODER_FIRST if first else DETECTOR_SECOND if second else
                            DETECTOR_PERCENTILE_LAST if last else t.order, recipe))
    ordered.sort(key=lambda pair: pair[0])  # stable: equal orders keep the fields' order
    out = [r for _, r in ordered
           if not (r.is_dynamic and ops and not ops & DYNAMIC_OPS)]
    return dedupe(out)[0]
