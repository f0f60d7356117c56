"""Every ``(default: …)`` in ``--help`` is the value the command really uses when the flag is left out.

The test walks every sub-command's parser (``ortlab.cli.main.build_parser``). For a flag generated from a config
dataclass (``ortlab.settings.flags``) the truth is the field of the config the command builds from no flags
(``recipe_from_args``, ``checked_policy`` of the verdict flags, ``bench_from_args``: bench's base differs from ``BenchConfig()``);
for a hand-written flag it is the parser's own default. A flag whose default is computed later (``None`` in the
parser) may describe it in words, listed below with the code's value where there is one. A flag with a real
default that its help does not state fails, and so does ``(default 600)`` without the colon.
"""

from __future__ import annotations

import argparse
import enum
import re

import pytest

from ortlab.cli import bench as cli_bench, common as cli_common, optimize as cli_optimize
from ortlab.cli.main import build_parser
from ortlab.data.inputs import DEFAULT_SEQ_LEN
from ortlab.settings.config import DEFAULT_BENCH_DURATION_S, BenchConfig, PreprocessConfig, Recipe
from ortlab.settings.flags import config_from_args, flag_specs
from ortlab.checks.verdict import VerdictPolicy

SHOWN = re.compile(r"\(default: ((?:[^()]|\([^()]*\))*)\)")

# config class → (the flags it generates, how a command turns a namespace into that config)
BUILDERS = {
    Recipe: (flag_specs(Recipe), cli_optimize.recipe_from_args),
    VerdictPolicy: (flag_specs(VerdictPolicy), lambda ns: cli_common.checked_policy(config_from_args(VerdictPolicy, ns))),
    BenchConfig: (flag_specs(BenchConfig, cli_bench.BENCH_FLAGS_EXCLUDED), cli_bench.bench_from_args),
    PreprocessConfig: (flag_specs(PreprocessConfig), None),  # no defaults shown: the manifest or the model decides
}

# (command, flag) → words that must be in the help of a flag whose default is decided after parsing (None there)
PROSE = {
    ("optimize", "--eval"): "the calibration data",
    ("run", "--eval"): "the calibration data",
    ("run", "--out"): "a new folder in the workspace",
    ("optimize", "--timing-s"): "$ORTLAB_SPEED_CHECK_S, else 3",
    ("run", "--timing-s"): "$ORTLAB_SPEED_CHECK_S, else 3",
    ("tune", "--data"): "a bundled sample's calibration set",
    ("tune", "--eval"): "the sample's evaluation set",
    ("history", "--limit"): "all",
    ("tune", "--budget"): "600cpu, at most 3600 s of wall time; with --ray, 600 s of wall time",
    ("tune", "--verify-samples"): "all the evaluation data given",
    ("compare", "--n"): "all",
    **{(cmd, "--data"): "the evaluation images of the sample REF is, or was made from" for cmd in ("compare", "analyze")},
    ("bench", "--runs"): "with --duration 0 it is {runs_without_duration}",
    **{(cmd, "--tokenizer"): "tokenizer.json beside the .txt" for cmd in ("optimize", "run", "compare", "analyze", "tune")},
    **{(cmd, "--seq-len"): f"the model's fixed length, else {DEFAULT_SEQ_LEN}"
       for cmd in ("optimize", "run", "compare", "analyze", "tune")},
}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": parser, **sub.choices}


def minimal_args(name: str, p: argparse.ArgumentParser) -> list[str]:
    """The arguments of command ``name`` with a dummy value for every positional and required option only."""
    if not name:
        return ["inspect", "x.onnx"]
    args = []
    for a in p._actions:
        if not a.option_strings:
            args.append("x.onnx")
        elif a.required:
            args += [a.option_strings[0], "x"]
    return args


def words(value) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple | list):
        return " ".join(words(v) for v in value)
    return str(value)


def same(shown: str, value) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(shown) == float(value)
        except ValueError:
            return False
    return shown == words(value)


def effective_defaults(name: str, p: argparse.ArgumentParser) -> dict[str, object]:
    """dest → the value the command uses when the flag is left out."""
    ns = p.parse_args(minimal_args(name, p))
    out: dict[str, object] = {a.dest: a.default for a in p._actions}
    dests = {a.dest for a in p._actions}
    for specs, build in BUILDERS.values():
        if build is None or not {fl.path for fl in specs} <= dests:
            continue
        config = build(ns)
        for fl in specs:
            value = config
            for part in fl.path.split("."):
                value = getattr(value, part)
            out[fl.path] = value
    return out


CASES = [(name, a) for name, p in subparsers().items() for a in p._actions
         if a.option_strings and a.dest != "help" and not isinstance(a, argparse._VersionAction)]


@pytest.mark.parametrize("name,action", CASES, ids=[f"{n or 'ortlab'} {a.option_strings[-1]}" for n, a in CASES])
def test_help_states_the_default_the_command_uses(name, action):
    p = subparsers()[name]
    action = next(a for a in p._actions if a.dest == action.dest)
    text = " ".join((action.help or "").split())
    flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
    assert not re.search(r"\(default(?!: )", text), f"{name} {flag}: write '(default: X)': {text}"
    shown = SHOWN.findall(text)
    assert len(shown) <= 1, (name, flag, shown)
    value = effective_defaults(name, p)[action.dest]
    generated = {fl.path for specs, _ in BUILDERS.values() for fl in specs}
    if (name, flag) in PROSE:
        runs = cli_bench.bench_from_args(subparsers()["bench"].parse_args(["x.onnx", "--duration", "0"])).runs
        expected = PROSE[name, flag].format(runs_without_duration=runs)
        assert shown and expected in shown[0], (name, flag, value, shown)
        assert value is None or flag == "--runs", (name, flag, value)  # bench times 3 s unless --runs alone
    elif shown:
        assert same(shown[0], value), f"{name} {flag}: help says {shown[0]!r}, the command uses {value!r}"
    elif action.dest in generated and isinstance(value, bool):
        pass  # a generated switch (--no-preprocess, --reduce-range): its name says what it changes
    else:
        assert value in (None, False, [], (), ""), f"{name} {flag}: default {value!r} not stated in its help: {text!r}"


def test_the_walk_checks_the_defaults_that_matter():
    """The cases above include the generated flags' and the bench's computed default (a test of the test)."""
    optimize, bench = effective_defaults("optimize", subparsers()["optimize"]), effective_defaults(
        "bench", subparsers()["bench"])
    assert optimize["quant.percentile"] == Recipe().quant.percentile and optimize["min_sqnr_db"] == 10.0
    assert bench["duration_s"] == DEFAULT_BENCH_DURATION_S != BenchConfig().duration_s
    assert not same("0.0", bench["duration_s"]) and same("3", bench["duration_s"])
    assert {n for n, _ in CASES} >= {"", "inspect", "optimize", "run", "bench", "compare", "history", "samples",
                                     "analyze", "tune"}
