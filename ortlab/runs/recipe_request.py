"""What a recipe child is given (:class:`RecipeRequest`) and what becomes of the result it asks for: installed at
OUT (:func:`install_result`), described (:func:`describe_run`) and its folder tidied (:func:`tidy_run`), by the child
when its run ends (:mod:`ortlab.runs.recipe_child`) or by the parent that adopts a complete result whose child died
(:class:`ortlab.runs.service.RecipeHandle`); both record it with :func:`ortlab.runs.history.record_run`."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from ortlab.core.layout import QDQ_FILE, qdq_path
from ortlab.runs import outputs
from ortlab.runs.artifact import Artifact
from ortlab.runs.runspec import RunSpec


@dataclass(frozen=True)
class RecipeRequest:
    """What a recipe child is given: the prepared ``spec``, the folder it runs into (``run_dir``), the single file
    the result is installed at (``out_file``, None: the folder is the result), the history it is recorded in
    (``db``, None: not recorded), the kept calibrations (``calibrations``, None: the workspace's beside ``db``),
    where the run was started (``origin``), its time limit and why (``timeout_s``, ``timeout_why``), its memory
    limit (``memory_gb``), a folder the child removes when its parent dies first (``owned_dir``) and the newest run
    id in the history when it started (``runs_before``; a run recorded then is not this one's; None: unknown)."""

    spec: RunSpec
    run_dir: Path
    out_file: Path | None = None
    db: Path | None = None
    calibrations: Path | None = None
    origin: str = ""
    timeout_s: float | None = None
    timeout_why: str = ""
    memory_gb: float | None = None
    owned_dir: Path | None = None
    runs_before: int | None = None

    @property
    def recorded(self) -> bool:
        return self.db is not None

    @property
    def volume(self) -> Path:
        """The folder whose volume the run writes to: OUT's folder, else the workspace, else the run's folder's."""
        if self.out_file is not None:
            return self.out_file.parent
        return self.db.parent if self.db is not None else self.run_dir.parent


def install_result(artifact: Artifact, spec: RunSpec, run_dir: Path, out_file: Path | None) -> Artifact:
    """For a run into a single file: the model (and its external data, as OUT.onnx.data) installed at OUT.onnx,
    with the QDQ model beside it when the run made one; the artifact naming the installed model."""
    if out_file is None:
        return artifact
    target = Path(out_file)
    outputs.check_targets(spec.model, outputs.result_files(target, as_file=True))
    installed = replace(artifact, model_path=outputs.install_model(artifact.model_path, target))
    qdq = qdq_path(target)
    if (run_dir / QDQ_FILE).is_file():  # ortlab analyze M OUT.onnx reads it (static int8 QDQ)
        outputs.install_model(run_dir / QDQ_FILE, qdq)
    else:
        qdq.unlink(missing_ok=True)  # an earlier run's, which this result does not match
    return installed


def describe_run(artifact: Artifact, request: RecipeRequest, calibrated_on: int | None = None,
                 notes: tuple[str, ...] = ()) -> Artifact:
    """The artifact with where the run was started, what was asked for, and the time limit it ran under (with the
    samples really used: ``calibrated_on`` calibration samples, when known, and the verification's), then
    ``notes``."""
    said = list(artifact.notes)
    if request.timeout_s:
        used = [f"{calibrated_on} calibration"] if calibrated_on else []
        if artifact.evaluation is not None:
            used.append(f"{artifact.evaluation.n_samples} verification")
        said.append(f"Time limit: {float(request.timeout_s):g} s ({request.timeout_why or 'set'})"
                    + (f"; this run used {' + '.join(used)} samples." if used else "."))
    return replace(artifact, origin=request.origin, spec=request.spec.undecided(), notes=[*said, *notes])


def tidy_run(request: RecipeRequest, owner: Path) -> None:
    """After a recorded run: the temp folder of a run into OUT.onnx goes; a workspace folder loses its markers."""
    if request.out_file is not None:
        shutil.rmtree(request.run_dir, ignore_errors=True)
    else:
        (request.run_dir / outputs.RUNNING_FILE).unlink(missing_ok=True)
        (request.run_dir / outputs.RECORDED_FILE).unlink(missing_ok=True)
    owner.unlink(missing_ok=True)
