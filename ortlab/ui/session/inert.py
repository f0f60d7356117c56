"""Text that came from a model, a file or a person, shown as text: never as Markdown or HTML.

Model metadata (producer, graph name), file names, node and tensor names, recipe names and engine messages
that quote them can hold ``![x](http://host/…)``, ``<img src=x>``, ``**`` or ``:red[…]``. Where such text
stands alone, show it with :func:`text` (``st.text``) or in a dataframe; where it is mixed into Markdown (a
heading, a caption, a message, a widget label or help), pass it through :func:`md` first.
"""

from __future__ import annotations

import html
import re

import streamlit as st

# What can start Markdown or HTML inside one line (CommonMark, GFM, Streamlit's extensions), each made a literal
# character with a backslash: code, emphasis, links and images ("[" — "![" needs it), raw HTML and autolinks
# ("<", ">"), headings ("#"), strikethrough ("~"), LaTeX ("$"), entities ("&"); "_" only where it can open or
# close emphasis (not inside a word such as my_model); ":" only before a non-space (Streamlit's :red[…] and
# :material/…:, and the "http:" of a bare link); "www." (a GFM autolink); and a list or heading marker at the
# start. Ordinary text ("model.onnx failed: (see above)") stays as it is.
_ALWAYS = re.compile(r"([\\`*\[\]<>#~$&|])")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_COLON = re.compile(r":(?=\S)")
_WWW = re.compile(r"(?i)\b(www)\.")
_MD_CHARS = set("\\`*[]~$")  # in an HTML fragment: what could still make a link, code or emphasis
_LIST_START = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def md(value: object) -> str:
    """``value`` as Markdown that renders as exactly its characters (one line: line breaks become spaces)."""
    out = _ALWAYS.sub(r"\\\1", " ".join(str(value).split()))
    out = _UNDERSCORE.sub(r"\\_", out)
    out = _COLON.sub(r"\\:", out)
    out = _WWW.sub(r"\1\\.", out)
    return _LIST_START.sub(lambda m: m.group(1) + (m.group(2) + "\\" if m.group(2)[0].isdigit() else "\\" + m.group(2)),
                           out)


def html_text(value: object) -> str:
    """``value`` for an HTML fragment that ``st.markdown(..., unsafe_allow_html=True)`` shows: HTML-escaped,
    and every character Markdown reads written as a numeric entity, so no parser makes markup of it."""
    return "".join(html.escape(c, quote=True) if c in "&<>\"'" else f"&#{ord(c)};" if c in _MD_CHARS else c
                   for c in " ".join(str(value).split()))


def text(value: object) -> None:
    """Show ``value`` as plain text (``st.text``: no Markdown, no HTML)."""
    st.text(str(value))
