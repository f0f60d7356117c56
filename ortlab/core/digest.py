"""sha256 digests of arrays and of sequences of model feeds: the keys under which a computed result is kept."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


def update_with_array(h: Any, a: np.ndarray, label: str = "") -> None:
    """Add ``a`` (its dtype, shape and bytes, after ``label``) to the hash ``h``."""
    a = np.ascontiguousarray(a)
    h.update(f"{label}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())


def array_digest(a: np.ndarray) -> str:
    """sha256 of the array's dtype, shape and bytes."""
    h = hashlib.sha256()
    update_with_array(h, a)
    return h.hexdigest()


def feeds_digest(feeds: Iterable[Mapping[str, np.ndarray]]) -> str:
    """sha256 of every feed in order: each input's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for n, feed in enumerate(feeds, start=1):
        for name in sorted(feed):
            update_with_array(h, feed[name], f"{n}|{name}")
    return h.hexdigest()
