"""Data: the images or tensors used for calibration and evaluation, and exactly how they become model inputs."""

import numpy as np
import streamlit as st

from ortlab import data, samples
from ortlab.config import PreprocessConfig
from ortlab.ui import actions, state
from ortlab.ui.cards import random_data_warning
from ortlab.ui.forms import dataclass_form
from ortlab.ui.guard import engine_errors
from ortlab.ui.inert import md
from ortlab.ui.progress_view import show_flash
from ortlab.ui.router import require_model, require_router, stop_page

require_router()
st.title(":material/photo_library: Data")
show_flash()
info = require_model()

SOURCES = ["sample", "images", "tensors", "random"]
SOURCE_NAMES = {"sample": "Bundled sample set", "images": "Upload images (files or a .zip)",
                "tensors": "Upload tensors (.npy / .npz)", "random": "Random data"}
sample = state.sample_name()
choices = SOURCES if sample else SOURCES[1:]
state.ensure_widget("data.source", state.ui("data_source") if state.ui("data_source") in choices else choices[0])
source = st.radio("Where the calibration and evaluation data come from", choices, key="data.source",
                  format_func=SOURCE_NAMES.get, horizontal=True)
state.set_ui("data_source", source)


def sample_labels() -> list[str]:
    if not sample:
        return []
    return list(samples.get_sample(sample).labels)


def _new_files(key: str, files) -> bool:
    sig = tuple(f.file_id for f in files)
    if sig and state.ui(key) != sig:
        state.set_ui(key, sig)
        return True
    return False


with st.container(border=True):
    if source == "sample":
        s = samples.get_sample(sample)
        sets = [n for n, d in (("calibration", s.calibration_dir), ("evaluation", s.evaluation_dir)) if d]
        c1, c2, c3 = st.columns([2, 2, 1])
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
                    ds = data.load_image_zip(zips[0].getvalue(), names)
                else:
                    ds = data.load_image_files([(f.name, f.getvalue()) for f in files], names)
                actions.set_user_dataset(ds, f"uploaded images ({len(ds)})")
                st.success(f"Loaded {len(ds)} images{' with labels' if ds.labeled() else ' (unlabeled)'}.")
    elif source == "tensors":
        f = st.file_uploader("A .npy (first axis = samples) or .npz (one array per input, optional 'labels')",
                             key="tensor_upload", type=["npy", "npz"])
        if f is not None and _new_files("tensor_upload", [f]):
            with engine_errors(f"Reading {f.name}"):
                ds = data.load_tensor_file(f.getvalue(), f.name)
                data.check_tensor_inputs(ds, info.inputs)
                actions.set_user_dataset(ds, f"{f.name} ({len(ds)})")
                st.success(f"Loaded {len(ds)} samples from {md(f.name)}.")
    else:
        st.warning("Random inputs make calibration ranges and accuracy meaningless. Use them only to try the "
                   "pipeline on a model without data; every result will carry a warning.")
        c1, c2 = st.columns(2)
        n_rand = c1.number_input("Random samples", 1, 10000, 32, key="data.random_n")
        if c2.checkbox("I understand: use random data", key="data.random_ok") and state.ui("random_applied") != n_rand:
            with engine_errors("Making random data"):
                actions.set_user_dataset(data.random_dataset(int(n_rand), seed=0), f"random ({n_rand})")
                state.set_ui("random_applied", n_rand)

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
    strat = st.toggle("Stratified by class", value=settings["stratify"], key="data.stratify",
                      help="Keep the class balance when drawing the evaluation samples.")
    seed = st.number_input("Seed", 0, 2**31 - 1, settings["seed"], key="data.seed")
state.set_data_settings(n, strat, seed)

if ds.kind == "images":
    st.markdown("#### Preview")
    k = min(24, len(ds))
    idx = [int(i) for i in np.linspace(0, len(ds) - 1, k)] if k else []
    with engine_errors("Reading the preview images"):
        imgs = [ds.load_preview(i) for i in idx]  # decoded reduced, never full-size
        caps = [ds.class_names[ds.samples[i].label] if ds.samples[i].label is not None and ds.class_names
                else ds.samples[i].name for i in idx]
        st.image(imgs, caption=caps, width=88)

    st.markdown("#### Preprocessing")
    current = actions.preprocess_or_detect(info) or PreprocessConfig()
    cols = st.columns([4, 1])
    with cols[1]:
        if st.button("Reset to detected", key="pre.reset", help="Detected from the model input, or the sample's manifest."):
            with engine_errors("Detecting preprocessing"):
                if sample:
                    current = samples.get_sample(sample).preprocess
                else:
                    current = data.detect_preprocess(info.inputs[0])
                state.set_preprocess(current)
                state.clear_widgets("pre.")
    with cols[0]:
        cfg = dataclass_form(PreprocessConfig, current, "pre", columns=3)
    problems = cfg.problems()
    for p in problems:
        st.error(p)
    if not problems:
        state.set_preprocess(cfg)

    st.markdown("#### What the model receives")
    with engine_errors("Preprocessing a batch"):
        b = list(range(min(4, len(ds))))
        feed = data.batch_inputs(ds, b, cfg, info.inputs)
        name, arr = next(iter(feed.items()))
        a32 = arr.astype(np.float32)
        m = st.columns(5)
        m[0].metric("Input", name, border=True)
        m[1].metric("Batch shape", "×".join(map(str, arr.shape)), border=True)
        m[2].metric("dtype", str(arr.dtype), border=True)
        m[3].metric("min / max", f"{a32.min():.3g} / {a32.max():.3g}", border=True)
        m[4].metric("mean", f"{a32.mean():.3g}", border=True)
        pc = st.columns(6)
        pc[0].image(ds.load_preview(0), caption="original", width=140)
        pc[1].image(data.tensor_preview(arr[0], cfg), caption=f"model input {cfg.size[0]}×{cfg.size[1]} (rescaled)",
                    width=140)
        data.check_fits(ds, cfg, info.inputs)
        st.success("This data fits the model.")
elif ds.kind == "tensors":
    with engine_errors("Checking the tensors against the model"):
        feed = data.batch_inputs(ds, [0], None, info.inputs)
        st.dataframe([{"input": k, "shape": list(v.shape), "dtype": str(v.dtype), "min": float(v.min()),
                       "max": float(v.max()), "mean": float(v.astype(np.float64).mean())} for k, v in feed.items()],
                     hide_index=True)
        st.success("These tensors fit the model.")
