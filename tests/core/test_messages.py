"""Messages in ortlab's words: a non-UTF-8 file name, a model nested past protobuf's limit, control characters."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from ortlab.core.errors import ModelLoadError
from ortlab.core.text import escape_controls, one_line
from ortlab.model.inspect import inspect_model, load_model
from tests.support.models import conv_bn_model


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def nested_if_bytes(depth: int) -> bytes:
    """A model whose If nests ``depth`` deep, serialized by hand (protobuf itself refuses to build it)."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    leaf = helper.make_graph([helper.make_node("Constant", [], ["y"], value=helper.make_tensor(
        "c", TensorProto.FLOAT, [1], [1.0]))], "leaf", [], [out]).SerializeToString()

    def branch(name: str, graph: bytes) -> bytes:
        return onnx.AttributeProto(name=name, type=onnx.AttributeProto.GRAPH).SerializeToString() + _field(6, graph)

    def if_node(then: bytes) -> bytes:
        return (onnx.NodeProto(op_type="If", input=["cond"], output=["y"]).SerializeToString()
                + _field(5, branch("then_branch", then)) + _field(5, branch("else_branch", leaf)))

    graph = leaf
    for i in range(depth - 1):
        graph = onnx.GraphProto(name=f"g{i}", output=[out]).SerializeToString() + _field(1, if_node(graph))
    main = onnx.GraphProto(name="main", input=[helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                           output=[out]).SerializeToString() + _field(1, if_node(graph))
    head = onnx.ModelProto(ir_version=8, opset_import=[helper.make_opsetid("", 13)]).SerializeToString()
    return head + _field(7, main)


def test_an_if_nested_past_protobufs_limit_is_named_so():
    assert len(load_model(nested_if_bytes(10)).graph.node) == 1  # the builder makes valid models
    with pytest.raises(ModelLoadError) as err:
        load_model(nested_if_bytes(200))
    assert "exceeds protobuf's nesting limit of 100" in err.value.message
    assert "truncated" not in err.value.message
    data = nested_if_bytes(10)
    with pytest.raises(ModelLoadError, match="truncated"):  # a damaged file is still called that
        load_model(data[:-3])


@pytest.mark.skipif(os.name != "posix", reason="file names are bytes on POSIX only")
def test_a_non_utf8_file_name_gets_ortlabs_words(tmp_path):
    good = conv_bn_model(tmp_path / "ok.onnx")
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/mod\xe9l.onnx"))
    os.rename(good, bad)
    with pytest.raises(ModelLoadError) as err:
        inspect_model(bad)
    msg = err.value.message
    assert "mod\\xe9l.onnx" in msg and "not valid UTF-8" in msg and "Rename the file" in msg
    assert "incompatible function arguments" not in msg and "check_model_path" not in msg


def test_control_characters_are_escaped_in_every_one_line_message():
    text = one_line(ValueError("External data file 'w\x00.bin\x1b[31m' \u202eexe.onnx is missing\nnext line"))
    assert text == "External data file 'w\\x00.bin\\x1b[31m' \\u202eexe.onnx is missing next line"
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in text)
    assert escape_controls("plain é ü ✓ text") == "plain é ü ✓ text"


def test_the_cli_prints_a_nul_in_an_external_data_location_escaped(tmp_path, capsys):
    import numpy as np
    from onnx import numpy_helper

    from ortlab.cli import main as cli

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="we\x00ights.bin")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    code = cli.main(["inspect", str(path)])
    err = capsys.readouterr().err
    assert code != 0 and "\x00" not in err and "we\\x00ights.bin" in err, err
