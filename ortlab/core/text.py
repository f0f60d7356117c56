"""Text every layer shows a person: one-line error reasons and byte sizes (one convention each)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

MAX_ONE_LINE = 2000  # only pathological texts are capped, and only at the end


# C0 and C1 control characters other than the whitespace one_line folds, DEL, and the bidirectional overrides
# that reorder what a terminal or a page shows
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with control characters (NUL, escape sequences, bidi overrides…) written as escapes (``\\x00``,
    ``\\u202e``): shown, never acted on by a terminal or a browser."""
    def esc(m: re.Match) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _CONTROL.sub(esc, text)


_UNSAFE_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
MAX_UPLOAD_NAME = 200  # characters kept of an uploaded file's name


def upload_name(raw: object) -> tuple[str, str | None]:
    """(the name to use for an uploaded file, a one-line note when ``raw`` had to be cleaned): the last part of any
    path (``/`` or ``\\``), control and invisible characters (NUL, bidi overrides…) replaced by ``_``, at most
    :data:`MAX_UPLOAD_NAME` characters (a longer name keeps its start and its extension, so ``.onnx`` stays
    ``.onnx``); ``"upload"`` when nothing is left. Cleaned before anything else sees it. The note says what was
    done: control characters or path separators replaced, or the name shortened."""
    text = str(raw)
    base = text.replace("\\", "/").rsplit("/", 1)[-1]
    unsafe = base != text or not base.strip(" .") or _UNSAFE_IN_NAME.search(base) is not None
    clean = _UNSAFE_IN_NAME.sub("_", base).strip(" .")
    too_long = len(clean) > MAX_UPLOAD_NAME
    if too_long:
        clean = _shortened(clean, MAX_UPLOAD_NAME)
    clean = clean or "upload"
    if clean == text:
        return clean, None
    shown = escape_controls(text).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    shown, used = _middle_cut(shown), _middle_cut(clean)
    if not unsafe:
        what = (f"was {len(text):,} characters long (at most {MAX_UPLOAD_NAME} are kept, with its extension)"
                if too_long else "starts or ends with spaces or dots")
        return clean, f"The file name '{shown}' {what}; it is used as '{used}'."
    what = "had control characters or path separators in it" + (
        f" and was longer than {MAX_UPLOAD_NAME} characters (shortened)" if too_long else "")
    return clean, f"The file name '{shown}' {what}; it is used as '{used}'."


def _middle_cut(name: str, limit: int = 80) -> str:
    """``name`` as a note shows it: a longer one keeps its start and its last 20 characters around "..."."""
    return name if len(name) <= limit else name[: limit - 23] + "..." + name[-20:]


MAX_EXTENSION = 16  # characters of a name's last ".suffix" kept when the name is shortened


def _shortened(name: str, limit: int) -> str:
    """``name`` cut to ``limit`` characters, keeping its extension (the last ``.suffix``, when it is short)."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext) + 1 > MAX_EXTENSION:
        return name[:limit].rstrip(" .")
    return stem[: limit - len(ext) - 1].rstrip(" .") + "." + ext


def one_line(exc_or_text: BaseException | str | object) -> str:
    """``exc_or_text`` as one line: every line of the message kept, runs of whitespace made one space, control
    characters escaped (:func:`escape_controls`).

    An exception with an empty message gives its class name. The reason is never cut off: only a text longer
    than ``MAX_ONE_LINE`` characters is shortened, at its end (marked with "…").
    """
    text = escape_controls(" ".join(str(exc_or_text).split()))
    if not text and isinstance(exc_or_text, BaseException):
        text = type(exc_or_text).__name__
    if len(text) > MAX_ONE_LINE:
        text = text[: MAX_ONE_LINE - 1] + "…"
    return text


BYTE_UNITS = (("GB", 10**9), ("MB", 10**6), ("kB", 10**3))  # decimal SI, largest first
_UNITS = BYTE_UNITS


def format_bytes(n: float | int | None) -> str:
    """A byte count in decimal SI units, used by the CLI, the app and the HTML report alike.

    ``512`` → ``"512 B"``, ``1_536`` → ``"1.54 kB"``, ``12_345_678`` → ``"12.35 MB"`` (kB/MB/GB = 10³/10⁶/10⁹
    bytes); ``None`` → ``"–"``.
    """
    if n is None or isinstance(n, bool):
        return "–"
    for unit, size in _UNITS:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def utc_timestamp() -> str:
    """Now, in UTC, as ISO 8601 to the second (``2026-11-23T19:30:00+00:00``): how runs are dated."""
    return datetime.now(UTC).isoformat(timespec="seconds")
