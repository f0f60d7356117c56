"""What one recipe run takes, in a form another process (or a person at a shell) can run again.

A :class:`RunSpec` names the source model, the recipe, the calibration and evaluation data (as
:class:`DataRef`) and the image preprocessing; :meth:`RunSpec.cli_line` renders the ``ortlab optimize`` line
that runs the same spec.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any

from ortlab.settings.config import PreprocessConfig, Recipe, preprocess_cli_args, recipe_cli_args
from ortlab.core.errors import DataError, OrtlabError
from ortlab.data.inputs import format_shape_arg
from ortlab.core.serial import dumps, from_plain, loads, to_plain
from ortlab.checks.verdict import VerdictPolicy
from ortlab.data.samples import get_sample
from ortlab.data.dataset import pick_subset, random_dataset
from ortlab.data.loaders import load_path
from ortlab.settings.flags import config_cli_args

DEFAULT_VERIFY_SAMPLES = 64  # samples a run is verified on, in the app and the CLI alike


@dataclass(frozen=True)
class DataRef:
    """Data another process can load again: a ``path`` (image folder, .zip, .npy/.npz, or a .txt with its
    ``tokenizer`` and ``seq_len``), a bundled sample's named set (``sample`` + ``set``: "calibration"/
    "evaluation"), or ``random`` samples (a count, with ``seed``). ``count``/``stratify``/``seed`` pick a subset
    (the evaluation samples)."""

    path: str | None = None
    sample: str | None = None
    set: str | None = None
    random: int | None = None
    seed: int = 0
    count: int | None = None
    stratify: bool = True
    tokenizer: str | None = None
    seq_len: int | None = None

    def __post_init__(self) -> None:
        given = [x for x in (self.path, self.sample, self.random) if x is not None]
        if len(given) != 1:
            raise DataError("A data reference names exactly one of: a path, a sample's set, a random count.")

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataRef:
        return from_plain(cls, data, error=DataError)

    def location(self) -> str | None:
        """The file or folder this reference reads (None for random data)."""
        if self.path is not None:
            return self.path
        if self.sample is not None:

            s = get_sample(self.sample)
            folder = s.evaluation_dir if self.set == "evaluation" else s.calibration_dir
            return str(folder) if folder is not None else None
        return None

    def load(self, class_names: Sequence[str] | None = None):
        """The dataset (its ``count`` subset when given)."""

        if self.random is not None:
            ds = random_dataset(int(self.random), seed=self.seed)
        elif self.sample is not None:

            s = get_sample(self.sample)
            ds = s.evaluation_data() if self.set == "evaluation" else s.calibration_data()
        else:
            ds = load_path(str(self.path), class_names, tokenizer=self.tokenizer, seq_len=self.seq_len)
        return pick_subset(ds, self.count, self.stratify, self.seed)


@dataclass(frozen=True)
class RunSpec:
    """One recipe run: the source ``model`` (``sample`` names the bundled sample it is, when known), the
    ``recipe``, the ``calibration`` and ``evaluation`` data, the ``preprocess`` of images (None: decided by
    :func:`ortlab.data.dataset.resolve_preprocess`), how many samples verify the result, the verdict ``policy`` and
    ``shapes``: the user's ``{input name: shape}`` for dims the model leaves open (``--shape``), ``values``: the
    value each control input takes in random data (``--input-value``). ``model_info``
    (``ModelInfo.to_dict()``), ``warnings`` and ``notes`` are set by :func:`ortlab.runs.prepare.prepare_run`."""

    model: str
    recipe: Recipe
    sample: str | None = None
    calibration: DataRef | None = None
    evaluation: DataRef | None = None
    preprocess: PreprocessConfig | None = None
    verify_samples: int = DEFAULT_VERIFY_SAMPLES
    policy: VerdictPolicy | None = None  # how the result is judged (None: the default policy)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    # decided once before the run (ortlab.runs.prepare): the model's facts and the recipe's warnings and notes
    model_info: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def undecided(self) -> RunSpec:
        """This spec as a person gave it: without what :func:`ortlab.runs.prepare.prepare_run` decided (a stored
        spec is prepared again when it is run again)."""
        return replace(self, model_info=None, warnings=(), notes=())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        return from_plain(cls, data, error=DataError)

    def to_json(self) -> str:
        return dumps(self)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.from_dict(loads(text))

    def cli_line(self, out: str = "OUT.onnx", roots: Mapping[str, str] | None = None, width: int | None = None) -> str:
        """The ``ortlab optimize`` line that runs this spec (random data becomes ``--allow-random-data``). ``roots``
        maps folders to how a shell names them (``{"/home/me/.ortlab": '"$ORTLAB_HOME"'}``): a path under one is
        written from it (``"$ORTLAB_HOME"/models/…``) instead of in full. A bundled sample's model is written by its
        name, and its own two sets (what the CLI takes for it by default) are left out. With ``width`` the line is
        continued (`` \\``) between options so that no line is longer than that where it can be helped."""
        model = self.model
        cal_ref, ev_ref = self.calibration, self.evaluation
        if self.sample is not None:
            try:
                sample = get_sample(self.sample)
                same = Path(sample.model_path).resolve() == Path(self.model).resolve()
            except (OrtlabError, OSError):  # a sample no longer installed: its path stays
                same = False
            if same:
                model = self.sample
                if (cal_ref is not None and (cal_ref.sample, cal_ref.set) == (self.sample, "calibration")
                        and ev_ref is not None and (ev_ref.sample, ev_ref.set) == (self.sample, "evaluation")):
                    cal_ref = ev_ref = None  # the CLI's default for a sample
        cal = cal_ref.location() if cal_ref is not None else None
        ev = ev_ref.location() if ev_ref is not None else None
        parts = ["ortlab", "optimize", model, out, *recipe_cli_args(self.recipe)]
        if cal is not None:
            parts += ["--calibration", cal]
        if ev is not None and ev != cal:
            parts += ["--eval", ev]
        if self.verify_samples != DEFAULT_VERIFY_SAMPLES:
            parts += ["--verify-samples", str(self.verify_samples)]
        for ref in (self.calibration, self.evaluation):
            if ref is not None and ref.tokenizer is not None:
                parts += ["--tokenizer", ref.tokenizer] + (["--seq-len", str(ref.seq_len)] if ref.seq_len else [])
                break
        has_data = (cal or ev) is not None or cal_ref is not self.calibration  # (the sample's default sets)
        if self.preprocess is not None and has_data:
            parts += preprocess_cli_args(self.preprocess)
        if self.policy is not None:

            parts += config_cli_args(self.policy)
        for name, shape in self.shapes.items():
            parts += ["--shape", format_shape_arg(name, [int(d) for d in shape])]
        for name, value in self.values.items():
            parts += ["--input-value", f"{name}={value:g}"]
        return shell_lines([_shell_word(p, roots or {}) for p in parts], width)


def shell_lines(words: Sequence[str], width: int | None = None) -> str:
    """Shell ``words`` (already quoted) as one line, or with ``width`` as lines continued with `` \\`` that break
    between arguments and options (a ``--flag`` keeps its values on its line, unless together they are too long),
    each at most ``width`` long where a single word allows it."""
    if width is None:
        return " ".join(words)
    groups: list[list[str]] = []
    for k, w in enumerate(words):
        if k == 1 or (groups and not w.startswith("--") and groups[-1][0].startswith("--")):
            groups[-1].append(w)  # "ortlab optimize"; an option's values
        else:
            groups.append([w])
    lines: list[str] = []
    for g in groups:
        text = " ".join(g)
        if lines and len(lines[-1]) + 1 + len(text) + 2 <= width:
            lines[-1] += " " + text
        elif not lines:
            lines.append(text)
        elif len(text) + 4 <= width or len(g) == 1:
            lines.append("  " + text)
        else:  # a flag whose value does not fit beside it: the value on a line of its own
            lines += ["  " + g[0], "    " + " ".join(g[1:])]
    return " \\\n".join(lines)


def _shell_word(word: str, roots: Mapping[str, str]) -> str:
    """``word`` quoted for a shell; an absolute path under one of ``roots`` written from that root's shell name."""
    if word.startswith("/"):
        for root, name in sorted(roots.items(), key=lambda kv: -len(kv[0])):
            base = root.rstrip("/")
            if word.startswith(base + "/"):
                rest = word[len(base) + 1:]
                quoted = shlex.quote(rest)
                return f"{name}/{quoted}"
    return shlex.quote(word)
