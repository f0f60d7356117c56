"""ortlab.core.text: the one-line error text and the one byte format every layer shows."""

import pytest

from ortlab.core.errors import ModelLoadError
from ortlab.core.text import MAX_ONE_LINE, format_bytes, one_line, upload_name


def test_one_line_keeps_the_reason_on_later_lines():
    exc = RuntimeError("[ONNXRuntimeError] : 1 : FAIL :\n  Load model failed:\n\tNode (x) Op (Foo) is not a registered op")
    assert one_line(exc) == ("[ONNXRuntimeError] : 1 : FAIL : Load model failed: Node (x) Op (Foo) "
                             "is not a registered op")


def test_one_line_never_cuts_a_normal_message_short():
    reason = "x" * 900 + " the actual reason at the end"
    assert one_line(ValueError(reason)).endswith("the actual reason at the end")


def test_one_line_caps_only_pathological_texts_at_the_end():
    out = one_line("a" * 10 * MAX_ONE_LINE)
    assert len(out) == MAX_ONE_LINE and out.endswith("…") and out.startswith("aaa")


def test_one_line_of_an_empty_exception_names_its_class():
    assert one_line(KeyError()) == "KeyError"
    assert one_line(ModelLoadError("bad\nmodel", step="load")) == "load: bad model"
    assert one_line("") == ""


@pytest.mark.parametrize(("n", "text"), [
    (None, "–"), (0, "0 B"), (999, "999 B"), (1000, "1.00 kB"), (1536, "1.54 kB"),
    (4_938_268, "4.94 MB"), (1_234_567_890, "1.23 GB"), (2**20, "1.05 MB"),
])
def test_format_bytes_uses_decimal_si_units(n, text):
    assert format_bytes(n) == text


def test_cli_app_and_report_share_the_byte_format():
    from ortlab.cli import render as cli
    from ortlab.runs import report
    from ortlab.ui.views import cards

    assert cli.format_bytes is format_bytes and cards.format_bytes is format_bytes
    assert report._bytes(4_938_268) == "4.94 MB (4,938,268 bytes)"


@pytest.mark.parametrize("raw, clean", [
    ("a\x00b.onnx", "a_b.onnx"),
    ("../../etc/passwd", "passwd"),
    ("C:\\models\\m.zip", "m.zip"),
    ("\u202egnp.onnx", "_gnp.onnx"),
    ("line\nbreak.onnx", "line_break.onnx"),
    ("..", "upload"),
])
def test_a_hostile_upload_name_is_cleaned_with_a_one_line_note(raw, clean):
    name, note = upload_name(raw)
    assert name == clean
    assert note is not None and "\n" not in note and "\x00" not in note and "\u202e" not in note
    assert note.endswith(f"it is used as '{clean}'.")


def test_a_plain_upload_name_is_kept_without_a_note():
    assert upload_name("my model-1.onnx") == ("my model-1.onnx", None)



def test_a_long_upload_name_is_shortened_keeping_its_extension_and_the_note_says_so():
    from ortlab.core.text import MAX_UPLOAD_NAME

    name, note = upload_name("m" * 300 + ".onnx")
    assert len(name) == MAX_UPLOAD_NAME and name.endswith(".onnx") and name.startswith("mmm")
    assert note is not None and "305 characters long" in note and "control characters" not in note
    assert len(note) < 300 and "\n" not in note
    name, note = upload_name("a\x00" * 150 + ".zip")  # both faults: both said
    assert len(name) == MAX_UPLOAD_NAME and name.endswith(".zip")
    assert note is not None and "control characters" in note and "longer than 200 characters" in note
    assert upload_name("x" * 200 + ".onnx")[0] == "x" * 195 + ".onnx"
    assert upload_name("y" * MAX_UPLOAD_NAME) == ("y" * MAX_UPLOAD_NAME, None)  # at the limit: kept as it is
