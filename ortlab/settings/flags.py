"""Command-line flags generated from the config dataclasses' field metadata.

One ``Flag`` per field (nested dataclasses such as ``Recipe.quant`` contribute their fields under a dotted
path). The flag is ``--field-name`` unless the metadata names another (``flag="--quant-mode"``); an optional
``metavar`` and ``choices`` refine the help. By type:

* enum → a choice of its values; ``str`` → text (a choice when the metadata lists ``choices``);
* ``int``/``float`` → a number; ``tuple[int, int]`` → that many numbers; ``tuple[int/float, ...]`` → one or more;
* ``tuple[str, ...]`` → a comma-separated list;
* ``bool`` → the flag that changes the default: ``--x`` when it is off, ``--no-x`` when it is on;
  ``negatable=True`` gives both.

``explicit=True`` makes ``config_cli_args`` write the flag even at its default (the main choices of a recipe,
so a reproduce line still says them if a default changes).

Each flag's ``dest`` is its dotted path and stays ``None`` unless given, so ``config_from_args`` knows which
settings the user chose. A flag given where its ``when`` rule (or its nested config's) says it does not
matter is a ``UsageError`` naming the flag and the condition. ``config_cli_args`` writes the flags back.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class UsageError(Exception):
    """Bad command-line usage (exit status 2)."""


Rule = tuple[str, Mapping[str, Sequence[Any]]]  # (dotted prefix of the object the rule reads, sibling → allowed)


@dataclass(frozen=True)
class Flag:
    """The command-line flag of one config field."""

    path: str                # dotted field path from the top config, e.g. "quant.percentile"
    field: dataclasses.Field
    type: Any                # the field's resolved annotation
    default: Any             # the field's default value in the top config's default
    options: tuple[str, ...]  # option strings, e.g. ("--per-channel", "--no-per-channel")
    rules: tuple[Rule, ...]  # the ``when`` rules that must hold for the flag to matter, outermost first
    section: str             # dotted path of the nested config that holds the field ("" at the top)

    @property
    def name(self) -> str:
        """The flag as people know it (the first option string)."""
        return self.options[0]

    @property
    def help(self) -> str:
        return self.field.metadata.get("help", "")


def flag_specs(cls: type, exclude: Sequence[str] = ()) -> list[Flag]:
    """The flags of config class ``cls`` in field order; ``exclude`` drops fields by dotted path."""
    return list(_flag_specs(cls, tuple(exclude)))


@functools.cache
def _flag_specs(cls: type, exclude: tuple[str, ...]) -> tuple[Flag, ...]:
    return tuple(_walk(cls, cls(), "", (), exclude))


def _walk(cls: type, default: Any, prefix: str, rules: tuple[Rule, ...], exclude: Sequence[str]) -> Iterator[Flag]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        if path in exclude:
            continue
        tp, value = hints[f.name], getattr(default, f.name)
        own = (*rules, (prefix, f.metadata["when"])) if f.metadata.get("when") else rules
        if dataclasses.is_dataclass(tp):
            yield from _walk(typing.cast(type, tp), value, path + ".", own, exclude)
            continue
        yield Flag(path, f, tp, value, _options(f, tp, value), own, prefix.rstrip("."))


def _options(f: dataclasses.Field, tp: Any, default: Any) -> tuple[str, ...]:
    flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
    if tp is not bool:
        return (flag,)
    negated = "--no-" + flag[2:]
    if f.metadata.get("negatable"):
        return (flag, negated)
    return (negated,) if default else (flag,)


# -- parser ------------------------------------------------------------------------------------------------


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, *, title: str | None = None,
                         show_defaults: bool = True, exclude: Sequence[str] = ()) -> list[Flag]:
    """Add the flags of ``cls`` to ``parser``: top-level fields in a group titled ``title``, each nested config
    in its own group named by its label and ``when`` condition. Returns the flags added."""
    flags = flag_specs(cls, exclude)
    by_path = {fl.path: fl for fl in flags}
    groups: dict[str, Any] = {}
    for fl in flags:
        if fl.section not in groups:
            groups[fl.section] = parser.add_argument_group(title if not fl.section
                                                           else _section_title(cls, fl.section, by_path))
        # BooleanOptionalAction derives the --no- form from the positive one
        options = fl.options[:1] if len(fl.options) == 2 else fl.options
        groups[fl.section].add_argument(*options, **_argparse_kwargs(fl, show_defaults))
    return flags


def _section_title(cls: type, section: str, by_path: Mapping[str, Flag]) -> str:
    owner, _, name = section.rpartition(".")
    owner_cls = cls
    for part in filter(None, owner.split(".")):
        owner_cls = typing.get_type_hints(owner_cls)[part]
    f = next(x for x in dataclasses.fields(owner_cls) if x.name == name)
    title = f.metadata.get("label") or f.name.replace("_", " ")
    rule = f.metadata.get("when")
    if rule:
        title += " (with " + " and ".join(_condition(by_path, _join(owner, k), v) for k, v in rule.items()) + ")"
    return title


def _argparse_kwargs(fl: Flag, show_defaults: bool) -> dict[str, Any]:
    meta, tp, default = fl.field.metadata, fl.type, fl.default
    word = fl.name[2:].upper().replace("-", "_")
    text = fl.help.replace("%", "%%")
    shown = _format(default) if show_defaults and default not in ((), "") else None
    kw: dict[str, Any] = {"dest": fl.path, "default": None}
    if tp is bool:
        if len(fl.options) == 2:
            kw["action"] = argparse.BooleanOptionalAction
            shown = ("on" if default else "off") if show_defaults else None
        else:
            kw["action"] = "store_false" if default else "store_true"
            if default:
                text += " This flag turns it off."
            shown = None
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        kw["choices"] = [m.value for m in tp]
        kw["type"] = _any_case(kw["choices"])
    elif typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        inner = args[0] if args else str
        if inner is str:
            kw["type"] = _comma_list
            kw["metavar"] = meta.get("metavar") or f"{word}[,…]"
        else:
            kw["type"] = inner
            kw["nargs"] = "+" if (len(args) == 2 and args[1] is Ellipsis) else len(args)
            kw["metavar"] = meta.get("metavar") or word
    else:
        kw["type"] = tp if tp in (int, float) else str
        kw["metavar"] = meta.get("metavar") or word
        if meta.get("choices"):
            kw["choices"] = list(meta["choices"])
            del kw["metavar"]
    kw["help"] = f"{text} (default: {shown})" if shown is not None else text
    return kw


def _any_case(values: list[str]) -> Callable[[str], str]:
    """A choice's value as the flag spells it, from any case (``qoperator`` is ``QOperator``); other text is
    left for argparse to refuse with the list of choices."""
    by_lower = {str(v).lower(): v for v in values}

    def choice(text: str) -> str:
        return by_lower.get(text.lower(), text)

    return choice


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


# -- namespace → config -------------------------------------------------------------------------------------


def given_values(cls: type, ns: argparse.Namespace, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """Dotted path → value, in the field's type, for each flag of ``cls`` the user gave."""
    out = {}
    for fl in flag_specs(cls, exclude):
        raw = getattr(ns, fl.path, None)
        if raw is not None:
            out[fl.path] = _convert(fl.type, raw)
    return out


def config_from_args(cls: type, ns: argparse.Namespace, base: Any = None, exclude: Sequence[str] = ()) -> Any:
    """``base`` (default ``cls()``) with the flags the user gave applied. Raises ``UsageError`` when a given
    flag's ``when`` rule does not hold for the result."""
    values = given_values(cls, ns, exclude)
    obj = replace_path(cls() if base is None else base, values)
    check_when(cls, obj, values, exclude)
    return obj


def check_when(cls: type, obj: Any, given: Mapping[str, Any], exclude: Sequence[str] = ()) -> None:
    """Raise ``UsageError`` for each given flag (dotted paths in ``given``) whose ``when`` rules fail on ``obj``;
    flags failing the same condition share one sentence."""
    flags = flag_specs(cls, exclude)
    by_path = {fl.path: fl for fl in flags}
    failed: dict[str, list[str]] = {}
    for fl in flags:
        if fl.path not in given:
            continue
        for prefix, rule in fl.rules:
            unmet = _unmet(obj, prefix, rule)
            if unmet:
                condition = " and ".join(_condition(by_path, path, allowed) for path, allowed in unmet)
                failed.setdefault(condition, []).append(fl.name)
                break
    if failed:
        raise UsageError(" ".join(f"{', '.join(names)} only appl{'ies' if len(names) == 1 else 'y'} with {cond}."
                                  for cond, names in failed.items()))


def _unmet(obj: Any, prefix: str, rule: Mapping[str, Sequence[Any]]) -> list[tuple[str, Sequence[Any]]]:
    """(dotted path, allowed values) for each part of a ``when`` rule that ``obj`` does not meet."""
    return [(prefix + name, allowed) for name, allowed in rule.items()
            if _plain(_get(obj, prefix + name)) not in [_plain(a) for a in allowed]]


def _condition(by_path: Mapping[str, Flag], path: str, allowed: Sequence[Any]) -> str:
    """The flags that make ``path`` one of ``allowed``, e.g. ``--calibration-method Entropy or Percentile``."""
    fl = by_path.get(path)
    if fl is None:
        return f"{path} {_or(allowed)}"
    if fl.type is bool:
        wanted = bool(allowed[0])
        if len(fl.options) == 2:
            return fl.options[0] if wanted else fl.options[1]
        sets = fl.name.startswith("--no-") != wanted  # the flag sets the value ``wanted``
        return fl.name if sets else "without " + fl.name
    return f"{fl.name} {_or(allowed)}"


def _or(values: Sequence[Any]) -> str:
    words = [_format(_plain(v)) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _convert(tp: Any, raw: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(raw)
    if typing.get_origin(tp) is tuple:
        return tuple(raw)
    return raw


def replace_path(obj: Any, changes: Mapping[str, Any]) -> Any:
    """``dataclasses.replace`` with dotted paths for nested configs (``{"quant.mode": ...}``)."""
    flat: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            flat[head] = value
    for head, sub in nested.items():
        flat[head] = replace_path(getattr(obj, head), sub)
    return dataclasses.replace(obj, **flat) if flat else obj


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


# -- config → flags -----------------------------------------------------------------------------------------


def config_cli_args(obj: Any, *, complete: bool = False, exclude: Sequence[str] = ()) -> list[str]:
    """The flags that rebuild ``obj`` with ``config_from_args``: those of fields that differ from the class
    default or are marked ``explicit`` (every field when ``complete``), skipping fields whose ``when`` rules
    do not hold."""
    out: list[str] = []
    for fl in flag_specs(type(obj), exclude):
        if any(_unmet(obj, prefix, rule) for prefix, rule in fl.rules):
            continue
        value = _get(obj, fl.path)
        if value == fl.default and not (complete or fl.field.metadata.get("explicit")):
            continue
        out += _tokens(fl, value)
    return out


def _tokens(fl: Flag, value: Any) -> list[str]:
    if fl.type is bool:
        setters = [o for o in fl.options if o.startswith("--no-") != bool(value)]
        return setters[:1]  # none: the value is the one you get by leaving the flag out
    if typing.get_origin(fl.type) is tuple:
        inner = (typing.get_args(fl.type) or (str,))[0]
        if inner is str:
            return [fl.name, ",".join(value)]
        return [fl.name, *(_format(v) for v in value)] if value else []
    return [fl.name, _format(_plain(value))]


def _format(value: Any) -> str:
    """A value as a command-line word (floats by ``repr`` so they parse back exactly)."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return " ".join(_format(v) for v in value)
    return str(value)

