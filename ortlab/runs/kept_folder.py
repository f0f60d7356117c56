"""A workspace folder of results kept for reuse, one file per key, bounded in bytes: each write removes the entries
used longest ago (by modification time; a reuse touches its file) until the rest fit."""

from __future__ import annotations

import os
from pathlib import Path


class KeptFolder:
    """The entries ``<key><suffix>`` in ``folder``, at most ``max_bytes`` together."""

    suffix = ".json"

    def __init__(self, folder, max_bytes: float) -> None:
        self.folder = Path(folder)
        self.max_bytes = int(max_bytes)

    def _file(self, key: str) -> Path:
        return self.folder / f"{key}{self.suffix}"

    def prune(self, keep: str | None = None) -> list[Path]:
        """Remove the entries used longest ago until the folder holds at most ``max_bytes`` (the entry ``keep``
        stays in any case); returns the files removed."""
        entries = []
        for path in self.folder.glob(f"*{self.suffix}"):
            try:
                st = path.stat()
            except OSError:  # removed meanwhile by another run's prune
                continue
            entries.append((st.st_mtime, st.st_size, path))
        entries.sort(key=lambda e: (e[0], e[2].name), reverse=True)  # newest first
        total, removed = 0, []
        for _, size, path in entries:
            total += size
            if total > self.max_bytes and path != self._file(keep or ""):
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def touch(self, key: str) -> None:
        """Mark an entry as just used (a workspace that cannot be written only loses the order)."""
        try:
            os.utime(self._file(key))
        except OSError:
            pass
