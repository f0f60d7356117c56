"""A tune trial on a cluster node runs in a recipe child, as a local trial does: the same memory limit and the
same message when a trial goes over it (with the node named); a cancelled prefetched trial stops its child and
leaves no ``ortlab-trial-*`` folder; a folder left by a trial whose processes all died goes with the next trial
on that node."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ortlab.runs import prepare
from ortlab.runs import outputs, service
from ortlab.runs.recipe_request import RecipeRequest
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.tune_cluster import ClusterTrials, pid_namespace, trial_folder_prefix
from ortlab.runs.workspace import Workspace
from ortlab.runtime.child import MEMORY_ENV
from ortlab.runtime.child import decode
from ortlab.settings.config import Recipe
from tests.support.memory_cases import big_input_model
from tests.support.ray_cluster import marked_pids

DIGITS = Path(__file__).resolve().parents[2] / "sample_models" / "digits_cnn" / "model.onnx"
CHILD_CALL = "ortlab.runs.recipe_child:run_recipe_child"


def _digits_spec() -> RunSpec:
    return RunSpec(str(DIGITS), Recipe(), calibration=DataRef(sample="digits_cnn", set="calibration"),
                   evaluation=DataRef(sample="digits_cnn", set="evaluation", count=64), verify_samples=64)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (one that only waits to be reaped has stopped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _trial_children(cluster) -> dict[int, RecipeRequest]:
    """The recipe children running on the test cluster's nodes: pid → the request they were given."""
    out = {}
    for pid in marked_pids(cluster.head_marker) + marked_pids(cluster.worker_marker):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if CHILD_CALL in argv and _running(pid):  # the request follows the function's name
            out[pid] = decode(RecipeRequest, argv[argv.index(CHILD_CALL) + 1])
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is applied on Linux only")
def test_a_trial_over_the_memory_limit_fails_as_locally_and_names_its_node(ray_cluster, tmp_path, monkeypatch):
    model = big_input_model(tmp_path / "big_input.onnx")  # 192 MB per sample
    spec = RunSpec(str(model), Recipe(allow_random_data=True), calibration=DataRef(random=64), verify_samples=64)
    ws = Workspace(tmp_path / "home")
    local = prepare.start_recipe(spec, workspace=ws, memory_gb=1.5)
    assert local.wait(180) and local.state == service.FAILED
    assert "needed more than 1.5 GB of memory" in local.error.message

    monkeypatch.setenv(MEMORY_ENV, "1.5")  # where the search runs: the nodes' trials take it
    trials = ClusterTrials(ray_cluster.address, None, str(model), launch=prepare.start_unrecorded_recipe)
    try:
        handle = trials.start(spec, None, ws)
        assert handle.wait(240)
    finally:
        trials.close()
    assert handle.result is None and handle.error is not None
    names = [n.name() for n in trials.nodes]
    assert handle.error.message in [f"{local.error.message} It ran on the cluster node {n}." for n in names]
    assert ws.history().list() == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _left_folders(temp: Path, tag: str) -> dict[str, Path]:
    """Trial folders as trials leave them, in a node's temp folder: one whose trial process and child are gone,
    one whose trial process runs, one whose trial process is gone while its child runs; a folder that is not a
    trial's, and one of a trial whose pid is of another pid namespace (another container sharing the folder)."""
    dead, alive = _dead_pid(), os.getpid()
    left = {}
    for name, pid, owner in (("stale", dead, dead), ("running", alive, alive), ("orphan-child", dead, alive)):
        folder = temp / f"{trial_folder_prefix(pid)}{name}-{tag}"
        (folder / "out").mkdir(parents=True)
        (folder / "out" / outputs.OWNER_FILE).write_text(str(owner))
        left[name] = folder
    left["other"] = temp / f"ortlab-other-{dead}-{tag}"
    left["other-namespace"] = temp / f"ortlab-trial-{dead}-ns{pid_namespace() + 1}-{tag}"  # pids from elsewhere
    for name in ("other", "other-namespace"):
        left[name].mkdir()
    return left


def test_a_cancelled_prefetched_trial_stops_its_child_and_leaves_no_folder(ray_cluster, tmp_path):
    ws = Workspace(tmp_path / "home")
    trials = ClusterTrials(ray_cluster.address, None, str(DIGITS), launch=prepare.start_unrecorded_recipe)
    left: dict[str, Path] = {}
    try:
        trials.prefetch([_digits_spec()], ws)
        deadline = time.monotonic() + 120
        while not (children := _trial_children(ray_cluster)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(children) == 1, "no trial child started on the cluster"
        [(pid, request)] = children.items()
        folder = Path(request.owned_dir or "")
        assert folder.name.startswith("ortlab-trial-") and folder.is_dir()
        assert Path(request.run_dir).parent == folder and request.memory_gb  # the local default limit applies

        trials.prefetch([], ws)  # the search no longer wants it: its Ray task is cancelled (its worker killed)
        deadline = time.monotonic() + 30
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the trial's child still runs after its task was cancelled"
        assert _trial_children(ray_cluster) == {}

        # the next trial task removes what the killed one left (Ray kills a dead worker's children: the child
        # cannot tidy up itself), and only that: not the folders of processes that still run, nor others
        left = _left_folders(folder.parent, tmp_path.name)
        handle = trials.start(_digits_spec(), None, ws)
        assert handle.wait(240) and handle.error is None, handle.error
        assert not folder.exists(), sorted(p.name for p in folder.rglob("*"))
        assert not list(folder.parent.glob(f"{outputs.TEMP_PREFIX}{pid}-*"))  # nor the child's scratch folder
        assert [name for name, f in left.items() if not f.exists()] == ["stale"]
    finally:
        trials.close()
        for f in left.values():
            shutil.rmtree(f, ignore_errors=True)


def test_when_the_search_ends_each_node_removes_what_cancelled_trials_left(ray_cluster, tmp_path):
    """ClusterTrials.close (the end of every search on a cluster) runs the clean-up on each node: a trial folder
    whose processes are gone goes at once, not at the next search; folders of running processes and others stay."""
    trials = ClusterTrials(ray_cluster.address, None, str(DIGITS), launch=prepare.start_unrecorded_recipe)
    left = _left_folders(Path(tempfile.gettempdir()), tmp_path.name)
    try:
        trials.close()
        assert [name for name, f in left.items() if not f.exists()] == ["stale"]
    finally:
        for f in left.values():
            shutil.rmtree(f, ignore_errors=True)


def test_a_head_to_head_on_the_cluster_times_against_the_trial_given_not_the_source(ray_cluster, tmp_path,
                                                                                   monkeypatch):
    """The recommender times a pick against the default (not the fp32 source) on the timing node: the reference's
    bytes are the default's. A reference that is the source goes by the source's stored reference."""
    import onnx

    from ortlab.core.progress import CancelToken
    from ortlab.settings.config import BenchConfig

    default = tmp_path / "default.onnx"
    m = onnx.load(str(DIGITS))
    m.doc_string = "the default trial's model"  # other bytes than the source's, the same graph
    onnx.save(m, str(default))
    trials = ClusterTrials(ray_cluster.address, None, str(DIGITS), launch=prepare.start_unrecorded_recipe)
    sent: list[bytes] = []
    put = trials.cluster.put

    def recording(blob: bytes):
        sent.append(blob)
        return put(blob)

    monkeypatch.setattr(trials.cluster, "put", recording)
    cfg = BenchConfig(batch_sizes=(1,), warmup=1, duration_s=0.3)
    try:
        speed = trials.measure(str(default), str(DIGITS), cfg, 1, shapes={}, cancel=CancelToken())
        assert default.read_bytes() in sent and speed.rounds >= 3
        sent.clear()
        trials.measure(str(DIGITS), str(default), cfg, 1, shapes={}, cancel=CancelToken())
        assert sent == [default.read_bytes()]  # the candidate only: the source is already on the store
    finally:
        trials.close()
