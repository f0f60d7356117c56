"""The paths a command is given, checked before any work: an OUT the run could not write (a name too long for the
file system, a folder this user may not write, a kernel file system such as /proc) and a model this user may not
read are refused with one line that names the path and what to do (a :class:`UsageError`, exit status 2), instead
of an OS error met after the model and the data were loaded. What happens when OUT's folder does not exist is not
decided here: only the part of OUT that exists is checked."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from ortlab.api import UsageError
from ortlab.core.layout import qdq_path
from ortlab.core.text import escape_controls

# file systems of the kernel: they hold no files a run could write (/proc, /sys, /dev/pts…)
PSEUDO_FILE_SYSTEMS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs", "securityfs", "configfs", "pstore",
    "bpf", "efivarfs", "fusectl", "mqueue", "binfmt_misc", "autofs", "nsfs", "rpc_pipefs", "hugetlbfs",
})
MOUNTS = "/proc/self/mounts"


def user() -> str:
    """This process's user name (``uid N`` when it has none)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {getattr(os, 'getuid', lambda: '?')()}"


def _shown(path: object) -> str:
    text = escape_controls(str(path))
    return text if len(text) <= 100 else text[:60] + "..." + text[-30:]


def written_names(out: Path, *, as_file: bool) -> list[str]:
    """The file names a run writes beside (``as_file``: ``OUT.onnx``, its ``.data``, the QDQ graph and its data)
    or as (a folder) OUT."""
    if not as_file:
        return [out.name]
    qdq = qdq_path(out)
    return [out.name, out.name + ".data", qdq.name, qdq.name + ".data"]


def _existing_ancestor(path: Path) -> Path:
    """``path`` or the nearest folder above it that exists."""
    for p in (path, *path.parents):
        if os.path.lexists(p):
            return p
    return Path(path.anchor or "/")


def _file_system(path: Path) -> tuple[str, str] | None:
    """(mount point, type) of the file system holding the existing ``path``, from /proc/self/mounts; None where
    that cannot be read (not Linux)."""
    try:
        lines = Path(MOUNTS).read_text(encoding="utf-8", errors="replace").splitlines()
        real = os.path.realpath(path)
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best[0])):
            best = (mount, fields[2])
    return best


def written_as_file(text: str) -> bool:
    """Whether a run writes OUT ``text`` as one ``.onnx`` file (else as a folder), as ``start_recipe`` decides."""
    out = Path(text).expanduser()
    return out.suffix.lower() == ".onnx" and not os.path.isdir(out)  # isdir: False for a name too long, too


def check_out_path(text: str, *, as_file: bool | None = None, flag: str = "OUT") -> None:
    """Refuse (``UsageError``, one line naming the path and what to do) an OUT the run could not write, before
    any work: a name longer than its file system takes (with the names the run adds beside it), a path longer
    than the system takes, a kernel file system (/proc, /sys…), a folder this user may not write or a read-only
    one. ``as_file``: OUT is a ``.onnx`` file (its folder receives it), else a folder (it receives the files);
    by default as the run decides (:func:`written_as_file`).
    Only the part of OUT that exists is checked: a folder still to be made is not this function's business."""
    if as_file is None:
        as_file = written_as_file(text)
    out = Path(text).expanduser().absolute()
    shown = _shown(text)
    base = _existing_ancestor(out.parent)
    try:
        name_max = os.pathconf(base, "PC_NAME_MAX")
        path_max = os.pathconf(base, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows): the usual limits
        name_max, path_max = 255, 4096
    for part in out.parts[1:-1]:
        if len(os.fsencode(part)) > name_max:
            raise UsageError(f"{flag} {shown}: the folder name '{_shown(part)}' is {len(os.fsencode(part)):,} bytes "
                             f"long; this file system takes names of at most {name_max} bytes. Give a shorter one.")
    names = written_names(out, as_file=as_file)
    longest = out.name if len(os.fsencode(out.name)) > name_max else max(names, key=lambda n: len(os.fsencode(n)))
    if len(os.fsencode(longest)) > name_max:
        extra = "" if longest == out.name else f" with the '{longest[len(out.stem):]}' the run adds to it"
        raise UsageError(f"{flag} {shown}: the name is too long for this file system ({len(os.fsencode(longest)):,} "
                         f"bytes{extra}; at most {name_max}). Give a shorter name.")
    if len(os.fsencode(str(out / longest))) >= path_max:
        raise UsageError(f"{flag} {shown}: the path is too long ({len(os.fsencode(str(out))):,} bytes; this system "
                         f"takes at most {path_max}). Give a shorter path.")
    existing = _existing_ancestor(out if not as_file else out.parent)
    fs = _file_system(existing)
    if fs is not None and fs[1] in PSEUDO_FILE_SYSTEMS:
        raise UsageError(f"{flag} {shown} is on {_shown(fs[0])}, the kernel's {fs[1]} file system, which holds no "
                         "files. Give an OUT on a disk (e.g. in your home folder).")
    if not os.path.isdir(existing):
        return  # a file where a folder is needed: the run says so in its own words
    receives = out.parent if as_file else out
    _check_writable(existing, shown, flag, probe=existing == receives)


def _check_writable(folder: Path, shown: str, flag: str, *, probe: bool) -> None:
    """Refuse an OUT whose existing ``folder`` this user cannot create files in. ``probe``: the folder receives
    the result, so a file is created and removed there (what the run will do; it also meets read-only mounts,
    ACLs and root-squashing shares); otherwise only the permission bits are asked (``os.access``)."""
    problem: OSError | None = None
    if probe:
        try:
            fd, name = tempfile.mkstemp(prefix=".ortlab-probe-", dir=folder)
        except OSError as exc:
            problem = exc
        else:
            os.close(fd)
            os.unlink(name)
    elif not os.access(folder, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) if hasattr(os, "statvfs") else False
        problem = OSError(errno.EROFS, os.strerror(errno.EROFS)) if read_only else \
            PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    if problem is None:
        return
    where = _shown(folder)
    if problem.errno == errno.EROFS:
        raise UsageError(f"{flag} {shown} cannot be written: {where} is on a read-only file system. Give an OUT in "
                         "a folder you can write to.")
    if isinstance(problem, PermissionError):
        raise UsageError(f"{flag} {shown} cannot be written: this user ({user()}) may not create files in {where}. "
                         "Give an OUT in a folder you can write to.")
    if problem.errno in (errno.ENOSPC, errno.EDQUOT):
        return  # the run's own space check says how much it needs and what to do
    raise UsageError(f"{flag} {shown} cannot be written: creating a file in {where} failed "
                     f"({problem.strerror or problem}). Give an OUT in another folder.")


def check_readable(path: Path, what: str, text: str) -> Path:
    """``path`` (the file ``text`` named) when this user may read it, else a ``UsageError`` naming it and what to
    do (a model of another user that is 0600 gave "system error number 13" from ONNX Runtime)."""
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        raise UsageError(f"{what} {_shown(text)} cannot be read: this user ({user()}) may not read it. Give a copy "
                         "this user can read, or run as a user who may.") from None
    except IsADirectoryError:
        pass
    return path
