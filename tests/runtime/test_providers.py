"""ortlab.runtime.providers: real provider detection, quiet native stderr, sessions that report what ran."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnxruntime as ort
import pytest

from tests.support.models import conv_bn_model
from ortlab.runtime import providers as P
from ortlab.settings.config import BenchConfig, ExecutionMode, OptLevel, Target
from ortlab.core.errors import ModelLoadError


@pytest.fixture
def conv(tmp_path):
    return conv_bn_model(tmp_path / "conv.onnx")


def test_claimed_is_what_ort_says():
    assert P.claimed_providers() == ort.get_available_providers()


def test_working_providers_really_work(conv, capfd):
    P._working.cache_clear()
    working = P.working_providers()
    assert working[-1] == P.CPU and set(working) <= set(P.claimed_providers())
    for p in working:
        sess = ort.InferenceSession(str(conv), providers=[p], enable_fallback=0)
        assert sess.get_providers()[0] == p
    for p in set(P.claimed_providers()) - set(working):  # claimed but unusable (onnxruntime-gpu without a GPU)
        try:
            with P.quiet_native_stderr():
                sess = ort.InferenceSession(str(conv), providers=[p, P.CPU], enable_fallback=0)
        except Exception:
            continue
        assert p not in sess.get_providers()
    out = capfd.readouterr()
    assert "EP Error" not in out.out + out.err and "Failed to load" not in out.err
    assert P.working_providers() is not working and P.working_providers() == working  # cached copy


def test_runtime_providers():
    assert P.runtime_providers(Target.CPU) == [P.CPU]
    gpu = P.runtime_providers(Target.GPU)
    assert gpu == [p for p in (P.TRT, P.CUDA, P.CPU) if p in P.working_providers()]
    assert gpu[-1] == P.CPU


def test_create_session_reports_real_providers_and_is_quiet(conv, capfd):
    sess, used = P.create_session(conv, Target.GPU)
    assert used == sess.get_providers()
    if not any(p in P.working_providers() for p in (P.CUDA, P.TRT)):
        assert used == [P.CPU]
    x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    assert sess.run(None, {"input": x})[0].shape == (2, 10)
    out = capfd.readouterr()
    assert out.out == "" and out.err == ""


def test_create_session_bad_model(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="^ONNX Runtime could not load the model: "):
        P.create_session(tmp_path / "bad.onnx")


def test_quiet_native_stderr_captures_fd2(capfd):
    with P.quiet_native_stderr() as cap:
        os.write(2, b"native noise\n")
    os.write(2, b"after\n")
    assert cap.text == "native noise\n"
    assert capfd.readouterr().err == "after\n"


def test_fd2_comes_back_when_a_redirection_is_cut_off_before_its_exit(capfd):
    """Ctrl-C landing in the redirection's own exit leaves it open until the garbage collector runs: the CLI's last
    line ("interrupted") would go to the temp file. ``restore_native_stderr`` puts fd 2 back, the late exit then
    leaves it be; nested redirections come back whole."""
    outer = P.quiet_native_stderr()
    outer.__enter__()
    inner = P.quiet_native_stderr()
    inner.__enter__()
    os.write(2, b"caught\n")
    P.restore_native_stderr()
    os.write(2, b"seen\n")
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)
    os.write(2, b"after\n")
    P.restore_native_stderr()  # nothing left to put back
    assert capfd.readouterr().err == "seen\nafter\n"
    with P.quiet_native_stderr() as cap:
        os.write(2, b"native noise\n")
    assert cap.text == "native noise\n" and capfd.readouterr().err == ""


class _SpyLock:
    """The redirection lock, noting when a second thread has to wait for it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.contended = threading.Event()

    def __enter__(self):
        if not self.inner.acquire(blocking=False):
            self.contended.set()
            self.inner.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.inner.release()


def test_quiet_native_stderr_is_serialised_across_threads(monkeypatch):
    results: dict[str, str] = {}
    entered = threading.Event()
    spy = _SpyLock(P._STDERR_LOCK)
    monkeypatch.setattr(P, "_STDERR_LOCK", spy)

    def first():
        with P.quiet_native_stderr() as cap:
            entered.set()
            os.write(2, b"A1 ")
            assert spy.contended.wait(10)  # the second thread is blocked on the lock while we write
            os.write(2, b"A2")
        results["a"] = cap.text

    def second():
        entered.wait()
        with P.quiet_native_stderr() as cap:
            os.write(2, b"B")
        results["b"] = cap.text

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"a": "A1 A2", "b": "B"}


def test_session_options_from_bench_config(conv, tmp_path):
    bench = BenchConfig(intra_op_threads=1, inter_op_threads=2, execution_mode=ExecutionMode.PARALLEL,
                        enable_mem_pattern=False, enable_cpu_mem_arena=False)
    so = P.session_options(bench, OptLevel.BASIC, profile_prefix=str(tmp_path / "prof"))
    assert so.intra_op_num_threads == 1 and so.inter_op_num_threads == 2
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert so.enable_mem_pattern is False and so.enable_cpu_mem_arena is False
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess, _ = P.create_session(conv, Target.CPU, so)
    sess.run(None, {"input": np.zeros((1, 3, 32, 32), np.float32)})
    prof = sess.end_profiling()
    assert os.path.dirname(os.path.abspath(prof)) == str(tmp_path) and os.path.basename(prof).startswith("prof")
    default = P.session_options()
    assert default.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert not default.enable_profiling
