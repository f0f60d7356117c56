"""Input specs: every input's shape, batch axis and role, never guessed; --shape; text data with a tokenizer.

Real models built with onnx.helper: a conv net with dynamic H/W, a transformer-style model with int64
input_ids/attention_mask of dynamic [batch, seq], and a bidirectional GRU whose initial state is [2, batch, 16].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortlab.cli import main as cli
from ortlab.data.dataset import random_dataset
from ortlab.data.feeds import batch_inputs, check_fits
from ortlab.data.loaders import load_tensor_file, load_text_file
from ortlab.data.preprocess import detect_preprocess
from ortlab.data.store import dataset_digest, write_dataset
from ortlab.timing.bench import latency_samples, make_inputs
from ortlab.transforms.calibration import CalibrationReader
from ortlab.settings.config import BenchConfig, PreprocessConfig, QuantConfig, QuantMode, Precision, Recipe
from ortlab.core.errors import DataError
from ortlab.data.inputs import fit_preprocess, infer_specs, is_control_input, parse_shape
from ortlab.model.inspect import TensorInfo, inspect_model
from ortlab.runs.runspec import DataRef, RunSpec
from tests.support.models import onnx_node_case

VOCAB = 64
TEXT = ["the cat sat on the mat", "a dog ran in the park", "the bird sang a song", "cats and dogs play",
        "the mat is red", "a song for the park"]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(path))
    return path


def _model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ortlab-tests")
    m.ir_version = 8
    return m


def dynamic_hw_model(path: Path) -> Path:
    """images [batch, 3, height, width] → Conv → GlobalAveragePool → Flatten → logits [batch, 4]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["images", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]), helper.make_node("Flatten", ["p"], ["logits"])]
    return _save(_model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                              ["batch", 3, "height", "width"])],
                        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])], inits), path)


def text_model(path: Path, seq: str | int = "sequence", token_types: bool = False) -> Path:
    """input_ids, attention_mask (int64 [batch, seq]) → Gather embedding × mask → MatMul → ReduceMean → [batch, 8]."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (VOCAB, 16)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.normal(0, 0.3, (16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mf", "axis2"], ["mu"]),
             helper.make_node("Mul", ["e", "mu"], ["em"])]
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq])]
    last = "em"
    if token_types:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.5, (2, 16)).astype(np.float32), "temb"))
        nodes += [helper.make_node("Gather", ["temb", "token_type_ids"], ["te"]),
                  helper.make_node("Add", ["em", "te"], ["et"])]
        ins.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", seq]))
        last = "et"
    nodes += [helper.make_node("MatMul", [last, "w"], ["h"]),
              helper.make_node("ReduceMean", ["h"], ["pooled"], axes=[1], keepdims=0)]
    return _save(_model(nodes, ins, [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 8])],
                        inits), path)


def rnn_model(path: Path) -> Path:
    """x [batch, 5, 8] → Transpose → bidirectional GRU with initial_h = h0 [2, batch, 16] → MatMul → [2, batch, 4]."""
    rng = np.random.default_rng(2)
    h, f = 16, 8
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (2, 3 * h, f)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, 0.3, (2, 3 * h, h)).astype(np.float32), "R"),
             numpy_helper.from_array(rng.normal(0, 0.1, (2, 6 * h)).astype(np.float32), "B"),
             numpy_helper.from_array(rng.normal(0, 0.3, (h, 4)).astype(np.float32), "head")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("GRU", ["xt", "W", "R", "B", "", "h0"], ["Y", "Y_h"], hidden_size=h,
                              direction="bidirectional"),
             helper.make_node("MatMul", ["Y_h", "head"], ["out"])]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, f]),
           helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, "batch", h])]
    return _save(_model(nodes, ins, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, "batch", 4])],
                        inits), path)


def make_tokenizer(path: Path) -> Path:
    """A WordLevel tokenizer trained on TEXT, with [CLS] … [SEP] around each line and [PAD] = 0."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXT, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    assert tok.get_vocab_size() < VOCAB
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "examples.txt").write_text("\n".join(TEXT) + "\n\n", encoding="utf-8")
    return {"root": root, "hw": dynamic_hw_model(root / "hw.onnx"), "text": text_model(root / "text.onnx"),
            "rnn": rnn_model(root / "rnn.onnx"), "tok": make_tokenizer(root / "tokenizer.json"),
            "txt": root / "examples.txt"}


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- specs ------------------------------------------------------------------------------------------------------


def test_a_suggested_shape_never_repeats_a_machine_made_dim_name():
    """A Paddle export names its open dims p2o.DynamicDimension.N: the suggestion gives 1 for the batch, H and W for
    the image's size and the values it knows, never those names."""
    det = (TensorInfo("x", "float32", ("p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1",
                                       "p2o.DynamicDimension.2")),)
    with pytest.raises(DataError) as exc:
        infer_specs(det)
    msg = str(exc.value)
    assert "--shape x=1,3,H,W (H, W and D<axis> stand for the sizes to run at)" in msg
    assert "DYNAMICDIMENSION" not in msg.upper().split("GIVE THE SHAPE")[1]
    enc = (TensorInfo("input_ids", "int64", ("batch", "seq")), TensorInfo("mask", "int64", ("batch", 16)))
    with pytest.raises(DataError, match=r"--shape input_ids=1,D1 .*; in the app"):
        infer_specs(enc)


def test_specs_record_where_each_dim_came_from(files):
    info = inspect_model(files["hw"])
    with pytest.raises(DataError) as exc:
        infer_specs(info)
    msg = str(exc.value)
    assert "'height' (axis 2)" in msg and "'width' (axis 3)" in msg and "--shape images=1,3,H,W" in msg
    (s,) = infer_specs(info, overrides={"images": [1, 3, 64, 48]})
    assert s.shape == (1, 3, 64, 48) and s.role == "image" and s.batch_axis == 0
    assert [d.source for d in s.dims] == ["user", "model", "user", "user"]
    assert s.at_batch(8) == (8, 3, 64, 48)
    # the sample manifest (a SampleModel has .preprocess) sizes an image input; a preprocessing someone set too
    manifest = type("Sample", (), {"preprocess": PreprocessConfig(size=(40, 30))})()
    (m,) = infer_specs(info, manifest)
    assert m.shape == (1, 3, 40, 30) and m.dims[2].source == "manifest"
    # images with the detected preprocessing (224 because the model is dynamic): a stated default, not silent
    images = random_dataset(1)
    images.kind = "images"
    (d,) = infer_specs(info, detect_preprocess(info.inputs[0]), images)
    assert d.shape == (1, 3, 224, 224) and d.dims[2].source == "default" and "dynamic" in d.dims[2].reason
    # --shape gives the image size the preprocessing resizes to
    assert fit_preprocess(PreprocessConfig(), [s]).size == (64, 48)
    with pytest.raises(DataError, match="does not take; its inputs are images"):
        infer_specs(info, overrides={"pixels": [1, 3, 8, 8]})
    with pytest.raises(DataError, match="has 3 dimension"):
        infer_specs(info, overrides={"images": [1, 3, 8]})
    with pytest.raises(DataError, match="fixes it to 3"):
        infer_specs(info, overrides={"images": [1, 4, 8, 8]})


def test_roles_and_batch_axis_of_text_and_rnn_inputs(files):
    ids, mask = infer_specs(inspect_model(files["text"]), overrides={"input_ids": [1, 32]})
    assert (ids.role, mask.role) == ("token_ids", "mask")
    assert ids.shape == mask.shape == (1, 32)  # 'sequence' set on input_ids resolves it in attention_mask too
    x, h0 = infer_specs(inspect_model(files["rnn"]))
    assert (x.role, x.batch_axis, x.shape) == ("other", 0, (1, 5, 8))
    assert (h0.role, h0.batch_axis, h0.shape) == ("state", 1, (2, 1, 16))
    assert h0.at_batch(3) == (2, 3, 16)
    fixed = [TensorInfo("x", "float32", (1, 5, 8)), TensorInfo("h0", "float32", (2, 1, 16))]
    assert [s.batch_axis for s in infer_specs(fixed)] == [0, None]  # a fixed state has no batch axis
    (two,) = infer_specs([TensorInfo("x", "float32", (2, 5, 8))])  # exported with a batch of 2
    assert two.at_batch(2) == two.at_batch(1) == (2, 5, 8) and two.copies == 2  # one sample fills it, repeated
    assert [s.copies for s in infer_specs(fixed)] == [1, 1]
    with pytest.raises(DataError, match=r"fixed batch size of 2 \(axis 0\); cannot feed 3 samples at once: it is fed "
                                        r"one sample at a time, repeated to fill the batch"):
        two.at_batch(3)


def test_parse_shape():
    assert parse_shape("images=1,3,640,640") == ("images", [1, 3, 640, 640])
    for bad in ("images", "images=", "=1,2", "images=1,a", "images=0,3"):
        with pytest.raises(DataError):
            parse_shape(bad)


# -- random data, bench --------------------------------------------------------------------------------------


def test_rnn_random_feeds_put_the_batch_on_axis_1_with_zero_state(files):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(files["rnn"]), providers=["CPUExecutionProvider"])
    feeds = make_inputs(sess.get_inputs(), 3)
    assert feeds["x"].shape == (3, 5, 8) and feeds["h0"].shape == (2, 3, 16)
    assert not feeds["h0"].any()
    assert sess.run(None, feeds)[0].shape == (2, 3, 4)
    ds = random_dataset(3)
    specs = infer_specs(inspect_model(files["rnn"]))
    feed = batch_inputs(ds, [0, 1], None, inspect_model(files["rnn"]).inputs, specs)
    assert feed["x"].shape == (2, 5, 8) and feed["h0"].shape == (2, 2, 16) and not feed["h0"].any()


def test_bench_dynamic_hw_needs_a_shape_and_runs_at_it(files):
    with pytest.raises(DataError, match="--shape images=1,3,H,W"):
        next(latency_samples(files["hw"], BenchConfig(warmup=0, runs=1), 1))
    run = latency_samples(files["hw"], BenchConfig(warmup=0, runs=2), 2, shapes={"images": [1, 3, 64, 64]})
    assert len(list(run)) == 2
    assert run.input_shapes == {"images": (2, 3, 64, 64)}
    assert run.summary().input_shapes == {"images": [2, 3, 64, 64]}


def test_bench_transformer_at_the_given_sequence_length(files):
    run = latency_samples(files["text"], BenchConfig(warmup=0, runs=2), 2, shapes={"input_ids": [1, 48]})
    list(run)
    assert run.summary().input_shapes == {"input_ids": [2, 48], "attention_mask": [2, 48]}


def test_cli_bench_shape_flag_and_json(files, capsys):
    code, out, err = run(["bench", files["hw"], "--runs", "2", "--warmup", "0", "--json"], capsys)
    assert code == 2 and "'height' (axis 2)" in err and "--shape images=1,3,H,W" in err
    code, out, err = run(["bench", files["hw"], files["rnn"], "--runs", "2", "--warmup", "0", "--batch-sizes", "3",
                          "--shape", "images=1,3,64,64", "--json"], capsys)
    assert code == 0, err
    results = json.loads(out)["results"]
    assert results[0]["input_shapes"] == {"images": [3, 3, 64, 64]}
    assert results[1]["input_shapes"] == {"x": [3, 5, 8], "h0": [2, 3, 16]}
    code, out, err = run(["bench", files["hw"], "--runs", "2", "--warmup", "0", "--shape", "images=1,3,32,40"], capsys)
    assert code == 0 and "images [1, 3, 32, 40]" in out
    code, out, err = run(["bench", files["hw"], "--shape", "images:1,3"], capsys)
    assert code == 2 and "NAME=D0,D1" in err


@pytest.mark.parametrize("shape, says", [
    ("images:1,3", "NAME=D0,D1"),  # malformed
    ("images=1,3,a,64", "whole numbers"),  # malformed
    ("images=1,3,64", "has 3 dimension(s) but input 'images' has 4"),  # wrong rank
    ("images=1,4,64,64", "sets axis 1 to 4, but the model fixes it to 3"),  # against a fixed dim
])
def test_every_bad_shape_exits_2_with_one_line(files, capsys, shape, says):
    for command in (["bench", files["hw"], "--runs", "2", "--warmup", "0"],
                    ["optimize", files["hw"], str(Path(files["hw"]).parent / "o.onnx"), "--allow-random-data"]):
        code, out, err = run([*command, "--shape", shape], capsys)
        assert code == 2, (command[0], err)
        assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# -- text data --------------------------------------------------------------------------------------------------


def test_text_data_becomes_the_inputs_the_model_takes_at_the_length(files):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(files["tok"]))
    ds = load_text_file(files["txt"], files["tok"], seq_len=6)
    assert ds.kind == "text" and len(ds) == len(TEXT)
    info = inspect_model(files["text"])
    specs = infer_specs(info, dataset=ds)
    assert [s.shape for s in specs] == [(1, 6), (1, 6)] and specs[0].dims[1].source == "data"
    feed = batch_inputs(ds, [0, 3], None, info.inputs, specs)
    assert set(feed) == {"input_ids", "attention_mask"}
    assert feed["input_ids"].shape == (2, 6) and feed["input_ids"].dtype == np.int64
    # "the cat sat on the mat" is 6 words + [CLS] [SEP]: truncated to 6 with [SEP] kept last
    first = tok.encode(TEXT[0]).ids
    assert feed["input_ids"][0, 0] == 2 and feed["input_ids"][0, -1] == 3 and list(feed["input_ids"][0, 1:5]) == first[1:5]
    # "cats and dogs play" is 4 words + 2 = 6 tokens exactly; a shorter line is padded with [PAD] = 0, mask 0
    short = load_text_file(files["txt"], files["tok"], seq_len=10)
    f2 = batch_inputs(short, [3], None, info.inputs)
    assert list(f2["attention_mask"][0]) == [1] * 6 + [0] * 4 and list(f2["input_ids"][0, 6:]) == [0] * 4
    # no --seq-len and an open sequence dim: 128, stated as a default
    default = infer_specs(info, dataset=load_text_file(files["txt"], files["tok"]))
    assert default[0].shape == (1, 128) and default[0].dims[1].source == "default"
    # a model with a fixed length and token_type_ids: the model's length, all three tensors
    fixed = inspect_model(text_model(files["root"] / "fixed.onnx", seq=16, token_types=True))
    f3 = batch_inputs(load_text_file(files["txt"], files["tok"]), [1], None, fixed.inputs)
    assert {k: v.shape for k, v in f3.items()} == {"input_ids": (1, 16), "attention_mask": (1, 16),
                                                  "token_type_ids": (1, 16)}
    assert not f3["token_type_ids"].any()
    # text cannot feed an image model; a tokenizer that is not one is refused
    with pytest.raises(DataError, match="no model input looks like one"):
        check_fits(ds, None, inspect_model(files["rnn"]).inputs, infer_specs(inspect_model(files["rnn"])))
    bad = files["root"] / "bad.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(DataError, match="not a Hugging Face tokenizer.json"):
        load_text_file(files["txt"], bad)


def test_text_dataset_round_trips_through_a_data_ref(files, tmp_path):
    ds = load_text_file(files["txt"], files["tok"], seq_len=12)
    path = write_dataset(ds, tmp_path / "d")
    assert path.name == "data.txt" and (path.parent / "tokenizer.json").is_file()
    ref = DataRef(path=str(path), tokenizer=str(path.parent / "tokenizer.json"), seq_len=12)
    again = DataRef.from_dict(json.loads(json.dumps(ref.to_dict()))).load()
    assert again.kind == "text" and again._texts == ds._texts and again.seq_len == 12
    assert dataset_digest(again) == dataset_digest(ds)


def test_calibration_reader_feeds_text_at_the_length(files):
    ds = load_text_file(files["txt"], files["tok"], seq_len=7)
    info = inspect_model(files["text"])
    reader = CalibrationReader(ds, None, info.inputs)
    feeds = list(iter(reader.get_next, None))
    assert len(feeds) == len(TEXT) and all(f["input_ids"].shape == (1, 7) for f in feeds)


# -- recipe runs through the CLI: calibrate, verify, compare ----------------------------------------------------


def test_cli_optimize_text_model_calibrates_at_the_sequence_length(files, tmp_path, capsys):
    code, out, err = run(["optimize", files["text"], tmp_path / "q", "--precision", "int8", "--quant-mode", "static",
                          "--data", files["txt"], "--tokenizer", files["tok"], "--seq-len", "24", "--json"], capsys)
    assert code == 0, err
    art = json.loads(out)
    assert art["input_shapes"] == {"input_ids": [1, 24], "attention_mask": [1, 24]}
    assert art["evaluation"]["input_shapes"] == {"input_ids": [1, 24], "attention_mask": [1, 24]}
    spec = RunSpec.from_dict(art["spec"])
    assert spec.calibration is not None and spec.calibration.seq_len == 24
    line = spec.cli_line("OUT")
    assert "--tokenizer" in line and "--seq-len 24" in line
    code, out, err = run(["compare", files["text"], tmp_path / "q" / "model.onnx", "--data", files["txt"],
                          "--tokenizer", files["tok"], "--seq-len", "24", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["input_shapes"] == {"input_ids": [1, 24], "attention_mask": [1, 24]}
    code, out, err = run(["compare", files["text"], tmp_path / "q" / "model.onnx", "--data", files["txt"]], capsys)
    assert code == 0, err  # tokenizer.json beside the .txt; the open length defaults to 128, shown
    assert "input_ids [1, 128]" in out


def test_cli_optimize_random_data_with_shape_and_without(files, tmp_path, capsys):
    code, out, err = run(["optimize", files["hw"], tmp_path / "a.onnx", "--precision", "int8", "--quant-mode",
                          "static", "--allow-random-data", "--calibration-samples", "4", "--verify-samples", "2"],
                         capsys)
    assert code == 2 and "--shape images=1,3,H,W" in err
    code, out, err = run(["optimize", files["hw"], tmp_path / "b", "--precision", "int8", "--quant-mode", "static",
                          "--allow-random-data", "--calibration-samples", "4", "--verify-samples", "2",
                          "--shape", "images=1,3,40,40", "--json"], capsys)
    assert code == 0, err
    art = json.loads(out)
    assert art["input_shapes"] == {"images": [1, 3, 40, 40]}
    assert art["spec"]["shapes"] == {"images": [1, 3, 40, 40]}
    assert "--shape images=1,3,40,40" in RunSpec.from_dict(art["spec"]).cli_line()


def test_rnn_model_is_calibrated_compared_and_benchmarked(files, tmp_path, capsys):
    rng = np.random.default_rng(0)
    npz = tmp_path / "rnn.npz"
    np.savez(npz, x=rng.standard_normal((6, 5, 8)).astype(np.float32),
             h0=np.zeros((6, 2, 16), dtype=np.float32))  # samples first; h0 fed as [2, batch, 16]
    code, out, err = run(["optimize", files["rnn"], tmp_path / "r", "--precision", "int8", "--quant-mode", "static",
                          "--calibration", npz, "--json"], capsys)
    assert code == 0, err
    art = json.loads(out)
    assert art["input_shapes"] == {"x": [1, 5, 8], "h0": [2, 1, 16]}
    code, out, err = run(["optimize", files["rnn"], tmp_path / "r2", "--precision", "int8", "--quant-mode", "static",
                          "--allow-random-data", "--calibration-samples", "3", "--verify-samples", "2", "--json"],
                         capsys)
    assert code == 0, err  # random data: batch on axis 1, zero state
    assert json.loads(out)["input_shapes"] == {"x": [1, 5, 8], "h0": [2, 1, 16]}
    code, out, err = run(["compare", files["rnn"], tmp_path / "r" / "model.onnx", "--data", npz, "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["n_samples"] == 6 and report["input_shapes"] == {"x": [1, 5, 8], "h0": [2, 1, 16]}
    code, out, err = run(["bench", tmp_path / "r" / "model.onnx", "--runs", "2", "--warmup", "0", "--batch-sizes", "4",
                          "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["results"][0]["input_shapes"] == {"x": [4, 5, 8], "h0": [2, 4, 16]}


def test_run_spec_carries_shapes_and_text(files):
    spec = RunSpec(str(files["text"]), Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.STATIC)),
                   calibration=DataRef(path=str(files["txt"]), tokenizer=str(files["tok"]), seq_len=32),
                   shapes={"input_ids": [1, 32]})
    again = RunSpec.from_json(spec.to_json())
    assert again == spec
    line = spec.cli_line()
    assert f"--calibration {files['txt']}" in line and f"--tokenizer {files['tok']} --seq-len 32" in line
    assert "--shape input_ids=1,32" in line


def test_a_shape_set_on_one_input_wins_over_the_data_for_the_same_dim_name(files):
    ds = load_text_file(files["txt"], files["tok"], seq_len=20)
    ids, mask = infer_specs(inspect_model(files["text"]), dataset=ds, overrides={"input_ids": [1, 33]})
    assert ids.shape == mask.shape == (1, 33) and mask.dims[1].source == "user"


def test_open_dims_are_named_by_axis_and_suggest_sizes_a_square_image_first():
    from ortlab.data.inputs import DimSpec, InputSpec, axis_label, suggested_sizes

    spec = InputSpec("x", "float32", (DimSpec(1, "p2o.DynamicDimension.0", "batch"), DimSpec(3),
                                      DimSpec(320, "p2o.DynamicDimension.1", "user"),
                                      DimSpec(None, "p2o.DynamicDimension.2", "unresolved")), 0, "image")
    assert [axis_label(spec, i) for i in range(4)] == [
        "input x, axis 0 (batch)", "input x, axis 1 (channels)", "input x, axis 2 (height)", "input x, axis 3 (width)"]
    assert suggested_sizes(spec, 3) == (320, 224, 640)  # the height set: a square image first
    ids = InputSpec("input_ids", "int64", (DimSpec(1, "batch", "batch"), DimSpec(None, "seq", "unresolved")),
                    0, "token_ids")
    assert axis_label(ids, 1) == "input input_ids, axis 1 (sequence)" and suggested_sizes(ids, 1) == (128, 256, 512)


def test_an_open_size_is_not_taken_for_the_batch(tmp_path):
    """ddddocr's recognizer takes [1, 1, 64, image_width]: its one open dim is the line's width, and the fixed first
    axis is the batch (it was read as the batch, and a tensor file of lines [N, 1, 64, W] was refused)."""
    (line,) = infer_specs([TensorInfo("input1", "float32", (1, 1, 64, "image_width"))], strict=False)
    assert line.batch_axis == 0 and line.copies == 1
    (unnamed,) = infer_specs([TensorInfo("x", "float32", (1, 3, "d0", 224))], strict=False)  # an image's height
    (tokens,) = infer_specs([TensorInfo("input_ids", "int64", (1, "seq_len"))], strict=False)
    (other,) = infer_specs([TensorInfo("x", "float32", (4, "d1"))], strict=False)  # no size: still the batch
    assert (unnamed.batch_axis, tokens.batch_axis, other.batch_axis) == (0, 0, 1)
    np.savez(tmp_path / "lines.npz", input1=np.zeros((5, 1, 64, 160), np.float32))
    ds = load_tensor_file(tmp_path / "lines.npz")
    specs = infer_specs([TensorInfo("input1", "float32", (1, 1, 64, "image_width"))], None, ds)
    assert batch_inputs(ds, [3], None, [TensorInfo("input1", "float32", (1, 1, 64, "image_width"))],
                        specs)["input1"].shape == (1, 1, 64, 160)


def test_a_sequence_model_open_only_in_its_first_axis_takes_each_sample_whole(tmp_path):
    """silero-vad 6.2's 16k sequence model takes input [sequence_length, 576] with h, c [1, 1, 128]: its one open
    dim is the sequence, not a batch (it was read as the batch, and a file of 4-frame sequences was refused)."""
    infos = [TensorInfo("input", "float32", ("sequence_length", 576)), TensorInfo("h", "float32", (1, 1, 128))]
    seq, _ = infer_specs(infos, strict=False)
    assert seq.batch_axis is None and not seq.resolved
    (batched,) = infer_specs([TensorInfo("x", "float32", ("N", 576))], strict=False)  # a name that says no size
    assert batched.batch_axis == 0
    np.savez(tmp_path / "seq.npz", input=np.zeros((6, 4, 576), np.float32), h=np.zeros((6, 1, 128), np.float32))
    ds = load_tensor_file(tmp_path / "seq.npz")
    specs = infer_specs(infos, None, ds)
    assert specs[0].shape == (4, 576) and specs[0].dims[0].source == "data"
    feed = batch_inputs(ds, [2], None, infos, specs)
    assert feed["input"].shape == (4, 576) and feed["h"].shape == (1, 1, 128)


def test_samples_saved_with_the_batch_axis_are_named_in_the_open_dims_error(tmp_path):
    """A VAD's [batch, sequence] input, its samples saved as they are fed ([N, 1, 512]): the data cannot set the
    sequence, and the error said only "neither the preprocessing nor the data set them"."""
    info = [TensorInfo("input", "float32", ("batch", "sequence"))]
    np.savez(tmp_path / "clips.npz", input=np.zeros((64, 1, 512), np.float32))
    with pytest.raises(DataError) as err:
        infer_specs(info, None, load_tensor_file(tmp_path / "clips.npz"))
    text = str(err.value)
    assert "the data's samples do not fit the model" in text
    assert "64 samples of shape [1, 512]" in text and "takes samples of shape [sequence]" in text
    assert "save the array as [64, 512]" in text and "--shape input=1,D1" in text
    np.savez(tmp_path / "ok.npz", input=np.zeros((64, 512), np.float32))
    (spec,) = infer_specs(info, None, load_tensor_file(tmp_path / "ok.npz"))
    assert spec.shape == (1, 512)
    with pytest.raises(DataError, match="neither the preprocessing nor the data set them"):
        infer_specs(info)  # no data: the plain error


def test_a_dim_the_model_fixes_at_zero_is_fed_at_zero(tmp_path, capsys):
    """ONNX's CastLike test models take their target type from an empty input ``like`` [0]: ortlab read the 0 as an
    open dim, fed [1], and ORT refused it ("Got invalid dimensions for input: like … Got: 1 Expected: 0"), said
    as "The model fails on random data of its input shapes". ORT holds a declared 0 to 0; so does ortlab."""
    (like,) = infer_specs([TensorInfo("like", "float32", (0,))], strict=False)
    assert like.shape == (0,) and like.resolved
    (rows,) = infer_specs([TensorInfo("x", "float32", ("N", 0, 4))], strict=False)
    assert rows.batch_axis == 0 and rows.at_batch(2) == (2, 0, 4)
    (empty,) = infer_specs([TensorInfo("like", "int8", (0,))], strict=False)  # no value to make up: not a control
    (count,) = infer_specs([TensorInfo("n", "int64", (1,))], strict=False)
    assert (is_control_input(empty), is_control_input(count)) == (False, True)
    src = onnx_node_case("test_castlike_DOUBLE_to_FLOAT", tmp_path / "castlike.onnx")
    assert cli.main(["optimize", str(src), str(tmp_path / "out.onnx"), "--precision", "fp16", "--allow-random-data",
                     "--json"]) == 0
    art = json.loads(capsys.readouterr().out)
    assert art["input_shapes"] == {"input": [3, 4], "like": [0]}


def test_calibration_data_with_nan_or_infinity_is_refused_with_the_sample_it_is_in(tmp_path, capsys):
    """A NaN in one calibration sample made ONNX Runtime's calibrator fail with "scale issue" (or write ranges
    from it): the run names the sample and the count instead, and writes nothing."""
    from tests.support.models import matmul_graph

    model = _save(matmul_graph(), tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    for bad, count in ((np.nan, 1), (np.inf, 3)):
        x = rng.normal(size=(4, 16, 32)).astype(np.float32)
        x[2, 0, :count] = bad
        np.savez(tmp_path / "cal.npz", input=x)
        code, _, err = run(["optimize", model, tmp_path / "q", "--precision", "int8", "--quant-mode", "static",
                            "--calibration", tmp_path / "cal.npz", "--no-timing"], capsys)
        assert code == 1
        assert (f"calibrate: Calibration sample 3 of 4 holds NaN or infinite values in input 'input' ({count} of 512)"
                in err), err
        assert not (tmp_path / "q").exists()
