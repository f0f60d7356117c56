"""What the commands share: the parser's argument groups, finding models and data, the verdict policy's check and
exit status, progress on stderr, and touching the workspace before a command. Each command turns its own parsed
flags into settings; these helpers take the values they read, never the parsed namespace."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ortlab.api import ModelInfo
from ortlab.api import UsageError
from ortlab.api import PreprocessConfig, Recipe
from ortlab.core.text import one_line
from ortlab.api import Level, VerdictPolicy
from ortlab.core.errors import DataError
from ortlab.api import DataRef, SampleModel
from ortlab.core.layout import MODEL_FILE
from ortlab import api
from ortlab.cli.inputs import read_model
from ortlab.cli.out_path import check_readable


from ortlab.cli import PROG


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def values(enum_cls) -> list[str]:
    return [m.value for m in enum_cls]


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ortlab optimize`` that describe a Recipe (the ones ``config.recipe_cli_args`` writes)."""
    api.recipes.add_config_arguments(p, Recipe, title="recipe")


def add_preprocess_arguments(p: argparse.ArgumentParser) -> None:
    """Image preprocessing flags; unset ones come from the sample manifest or the model input; ``--preset``
    names a known convention (applied only when chosen)."""
    api.recipes.add_config_arguments(p, PreprocessConfig, show_defaults=False,
                                     title="image preprocessing (default: the sample's manifest, else detected from the model)")
    p.add_argument("--preset", choices=list(api.data.PREPROCESS_PRESETS), default=None,
                   help="A known preprocessing convention, applied before the flags above: "
                        + "; ".join(f"{k}: {v.source}" for k, v in api.data.PREPROCESS_PRESETS.items())
                        + ". Never applied unless given.")


def add_verdict_arguments(p: argparse.ArgumentParser) -> None:
    """The verdict policy's flags (``verdict.VerdictPolicy``) and ``--fail-on``."""
    api.recipes.add_config_arguments(p, VerdictPolicy, title="verdict policy (ok / degraded / broken)")
    p.add_argument("--fail-on", choices=[Level.DEGRADED.value, Level.BROKEN.value], default=None,
                   help="Exit with status 3 when the verdict is this level or worse (unknown counts as worse "
                        "than ok, better than degraded).")


def checked_policy(policy: VerdictPolicy) -> VerdictPolicy:
    """``policy`` (the verdict flags' VerdictPolicy), or a UsageError saying which of its bars cannot be used."""
    if policy.problems():
        raise UsageError(" ".join(policy.problems()))
    return policy


def exit_for(verdict, fail_on: str | None) -> int:
    """3 when ``--fail-on`` is given and the verdict is at or worse than it, else 0."""
    if fail_on and verdict is not None and api.checks.worse_or_equal(verdict.level, Level(fail_on)):
        return 3
    return 0


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """``--calibration``/``--data``, ``--eval`` and ``--verify-samples`` of ``optimize`` and ``run``."""
    g = p.add_argument_group("data (default for a bundled sample: its calibration and evaluation images)")
    g.add_argument("--calibration", "--data", metavar="DIR", dest="calibration",
                   help="Calibration data: a folder of images (class sub-folders are labels), a .zip of images, a "
                        ".npy/.npz tensor file, or a .txt file (one example per line; with --tokenizer).")
    g.add_argument("--eval", metavar="DIR", dest="eval_data",
                   help="Data to verify the result against the source (default: the calibration data).")
    g.add_argument("--verify-samples", type=int, default=api.recipes.DEFAULT_VERIFY_SAMPLES,
                   help=f"Samples compared with the source (default: {api.recipes.DEFAULT_VERIFY_SAMPLES}).")


def set_default_help(p: argparse.ArgumentParser, dest: str, default: str) -> None:
    """Say ``default`` as the default in the help of ``p``'s flag that stores into ``dest``, where the CLI's
    default is not the config field's (bench times 3 s, not a run count)."""
    action = next(a for a in p._actions if a.dest == dest)
    text = re.sub(r"\s*\(default: [^()]*\)$", "", action.help or "")
    action.help = f"{text} (default: {default})"  # the field's help is already %-escaped; ``default`` has no %


def new_folder_note(out: Path, as_dir: bool) -> str:
    """What to say on stderr, once the work starts, when the folder the result goes into (``out`` itself when
    ``as_dir``, else its parent) does not exist yet and is created: a typo in OUT shows at once instead of a result
    in a folder nobody meant. "" when it exists."""
    folder = out if as_dir else out.parent
    return "" if folder.exists() else f"{PROG}: the folder {folder} does not exist: it is created for the result"


def say(note: str) -> None:
    """``note`` on stderr, when there is one."""
    if note:
        print(note, file=sys.stderr)


@dataclass(frozen=True)
class TextFlags:
    """``--tokenizer`` and ``--seq-len``: how .txt data becomes model inputs (None: the defaults)."""

    tokenizer: str | None = None
    seq_len: int | None = None

    def options(self, path: Path) -> dict[str, Any]:
        """tokenizer/seq_len of a .txt data ``path`` (UsageError without a tokenizer); {} for other data."""
        if self.seq_len is not None and self.seq_len < 1:
            raise UsageError("--seq-len must be at least 1.")
        if path.is_dir() or path.suffix.lower() not in api.data.TEXT_EXTENSIONS:
            return {}
        tok = Path(self.tokenizer).expanduser() if self.tokenizer else path.parent / api.data.TOKENIZER_FILE
        if not tok.is_file():
            raise UsageError(f"Text data {path} needs a tokenizer: give --tokenizer TOKENIZER.json"
                             + (f" ({self.tokenizer} not found)." if self.tokenizer else "."))
        return {"tokenizer": str(tok.resolve()), "seq_len": self.seq_len}


def add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="Print JSON on stdout.")
    talk = p.add_mutually_exclusive_group()
    talk.add_argument("-v", "--verbose", action="store_true",
                      help="Print progress on stderr, one line each time a stage starts or ends, also when stderr is "
                           "not a terminal (a log).")
    talk.add_argument("-q", "--quiet", action="store_true",
                      help="No progress. Without -v or -q, progress shows on a terminal as one updating line per "
                           "stage, and not at all when stderr is piped or redirected.")


def existing(path: str, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{what} not found: {path}")
    return p


def existing_file(path: str, what: str) -> Path:
    p = existing(path, what)
    if p.is_dir():
        raise UsageError(f"{what} is a folder, not a file: {path}")
    return check_readable(p, what, path)


def _sample_named(text: str, found: Sequence[SampleModel] | None = None) -> SampleModel | None:
    """The bundled sample called exactly ``text``, or None."""
    return next((s for s in (found if found is not None else api.models.list_samples(skip_broken=True)) if s.name == text),
                None)


def _not_found(text: str, what: str, found: Sequence[SampleModel]) -> UsageError:
    """``what not found: text``, with the samples whose names are close to ``text`` (or all of them) when ``text``
    looks like a sample's name rather than a path."""
    path = Path(text)
    if len(path.parts) != 1 or path.suffix or not found:
        return UsageError(f"{what} not found: {text}")
    names = [s.name for s in found]
    close = difflib.get_close_matches(text, names, n=3, cutoff=0.6)
    if close:
        return UsageError(f"{what} not found: {text} (no such file or folder here; did you mean the sample "
                          f"{' or '.join(close)}?)")
    return UsageError(f"{what} not found: {text} (no file, nor a bundled sample: {', '.join(names)})")


def _readme_path(path: Path) -> Path | None:
    """``sample_models/…`` where the bundled samples live, for a relative path that names it but is not here (the
    README's lines work from any folder); else None."""
    root = api.models.samples_root()
    if not path.is_absolute() and path.parts[:1] == (root.name,) and (root.parent / path).exists():
        return root.parent / path
    return None


def _shadow_note(text: str, path: Path, sample: SampleModel, instead: Path) -> None:
    """Say on stderr that ``text``, a sample's name, is the file or folder ``path`` here, not the sample."""
    kind = "folder" if path.is_dir() else "file"
    print(f"{PROG}: note: {text} is the {kind} {path.resolve()} here, which shadows the bundled sample {sample.name} "
          f"(for the sample, give {instead})", file=sys.stderr)


# the first bytes of files people give as MODEL by mistake (an ONNX file is a protobuf: none of these)
_NOT_MODELS = ((b"\xff\xd8\xff", "a JPEG image"), (b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"GIF8", "a GIF image"),
               (b"RIFF", "a RIFF file (WebP image or WAV audio)"), (b"PK\x03\x04", "a zip file"),
               (b"%PDF", "a PDF document"), (b"\x93NUMPY", "a NumPy .npy array"))


def _not_a_model(path: Path) -> str:
    """What ``path`` is when its first bytes say it is an image, an archive or an array rather than a model; ""
    otherwise (an unreadable file is left to the model's own loader to explain)."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
    except OSError:
        return ""
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "a WebP image"
    return next((kind for magic, kind in _NOT_MODELS if head.startswith(magic)), "")


def model_file(text: str, what: str = "Model") -> Path:
    """The model file of a MODEL argument: a path to an .onnx file (relative to the current folder, or absolute), a
    folder that ``ortlab optimize`` wrote (its ``model.onnx``), or a bundled sample's name (``digits_cnn``;
    ``ortlab samples`` lists them). A file or folder here named like a sample is used, with a note that it
    shadows the sample. A path such as ``sample_models/digits_cnn/model.onnx`` that is not there from the
    current folder is also looked up where the bundled samples live, so the README's lines work from any folder."""

    path = Path(text).expanduser()
    found = api.models.list_samples(skip_broken=True)
    sample = _sample_named(text, found)
    if path.exists():
        if sample is not None:
            _shadow_note(text, path, sample, Path(sample.model_path))
        if path.is_dir():
            if (path / MODEL_FILE).is_file():
                return check_readable(path / MODEL_FILE, what, str(path / MODEL_FILE))
            raise UsageError(f"{what} is a folder with no {MODEL_FILE} in it (give an .onnx file, or a folder that "
                             f"ortlab optimize wrote): {text}")
        kind = _not_a_model(path)
        if kind:
            raise UsageError(f"{what} {text} is {kind}, not an ONNX model: give the .onnx file (images go to "
                             f"--calibration/--eval/--data).")
        return check_readable(path, what, text)
    if sample is not None:
        return Path(sample.model_path)
    readme = _readme_path(path)
    if readme is not None and readme.is_file():
        return readme
    raise _not_found(text, what, found)


def model_sample(model_path: Path) -> SampleModel | None:
    """The bundled sample ``model_path`` is (``find_sample``), or the one it was made from when it is the
    ``model.onnx`` of a folder that ``ortlab optimize`` wrote (its ``artifact.json``); else None."""
    sample = find_sample(model_path)
    if sample is not None:
        return sample
    folder = Path(model_path).parent
    name = api.models.artifact_sample(folder) if Path(model_path).name == MODEL_FILE else None
    return _sample_named(name) if name else None


def data_path(text: str, sample_set: str = "evaluation") -> tuple[Path, SampleModel | None]:
    """The data a ``--data``/``--calibration``/``--eval`` argument names, and the sample it is of (else None): a
    path from the current folder, or a bundled sample's name for its ``sample_set`` ("calibration" or
    "evaluation") images. A file or folder here named like a sample is used, with a note that it shadows the
    sample; an unknown name gets the samples' names that are close to it."""

    path = Path(text).expanduser()
    found = api.models.list_samples(skip_broken=True)
    sample = _sample_named(text, found)
    folder = None if sample is None else (sample.calibration_dir if sample_set == "calibration"
                                          else sample.evaluation_dir)
    if path.exists():
        if sample is not None and folder is not None:
            _shadow_note(text, path, sample, Path(folder))
        return path, None
    if sample is not None:
        if folder is None:
            raise UsageError(f"The sample {sample.name} has no {sample_set} data; give {DATA_KINDS}.")
        return Path(folder), sample
    readme = _readme_path(path)
    if readme is not None:
        return readme, None
    raise _not_found(text, "Data", found)


def display_path(path: Path) -> str:
    """``path`` relative to the current folder when it is under it, else as given (absolute)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


DATA_SUFFIXES = (".zip", ".npy", ".npz", ".txt", ".text")


DATA_KINDS = "a folder of images, a .zip, a .npy/.npz file or a .txt file (with --tokenizer)"


def load_dataset(path: str, class_names: Sequence[str] | None = None, text: TextFlags = TextFlags(),
                 sample_set: str = "evaluation"):
    """A dataset from a folder of images, a .zip of images, a .npy/.npz tensor file, a .txt file (read as ``text``
    says) or a bundled sample's name (its ``sample_set`` images, ``data_path``)."""

    p, sample = data_path(path, sample_set)
    if sample is not None:
        return sample.calibration_data() if sample_set == "calibration" else sample.evaluation_data()
    if not p.is_dir() and p.suffix.lower() not in DATA_SUFFIXES:
        raise UsageError(f"Data must be {DATA_KINDS}: {path}")
    return api.data.load_path(p, class_names, **text.options(p))


def data_ref(path: str | None, text: TextFlags = TextFlags(), sample_set: str = "evaluation", **subset: Any):
    """A reference to the data at ``path`` for the run service (checked to exist, not loaded here; .txt data read
    as ``text`` says); a bundled sample's name refers to its ``sample_set`` images."""

    if path is None:
        return None
    p, sample = data_path(path, sample_set)
    if sample is not None:
        return DataRef(sample=sample.name, set=sample_set, **subset)
    if not p.is_dir() and p.suffix.lower() not in DATA_SUFFIXES:
        raise UsageError(f"Data must be {DATA_KINDS}: {path}")
    return DataRef(path=str(p.resolve()), **subset, **text.options(p))


def evaluation_data(data: str | None, text: TextFlags, sample: SampleModel | None, command: str):
    """The dataset at ``data`` (``--data``), else ``sample``'s evaluation images, said in one line on stderr; a
    UsageError naming ``--data`` when there is neither."""

    if data is not None:
        return load_dataset(data, sample.labels if sample is not None and sample.labels else None, text)
    if sample is None or sample.evaluation_dir is None:
        raise UsageError(f"{command} needs evaluation data: give --data with {DATA_KINDS}, or a bundled sample's "
                         "name (the reference model is not a bundled sample, nor made from one).")
    dataset = sample.evaluation_data()
    print(f"{PROG}: evaluation data: the {sample.name} sample's {len(dataset)} held-out images (give --data to use "
          "others)", file=sys.stderr)
    return dataset


def find_sample(model_path: Path, info: ModelInfo | None = None):
    """The bundled sample whose model is ``model_path`` (same file or same bytes: ``info.sha256`` when the model
    was already read), or None."""
    return api.models.find_for_model(model_path, info.sha256 if info is not None else None)


def preprocess_from_flags(model_path: Path, sample=None, given: Mapping[str, Any] | None = None,
                          shapes: Mapping[str, list[int]] | None = None, preset: str | None = None,
                          images: bool = True, info: ModelInfo | None = None) -> PreprocessConfig | None:
    """Preprocessing: the sample manifest's, else detected from the model's first input; ``preset`` (``--preset``),
    then the preprocessing flags ``given`` (dotted path → value) override (``explain_preprocess``); ``shapes``
    (``--shape``) give an image input's size. Says on stderr what it uses and where each value came from. For
    ``images`` data on a model whose height/width are open, a size must be given (``--size`` or ``--shape``):
    a UsageError asks for it instead of guessing. None for models whose input is not an image and no flags were
    given."""

    overrides, shapes = dict(given or {}), dict(shapes or {})
    try:
        model = (info or read_model(model_path)) if sample is None else None
        inputs = model.inputs if model is not None else ()
        if "size" not in overrides and len(inputs) == 1 and inputs[0].name in shapes:
            hw = _size_from_shape(shapes[inputs[0].name])
            if hw is not None:
                overrides["size"] = hw
        resolved = api.data.explain_preprocess(model if model is not None else inputs, sample, overrides=overrides,
                                               preset=preset)  # the outputs: the YOLO preset's size
    except DataError as exc:
        raise UsageError(exc.message) from None
    if resolved is None:
        return None
    unknown = set(shapes) - {t.name for t in inputs}
    if images and resolved.open_size:
        if inputs and unknown:  # a --shape for no input of the model: its own error follows
            return resolved.config
        raise UsageError(resolved.open_size_message() + _sized_by_preset(model, overrides, preset))
    if images:
        print(f"{PROG}: preprocessing: " + "; ".join(resolved.lines()), file=sys.stderr)
        warning = resolved.manifest_warning(getattr(sample, "name", "")) if sample is not None else ""
        if warning:
            print(f"{PROG}: warning: {warning}", file=sys.stderr)
        elif model is not None and preset is None and not _CONVENTION_FLAGS & set(overrides) \
                and (hint := _preset_hint(model)) is not None:
            print(f"{PROG}: hint: {hint}", file=sys.stderr)
    return resolved.config


_CONVENTION_FLAGS = {"mean", "std", "channel_order", "scale"}  # a person who gave these chose their convention


def _sized_by_preset(model: ModelInfo | None, overrides: Mapping[str, Any], preset: str | None) -> str:
    """" Or give --preset yolo: …" when the preset the model's shapes point to sets the open size (or its height),
    else ""."""
    suggested = api.data.suggest_preprocess_preset(model) if model is not None and preset is None else None
    if suggested is None:
        return ""
    resolved = api.data.explain_preprocess(model, overrides=dict(overrides), preset=suggested[0])
    if resolved is None:
        return ""
    h, w = resolved.config.size
    if resolved.open_size:
        height = api.data.PREPROCESS_PRESETS[suggested[0]].height
        return f" Or give --preset {suggested[0]} with --size {height} W: {suggested[1]}." if height else ""
    return f" Or give --preset {suggested[0]}, which sets {h}×{w}: {suggested[1]}."


def _preset_hint(model: ModelInfo) -> str | None:
    """The preset the model's shapes point to, offered (never applied) when the person chose none."""
    suggested = api.data.suggest_preprocess_preset(model)
    if suggested is None:
        return None
    name, why = suggested
    return (f"{why}: --preset {name} gives that preprocessing ({api.data.PREPROCESS_PRESETS[name].source}); "
            "without it, the values above are used.")


def _size_from_shape(shape: Sequence[int]) -> tuple[int, int] | None:
    """(H, W) of a 4-D image --shape (NCHW when axis 1 is 1 or 3, else NHWC)."""
    if len(shape) != 4:
        return None
    return (int(shape[2]), int(shape[3])) if shape[1] in (1, 3) else (int(shape[1]), int(shape[2]))


def start_service() -> None:
    """Before a command that uses the workspace: remove what killed runs left, and say once on stderr when
    the history database had to be rebuilt."""

    for notice in api.recipes.startup():
        print(f"{PROG}: warning: {one_line(notice)}", file=sys.stderr)
