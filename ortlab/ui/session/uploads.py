"""Uploaded file names, cleaned where they enter the server: a name with NUL, other control characters or path
separators is made safe, and a name over 200 characters is shortened with its extension kept
(``core.text.upload_name``), as Streamlit stores the upload, before its widget, the pages or the engine see it
(Streamlit itself stops the whole page at a NUL in a name, or at a name whose extension is not the widget's, with a
traceback, until the person navigates away); the note saying so is kept for the page that uses the upload."""

from __future__ import annotations

import threading

from ortlab.core.text import upload_name

MAX_NOTES = 256  # notes kept for uploads no page asked about yet (the oldest go first)

_NOTES: dict[str, str] = {}
_LOCK = threading.Lock()


def install() -> None:
    """Clean the name of every file uploaded to this server from now on (once per process)."""
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

    original = MemoryUploadedFileManager.add_file
    if getattr(original, "ortlab_cleans_names", False):
        return

    def add_file(self, session_id, file):
        name, note = upload_name(file.name)
        if note is not None:
            file = file._replace(name=name)
            with _LOCK:
                _NOTES[file.file_id] = note
                while len(_NOTES) > MAX_NOTES:
                    _NOTES.pop(next(iter(_NOTES)))
        return original(self, session_id, file)

    add_file.ortlab_cleans_names = True  # type: ignore[attr-defined]
    MemoryUploadedFileManager.add_file = add_file  # type: ignore[method-assign]


def cleaned_note(upload) -> str | None:
    """The one-line note for an upload whose name was cleaned (then forgotten), or None."""
    file_id = getattr(upload, "file_id", None)
    with _LOCK:
        return _NOTES.pop(file_id, None) if file_id is not None else None
