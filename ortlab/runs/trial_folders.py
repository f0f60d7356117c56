"""The folders of tune's trials on a cluster node (``ortlab-trial-<worker pid>-ns<pid namespace>-…`` in the node's
temp folder): how they are named, and their removal once the trial's processes are gone — by the next trial on the
node, by every node when a search ends (:func:`clean_trial_folders`, a Ray task), and by ``ortlab cluster stop``."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from ortlab.runs import outputs

__all__ = ["CLEAN_WAIT_S", "TRIAL_PREFIX", "clean_trial_folders", "pid_namespace", "remove_stale_trial_folders",
           "trial_folder_prefix"]

TRIAL_PREFIX = "ortlab-trial-"  # a trial's folder in a node's temp folder: ortlab-trial-<worker pid>-ns<its pid namespace>-…
_TRIAL_NAME = re.compile(rf"^{TRIAL_PREFIX}(\d+)-ns(\d+)-")
CLEAN_WAIT_S = 10.0  # how long a node waits for stopped trials' processes to go before it removes their folders


def pid_namespace() -> int:
    """The id (inode) of this process's pid namespace, 0 where it cannot be read: pids are compared only within
    one (two containers may share a temp folder)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def trial_folder_prefix(pid: int | None = None) -> str:
    """``ortlab-trial-<pid>-ns<pid namespace>-``: how a trial's folder begins (``pid``: default this process)."""
    return f"{TRIAL_PREFIX}{os.getpid() if pid is None else pid}-ns{pid_namespace()}-"


def remove_stale_trial_folders(parent: Path) -> list[Path]:
    """Removes what force-stopped trials left in ``parent`` (the node's temp folder): folders named
    ``ortlab-trial-<pid>-ns<namespace>-…`` (:func:`trial_folder_prefix`) of this user and this pid namespace whose
    trial process (that pid) and whose recipe child (the pid in its ``out`` folder's owner file, when there is
    one) are both gone. Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for folder in entries:
        m = _TRIAL_NAME.match(folder.name)
        try:
            ours = folder.is_dir() and not folder.is_symlink() and folder.lstat().st_uid == os.getuid()
        except OSError:
            continue
        if not m or not ours or int(m.group(2)) != pid_namespace() or outputs.pid_alive(int(m.group(1))) \
                or outputs.owner_alive(folder / "out"):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed


def clean_trial_folders(wait_s: float | None = None) -> list[str]:
    """A Ray task run on each node when a search ends: removes the folders of this node's stopped trials
    (:func:`remove_stale_trial_folders`), waiting up to ``wait_s`` for a force-stopped trial's processes to go;
    returns the folders of this pid namespace still there (a trial whose processes still run)."""
    here = Path(tempfile.gettempdir())
    deadline = time.monotonic() + (CLEAN_WAIT_S if wait_s is None else wait_s)
    while True:
        remove_stale_trial_folders(here)
        left = [f.name for f in here.glob(f"{TRIAL_PREFIX}*-ns{pid_namespace()}-*")]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)
