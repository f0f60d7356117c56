"""Datasets, preprocessing and the calibration reader, on real image files and real tiny models."""

from __future__ import annotations

import io
import stat
import zipfile

import numpy as np
import pytest
from PIL import Image

from ortlab.settings.config import ChannelOrder, Layout, PreprocessConfig, ResizeMode
from ortlab.transforms.calibration import CalibrationReader
from ortlab.data.dataset import Dataset, Sample, random_dataset, stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits
from ortlab.data.loaders import load_image_files, load_image_folder, load_image_zip, load_tensor_file
from ortlab.data.preprocess import detect_preprocess, preprocess_image, tensor_preview
from ortlab.core.errors import Cancelled, DataError
from ortlab.data.inputs import infer_specs
from ortlab.model.inspect import TensorInfo
from ortlab.core.progress import CancelToken
from tests.support.reporting import CollectingReporter

IMG_IN = (TensorInfo("input", "float32", ("N", 3, 32, 32)),)


def png_bytes(color=(10, 20, 30), size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def make_folder(root, classes=("cat", "dog"), per_class=3):
    for ci, c in enumerate(classes):
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            (root / c / f"{i}.png").write_bytes(png_bytes((ci * 80, i * 40, 5)))
    return root


# -- folders, zips, uploads -----------------------------------------------------------------------------

def test_folder_class_subfolders_are_labels_and_non_images_are_skipped(tmp_path):
    root = make_folder(tmp_path / "data")
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.png").write_bytes(png_bytes())
    ds = load_image_folder(root)
    assert ds.kind == "images" and not ds.is_random
    assert ds.class_names == ["cat", "dog"]
    assert len(ds) == 6 and ds.labeled()
    assert [s.label for s in ds.samples] == [0, 0, 0, 1, 1, 1]
    assert ds.samples[0].name == "cat/0.png"
    assert ds.load_image(4).size == (40, 30)


def test_folder_labels_follow_given_class_names(tmp_path):
    root = make_folder(tmp_path / "data", classes=("dog", "cat"))
    ds = load_image_folder(root, class_names=["bird", "cat", "dog"])
    assert ds.class_names == ["bird", "cat", "dog"]
    assert {s.label for s in ds.samples} == {1, 2}
    assert all((s.label == 1) == s.name.startswith("cat/") for s in ds.samples)


def test_folder_with_unknown_class_name_is_refused(tmp_path):
    root = make_folder(tmp_path / "data", classes=("cat", "zebra"))
    with pytest.raises(DataError, match=r"Class folder\(s\) zebra .* are not among the model's 2 labels"):
        load_image_folder(root, class_names=["cat", "dog"])


def test_flat_folder_is_unlabeled(tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.jpg").write_bytes(png_bytes())  # PIL reads by content, not extension
    ds = load_image_folder(tmp_path)
    assert len(ds) == 3 and not ds.labeled() and ds.class_names == []


def test_broken_image_file_is_named(tmp_path):
    root = make_folder(tmp_path / "data")
    (root / "dog" / "broken.png").write_bytes(b"this is not a png")
    with pytest.raises(DataError, match=r"^dog/broken\.png has an image extension but cannot be opened"):
        load_image_folder(root)


def test_empty_and_missing_folders(tmp_path):
    with pytest.raises(DataError, match="No images found in folder"):
        load_image_folder(tmp_path)
    with pytest.raises(DataError, match="does not exist or is not a folder"):
        load_image_folder(tmp_path / "nope")


def test_mixed_loose_images_and_class_folders_are_refused(tmp_path):
    root = make_folder(tmp_path / "data")
    (root / "loose.png").write_bytes(png_bytes())
    with pytest.raises(DataError, match="mixes loose images"):
        load_image_folder(root)


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_zip_with_wrapping_folder_and_class_folders(tmp_path):
    data = zip_bytes({"digits/0/a.png": png_bytes(), "digits/1/b.png": png_bytes(), "digits/1/c.png": png_bytes(),
                      "__MACOSX/digits/._a.png": b"junk", "digits/readme.txt": b"hello"})
    ds = load_image_zip(data)
    assert ds.class_names == ["0", "1"] and [s.label for s in ds.samples] == [0, 1, 1]
    assert ds.samples[0].source == "zip:digits/0/a.png"
    assert ds.load_image(0).size == (40, 30)
    (tmp_path / "d.zip").write_bytes(data)
    assert len(load_image_zip(tmp_path / "d.zip")) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zip"]  # nothing extracted to disk


@pytest.mark.parametrize("name, message", [
    ("../evil.png", "leaves its folder"),
    ("/abs/evil.png", "absolute path"),
    ("C:/evil.png", "absolute path"),
])
def test_zip_slip_members_are_refused(name, message):
    with pytest.raises(DataError, match=message):
        load_image_zip(zip_bytes({"ok/a.png": png_bytes(), name: png_bytes()}))


def test_zip_symlink_member_is_refused():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("link.png")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(DataError, match="symbolic link"):
        load_image_zip(buf.getvalue())


def test_zip_bomb_and_caps(monkeypatch):
    bomb = zip_bytes({"a.png": b"\0" * 5_000_000})
    with pytest.raises(DataError, match="zip bomb"):
        load_image_zip(bomb)
    monkeypatch.setattr("ortlab.core.zipsafe.MAX_MEMBERS", 2)
    with pytest.raises(DataError, match="has 3 members; at most 2 are accepted"):
        load_image_zip(zip_bytes({f"{i}.png": png_bytes() for i in range(3)}))


def test_not_a_zip():
    with pytest.raises(DataError, match="is not a readable zip file"):
        load_image_zip(b"plain bytes")


def test_uploaded_files_flat_and_labeled(tmp_path):
    ds = load_image_files([("a.png", png_bytes()), ("b.PNG", png_bytes()), ("notes.txt", b"x")])
    assert [s.name for s in ds.samples] == ["a.png", "b.PNG"] and not ds.labeled()
    ds2 = load_image_files([("cat/a.png", png_bytes()), ("dog/b.png", png_bytes())], class_names=["cat", "dog"])
    assert [s.label for s in ds2.samples] == [0, 1]
    p = tmp_path / "x.png"
    p.write_bytes(png_bytes())
    assert load_image_files([p]).samples[0].source == str(p)
    with pytest.raises(DataError, match=r"^bad\.png has an image extension"):
        load_image_files([("bad.png", b"nope")])


# -- tensors ---------------------------------------------------------------------------------------------

def test_npy_tensors_validate_against_model_inputs(tmp_path):
    arr = np.random.default_rng(0).standard_normal((5, 3, 32, 32))  # float64 on purpose
    np.save(tmp_path / "x.npy", arr)
    ds = load_tensor_file(tmp_path / "x.npy")
    assert ds.kind == "tensors" and len(ds) == 5 and not ds.labeled()
    feed = batch_inputs(ds, [2], None, IMG_IN)
    assert feed["input"].shape == (1, 3, 32, 32) and feed["input"].dtype == np.float32
    np.testing.assert_allclose(feed["input"][0], arr[2].astype(np.float32))
    wrong = (TensorInfo("input", "float32", ("N", 3, 64, 64)),)
    with pytest.raises(DataError) as err:
        batch_inputs(ds, [0], None, wrong)
    assert err.value.message.startswith(
        "The .npy array has shape [5, 3, 32, 32]: 5 samples of shape [3, 32, 32] (its first axis counts samples), "
        "but model input 'input' [N, 3, 64, 64] takes samples of shape [3, 64, 64] (first axis = samples). "
        "Per sample, axis 1: got 32, the model fixes 64; axis 2: got 32, the model fixes 64.")


@pytest.mark.parametrize("array, model, hint", [
    # the silero case: a fixed [1, 576] input, each sample saved with its own batch axis of 1
    ((4, 1, 576), ("N", 576), "an extra axis of size 1 that the model does not take: save the array as [4, 576]."),
    ((4, 576), ("N", 1, 576), "lack the model's axis 0 of size 1: save the array as [4, 1, 576]."),
    ((4, 2, 3), ("N", 5), "A sample has 2 axes, the model's 1: save the array as [samples, 5]."),
])
def test_tensor_shape_messages_say_which_axis_differs(tmp_path, array, model, hint):
    np.save(tmp_path / "x.npy", np.zeros(array, dtype=np.float32))
    ds = load_tensor_file(tmp_path / "x.npy")
    with pytest.raises(DataError) as err:
        batch_inputs(ds, [0], None, (TensorInfo("input", "float32", model),))
    assert err.value.message.endswith(hint), err.value.message


def test_npz_keys_must_be_input_names_and_labels_are_read(tmp_path):
    ids = np.arange(12, dtype=np.int64).reshape(4, 3)
    mask = np.ones((4, 3), dtype=np.int64)
    np.savez(tmp_path / "t.npz", ids=ids, mask=mask, labels=np.array([0, 1, 1, 2]))
    ds = load_tensor_file((tmp_path / "t.npz").read_bytes(), name="t.npz")
    inputs = (TensorInfo("ids", "int64", ("N", "seq")), TensorInfo("mask", "int64", ("N", "seq")))
    assert ds.labeled() and [s.label for s in ds.samples] == [0, 1, 1, 2] and ds.class_names == ["0", "1", "2"]
    feed = batch_inputs(ds, [1, 3], None, inputs)
    np.testing.assert_array_equal(feed["ids"], ids[[1, 3]])
    with pytest.raises(DataError, match=r"The \.npz keys \(ids, mask\) must be the model's input names \(ids, tok\)"):
        batch_inputs(ds, [0], None, (TensorInfo("ids", "int64", ("N", "seq")), TensorInfo("tok", "int64", ("N", "seq"))))
    with pytest.raises(DataError, match=r"Array 'ids' is int64 but model input 'ids' is float32"):
        batch_inputs(ds, [0], None, (TensorInfo("ids", "float32", ("N", 3)), TensorInfo("mask", "int64", ("N", 3))))


def test_bad_tensor_files(tmp_path):
    np.savez(tmp_path / "uneven.npz", a=np.zeros((3, 2)), b=np.zeros((4, 2)))
    with pytest.raises(DataError, match=r"different sample counts \(a: 3, b: 4\)"):
        load_tensor_file(tmp_path / "uneven.npz")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match="holds Python objects"):
        load_tensor_file(tmp_path / "obj.npy")
    (tmp_path / "junk.npy").write_bytes(b"junk")
    with pytest.raises(DataError, match=r"is not a \.npy or \.npz file"):
        load_tensor_file(tmp_path / "junk.npy")


# -- random, sampling ------------------------------------------------------------------------------------

def test_random_dataset_is_flagged_and_reproducible():
    ds = random_dataset(4, seed=3)
    assert ds.is_random and ds.kind == "random" and len(ds) == 4
    a = batch_inputs(ds, [1], None, IMG_IN)["input"]
    assert a.shape == (1, 3, 32, 32) and a.dtype == np.float32
    np.testing.assert_array_equal(a, batch_inputs(random_dataset(4, seed=3), [1], None, IMG_IN)["input"])
    assert not np.array_equal(a, batch_inputs(ds, [2], None, IMG_IN)["input"])
    sub = stratified_sample(ds, 2, seed=0)
    assert sub.is_random  # the flag survives sub-sampling
    first = sub.samples[0].index
    assert first is not None
    np.testing.assert_array_equal(batch_inputs(sub, [0], None, IMG_IN)["input"],
                                  batch_inputs(ds, [first], None, IMG_IN)["input"])
    # open dims are never guessed: they are named, with the flag that sets them
    seq_in = (TensorInfo("x", "int64", ("batch", "seq")),)
    with pytest.raises(DataError, match=r"'seq' \(axis 1\).*--shape x=1,D1"):
        batch_inputs(ds, [0], None, seq_in)
    dyn = batch_inputs(ds, [0], None, seq_in, infer_specs(seq_in, overrides={"x": [1, 12]}))["x"]
    assert dyn.shape == (1, 12) and dyn.dtype == np.int64
    img_in = (TensorInfo("x", "float32", ("N", "H", "W", 1)),)
    with pytest.raises(DataError, match=r"'H' \(axis 1\), 'W' \(axis 2\).*--shape x=1,H,W,1"):
        batch_inputs(ds, [0], None, img_in)
    img = batch_inputs(ds, [0], None, img_in, infer_specs(img_in, overrides={"x": [1, 40, 30, 1]}))["x"]
    assert img.shape == (1, 40, 30, 1)


def test_stratified_sample_is_deterministic_and_balanced(tmp_path):
    samples = [
        Sample(f"s{i}", i % 4 if i < 80 else 0, f"p{i}")
        for i in range(100)
    ]
    ds = Dataset("images", samples, ["a", "b", "c", "d"], False)
    sub = stratified_sample(ds, 20, seed=7)
    counts = np.bincount([s.label for s in sub.samples if s.label is not None], minlength=4)
    assert counts.tolist() == [8, 4, 4, 4]  # class 0 holds 40 % of the data
    assert [s.name for s in sub.samples] == [s.name for s in stratified_sample(ds, 20, seed=7).samples]
    assert [s.name for s in sub.samples] != [s.name for s in stratified_sample(ds, 20, seed=8).samples]
    assert len(stratified_sample(ds, 500)) == 100
    # a subset remembers how many samples it was drawn from (a verdict never asks for more than that)
    assert ds.population == 0 and sub.population == 100
    assert stratified_sample(sub, 5, seed=0).population == 100


# -- preprocessing ---------------------------------------------------------------------------------------

def test_detect_preprocess_from_input_shape():
    nchw = detect_preprocess(TensorInfo("x", "float32", ("N", 3, 32, 48)))
    assert (nchw.layout.value, nchw.size, nchw.channels) == ("NCHW", (32, 48), 3)
    nhwc = detect_preprocess(TensorInfo("x", "uint8", (1, 64, 64, 1)))
    assert (nhwc.layout.value, nhwc.size, nhwc.channels, nhwc.scale.value, nhwc.dtype) == ("NHWC", (64, 64), 1, "0-255", "uint8")
    dyn = detect_preprocess(TensorInfo("x", "float32", ("N", 3, "H", "W")))
    assert dyn.size == (224, 224)
    with pytest.raises(DataError, match=r"Model input 'x' has shape \[N, 16\], not an image"):
        detect_preprocess(TensorInfo("x", "float32", ("N", 16)))


def test_preprocess_image_follows_the_spec_exactly():
    img = Image.fromarray(np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3), "RGB")
    cfg = PreprocessConfig(size=(2, 3), mean=(0.5, 0.25, 0.0), std=(0.5, 0.5, 2.0), channel_order=ChannelOrder.BGR)
    x = preprocess_image(img, cfg)
    ref: np.ndarray = np.asarray(img.resize((3, 2), Image.Resampling.BILINEAR), dtype=np.float32) / 255.0
    ref = (ref[:, :, ::-1] - np.array([0.5, 0.25, 0.0], np.float32)) / np.array([0.5, 0.5, 2.0], np.float32)
    assert x.shape == (3, 2, 3) and x.dtype == np.float32
    np.testing.assert_array_equal(x, ref.transpose(2, 0, 1))
    gray = preprocess_image(img, PreprocessConfig(size=(4, 4), channels=1, mean=(0.5,), std=(0.5,), layout=Layout.NHWC))
    assert gray.shape == (4, 4, 1) and gray.min() >= -1.0 and gray.max() <= 1.0


def test_center_crop_and_letterbox():
    grad = Image.fromarray(np.tile(np.arange(100, dtype=np.uint8) * 2, (51, 1)), "L").convert("RGB")  # 100×51
    crop = preprocess_image(grad, PreprocessConfig(size=(28, 28), resize_mode=ResizeMode.CENTER_CROP))
    # short side 51 → round(28·256/224) = 32, long side → round(100·32/51) = 63; crop at ((63-28)//2, (32-28)//2)
    manual = np.asarray(grad.resize((63, 32), Image.Resampling.BILINEAR).crop((17, 2, 45, 30)), dtype=np.float32) / 255.0
    np.testing.assert_array_equal(crop, manual.transpose(2, 0, 1))
    img = Image.new("RGB", (100, 50), (255, 255, 255))
    box = preprocess_image(img, PreprocessConfig(size=(20, 20), resize_mode=ResizeMode.LETTERBOX, layout=Layout.NHWC))
    assert box.shape == (20, 20, 3)
    grey = np.float32(114 / 255)  # YOLO exporters' letterbox grey, not black
    assert (box[0] == grey).all() and (box[-1] == grey).all() and box[10, 10].min() == 1.0  # padded top/bottom


def test_wrong_images_for_the_model_say_what_it_expects(tmp_path):
    ds = load_image_folder(make_folder(tmp_path / "d"))
    gray = PreprocessConfig(size=(32, 32), channels=1, mean=(0.0,), std=(1.0,))
    with pytest.raises(DataError, match=r"Preprocessing makes 1-channel NCHW images but the model expects "
                                        r"\[N, 3, 32, 32\] \(NCHW, 3 channel\(s\)\); set channels to 3"):
        batch_inputs(ds, [0], gray, IMG_IN)
    with pytest.raises(DataError, match=r"resizes to 64×64 but the model expects .*; set size to 32×32"):
        batch_inputs(ds, [0], PreprocessConfig(size=(64, 64)), IMG_IN)
    with pytest.raises(DataError, match=r"not an image \(\[N, C, H, W\] or \[N, H, W, C\]\)"):
        batch_inputs(ds, [0], None, (TensorInfo("tokens", "int64", ("N", 16)),))
    feed = batch_inputs(ds, [0], None, IMG_IN)
    assert feed["input"].shape == (1, 3, 32, 32)


def test_images_for_a_model_with_several_inputs_name_them_and_ask_for_an_npz(tmp_path):
    """As silero_vad_v6 (faster-whisper's) said "Images need preprocessing settings", which no setting could meet."""
    ds = load_image_folder(make_folder(tmp_path / "d"))
    vad = (TensorInfo("input", "float32", ("seq_len", 576)), TensorInfo("h", "float32", (1, 1, 128)),
           TensorInfo("c", "float32", (1, 1, 128)))
    said = ("Images can feed a model with one input; this model has 3 (input [seq_len, 576], h [1, 1, 128], "
            "c [1, 1, 128]). Use an .npz file with one array per input.")
    for cfg in (None, PreprocessConfig(size=(32, 32))):
        with pytest.raises(DataError) as err:
            batch_inputs(ds, [0], cfg, vad)
        assert err.value.message == said
        with pytest.raises(DataError) as err:
            check_fits(ds, cfg, vad)
        assert err.value.message == said


# -- calibration reader ----------------------------------------------------------------------------------

def test_calibration_reader_counts_rewinds_and_cancels(tmp_path):
    ds = load_image_folder(make_folder(tmp_path / "d"))
    rep = CollectingReporter()
    reader = CalibrationReader(ds, None, IMG_IN, rep)
    feeds = list(iter(reader.get_next, None))
    assert len(feeds) == 6 and feeds[0]["input"].shape == (1, 3, 32, 32)
    assert [(e.stage, e.done, e.total) for e in rep.events] == [("calibrate", i, 6) for i in range(1, 7)]
    assert reader.get_next() is None
    reader.rewind()
    assert reader.get_next() is not None
    token = CancelToken()
    reader = CalibrationReader(ds, None, IMG_IN, cancel=token)
    reader.get_next()
    token.cancel()
    with pytest.raises(Cancelled):
        reader.get_next()


def test_calibration_reader_checks_fit_up_front(tmp_path):
    ds = load_image_folder(make_folder(tmp_path / "d"))
    with pytest.raises(DataError, match="set channels to 3"):
        CalibrationReader(ds, PreprocessConfig(size=(32, 32), channels=1, mean=(0.0,), std=(1.0,)), IMG_IN)


def test_tensor_preview_undoes_layout_and_channel_order_for_display():
    img = Image.fromarray(np.stack([np.full((4, 6), v, np.uint8) for v in (200, 100, 0)], axis=-1), "RGB")
    cfg = PreprocessConfig(size=(4, 6), channel_order=ChannelOrder.BGR, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    shown = tensor_preview(preprocess_image(img, cfg), cfg)
    assert shown.shape == (4, 6, 3) and shown.dtype == np.uint8
    assert list(shown[0, 0]) == [255, 128, 0]  # red stays the strongest channel, stretched to 0–255
    gray = tensor_preview(preprocess_image(img, PreprocessConfig(size=(4, 6), channels=1, mean=(0,), std=(1,))),
                          PreprocessConfig(size=(4, 6), channels=1, mean=(0,), std=(1,)))
    assert gray.shape == (4, 6)
