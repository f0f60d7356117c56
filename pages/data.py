"""Data: the images, tensors or text used for calibration and evaluation, exactly how they become model inputs,
and the shape of every input."""

import numpy as np
import streamlit as st

from ortlab import api
from ortlab.api import PreprocessConfig
from ortlab.ui.session import actions, state
from ortlab.ui.views.cards import random_data_warning
from ortlab.ui.views.forms import dataclass_form
from ortlab.ui.session.guard import engine_errors, show_message
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import show_flash
from ortlab.ui.session.router import require_model, require_router, stop_page

require_router()
st.title(":material/photo_library: Data")
show_flash()
info = require_model()

SOURCES = ["sample", "images", "tensors", "text", "random"]
SOURCE_NAMES = {"sample": "Bundled sample set", "images": "Upload images (files or a .zip)",
                "tensors": "Upload tensors (.npy / .npz)", "text": "Upload text (.txt + tokenizer.json)",
                "random": "Random data"}
# the bundled sample this model is (an uploaded byte-identical copy included): its image sets are offered
_sample = actions.demo_sample()
sample = _sample.name if _sample is not None else None
choices = SOURCES if sample else SOURCES[1:]
state.ensure_widget("data.source", state.ui("data_source") if state.ui("data_source") in choices else choices[0])
source = st.radio("Where the calibration and evaluation data come from", choices, key="data.source",
                  format_func=SOURCE_NAMES.get, horizontal=True)
state.set_ui("data_source", source)


def sample_labels() -> list[str]:
    if not sample:
        return []
    return list(api.models.get_sample(sample).labels)


def _new_files(key: str, files) -> bool:
    sig = tuple(f.file_id for f in files)
    if sig and state.ui(key) != sig:
        state.set_ui(key, sig)
        return True
    return False


with st.container(border=True):
    if source == "sample":
        assert sample is not None  # the "sample" source is offered only when there is one
        s = api.models.get_sample(sample)
        sets = [n for n, d in (("calibration", s.calibration_dir), ("evaluation", s.evaluation_dir)) if d]
        c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
        cal = c1.selectbox("Calibrate with", sets, key="data.sample_cal")
        ev = c2.selectbox("Evaluate with", sets, index=len(sets) - 1, key="data.sample_eval")
        if c3.button("Use these sets", key="data.use_sample"):
            with engine_errors("Loading the sample's images"):
                actions.use_sample_data(s, cal, ev)
        if s.data_notes:
            st.caption(s.data_notes)
    elif source == "images":
        files = st.file_uploader("Images (class sub-folders in a zip become labels)", key="data_upload",
                                 accept_multiple_files=True,
                                 type=["png", "jpg", "jpeg", "bmp", "gif", "webp", "tif", "tiff", "zip"])
        if files and _new_files("data_upload", files):
            with engine_errors("Reading the uploaded images"):
                zips = [f for f in files if f.name.lower().endswith(".zip")]
                names = sample_labels() or None
                if zips:
                    ds = api.data.load_image_zip(zips[0].getvalue(), names)
                else:
                    ds = api.data.load_image_files([(f.name, f.getvalue()) for f in files], names)
                actions.set_user_dataset(ds, f"uploaded images ({len(ds)})" + (f" from {zips[0].name}" if zips else ""))
                st.success(f"Loaded {len(ds)} images{' with labels' if ds.labeled() else ' (unlabeled)'}.")
                note = state.flash()  # the detected preprocessing: said now, not again after the next click
                if note is not None:
                    show_message(*note)
    elif source == "tensors":
        f = st.file_uploader("A .npy (first axis = samples) or .npz (one array per input, optional 'labels')",
                             key="tensor_upload", type=["npy", "npz"])
        if f is not None and _new_files("tensor_upload", [f]):
            with engine_errors(f"Reading {f.name}"):
                ds = api.data.load_tensor_file(f.getvalue(), f.name)
                api.data.check_tensor_inputs(ds, info.inputs, actions.input_specs(info, overrides={}))
                actions.set_user_dataset(ds, f"{f.name} ({len(ds)})")
                st.success(f"Loaded {len(ds)} samples from {md(f.name)}.")
    elif source == "text":
        c1, c2, c3 = st.columns([2, 2, 1])
        txt = c1.file_uploader("Text, one example per line (.txt)", key="text_upload", type=["txt"])
        tok = c2.file_uploader("Hugging Face tokenizer.json", key="tokenizer_upload", type=["json"])
        seq = c3.number_input("Sequence length", 0, 65536, 0, key="data.seq_len",
                              help="Padded or truncated to this many tokens; 0 = the model's fixed length, else 128.")
        if txt is not None and tok is not None and _new_files("text_upload", [txt, tok]) | (
                state.ui("text_seq") != seq):
            state.set_ui("text_seq", seq)
            with engine_errors(f"Reading {txt.name} with {tok.name}"):
                ds = api.data.load_text_file(txt.getvalue(), tok.getvalue(), int(seq) or None, txt.name)
                actions.set_user_dataset(ds, f"{txt.name} ({len(ds)})")
                st.success(f"Loaded {len(ds)} lines from {md(txt.name)}.")
    else:
        st.warning("Random inputs make calibration ranges and accuracy meaningless. Use them only to try the "
                   "pipeline on a model without data; every result will carry a warning.")
        c1, c2 = st.columns(2)
        n_rand = c1.number_input("Random samples", 1, 10000, 32, key="data.random_n")
        if c2.checkbox("I understand: use random data", key="data.random_ok") and state.ui("random_applied") != n_rand:
            with engine_errors("Making random data"):
                actions.set_user_dataset(api.data.random_dataset(int(n_rand), seed=0), f"random ({n_rand})")
                state.set_ui("random_applied", n_rand)


def short_name(name: str, keep: int = 11) -> str:
    """A file name for an 88 px caption: whole when short, else its start and end ("astro…009.jpg"), never broken
    mid-word across lines."""
    return name if len(name) <= keep else name[:4] + "…" + name[-(keep - 5):]


def input_shapes_form() -> None:
    """One small form per model input: its spec (dtype, role, the model's shape with symbolic names, where each
    value came from) with the open dims editable; the user's shapes go into every run and benchmark."""
    with engine_errors("Working out the input shapes"):
        base = actions.input_specs(info, overrides={})
        specs = actions.input_specs(info)
        shapes = state.input_shapes()
        shown = state.ui("shapes_shown") or {}
        state.set_ui("shapes_shown", shown)
        changed = False
        for spec, plain in zip(specs, base):
            with st.container(border=True):
                batch = "no batch axis" if spec.batch_axis is None else f"batch axis {spec.batch_axis}"
                st.text(f"{spec.name} · {spec.dtype} · {spec.role} · {batch} · model shape "
                        f"[{', '.join(str(d) for d in spec.model_shape())}]")
                cols = st.columns(max(1, len(spec.dims)))
                values = []
                for i, (d, col) in enumerate(zip(spec.dims, cols)):
                    key = f"shape.{info.sha256[:8]}.{spec.name}.{i}"
                    if shown.get(key) != (d.value, d.source):  # the data or another input changed it: redraw
                        state.clear_widgets(key)
                        shown[key] = (d.value, d.source)
                    # labelled by input and axis; the exporter's name ("p2o.DynamicDimension.1") only in the help
                    label = md(api.data.axis_label(spec, i))
                    fixed = d.source == "model"
                    sizes = "" if fixed else ", ".join(map(str, api.data.suggested_sizes(spec, i)))
                    named = f"The model calls this dim “{d.name}”. " if d.name else ""
                    why = ("Fixed by the model." if fixed else "Open: nothing sets it yet." if d.value is None
                           else f"Set from {d.source}" + (f": {d.reason}." if d.reason else "."))
                    values.append(col.number_input(
                        label, min_value=1, value=d.value, step=1, key=key, disabled=fixed,
                        placeholder=f"e.g. {sizes}" if sizes else "a size",
                        help=md(f"{named}{why}" + (f" Common sizes: {sizes}." if sizes else ""))))
                if any(v is None for v in values):
                    open_dims = [api.data.axis_label(spec, i) + (f": e.g. {', '.join(map(str, sz))}" if sz else "")
                                 for i, v in enumerate(values) if v is None
                                 for sz in [api.data.suggested_sizes(spec, i)]]
                    st.warning(md(f"Set every open dim of '{spec.name}' (the model does not fix them and the data "
                                  f"does not tell): {'; '.join(open_dims)}."))
                    continue
                shape = [int(v) for v in values]
                if spec.resolved and shape == list(spec.shape):
                    continue  # as shown: nothing changed here
                if plain.resolved and shape == list(plain.shape):
                    changed = changed or shapes.pop(spec.name, None) is not None
                elif shapes.get(spec.name) != shape:
                    shapes[spec.name] = shape
                    changed = True
        if changed:
            state.set_input_shapes(shapes)
            st.rerun()
        if shapes and st.button("Reset input shapes", key="data.shapes_reset"):
            state.set_input_shapes({})
            state.clear_widgets(f"shape.{info.sha256[:8]}.")
            st.rerun()


st.markdown("#### Input shapes")
st.caption("What every run, comparison and benchmark feeds each model input. Dims the model fixes are shown "
           "greyed; the others come from the data, the preprocessing, or you.")
input_shapes_form()

ds = state.dataset()
if ds is None:
    st.info("No data selected yet.")
    stop_page()
if ds.is_random:
    random_data_warning("This data set")

st.subheader(f"Data in use: {md(state.dataset_label())}")
ev_ds = state.eval_dataset()
settings = state.data_settings()
c1, c2, c3, c4 = st.columns(4)
c1.metric("Calibration samples available", len(ds), border=True)
c2.metric("Evaluation samples available", len(ev_ds) if ev_ds is not None else 0, border=True)
c3.metric("Classes", len(ds.class_names) if ds.labeled() else "unlabeled", border=True)
with c4:
    n = st.number_input("Samples used for evaluation", 1, max(1, len(ev_ds) if ev_ds is not None else 1),
                        max(1, min(int(settings["n"] or 1), len(ev_ds) if ev_ds is not None else 1)), key="data.n")
    labelled = ds.labeled() and ev_ds is not None and ev_ds.labeled()
    if not labelled:  # no classes to balance: off, and said so
        state.set_widget("data.stratify", False)
    else:
        state.ensure_widget("data.stratify", settings["stratify"])
    strat = st.toggle("Stratified by class", key="data.stratify", disabled=not labelled,
                      help="Keep the class balance when drawing the evaluation samples." if labelled else
                      "Off: this data has no class labels (class sub-folders) to balance.")
    seed = st.number_input("Seed", 0, 2**31 - 1, settings["seed"], key="data.seed")
state.set_data_settings(n, strat, seed)

if ds.kind == "images":
    st.markdown("#### Preview")
    k = min(24, len(ds))
    idx = [int(i) for i in np.linspace(0, len(ds) - 1, k)] if k else []
    with engine_errors("Reading the preview images"):
        imgs = [ds.load_preview(i) for i in idx]  # decoded reduced, never full-size
        caps = [ds.class_names[ds.samples[i].label] if ds.samples[i].label is not None and ds.class_names
                else short_name(ds.samples[i].name) for i in idx]
        st.image(imgs, caption=caps, width=88)

    st.markdown("#### Preprocessing")
    presets = [None, *api.data.PREPROCESS_PRESETS]
    chosen = state.ui("preprocess_preset")
    suggested = None if sample else api.data.suggest_preprocess_preset(info)
    if suggested is not None and chosen is None and state.widget("data.preset") is None:
        preset = api.data.PREPROCESS_PRESETS[suggested[0]]
        sc = st.columns([4, 1], vertical_alignment="center")
        sc[0].info(f"This model's shapes fit the **{md(preset.label)}** preset: {md(suggested[1])}. "
                   f"It sets {md(preset.source)}.", icon=":material/lightbulb:")
        # as if picked in the select below (its callback runs before this page, so the select shows the preset)
        sc[1].button("Use this preset", key="data.use_suggested_preset", on_click=state.set_widget,
                     args=("data.preset", suggested[0]))
    state.ensure_widget("data.preset", chosen if chosen in presets else None)
    picked = st.selectbox("Preset (a known convention; none is applied unless you pick it)", presets,
                          key="data.preset",
                          format_func=lambda k: "none: the manifest's or the model's values" if k is None else
                          f"{api.data.PREPROCESS_PRESETS[k].label}: {api.data.PREPROCESS_PRESETS[k].source}")
    if picked != chosen:
        with engine_errors("Applying the preset"):
            actions.apply_preset(info, picked)
    current = actions.preprocess_or_detect(info) or PreprocessConfig()
    cols = st.columns([4, 1])
    with cols[1]:
        if st.button("Reset to detected", key="pre.reset", help="Detected from the model input, or the sample's manifest."):
            with engine_errors("Detecting preprocessing"):
                if sample:
                    current = api.models.get_sample(sample).preprocess
                else:
                    current = api.data.detect_preprocess(info.inputs[0])
                state.set_ui("preprocess_preset", None)
                state.set_ui("preprocess_size_confirmed", False)
                state.set_preprocess(current)
                state.clear_widgets("pre.")
    with cols[0]:
        cfg = dataclass_form(PreprocessConfig, current, "pre", columns=3)
    problems = cfg.problems()
    for p in problems:
        st.error(p)
    if not problems:
        state.set_preprocess(cfg)
    explained = actions.preprocess_explained(info, cfg) if not problems else None
    if explained is not None:
        st.caption("The preprocessing every run, comparison and calibration uses, and where each value came from:")
        st.dataframe([{"setting": setting, "from": source} for setting, source in explained.rows()], hide_index=True)
        sample = state.sample_name()
        if sample and explained.manifest_changes():
            st.warning(md(explained.manifest_warning(sample)), icon=":material/warning:")
        if explained.open_size:
            st.error(md(actions.open_size_request(explained, cfg)))
            if st.checkbox(f"Use {cfg.size[0]}×{cfg.size[1]}", key="data.size_ok"):
                state.set_ui("preprocess_size_confirmed", True)
                st.rerun()
            stop_page()

    st.markdown("#### What the model receives")
    with engine_errors("Preprocessing a batch"):
        fixed = next((s.dims[s.batch_axis].value for s in actions.input_specs(info) if s.batch_fixed), None)
        b = list(range(min(fixed or 4, len(ds))))  # a model with a fixed batch gets exactly that many
        feed = api.data.batch_inputs(ds, b, cfg, info.inputs)
        name, arr = next(iter(feed.items()))
        a32 = arr.astype(np.float32)
        # the whole shape goes in a caption: as a card's big figure "4×3×224×224" wraps in a fifth of the page
        st.caption(f"Input {md(name)} · batch shape {list(arr.shape)}")
        m = st.columns(4)
        m[0].metric("Batch size", str(arr.shape[0]) if arr.ndim else "1", border=True,
                    help="Samples in this preview batch (a model with a fixed batch gets exactly that many).")
        m[1].metric("dtype", str(arr.dtype), border=True)
        m[2].metric("min / max", f"{a32.min():.3g} / {a32.max():.3g}", border=True)
        m[3].metric("mean", f"{a32.mean():.3g}", border=True)
        pc = st.columns(6)
        pc[0].image(ds.load_preview(0), caption="original", width=140)
        pc[1].image(api.data.tensor_preview(arr[0], cfg), caption=f"model input {cfg.size[0]}×{cfg.size[1]} (rescaled)",
                    width=140)
        api.data.check_fits(ds, cfg, info.inputs)
        st.success("This data fits the model.")
elif ds.kind in ("tensors", "text"):
    with engine_errors("Checking the data against the model"):
        feed = api.data.batch_inputs(ds, [0], None, info.inputs, actions.input_specs(info))
        st.dataframe([{"input": k, "shape": list(v.shape), "dtype": str(v.dtype), "min": float(v.min()),
                       "max": float(v.max()), "mean": float(v.astype(np.float64).mean())} for k, v in feed.items()],
                     hide_index=True)
        st.success("These tensors fit the model.")
