"""One child runner: every process ortlab starts is started by ``ortlab/runtime/child.py``, and every Ray task is
submitted by the Ray side of the one executor (``ortlab/runtime/ray_cluster.py``, used through
``ortlab/runtime/executor.py``), both found by parsing the package's source; and what
:class:`ortlab.runtime.child.Child` offers its callers works in a real child."""

from __future__ import annotations

import ast
import os
import signal
import time
from pathlib import Path

import pytest

from ortlab.runtime.child import Child, dotted_name, group_members

ROOT = Path(__file__).resolve().parents[2]
RUNNER = "ortlab/runtime/child.py"
RAY_RUNNERS = {"ortlab/runtime/ray_cluster.py", "ortlab/runtime/executor.py"}  # where a Ray task may be submitted

PROCESS_STARTS = {
    *(f"subprocess.{f}" for f in ("Popen", "run", "call", "check_call", "check_output", "getoutput",
                                  "getstatusoutput")),
    *(f"os.{f}" for f in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "startfile")),
    *(f"multiprocessing.{f}" for f in ("Process", "Pool", "get_context")),
    "multiprocessing.pool.Pool", "concurrent.futures.ProcessPoolExecutor",
    "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "pty.spawn",
}
PROCESS_START_PREFIXES = ("os.exec", "os.spawn")


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name → what it names, for every import in the file (functions included)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def process_starts(source: str, filename: str = "<source>") -> list[str]:
    """``file:line calls name`` for every call in ``source`` that starts a process."""
    tree = ast.parse(source, filename)
    aliases = _aliases(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (name := _dotted(node.func)) is None:
            continue
        head, _, rest = name.partition(".")
        full = aliases.get(head, head) + (f".{rest}" if rest else "")
        full = full.replace("concurrent.futures.process.", "concurrent.futures.")
        if full in PROCESS_STARTS or full.startswith(PROCESS_START_PREFIXES):
            found.append(f"{filename}:{node.lineno} calls {full}")
    return found


def ray_submissions(source: str, filename: str = "<source>") -> list[str]:
    """``file:line submits name`` for every call in ``source`` that hands work to Ray: ``….remote(…)`` (a remote
    function or actor method started) and ``ray.remote(…)`` (a function or class made remote), however ``ray`` or
    ``remote`` was imported."""
    tree = ast.parse(source, filename)
    aliases = _aliases(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        full = None
        if name is not None:
            head, _, rest = name.partition(".")
            full = aliases.get(head, head) + (f".{rest}" if rest else "")
        if full == "ray.remote" or (isinstance(node.func, ast.Attribute) and node.func.attr == "remote"):
            found.append(f"{filename}:{node.lineno} submits {full or ast.unparse(node.func)}")
    return found


def test_only_the_child_runner_starts_processes():
    files = sorted((ROOT / "ortlab").rglob("*.py"))
    assert len(files) > 50
    starts = {str(p.relative_to(ROOT)): process_starts(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
              for p in files}
    assert starts[RUNNER], "the runner itself starts its children"
    bad = [hit for path, hits in starts.items() if path != RUNNER for hit in hits]
    assert bad == [], "processes started outside ortlab/runtime/child.py:\n" + "\n".join(bad)


def test_only_the_ray_executor_submits_ray_tasks():
    files = sorted((ROOT / "ortlab").rglob("*.py"))
    found = {str(p.relative_to(ROOT)): ray_submissions(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
             for p in files}
    assert any(found[path] for path in RAY_RUNNERS), "the Ray runner itself submits its tasks"
    bad = [hit for path, hits in found.items() if path not in RAY_RUNNERS for hit in hits]
    assert bad == [], "Ray tasks submitted outside the Ray executor:\n" + "\n".join(bad)


@pytest.mark.parametrize("snippet, submitted", [
    ("import ray\n@ray.remote\ndef f():\n    pass\nf.remote()\n", "f.remote"),
    ("import ray as r\nr.remote(print)\n", "ray.remote"),
    ("from ray import remote\nremote(num_cpus=1)(print)\n", "ray.remote"),
    ("def go(fn):\n    return fn.options(num_cpus=2).remote(1)\n", "fn.options(num_cpus=2).remote"),
])
def test_the_scan_sees_a_ray_task_submitted_elsewhere(snippet, submitted):
    assert [hit.split(" submits ")[1] for hit in ray_submissions(snippet)] == [submitted]


def test_the_ray_scan_leaves_other_calls_alone():
    assert ray_submissions("import ray\nray.get(x)\nray.wait([x])\nremote = 1\nobj.remove(2)\n") == []


@pytest.mark.parametrize("snippet, called", [
    ("import subprocess\ndef f():\n    subprocess.Popen(['ls'])\n", "subprocess.Popen"),
    ("from subprocess import run as go\ngo(['ls'])\n", "subprocess.run"),
    ("import os\nos.execv('/bin/ls', ['ls'])\n", "os.execv"),
    ("import os as o\no.fork()\n", "os.fork"),
    ("import multiprocessing as mp\nmp.get_context('spawn').Process(target=print)\n", "multiprocessing.get_context"),
    ("from multiprocessing import Process\nProcess(target=print).start()\n", "multiprocessing.Process"),
    ("from concurrent.futures import ProcessPoolExecutor\nProcessPoolExecutor()\n",
     "concurrent.futures.ProcessPoolExecutor"),
    ("import asyncio\nasync def f():\n    await asyncio.create_subprocess_exec('ls')\n",
     "asyncio.create_subprocess_exec"),
])
def test_the_scan_sees_a_process_started_elsewhere(snippet, called):
    assert [hit.split(" calls ")[1] for hit in process_starts(snippet)] == [called]


def test_the_scan_leaves_threads_pipes_and_lookalikes_alone():
    source = ("import threading, subprocess\nfrom multiprocessing import Pipe\nthreading.Thread(target=print)\n"
              "Pipe()\nsubprocess.DEVNULL\nrun = print\nrun('x')\n")
    assert process_starts(source) == []


# -- what Child offers -----------------------------------------------------------------------------------------

HELPER = '''
import os, sys, time
from multiprocessing.connection import Connection


def echo(word, fd):
    conn = Connection(fd)
    conn.send((word, os.environ.get("ORTLAB_CHILD_TEST"), os.getpid(), os.getpgid(0)))
    print("to the log", flush=True)
    conn.close()


def sleeps_with_a_grandchild(fd):
    import subprocess
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    conn = Connection(fd)
    conn.send(grandchild.pid)
    time.sleep(60)


def forks_and_exits(how, fd):
    """Start a grandchild that outlives this process (by os.fork, which also keeps the pipe open, or by
    subprocess), report its pid, and exit at once."""
    conn = Connection(fd)
    if how == "fork":
        pid = os.fork()
        if pid == 0:  # the grandchild: ignores SIGTERM, holds the pipe, sleeps
            import signal
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)
            os._exit(0)
    else:
        import subprocess
        pid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]).pid
    conn.send(pid)
    os._exit(0)


def watched(folder, fd):
    """Start a grandchild, watch the parent (its end of the pipe) with a cleanup that removes ``folder``, report
    both pids and sleep."""
    import shutil
    import subprocess
    from ortlab.runtime.child import ParentWatch
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ParentWatch(fd, lambda: shutil.rmtree(folder, ignore_errors=True) or not os.path.exists(folder))
    conn = Connection(fd)  # kept: a connection that is let go closes fd, and the watch would see the parent gone
    conn.send((os.getpid(), sleeper.pid))
    time.sleep(60)


def starts_a_watched_child(folder, fd):
    from ortlab.runtime.child import Child
    child = Child.run("child_helper:watched", folder, new_session=True)
    conn = Connection(fd)
    conn.send(child.receive())
    time.sleep(60)
'''


@pytest.fixture
def helper(tmp_path, monkeypatch):
    (tmp_path / "child_helper.py").write_text(HELPER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return "child_helper"


def test_run_calls_a_function_by_its_dotted_path_with_args_and_env(helper):
    with Child.run(f"{helper}:echo", "hello", env={"ORTLAB_CHILD_TEST": "set"}) as child:
        word, var, pid, group = child.receive()
        assert child.finish() == 0
        assert (word, var, pid) == ("hello", "set", child.pid)
        assert group == os.getpgid(0)  # not a session of its own: the same process group as this one
        assert "to the log" in child.log_text() and child.last_line() == ": to the log"


def test_a_new_session_child_is_stopped_with_everything_it_started(helper):
    with Child.run(f"{helper}:sleeps_with_a_grandchild", new_session=True) as child:
        grandchild = child.receive()
        assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
        started = time.monotonic()
        assert child.stop() == -signal.SIGTERM
        assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(grandchild):
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail("the grandchild outlived its group's stop")


def _group_left(group: int, timeout: float = 5) -> list[int]:
    """The running processes of ``group`` once they are gone or ``timeout`` passed (then they are killed here, so
    that a failing test leaves nothing behind)."""
    deadline = time.monotonic() + timeout
    while (left := group_members(group)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize("how", ["fork", "subprocess"])
def test_stop_ends_the_whole_group_after_the_child_itself_exited(helper, how):
    with Child.run(f"{helper}:forks_and_exits", how, new_session=True) as child:
        grandchild = child.receive()
        group = child.pid
        deadline = time.monotonic() + 10
        while child.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not child.running()  # the group's leader has exited and been reaped…
        assert group_members(group) == [grandchild] and os.getpgid(grandchild) == group  # …its grandchild runs on
        started = time.monotonic()
        assert child.stop(grace=1.0) == 0
        assert time.monotonic() - started < 5
        assert _group_left(group, timeout=2) == []


def test_receive_ends_when_the_child_exited_though_a_forked_grandchild_holds_the_pipe(helper):
    with Child.run(f"{helper}:forks_and_exits", "fork", new_session=True) as child:
        grandchild = child.receive()
        started = time.monotonic()
        assert child.receive() is None  # no EOF comes while the grandchild lives: the child's exit ends the wait
        assert time.monotonic() - started < 5
        assert child.finish(grace=1.0) == 0  # and finishing the child stops what it left in its group
        assert _group_left(child.pid, timeout=2) == [] and not _alive(grandchild)


def test_a_watched_child_whose_parent_dies_removes_its_folder_and_ends_its_group(helper, tmp_path):
    folder = tmp_path / "trial"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"x")
    with Child.run(f"{helper}:starts_a_watched_child", str(folder), new_session=True) as parent:
        child, grandchild = parent.receive()
        assert _alive(child) and _alive(grandchild) and folder.exists()
        parent.kill()  # as Ray force-kills a worker: no chance to stop its child
        deadline = time.monotonic() + 10
        while (_alive(child) or _alive(grandchild) or folder.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [pid for pid in (child, grandchild) if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert left == [] and not folder.exists()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for whoever adopted it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_dotted_name_of_a_function_and_refusal_of_a_nested_one():
    assert dotted_name(dotted_name) == "ortlab.runtime.child:dotted_name"
    assert dotted_name("a.b:c") == "a.b:c"

    def nested(fd):
        pass

    with pytest.raises(ValueError, match="top level"):
        dotted_name(nested)
