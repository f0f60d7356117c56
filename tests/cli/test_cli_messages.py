"""The CLI's messages in the user's words, each with the fix in it (issue 27, point 4)."""

from __future__ import annotations

import pytest

from ortlab.cli import main as cli

from tests.support.models import conv_bn_model


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return conv_bn_model(tmp_path_factory.mktemp("messages") / "conv.onnx")


def test_int8_static_without_data_names_the_flags_that_fix_it(src, tmp_path, capsys):
    code, _, err = run(["optimize", src, tmp_path / "o.onnx", "--precision", "int8"], capsys)
    assert code == 2
    assert err.startswith("ortlab: error: int8 static quantization needs calibration data: ")
    for flag in ("--calibration DIR", "--quant-mode dynamic", "--allow-random-data"):
        assert flag in err
    assert "validate:" not in err and not (tmp_path / "o.onnx").exists()


def test_an_empty_model_file_is_asked_for_in_cli_words(tmp_path, capsys):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    code, _, err = run(["inspect", empty], capsys)
    assert code == 1 and "Give a .onnx file exported from your framework." in err and "Upload" not in err
