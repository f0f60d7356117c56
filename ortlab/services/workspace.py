"""The workspace: its folders, its run and benchmark History, the imported models and data sets it stores."""

from __future__ import annotations

from ortlab.runs.history import History, take_notices
from ortlab.runs.report import html_report
from ortlab.runs.stored import MODEL, delete_dataset, delete_model, stored_items
from ortlab.runs.workspace import Workspace, bench_text, cache_dirs, default_root, import_roots, importable_path


def open_workspace(root=None) -> Workspace:
    """The workspace at ``root`` (default: ``$ORTLAB_HOME``, else ``~/.ortlab``); its folders are made if missing."""
    return Workspace(root)


def open_history(workspace: Workspace) -> History:
    """The run and benchmark History of ``workspace``."""
    return History(workspace.db_path)


class Workspaces:
    """Opening a workspace and its History, where imports may come from, and what it stores."""

    STORED_MODEL = MODEL

    open_workspace = staticmethod(open_workspace)
    open_history = staticmethod(open_history)
    default_root = staticmethod(default_root)
    cache_dirs = staticmethod(cache_dirs)
    import_roots = staticmethod(import_roots)
    importable_path = staticmethod(importable_path)
    bench_text = staticmethod(bench_text)
    stored_items = staticmethod(stored_items)
    delete_model = staticmethod(delete_model)
    delete_dataset = staticmethod(delete_dataset)
    take_notices = staticmethod(take_notices)
    html_report = staticmethod(html_report)


workspaces = Workspaces()
