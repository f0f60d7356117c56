"""What the pages do with the engine: choose models and data, start recipe runs, list variants.

Functions here raise ``OrtlabError`` (pages wrap them in ``engine_errors``) and keep the session state
consistent: a failed import or data load leaves the previous selection untouched.

Size: every page's calls into the engine in one module, so that session-state consistency (what a failed
import leaves) is checked in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ortlab.api import (
    Artifact, DataRef, OptLevel, Precision, PreprocessConfig, QuantConfig, QuantFormat, QuantMode, Recipe, RecipeHandle,
    RunSpec, VerdictPolicy, Workspace,
)
from ortlab.ui.session import model_cache, state, uploads
from ortlab.ui.jobs.status import DONE, started
from ortlab.ui.session.auth import workspace_root
from ortlab.ui.session import auth
from ortlab import api
from ortlab.core.errors import ModelLoadError, OrtlabError
from ortlab.core.text import format_bytes, upload_name
from ortlab.ui.views.cards import pct, verdict_text
from ortlab.ui.views.forms import set_form_values
from ortlab.core.errors import RecipeError
from ortlab.ui.views.report import html_report

DEMO_RECIPE = api.recipes.advised_recipe(Recipe(precision=Precision.INT8, opt_level=OptLevel.EXTENDED,
                                         quant=QuantConfig(mode=QuantMode.STATIC, quant_format=QuantFormat.QDQ)))
DEMO_LABEL = "▶ Run the demo: int8 static QDQ + graph optimization"
DEFAULT_EVAL_SAMPLES = api.recipes.DEFAULT_VERIFY_SAMPLES  # the CLI verifies on as many
WHAT_ORTLAB_DOES = ("ortlab makes an ONNX model smaller and faster with ONNX Runtime (graph optimization, fp16, "
                    "int8) and tells you whether each result is still ok, degraded or broken on your data.")


def workspace() -> Workspace:
    """This session's workspace: ``$ORTLAB_HOME`` (or ``~/.ortlab``), or — when the app is shared with sign-in —
    the signed-in user's private one under ``$ORTLAB_HOME/users/`` (see :mod:`ortlab.ui.session.auth`)."""

    return api.workspaces.open_workspace(workspace_root())


def history() -> api.History:
    """The History database of the workspace."""
    return api.workspaces.open_history(workspace())


def delete_run(run_id: int):
    """Delete History run ``run_id`` (``Workspace.delete_run``: its row, its folder in the workspace, the
    benchmarks that timed it) and forget it in this session; returns the ``DeletedRun``."""
    done = workspace().delete_run(run_id)
    state.remove_artifact(run_id)
    last = state.last_benchmark()
    if last is not None and last.id is not None and last.id in done.benchmarks:
        state.set_last_benchmark(None)
    return done


def benchmarks_of(run_id: int) -> list[str]:
    """The stored benchmarks that timed History run ``run_id``, each in words (``bench_text``): what deleting the
    run deletes with it."""
    return [api.workspaces.bench_text(b) for b in sorted(history().list_benchmarks(), key=lambda b: getattr(b, "id", 0) or 0)
            if isinstance(b, api.BenchmarkRecord) and b.id is not None and any(v.run_id == run_id for v in b.variants)]


def stored_items():
    """The imported models and uploaded data sets of this workspace, each with its size and runs
    (``StoredItem``)."""
    return api.workspaces.stored_items(workspace())


def delete_stored(item):
    """Delete an imported model or uploaded data set (``StoredItem``) with its runs; returns the ``DeletedItem``.
    The session forgets the deleted runs, and the model or data in use when they were the deleted ones (the
    default sample comes back for a deleted current model)."""
    ws = workspace()
    done = (api.workspaces.delete_model if item.kind == "model" else api.workspaces.delete_dataset)(ws, item.folder)
    for run_id in done.run_ids:
        state.remove_artifact(run_id)
    bench = state.last_benchmark()
    if bench is not None and any(v.run_id in done.run_ids for v in bench.variants):
        state.set_last_benchmark(None)
    current = state.model_path()
    if item.kind == "model" and current is not None and done.folder in Path(current).resolve().parents:
        select_sample(api.models.default_sample().name)
    elif item.kind != "model" and any(ref is not None and ref.path is not None
                                      and done.folder in Path(ref.path).resolve().parents
                                      for ref in state.data_refs()):
        state.set_dataset(None, "no data")
        state.set_data_refs(None, None)
    return done


def start_session() -> None:
    """When a session opens: remove what killed runs left behind and open the history (a damaged one is
    moved aside and rebuilt); its notice is shown once as a warning."""

    for notice in api.recipes.startup(workspace()):
        state.flash(notice.message, "warning")


# -- models -------------------------------------------------------------------------------------------
def ensure_defaults() -> None:
    """On first open: the start-up housekeeping, then select the default bundled sample with its data and
    manifest preprocessing."""
    if state.initialized():
        return
    state.set_initialized()
    try:
        start_session()
    except Exception as exc:  # housekeeping never keeps the app from opening
        import logging

        logging.getLogger("ortlab.ui").warning("Start-up housekeeping failed: %s", exc)
    if state.model_path() is None:

        select_sample(api.models.default_sample().name)


def select_sample(name: str) -> None:
    """Make the bundled sample ``name`` current, with its calibration/evaluation sets and preprocessing."""

    s = api.models.get_sample(name)
    info = api.models.inspect_model(s.model_path)
    state.set_model(s.model_path, info, sample=s.name, label=s.title or s.name)
    use_sample_data(s)


def use_sample_data(s, calibration: str = "calibration", evaluation: str = "evaluation") -> None:
    """Use the sample's bundled image sets (``calibration``/``evaluation`` say which set feeds what)."""
    present = [n for n, d in (("calibration", s.calibration_dir), ("evaluation", s.evaluation_dir)) if d]
    cal_set = calibration if calibration in present else next(iter(present), None)
    ev_set = evaluation if evaluation in present else ("evaluation" if "evaluation" in present else cal_set)
    cal_ref = DataRef(sample=s.name, set=cal_set) if cal_set else None
    ev_ref = DataRef(sample=s.name, set=ev_set) if ev_set else None
    cal = cal_ref.load() if cal_ref else None
    ev = ev_ref.load() if ev_ref and ev_set != cal_set else cal
    label = f"{s.name}: {calibration} ({len(cal) if cal is not None else 0})"
    if ev is not cal and ev is not None:
        label += f", {evaluation} ({len(ev)})"
    state.set_dataset(cal, label, eval_ds=ev)
    state.set_data_refs(cal_ref, ev_ref)
    state.set_preprocess(s.preprocess)
    n_ev = len(ev) if ev is not None else 0
    state.set_data_settings(min(DEFAULT_EVAL_SAMPLES, n_ev) if n_ev else 0, True, 0)


def import_uploaded_model(filename: str, data, on_saved=None) -> Path:
    """Import an uploaded .onnx or .zip into the workspace and make it current; returns the stored path.
    ``data`` is the ``UploadedFile`` (or any binary file object, or bytes): it is written to the workspace in
    chunks, never copied in memory, then validated and inspected in a child process (``isolated``), so the
    server never parses it; ``on_saved()`` runs once it is on disk (the page drops the upload there). On any
    error nothing changes. A name with control characters or path separators is cleaned first (``upload_name``)
    and the person is told so with the result."""
    import io

    name, cleaned = upload_name(filename)
    cleaned = uploads.cleaned_note(data) or cleaned
    stored_name = name if name.lower().endswith(".onnx") else "model.onnx"
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    path, info = api.models.import_upload(stream, workspace().models_dir, filename=stored_name, on_saved=on_saved)
    del stream, data
    _use_imported(path, info, name)
    if cleaned:
        prior = state.flash()
        state.flash(cleaned + (f" {prior[1]}" if prior else ""), "warning")
    return path


def local_imports_allowed() -> bool:
    """True when the app is used by one person at this machine: sign-in is off and it only listens on this
    machine (``server.address`` is a loopback address). Then a path typed on the Model page is a path of the
    person at the keyboard, and importing it (from a folder of ``$ORTLAB_IMPORT_ROOTS``) is theirs to do."""
    import ipaddress

    import streamlit as st

    if auth.sign_in_configured():  # shared: a path on the server is never a user's to read
        return False
    address = str(st.get_option("server.address") or "").strip().strip("[]")
    if address in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def server_cluster(on_cluster: bool) -> str | None:
    """The Ray cluster a page's job runs on: the one the server's operator configured (``$ORTLAB_CLUSTER``) when
    ``on_cluster``, else None (this machine). No page can name another: Ray unpickles what a cluster's nodes
    return, so a cluster a person could name would run their code in this server."""
    if not on_cluster:
        return None
    address = api.machine.configured_cluster()
    if address is None:
        raise api.UsageError("This server has no Ray cluster: its operator sets one with ORTLAB_CLUSTER where the "
                             "server starts.")
    return address


def import_roots() -> list[Path]:
    """The folders a path import may read from (``$ORTLAB_IMPORT_ROOTS``)."""
    return api.workspaces.import_roots()


def import_local_model(path_text: str) -> Path:
    """Import a model from a path on this machine (an .onnx with its external data beside it, or a .zip):
    copied into the workspace like an upload (and read in a child process), for models too big to upload. Local
    single-user mode only, from the folders of ``$ORTLAB_IMPORT_ROOTS`` and never from ortlab's home; one message
    for a path that is not allowed or not there."""

    if not local_imports_allowed():
        raise ModelLoadError("Importing from a path is only possible when the app runs on this machine for one "
                             "person (no sign-in, server.address a loopback address). Upload the model instead.")
    src = api.workspaces.importable_path(path_text)
    path, info = api.models.import_model(src, workspace().models_dir)
    return _use_imported(path, info, src.name)


def release_upload(file_id: str, upload=None) -> None:
    """Drop an upload from Streamlit's in-memory upload store (and close ``upload``, the ``UploadedFile``, whose
    buffer holds the same bytes), so its bytes do not stay resident for the rest of the session."""
    if upload is not None:
        upload.close()
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        if ctx is not None:
            remove = getattr(ctx.uploaded_file_mgr, "remove_file")  # noqa: B009 (not in Streamlit's type stubs)
            remove(ctx.session_id, file_id)
    except (ImportError, AttributeError, KeyError):  # an internal API: losing it only costs memory
        pass


def _use_imported(path: Path, info, name: str) -> Path:
    """Make the imported model at ``path`` (summarised by ``info``) current, shown as ``name``, with the sample's
    data when it is a bundled sample's copy."""

    same = api.models.find_by_sha256(info.sha256)
    state.set_model(path, info, sample=None, label=name)
    if same is not None:
        use_sample_data(same)
        state.flash(f"{name} has the same weights as the bundled sample '{same.title or same.name}': using its "
                    "preprocessing and images.", "info")
    elif state.dataset() is None:  # data belongs to a model: another model's images are never carried over
        state.flash(f"{name} has no data yet: choose its calibration and evaluation data on the Data page "
                    "(images, tensors, or explicitly random data).", "info")
    return path


def set_user_dataset(ds, label: str) -> None:
    """Use an uploaded (or random) dataset: uploads are split into disjoint calibration and evaluation parts
    (``split_dataset``), each written into the workspace (``data/<sha>/calibration``, ``…/evaluation``) so
    a run's child process can load them again."""

    if ds.is_random:
        cal = ev = ds
        cal_ref = ev_ref = DataRef(random=len(ds), seed=ds.seed)
    else:
        cal, ev = api.data.split_dataset(ds)  # disjoint: a verdict is never judged on calibration samples
        folder = workspace().root / "data" / api.data.dataset_digest(ds)[:16]
        refs = []
        for part, name in ((cal, "calibration"), (ev, "evaluation")):
            path = api.data.write_dataset(part, folder / name)
            text = {"tokenizer": str(path.parent / api.data.TOKENIZER_FILE), "seq_len": ds.seq_len} \
                if ds.kind == "text" else {}
            refs.append(DataRef(path=str(path), **text))
        cal_ref, ev_ref = refs
        # History's list names the stored set by what it was made from, not by its digest folder
        api.data.write_about(folder, label, ds, {"calibration": len(cal), "evaluation": len(ev)} if ev is not cal
                             else {"calibration": len(cal)})
        if ev is not cal:
            label += f": {len(cal)} to calibrate, {len(ev)} held out to evaluate"
    state.set_dataset(cal, label, eval_ds=ev)
    state.set_data_refs(cal_ref, ev_ref)
    state.set_data_settings(min(DEFAULT_EVAL_SAMPLES, len(ev)), state.data_settings().get("stratify", True),
                            state.data_settings().get("seed", 0))
    if ds.kind == "images" and state.preprocess() is None and state.model_info() is not None:
        pre = api.data.resolve_preprocess(state.model_info(), dataset=ds)
        state.set_preprocess(pre)
        if pre is not None:
            state.flash(detected_preprocess_note(state.model_info()), "warning")


def open_size_request(explained, cfg) -> str:
    """What the Data page asks while the model's size is open (``cfg``'s size is a placeholder): the size, or the
    width alone when the model or a preset fixes the height."""
    fixed = explained.open_height()
    placeholder = f"{cfg.size[0]}×{cfg.size[1]} is only a placeholder."
    if fixed is not None:
        _, who, widths = fixed
        return (f"Model input '{explained.input_name}' leaves its width open and {who}: fill in the width in "
                f"Size (H, W) (ortlab never guesses it" + (f"; {widths}" if widths else "") + f"); {placeholder}")
    return (f"Model input '{explained.input_name}' leaves its height and width open: fill in Size (H, W) with the "
            f"size it expects (ortlab never guesses it); {placeholder}")


def detected_preprocess_note(info) -> str:
    """What the Data page says once preprocessing was detected from the model input: the size only when the
    model fixes it (an open size is asked for below, never claimed as detected), and the preset its shapes
    point to."""
    explained = api.data.explain_preprocess(info)
    open_size = explained is not None and explained.open_size
    what = "layout, 0–1 scale, no mean/std" if open_size else "size, layout, 0–1 scale, no mean/std"
    text = f"Preprocessing was detected from the model input ({what}). Accuracy depends on it: check it below."
    suggested = api.data.suggest_preprocess_preset(info)
    if open_size:
        height = explained.open_height() if explained is not None else None
        with_preset = api.data.explain_preprocess(info, preset=suggested[0]) if suggested is not None else None
        sets = "its height" if with_preset is not None and with_preset.open_size else "them"
        text += (f" The model leaves its width open ({height[1]}): give it below" if height is not None else
                 " The model leaves its height and width open: give them below") + (
            f", or choose the preset offered there, which sets {sets}." if suggested is not None else ".")
    if suggested is not None:
        text += f" The {api.data.PREPROCESS_PRESETS[suggested[0]].label} preset fits this model: it is offered below."
    return text


def evaluation_subset(ds):
    """The evaluation samples chosen on the Data page (count, stratified or not, seed): ``data.evaluation_subset``
    with the page's settings."""
    if ds is None:
        return None

    st_ = state.data_settings()
    return api.data.pick_subset(ds, int(st_.get("n") or DEFAULT_EVAL_SAMPLES), bool(st_.get("stratify", True)),
                                int(st_.get("seed", 0)))


# -- variants -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """A model the user can compare or benchmark: the original or an artifact."""

    id: str
    name: str
    path: Path
    artifact: Artifact | None = None


def variant_id(a: Artifact) -> str:
    """The stable id of an artifact among the variants (``run<id>`` or ``sha<hash>``)."""
    return f"run{a.run_id}" if a.run_id is not None else "sha" + a.sha256[:10]


def recipe_label(a: Artifact) -> str:
    """A short name for the recipe of an artifact."""
    return a.recipe.label()


def run_summary(a: Artifact) -> dict:
    """The columns every table of runs shows: recipe, size, share of the source's size, accuracy, seconds."""

    ev = a.evaluation
    return {"verdict": verdict_text(run_verdict(a)), "recipe": recipe_label(a),
            "size": format_bytes(a.size_bytes), "vs source": f"{a.size_ratio:.0%}",
            "top-1": pct(ev.top1_accuracy_cand if ev else None), "agreement": pct(ev.top1_agreement if ev else None),
            "task metric": task_metric_text(ev), "seconds": round(a.total_seconds, 2)}


def task_metric_text(ev) -> str:
    """A run's task figure for a table, where top-1 says nothing (a detector, an OCR recognizer, an encoder):
    "F1 0.921 · score SQNR 24.1 dB", "3/64 strings changed", "cosine 0.9987 · NN agreement 94%"; "–" for a
    classifier or no evaluation."""
    return " · ".join(cell for _, _, cell in task_figures(ev)) or "–"


def task_figures(ev) -> list[tuple[str, str, str]]:
    """A run's task figures where top-1 says nothing, each as (card label, card value, table cell text): a
    detector's F1 against the float model and its score SQNR, an OCR recognizer's changed strings, an encoder's
    cosine and nearest-neighbour agreement; [] for a classifier or no evaluation."""
    task = ev.task if ev is not None else None
    if task is None or ev.top1_accuracy_cand is not None or ev.top1_agreement is not None:
        return []
    return next((figures for kind in api.checks.task_kinds(task) if (figures := kind.figures(task))), [])


def model_title(path, file_name: str) -> str:
    """The one name of a model on every page: a bundled sample's title when ``path`` is the sample's own file,
    else ``file_name`` (an upload is called by its file's name, a byte-identical copy of a sample included)."""

    try:
        s = api.models.find_by_path(Path(path))
    except (OrtlabError, OSError, ValueError):  # a damaged sample folder: the file name still says which model it was
        s = None
    return (s.title or s.name) if s is not None else file_name


def source_title(a: Artifact) -> str:
    """What to call a run's source model (see :func:`model_title`): the name its model had when it ran."""
    return model_title(a.source_path, a.source_name)


def run_verdict(a: Artifact):
    """The verdict stored with a run; for runs recorded before verdicts, the default policy's verdict on its
    evaluation (unknown when it has none)."""

    return a.verdict if a.verdict is not None else api.checks.judge(a.evaluation, coverage=a.coverage)


def verdict_policy():
    """The verdict policy chosen in this session (Compare page), default at first."""

    return state.ui("verdict_policy") or VerdictPolicy()


def model_artifacts() -> list[Artifact]:
    """This session's artifacts made from the current model (same sha256), oldest first."""
    key = state.model_key()
    return [a for a in state.artifacts() if a.source_sha256 == key]


def _variant(a: Artifact, other: bool = False) -> Variant:
    rid = f"#{a.run_id} " if a.run_id is not None else ""
    label = recipe_label(a)
    if rid and label.startswith("#"):  # a re-run named after what changed: "#2 = #1 + 3 nodes kept in float"
        rid += "= "
    return Variant(variant_id(a), f"{rid}{label}" + (f" · other model {a.source_name}" if other else ""),
                   Path(a.model_path), a)


def variants(include_other: bool = False) -> list[Variant]:
    """The original (current model) first, then this session's artifacts of the current model, oldest first;
    with ``include_other`` also the artifacts of other models whose inputs and outputs match the current
    model's (names, dtypes, ranks; see :func:`other_model_variants`)."""
    out = []
    path = state.model_path()
    if path is not None:
        out.append(Variant(state.ORIGINAL, f"original · {state.model_label()}", path))
    out += [_variant(a) for a in model_artifacts()]
    if include_other:
        out += [v for v, why in other_model_variants() if why is None]
    return out


def io_signature(info) -> tuple:
    """What must match for two models to stand in for each other: each input's and output's name, dtype and
    rank."""
    return (tuple((t.name, str(t.dtype), len(t.shape)) for t in info.inputs),
            tuple((t.name, str(t.dtype), len(t.shape)) for t in info.outputs))


def other_model_variants() -> list[tuple[Variant, str | None]]:
    """This session's artifacts of other models, each with None when its I/O matches the current model's, or
    the reason it cannot be compared with or timed against it."""
    info = state.model_info()
    if info is None:
        return []
    mine = io_signature(info)
    out: list[tuple[Variant, str | None]] = []
    for a in state.artifacts():
        if a.source_sha256 == info.sha256:
            continue
        v = _variant(a, other=True)
        try:
            theirs = io_signature(model_cache.model_info(v.path))
        except (OrtlabError, OSError) as exc:  # a deleted or unreadable file: listed with the reason
            out.append((v, f"cannot be read ({type(exc).__name__})"))
            continue
        if theirs != mine:
            out.append((v, "its inputs/outputs (names, dtypes, ranks) differ from this model's"))
        else:
            out.append((v, None))
    return out


# -- recipe runs --------------------------------------------------------------------------------------
def run_spec(recipe: Recipe) -> RunSpec:
    """The current model, data (as re-loadable references) and preprocessing with ``recipe``."""
    from dataclasses import replace

    cal, ev = state.data_refs()
    ev_ds = state.eval_dataset()
    n_verify = len(evaluation_subset(ev_ds)) if ev_ds is not None else DEFAULT_EVAL_SAMPLES
    if ev is not None:
        st_ = state.data_settings()
        ev = replace(ev, count=n_verify, stratify=bool(st_.get("stratify", True)), seed=int(st_.get("seed", 0)))
    images = getattr(state.dataset(), "kind", "images") == "images"

    policy = verdict_policy()
    return RunSpec(model=str(state.model_path()), recipe=recipe, sample=state.sample_name(), calibration=cal,
                   evaluation=ev, preprocess=state.preprocess() if images else None, verify_samples=n_verify,
                   policy=None if policy == VerdictPolicy() else policy,
                   shapes=state.input_shapes())


# -- input shapes -------------------------------------------------------------------------------------
def input_specs(info, overrides: dict | None = None) -> list:
    """The current model's :class:`ortlab.data.inputs.InputSpec` list with the data in use, its preprocessing and
    ``overrides`` (default: the shapes set on the Data page); unresolved dims stay ``None`` (never raises for
    them)."""

    ds = state.dataset()
    images = getattr(ds, "kind", None) == "images"
    pre: Any = state.preprocess() if images else None  # a PreprocessConfig, or the sample (its manifest's)
    name = state.sample_name()
    if pre is None and name:
        pre = api.models.get_sample(name)
    shapes = state.input_shapes() if overrides is None else overrides
    return api.data.infer_specs(info, pre, ds, shapes, strict=False)


def spec_rows(specs) -> list[dict]:
    """One plain-text row per input spec: name, dtype, role, the model's shape, the shape used, where each
    dim came from."""
    rows = []
    for s in specs:
        rows.append({"input": s.name, "dtype": s.dtype, "role": s.role,
                     "model shape": "[" + ", ".join(str(d) for d in s.model_shape()) + "]",
                     "shape used": "[" + ", ".join("?" if d.value is None else str(d.value) for d in s.dims) + "]",
                     "batch axis": "none" if s.batch_axis is None else str(s.batch_axis),
                     # by axis, not by the exporter's name ("p2o.DynamicDimension.1"; the model shape has it)
                     "from": ", ".join(f"{api.data.axis_label(s, i).split(', ', 1)[1]}: {d.source}"
                                       + (f" ({d.reason})" if d.source == "default" else "")
                                       for i, d in enumerate(s.dims) if d.source != "model") or "model"})
    return rows


def bench_shapes() -> dict[str, list[int]]:
    """The shapes a benchmark uses: every input the model leaves open, at the size the Data page resolved
    (the user's shapes, the data's, the preprocessing's); inputs still open are left out (the benchmark then
    says which dim to set)."""
    info = state.model_info()
    if info is None:
        return state.input_shapes()
    try:
        specs = input_specs(info)
    except (OrtlabError, ValueError):  # a bad override is reported on the Data page
        return state.input_shapes()
    return {s.name: list(s.shape) for s in specs if s.resolved and any(d.source != "model" for d in s.dims)}


def demo_sample():
    """The bundled sample the demo runs on: the current model when it is a bundled sample (or a copy of one with
    the same sha256), else None — the demo needs a sample's own images."""

    info = state.model_info()
    if info is None:
        return None
    name = state.sample_name()
    if name:
        return api.models.get_sample(name)
    return api.models.find_by_sha256(info.sha256)


def demo_spec(sample) -> RunSpec:
    """The demo's RunSpec: :data:`DEMO_RECIPE` on the current model with the sample's own image sets and
    preprocessing (whatever data the Data page holds)."""

    cal_set = "calibration" if sample.calibration_dir else "evaluation"
    ev_set = "evaluation" if sample.evaluation_dir else cal_set
    n_ev = len(DataRef(sample=sample.name, set=ev_set).load())
    n_verify = min(DEFAULT_EVAL_SAMPLES, n_ev)
    policy = verdict_policy()
    return RunSpec(model=str(state.model_path()), recipe=DEMO_RECIPE, sample=sample.name,
                   calibration=DataRef(sample=sample.name, set=cal_set),
                   evaluation=DataRef(sample=sample.name, set=ev_set, count=n_verify),
                   preprocess=sample.preprocess, verify_samples=n_verify,
                   policy=None if policy == VerdictPolicy() else policy)


def start_demo_job() -> RecipeHandle:
    """Run the demo on the current bundled sample with its own data and land on Compare."""

    sample = demo_sample()
    if sample is None:
        raise RecipeError("The demo runs on the bundled samples only (it needs a sample's own images).")
    return start_recipe_job(DEMO_RECIPE, land_on_compare=True, spec=demo_spec(sample))


def start_recipe_job(recipe: Recipe, *, land_on_compare: bool = False, spec: RunSpec | None = None) -> RecipeHandle:
    """Start the recipe on the current model and data (or ``spec``) through the run service (a child process
    that records the result in the history itself); under tests wait for its end."""

    spec = spec or run_spec(recipe)
    info = state.model_info()  # read when the model was chosen: the run does not read it again
    same = info is not None and Path(info.path).resolve() == Path(spec.model).resolve()
    job = api.recipes.start_recipe(spec, workspace=workspace(), origin="app", info=info if same else None,
                                   speed_check=speed_check())
    job.meta = {"recipe": recipe, "land_on_compare": land_on_compare, "model": state.model_label(),
                "model_sha": state.model_key(), "page": state.current_page()}
    state.set_job("recipe", job)
    return started(job)  # type: ignore[return-value]


def speed_check() -> api.SpeedCheck:
    """How a Run times its result against its source after the verdict: the engine's default, unless the Recipe
    page's "time the result" setting (``state.ui("time_result")``) turned it on or off."""
    default = api.benchmarks.default_speed_check()
    on = state.ui("time_result")
    if on is None or bool(on) == default.enabled:
        return default
    return api.SpeedCheck(enabled=bool(on))


def finish_recipe_job(job: RecipeHandle) -> Artifact | None:
    """Put a finished run (already recorded by the service) into the session once; returns the artifact."""
    if job.state != DONE or job.handled:
        return None
    job.handled = True
    artifact = job.result
    state.add_artifact(artifact)
    state.set_compare_pair(state.ORIGINAL, variant_id(artifact), model=artifact.source_sha256)
    return artifact


def preprocess_explained(info, cfg: PreprocessConfig) -> api.ResolvedPreprocess | None:
    """``cfg`` (the Data page's preprocessing) with the source of each value: the manifest's or the model's, the
    chosen preset's (``state.ui("preprocess_preset")``), and "you" for every value changed on the page.
    ``open_size``: the model leaves height/width open and the size is still the unchosen placeholder."""
    name = state.sample_name()
    sample = api.models.get_sample(name) if name else None
    base = api.data.explain_preprocess(info, sample, preset=state.ui("preprocess_preset"))
    if base is None:
        return None
    sources = dict(base.sources)
    for name in sources:
        if getattr(cfg, name) != getattr(base.config, name):
            sources[name] = "you"
    open_size = base.open_size and cfg.size == base.config.size and not state.ui("preprocess_size_confirmed")
    return api.ResolvedPreprocess(cfg, sources, open_size, base.input_name, base.input_shape, base.manifest)


def apply_preset(info, name: str | None) -> PreprocessConfig | None:
    """Choose a preprocessing preset (None: none) and make its preprocessing the current one."""
    state.set_ui("preprocess_preset", name)
    sample_name = state.sample_name()
    sample = api.models.get_sample(sample_name) if sample_name else None
    current = state.preprocess()
    keep = {"size": current.size} if current is not None and state.ui("preprocess_size_confirmed") else None
    resolved = api.data.explain_preprocess(info, sample, overrides=keep, preset=name)
    cfg = resolved.config if resolved is not None else None
    state.set_preprocess(cfg)
    if cfg is not None:  # written into the form's widgets: a browser keeps showing a widget whose state is only deleted
        set_form_values(PreprocessConfig, cfg, "pre")
    else:
        state.clear_widgets("pre.")
    return cfg


def preprocess_or_detect(info) -> PreprocessConfig | None:
    """The current preprocessing, or the policy's (manifest, else detected; None for non-image models)."""
    current = state.preprocess()
    if current is not None:
        return current

    name = state.sample_name()
    sample = api.models.get_sample(name) if name else None
    return api.data.resolve_preprocess(info, sample)


CLI_WIDTH = 88  # characters a page's CLI line is continued at (between options), so it is read whole


def cli_line(run: Artifact, out: str) -> str:
    """The runnable ``ortlab optimize`` line of a History run (its RunSpec; the recipe alone for older runs)."""

    if run.spec is not None:
        return run.spec.cli_line(out, shell_roots(), width=CLI_WIDTH)
    return api.recipes.recipe_cli_line(run.recipe, str(run.source_path), out)


def shell_roots() -> dict[str, str]:
    """How a shell names this session's workspace, for CLI lines shown on a page: ``"$ORTLAB_HOME"`` (with
    ``/users/<key>`` in a shared app) when that variable chose it, else ``~/…`` under the home folder; the full
    server path is never spelled out."""
    import os

    root = workspace().root
    home_env = os.environ.get("ORTLAB_HOME", "").strip()
    out: dict[str, str] = {}
    if home_env:
        base = Path(home_env).expanduser()
        if root == base or base in root.parents:
            rel = root.relative_to(base).as_posix()
            out[str(root)] = '"$ORTLAB_HOME"' + ("" if rel == "." else "/" + rel)
    if not out and root.is_relative_to(Path.home()):
        out[str(root)] = "~/" + root.relative_to(Path.home()).as_posix()
    return out


def spec_cli_line(spec: RunSpec, out: str = "OUT.onnx", width: int = CLI_WIDTH) -> str:
    """``spec``'s CLI line as a page shows it (workspace paths from ``$ORTLAB_HOME`` or ``~``, continued between
    options at ``width``)."""
    return spec.cli_line(out, shell_roots(), width=width)


def load_run(run: Artifact) -> Artifact:
    """Put a History run (and its source model, when it is not current) into this session for Compare."""

    src = Path(run.source_path)
    current = state.model_path()
    if current is None or Path(current).resolve() != src.resolve():
        match = api.models.find_by_path(src)
        if match is not None:
            select_sample(match.name)
        else:
            state.set_model(src, api.models.model_info(src), sample=None, label=source_title(run))
    state.add_artifact(run)
    state.set_compare_pair(state.ORIGINAL, variant_id(run))
    return run


def _stored_data_set(ref: DataRef) -> Path | None:
    """The folder ``data/<digest>/`` of the workspace that ``ref`` (a path reference) reads from (there or deleted),
    or None when it reads from elsewhere."""
    try:
        p = Path(str(ref.path)).expanduser().resolve()
        stored = (workspace().root / "data").resolve()
    except (OSError, RuntimeError):
        return None
    return stored / p.relative_to(stored).parts[0] if p.is_relative_to(stored) and p != stored else None


def restore_run_data(run: Artifact) -> str | None:
    """Make the data ``run`` was made with (its RunSpec's calibration and evaluation, preprocessing and input
    shapes) this session's data of its model, as the Data page would set them, when that data still exists: a
    bundled sample's sets, a data set stored in the workspace (``data/<digest>/``), or random data. Returns None
    when it did, else why not (a clause: "it ran without data", "its data set was deleted from the workspace")."""
    from dataclasses import replace

    spec = run.spec
    if spec is None:
        return "the run keeps no record of its data"
    cal_ref, ev_ref = spec.calibration, spec.evaluation
    if cal_ref is None and ev_ref is None:
        return "it ran without data"
    folder = None
    for ref in (cal_ref, ev_ref):
        if ref is None or ref.path is None:
            continue
        folder = _stored_data_set(ref)
        if folder is None:  # a CLI run's own folder: not this app's to open
            return f"it read {Path(ref.path).name} from outside the workspace"
        if not Path(str(ref.path)).exists():
            return "its data set was deleted from the workspace"
    try:
        cal_full = replace(cal_ref, count=None) if cal_ref is not None else None
        ev_full = replace(ev_ref, count=None) if ev_ref is not None else None
        cal = cal_full.load() if cal_full is not None else None
        ev = ev_full.load() if ev_full is not None and ev_full != cal_full else cal
    except (OrtlabError, OSError, ValueError) as exc:  # a sample no longer installed, an unreadable file: said
        return f"its data could not be read ({getattr(exc, 'message', None) or type(exc).__name__})"
    if cal is None:
        cal = ev
    assert cal is not None and ev is not None
    ref = cal_ref or ev_ref
    assert ref is not None
    if ref.sample is not None:
        label = f"{ref.sample}: {cal_ref.set if cal_ref else ev_ref.set} ({len(cal)})"  # type: ignore[union-attr]
        if ev is not cal and ev_ref is not None:
            label += f", {ev_ref.set} ({len(ev)})"
        source = "sample" if demo_sample() is not None else "images"
    elif ref.random is not None:
        label, source = f"random ({len(cal)})", "random"
    else:
        about = api.data.read_about(folder) if folder is not None else None
        label = about["label"] if about is not None else f"stored data set {folder.name if folder else ''}".strip()
        if ev is not cal:
            label += f": {len(cal)} to calibrate, {len(ev)} held out to evaluate"
        source = cal.kind
    state.set_dataset(cal, label, eval_ds=ev)
    state.set_data_refs(cal_ref, replace(ev_ref, count=None) if ev_ref is not None else None)
    n = ev_ref.count if ev_ref is not None and ev_ref.count else min(DEFAULT_EVAL_SAMPLES, len(ev))
    state.set_data_settings(min(n, len(ev)), ev_ref.stratify if ev_ref is not None else True,
                            ev_ref.seed if ev_ref is not None else 0)
    images = cal.kind == "images"
    if images and spec.preprocess is not None:
        state.set_preprocess(spec.preprocess)
        state.set_ui("preprocess_size_confirmed", True)  # the run was made at this size: chosen, not a placeholder
    state.set_input_shapes(spec.shapes)
    state.set_ui("data_source", source)
    return None


def run_report(run: Artifact, ws: Workspace | None = None, cache: dict | None = None) -> str:
    """The self-contained HTML report of a History run (with its benchmark, when one timed it), from the
    workspace ``ws`` and the session cache ``cache`` (default: this session's)."""

    src, model = Path(run.source_path), Path(run.model_path)
    timing = api.benchmarks.report_timing(api.workspaces.open_history(ws or workspace()), run)
    return html_report(run, model_cache.model_info(src, cache).to_dict(), model_cache.model_info(model, cache).to_dict(),
                       model_cache.graph_diff(src, model, cache), run.evaluation, timing.bench, speed=timing.speed,
                       machine=timing.machine)


def report_download(run: Artifact):
    """A callable that builds ``run``'s HTML report when its download is clicked. Streamlit calls it outside the
    user's session (no ``st.user``, no session state), so this session's workspace and cache are taken now: in a
    shared app the report is built from the signed-in user's own workspace."""
    ws, cache = workspace(), state.cache()

    def build() -> str:
        return run_report(run, ws, cache)

    return build


def interrupted_runs() -> list:
    """Runs the end of the server cut short (``run_recovery.InterruptedRun``), to run again or dismiss."""
    return api.recipes.interrupted_runs(workspace())


def rerun_interrupted(run) -> RecipeHandle:
    """Start an interrupted run's spec again (its folder is then removed)."""
    if run.spec is None:
        raise RecipeError("This interrupted run's recipe cannot be read; set it up again on the Recipe page.")
    job = start_recipe_job(run.spec.recipe, spec=run.spec)
    api.recipes.dismiss_interrupted(run, workspace())
    return job


def dismiss_interrupted(run) -> None:
    api.recipes.dismiss_interrupted(run, workspace())
