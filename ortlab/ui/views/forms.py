"""Widgets generated from the config dataclasses (field type, ``help``, ``label``, ``min/max/step``, ``when``).

``dataclass_form(cls, value, key)`` draws one widget per visible field and returns a new instance. Keys are
stable: ``<key>.<field>`` and ``<key>.<nested>.<field>`` (e.g. ``recipe.precision``, ``recipe.quant.mode``).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any
from collections.abc import Callable, Mapping

import streamlit as st

RADIO_MAX = 4   # enums with at most this many choices are radios, others selectboxes


def visible(meta: Mapping[str, Any], values: dict[str, Any], extra: dict[str, list] | None = None) -> bool:
    """Whether a field's ``when`` rule holds for the sibling ``values`` (enum values compared as text)."""
    rule = dict(meta.get("when") or {})
    rule.update(extra or {})
    for name, allowed in rule.items():
        v = values.get(name)
        v = v.value if isinstance(v, enum.Enum) else v
        if v not in allowed:
            return False
    return True


def _label(f: dataclasses.Field) -> str:
    return f.metadata.get("label") or f.name.replace("_", " ").capitalize()


def _parse_list(text: str, conv: Callable[[str], Any]) -> tuple:
    return tuple(conv(p.strip()) for p in text.replace(";", ",").split(",") if p.strip())


def field_widget(f: dataclasses.Field, tp: Any, current: Any, key: str, *, options: list[str] | None = None,
                 disabled: bool = False) -> Any:
    """One widget for one field; returns the value in the field's type (invalid text keeps ``current``)."""
    label, help_ = _label(f), f.metadata.get("help")
    meta = f.metadata
    # a value set_form_values wrote is the widget's: a default beside it is ignored, and Streamlit logs a warning
    seeded = key in st.session_state
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        choices = list(tp)
        idx = choices.index(current) if current in choices and not seeded else 0
        fmt = lambda m: m.value
        if len(choices) <= RADIO_MAX:
            return st.radio(label, choices, index=idx, key=key, help=help_, horizontal=True, format_func=fmt,
                            disabled=disabled)
        return st.selectbox(label, choices, index=idx, key=key, help=help_, format_func=fmt, disabled=disabled)
    if tp is bool:
        return st.toggle(label, value=bool(current) and not seeded, key=key, help=help_, disabled=disabled)
    if tp is int or tp is float:
        cast = int if tp is int else float
        # int or float, chosen at run time: st.number_input's int and float overloads each want one kind
        kw: dict[str, Any] = {k: cast(meta[k]) for k in ("min", "max", "step") if k in meta}
        value: Any = cast(current)
        if "min" in kw:
            value = max(value, kw["min"])
        if "max" in kw:
            value = min(value, kw["max"])
        num_format: str | None = None
        if tp is float and "step" in kw and kw["step"] < 0.01:
            num_format = "%.4f"
        if seeded and "min" in kw:  # "min": no default of its own (the type still follows min/max/step)
            value = "min"
        return cast(st.number_input(label, min_value=kw.get("min"), max_value=kw.get("max"), step=kw.get("step"),
                                    value=value, key=key, help=help_, format=num_format, disabled=disabled))
    if typing.get_origin(tp) is tuple:
        inner = (typing.get_args(tp) or (str,))[0]
        if inner is str and options is not None:
            opts = sorted(set(options) | set(current))
            return tuple(st.multiselect(label, opts, default=None if seeded else list(current), key=key, help=help_,
                                        disabled=disabled))
        conv = {int: int, float: float}.get(inner, str)
        text = st.text_input(label, value="" if seeded else ", ".join(str(v) for v in current), key=key,
                             help=help_, disabled=disabled)
        try:
            return _parse_list(text, conv)
        except ValueError:
            st.error(f"{label}: “{text}” is not a comma-separated list of {conv.__name__} values.")
            return current
    return st.text_input(label, value="" if current is None or seeded else str(current), key=key, help=help_,
                         disabled=disabled)


def dataclass_form(cls: type, value: Any, key: str, *, only: list[str] | None = None, exclude: tuple = (),
                   options: dict[str, list[str]] | None = None, extra_when: dict[str, dict] | None = None,
                   nested_titles: dict[str, str] | None = None, columns: int = 1, disabled: bool = False) -> Any:
    """Draw the fields of dataclass ``cls`` pre-filled from ``value``; return the edited instance.

    ``only``/``exclude`` pick fields; ``options`` gives choices for ``tuple[str]`` fields (dotted names, relative
    to ``key``); ``extra_when`` adds visibility rules (dotted name → {sibling: [values]}); nested dataclasses are
    drawn under a subheader from ``nested_titles``. Hidden fields keep their value.
    """
    hints = typing.get_type_hints(cls)
    options = options or {}
    extra_when = extra_when or {}
    values: dict[str, Any] = {f.name: getattr(value, f.name) for f in dataclasses.fields(cls)}
    fields = [f for f in dataclasses.fields(cls) if (only is None or f.name in only) and f.name not in exclude]
    simple = [f for f in fields if not dataclasses.is_dataclass(hints[f.name])]
    nested = [f for f in fields if dataclasses.is_dataclass(hints[f.name])]
    cols = st.columns(columns) if columns > 1 else None
    shown = 0
    for f in simple:
        if not visible(f.metadata, values, extra_when.get(f.name)):
            continue
        target = cols[shown % columns] if cols else st.container()
        with target:
            values[f.name] = field_widget(f, hints[f.name], values[f.name], f"{key}.{f.name}",
                                          options=options.get(f.name), disabled=disabled)
        shown += 1
    for f in nested:
        if not visible(f.metadata, values, extra_when.get(f.name)):
            continue
        title = (nested_titles or {}).get(f.name)
        if title:
            st.subheader(title)
        sub_opts = {k.partition(".")[2]: v for k, v in options.items() if k.startswith(f.name + ".")}
        sub_when = {k.partition(".")[2]: v for k, v in extra_when.items() if k.startswith(f.name + ".")}
        values[f.name] = dataclass_form(hints[f.name], values[f.name], f"{key}.{f.name}", options=sub_opts,
                                        extra_when=sub_when, columns=columns, disabled=disabled)
    return dataclasses.replace(value, **values)


def set_form_values(cls: type, value: Any, key: str, *, options: dict[str, list[str]] | None = None) -> None:
    """Put ``value`` into the widgets of ``dataclass_form(cls, ..., key, options=options)`` before they are drawn.
    Deleting a keyed widget's state is not enough to change it: the browser keeps showing (and sends back) the
    old choice; a value written to ``st.session_state`` is sent to the browser."""
    hints = typing.get_type_hints(cls)
    options = options or {}
    for f in dataclasses.fields(cls):
        tp, current, k = hints[f.name], getattr(value, f.name), f"{key}.{f.name}"
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a hint naming a dataclass is the class
            sub = {n.partition(".")[2]: v for n, v in options.items() if n.startswith(f.name + ".")}
            set_form_values(tp, current, k, options=sub)
        elif typing.get_origin(tp) is tuple:
            inner = (typing.get_args(tp) or (str,))[0]
            st.session_state[k] = list(current) if inner is str and f.name in options else ", ".join(map(str, current))
        elif tp is int or tp is float:
            st.session_state[k] = tp(current)
        elif (isinstance(tp, type) and issubclass(tp, enum.Enum)) or tp is bool:
            st.session_state[k] = current
        else:
            st.session_state[k] = "" if current is None else str(current)
