"""The one converter between typed results and plain JSON data.

``to_plain(obj)`` turns dataclasses, enums, paths, tuples, dicts, numpy scalars and arrays into JSON-safe
values; non-finite floats become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (JSON has no infinity).
``from_plain(cls, data)`` reads such data back into ``cls``, driven by its type hints: nested dataclasses,
enums, ``Path``, ``tuple[X, ...]`` and fixed tuples, ``list[X]``, ``dict[str, X]``, ``X | None``. It is strict:
unknown keys, missing required fields and values of the wrong type raise ``error`` (``PlainDataError`` unless
the caller names another ``OrtlabError`` subclass, e.g. ``RecipeError`` for recipes) with a message that says
which field is wrong. A dataclass may define a static ``_upgrade_plain(data) -> data`` that turns an older
written form of itself into today's before it is read.

``dumps``/``loads`` are the JSON text forms used for ``artifact.json``, the SQLite history and ``--json``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import types
import typing
from pathlib import Path, PurePath
from typing import Any, TypeVar

from ortlab.core.errors import OrtlabError, PlainDataError

T = TypeVar("T")

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan,
               "Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _float_plain(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def to_plain(obj: Any) -> Any:
    """A JSON-safe form of ``obj`` (dicts, lists, str, int, float, bool, None) that ``from_plain`` reads back."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return _float_plain(obj)
    if isinstance(obj, enum.Enum):
        return to_plain(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {_key(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, PurePath):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return to_plain(obj.tolist())
    if hasattr(obj, "to_dict"):
        return to_plain(obj.to_dict())
    raise TypeError(f"{type(obj).__name__} cannot be converted to plain data")


def _key(k: Any) -> str:
    if isinstance(k, enum.Enum):
        return str(k.value)
    if isinstance(k, tuple):  # (domain, op_type) keys
        return "::".join(str(p) for p in k if p) or ""
    return str(k)


def dumps(obj: Any, **kwargs: Any) -> str:
    """``to_plain`` as JSON text (keys sorted, no NaN/Infinity literals)."""
    kwargs.setdefault("sort_keys", True)
    return json.dumps(to_plain(obj), allow_nan=False, **kwargs)


def loads(text: str) -> Any:
    """JSON text as plain data (also accepts the NaN/Infinity literals older files may hold)."""
    return json.loads(text)


# -- reading ---------------------------------------------------------------------------------------------


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _name(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def from_plain(cls: type[T], data: Any, *, error: type[OrtlabError] = PlainDataError, where: str = "") -> T:
    """Read plain data written by :func:`to_plain` back into ``cls`` (a dataclass or any supported type).
    ``error`` is raised (with the field's dotted name) when the data does not fit."""
    return typing.cast(T, _coerce(cls, data, where, error))


def _dataclass(cls: type, data: Any, where: str, error: type[OrtlabError]) -> Any:
    upgrade = getattr(cls, "_upgrade_plain", None)
    if upgrade is not None:  # a class that reads older forms of itself says how
        data = upgrade(data)
    if not isinstance(data, dict):
        raise error(f"{where or cls.__name__} must be an object; got {_show(data)}.")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = set(data) - set(fields)
    if unknown:
        raise error(f"Unknown setting(s) {', '.join(sorted(map(str, unknown)))}"
                    f"{' in ' + where if where else ''}. Known: {', '.join(sorted(fields))}.")
    missing = [n for n, f in fields.items() if n not in data
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise error(f"{where or cls.__name__} lacks {', '.join(missing)}.")
    kwargs = {k: _coerce(hints[k], v, _name(where, k), error) for k, v in data.items()}
    return cls(**kwargs)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _coerce(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    if tp is Any or tp is object:
        return value
    coercer = _coercer(tp)
    return value if coercer is None else coercer(tp, value, where, error)


_Coercer = typing.Callable[[Any, Any, str, type[OrtlabError]], Any]


def _coercer(tp: Any) -> _Coercer | None:
    """How a value of type ``tp`` is read: by the generic's origin (``X | None``, ``list[X]``…), else by the
    class (dataclasses, enums, paths, the JSON scalars); None: taken as it is."""
    origin = typing.get_origin(tp)
    if origin is not None:
        return _BY_ORIGIN.get(origin)
    if not isinstance(tp, type):
        return None
    if dataclasses.is_dataclass(tp):
        return _dataclass
    if issubclass(tp, enum.Enum):
        return _enum
    if issubclass(tp, PurePath):
        return _path
    return _BY_CLASS.get(tp)


def _union(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        return _coerce(rest[0], value, where, error)
    for a in rest:  # the first member that accepts the value
        try:
            return _coerce(a, value, where, error)
        except OrtlabError:
            continue
    raise error(f"{where} has an unexpected value {_show(value)}.")


def _enum(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    try:
        return tp(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in tp)
        raise error(f"{where} must be one of {choices}; got {value!r}.") from None


def _tuple(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    args = typing.get_args(tp)
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)):
        raise error(f"{where} must be a list.")
    if not args or (len(args) == 2 and args[1] is Ellipsis):
        inner = args[0] if args else Any
        return tuple(_coerce(inner, v, where, error) for v in value)
    if len(args) != len(value):
        raise error(f"{where} must have {len(args)} values; got {len(value)}.")
    return tuple(_coerce(a, v, where, error) for a, v in zip(args, value))


def _list(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    args = typing.get_args(tp)
    if not isinstance(value, (list, tuple)):
        raise error(f"{where} must be a list; got {_show(value)}.")
    inner = args[0] if args else Any
    return [_coerce(inner, v, f"{where}[{i}]", error) for i, v in enumerate(value)]


def _dict(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    args = typing.get_args(tp)
    if not isinstance(value, dict):
        raise error(f"{where} must be an object; got {_show(value)}.")
    kt, vt = args if args else (Any, Any)
    if kt is int:  # JSON object keys are text
        value = {int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k: v for k, v in value.items()}
    return {_coerce(kt, k, where, error): _coerce(vt, v, f"{where}[{k!r}]", error) for k, v in value.items()}


def _bool(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    if not isinstance(value, bool):
        raise error(f"{where} must be true or false; got {value!r}.")
    return value


def _int(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise error(f"{where} must be a whole number; got {value!r}.")
    return int(value)


def _float(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{where} must be a number; got {value!r}.")
    return float(value)


def _str(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    if not isinstance(value, str):
        raise error(f"{where} must be text; got {value!r}.")
    return value


def _path(tp: Any, value: Any, where: str, error: type[OrtlabError]) -> Any:
    if not isinstance(value, (str, PurePath)):
        raise error(f"{where} must be a path; got {value!r}.")
    return Path(value)


_BY_ORIGIN: dict[Any, _Coercer] = {typing.Union: _union, types.UnionType: _union, tuple: _tuple, list: _list,
                                   dict: _dict}
_BY_CLASS: dict[type, _Coercer] = {list: _list, dict: _dict, bool: _bool, int: _int, float: _float, str: _str}
