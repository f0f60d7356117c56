"""A full disk, named: free space checked before a run, and any "no space left" error said in one line."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from ortlab.core.errors import OrtlabError
from ortlab.core.text import format_bytes

RUN_SPACE_FACTOR = 4        # a run writes a few copies of the model (stages, scratch, the result, its QDQ twin)
RUN_SPACE_MARGIN = 16 * 10**6  # plus its records, report and logs
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "enospc")


class DiskFullError(OrtlabError):
    """The disk that holds the workspace (or OUT) is full."""


def free_bytes(path) -> int | None:
    """Bytes free on the volume of ``path`` (its nearest existing parent), None when it cannot be told."""
    p = Path(path).expanduser()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:
        return None


def disk_full_message(path) -> str:
    """The one line for a full disk at ``path``'s volume."""
    free = free_bytes(path)
    return (f"The workspace disk is full ({format_bytes(free) if free is not None else 'no space'} free at "
            f"{path}'s volume); delete runs or models on History.")


def is_disk_full(exc: BaseException | str) -> bool:
    """Whether ``exc`` (or anything it was raised from) is a "no space left on device" error."""
    seen = 0
    cur: BaseException | str | None = exc
    while cur is not None and seen < 10:
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(w in str(cur).lower() for w in _FULL_WORDS):
            return True
        if isinstance(cur, str):
            return False
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def run_space_needed(model_bytes: int) -> int:
    """What a run of a model of ``model_bytes`` (with its external data) may write, at most."""
    return RUN_SPACE_FACTOR * int(model_bytes) + RUN_SPACE_MARGIN


def check_space(path, needed: int) -> None:
    """Raise :class:`DiskFullError` when the volume of ``path`` has less than ``needed`` bytes free."""
    free = free_bytes(path)
    if free is not None and free < needed:
        raise DiskFullError(f"The workspace disk is full ({format_bytes(free)} free at {path}'s volume, a run of "
                            f"this model needs about {format_bytes(needed)}); delete runs or models on History.")
