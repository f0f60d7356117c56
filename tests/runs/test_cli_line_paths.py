"""Issue 38 (10): the CLI line a page shows names workspace paths from the shell's $ORTLAB_HOME (or ~), never the
server's full path, and a bundled sample by its name; it still parses as the same command."""

from __future__ import annotations

import shlex

from ortlab.data.samples import default_sample
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.settings.config import Recipe


def test_paths_under_a_root_are_written_from_its_shell_name():
    ws = "/srv/data/me/.ortlab"
    spec = RunSpec(model=f"{ws}/models/abc/my model.onnx", recipe=Recipe(),
                   calibration=DataRef(path=f"{ws}/data/123/calibration/images"),
                   evaluation=DataRef(path=f"{ws}/data/123/evaluation/images", count=8))
    line = spec.cli_line("run3.onnx", {ws: '"$ORTLAB_HOME"'})
    assert ws not in line, line
    assert line.startswith("""ortlab optimize "$ORTLAB_HOME"/'models/abc/my model.onnx' run3.onnx"""), line
    assert '--calibration "$ORTLAB_HOME"/data/123/calibration/images' in line
    assert '--eval "$ORTLAB_HOME"/data/123/evaluation/images' in line
    words = shlex.split(line.replace('"$ORTLAB_HOME"', ws))  # what a shell with ORTLAB_HOME set runs
    assert words[2] == f"{ws}/models/abc/my model.onnx"
    assert spec.cli_line("x.onnx").split()[2] == shlex.quote(spec.model).split()[0]  # without roots: as before
    lines = spec.cli_line("run3.onnx", {ws: '"$ORTLAB_HOME"'}, width=60).split("\n")  # continued between options
    assert len(lines) > 2 and all(line.endswith(" \\") for line in lines[:-1]), lines
    assert all(len(x) <= 60 for x in lines), lines
    assert " ".join(x.rstrip(" \\").strip() for x in lines) == line  # the same command


def test_a_bundled_samples_model_and_own_sets_are_its_name():
    s = default_sample()
    spec = RunSpec(model=str(s.model_path), recipe=Recipe(), sample=s.name,
                   calibration=DataRef(sample=s.name, set="calibration"),
                   evaluation=DataRef(sample=s.name, set="evaluation", count=10), preprocess=s.preprocess)
    line = spec.cli_line("OUT.onnx")
    assert line.startswith(f"ortlab optimize {s.name} OUT.onnx"), line
    assert "--calibration" not in line and "--eval" not in line and str(s.model_path.parent) not in line
    assert "--size" in line or "--layout" in line or "--mean" in line or "--scale" in line, line  # preprocessing kept
    other = RunSpec(model=str(s.model_path), recipe=Recipe(), sample=s.name,
                    calibration=DataRef(sample=s.name, set="evaluation"),
                    evaluation=DataRef(sample=s.name, set="evaluation"))
    assert "--calibration" in other.cli_line()  # not the CLI's default: said
