"""Safe reading of user-supplied zip files: one set of limits for model zips and image zips.

Every member is checked before anything is read: no absolute paths, no ``..``, no symbolic links, no
encrypted members, names of at most ``MAX_NAME_BYTES`` per file or folder name, at most ``MAX_DEPTH``
folders deep, at most ``MAX_MEMBERS`` members, a compression ratio of at most ``MAX_RATIO`` for every
member and at most ``MAX_TOTAL_BYTES`` uncompressed over all members. Reading then refuses a member that
holds more bytes than its header declares. Errors are raised as the caller's error type (``DataError``
for images, ``ModelLoadError`` for models) and say which limit was hit and what to do.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from pathlib import Path

from ortlab.core import limits
from ortlab.core.errors import OrtlabError
from ortlab.core.text import format_bytes

MAX_MEMBERS = 50_000                 # entries in the central directory
MAX_TOTAL_BYTES = limits.ZIP_MAX_TOTAL_BYTES  # sum of the declared uncompressed sizes (limits.py says why)
MAX_RATIO = 200                      # uncompressed / compressed size of any one member
MAX_NAME_BYTES = 255                 # UTF-8 bytes of one file or folder name
MAX_DEPTH = 32                       # folders above a member

_CHUNK = 1 << 20


def _shown(name: str) -> str:
    """``name`` quoted for a message; a very long name keeps its start and end."""
    return repr(name if len(name) <= 160 else name[:100] + "…" + name[-50:])


def member_parts(name: str, error: type[OrtlabError], where: str = "The zip") -> tuple[str, ...]:
    """The path parts of a member name (or an uploaded file's name), after the path checks.

    Backslashes count as separators. Raises ``error`` for absolute or drive paths, ``..``, NUL bytes, names
    longer than ``MAX_NAME_BYTES`` and nesting deeper than ``MAX_DEPTH`` folders. No recursion: any depth
    gives this error, never a ``RecursionError``.
    """
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        raise error(f"{where} contains an absolute path ({_shown(name)}); refusing to open it. "
                    "Zip the files with paths relative to the archive.")
    parts = tuple(p for p in norm.split("/") if p not in ("", "."))
    if ".." in parts:
        raise error(f"{where} contains a path that leaves its folder ({_shown(name)}); refusing to open it. "
                    "Zip the files with paths inside the archive.")
    if "\x00" in norm:
        raise error(f"{where} contains a member name with a NUL byte ({_shown(name)}); refusing to open it.")
    if len(parts) - 1 > MAX_DEPTH:
        raise error(f"{where} has a member nested {len(parts) - 1} folders deep ({_shown(name)}); at most "
                    f"{MAX_DEPTH} are accepted. Flatten the folders and zip again.")
    for p in parts:
        size = len(p.encode("utf-8", "surrogatepass"))
        if size > MAX_NAME_BYTES:
            raise error(f"{where} has a file or folder name of {size} bytes ({_shown(p)}); at most "
                        f"{MAX_NAME_BYTES} bytes are accepted. Shorten the name and zip again.")
    return parts


def total_cap() -> int:
    """The cap on a zip's uncompressed total: ``$ORTLAB_LIMIT_ZIP_MAX_TOTAL_BYTES`` when set, else
    ``MAX_TOTAL_BYTES``."""
    if os.environ.get(limits.env_name("ZIP_MAX_TOTAL_BYTES"), "").strip():
        return int(limits.limit("ZIP_MAX_TOTAL_BYTES"))
    return MAX_TOTAL_BYTES


def safe_members(zf: zipfile.ZipFile, error: type[OrtlabError], where: str = "The zip", *,
                 max_total: int | None = None, total_hint: str = "Split it into smaller zips."
                 ) -> list[tuple[tuple[str, ...], zipfile.ZipInfo]]:
    """(path parts, info) of every file member (folders left out), after checking every member and the
    archive's totals against the limits above (``max_total`` lowers the total for a caller that holds the
    members in memory; ``total_hint`` says what to do then). Raises ``error`` naming the limit that was hit.
    Only the central directory is read: nothing is decompressed or written before every check passed."""
    cap = total_cap()
    hint = "Split it into smaller zips."
    if max_total is not None and max_total < cap:
        cap, hint = max_total, total_hint
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise error(f"{where} has {len(infos):,} members; at most {MAX_MEMBERS:,} are accepted. "
                    "Split it into smaller zips.")
    out = []
    total = 0
    for info in infos:
        parts = member_parts(info.filename, error, where)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise error(f"{where} contains a symbolic link ({_shown(info.filename)}); refusing to open it. "
                        "Zip the files themselves, not links to them.")
        if info.flag_bits & 0x1:
            raise error(f"{where}: member {_shown(info.filename)} is encrypted; use an unencrypted zip.")
        if info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise error(f"{where}: member {_shown(info.filename)} expands "
                        f"{info.file_size // max(info.compress_size, 1)}× its compressed size (at most "
                        f"{MAX_RATIO}× is accepted); refusing it as a possible zip bomb. Zip the files with "
                        "ordinary compression.")
        total += info.file_size
        if total > cap:
            declared = sum(i.file_size for i in infos)
            raise error(f"{where} expands to more than {format_bytes(cap)} (the limit for one zip); its members "
                        f"declare {format_bytes(declared)}. Refusing it before extracting anything. {hint}")
        if not info.is_dir() and parts:
            out.append((parts, info))
    return out


def _oversized(info: zipfile.ZipInfo, error: type[OrtlabError], where: str) -> OrtlabError:
    return error(f"{where}: member {_shown(info.filename)} is not the size its header declares "
                 f"({info.file_size:,}); refusing it. The zip is damaged or crafted: create it again.")


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, error: type[OrtlabError], where: str = "The zip") -> bytes:
    """The bytes of one member checked by :func:`safe_members`; never more than its declared size."""
    with zf.open(info) as fh:
        data = fh.read(info.file_size + 1)
    if len(data) != info.file_size:
        raise _oversized(info, error, where)
    return data


def extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, error: type[OrtlabError],
                   where: str = "The zip") -> None:
    """Write one member checked by :func:`safe_members` to ``target``; never more than its declared size."""
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with zf.open(info) as src, open(target, "wb") as out:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            if written > info.file_size:
                raise _oversized(info, error, where)
            out.write(chunk)
