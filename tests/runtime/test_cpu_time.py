"""CPU seconds across a process and its children (running ones too), and the note of a busy machine."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ortlab.runtime import cpu_time
from ortlab.runtime.cpu_time import CpuShare


def test_the_busy_note_says_what_share_of_the_machine_the_search_got():
    note = CpuShare(74.0, 100.0, 2, others_s=110.0).busy_note()
    assert note is not None and note.startswith(
        "The machine was busy: the search got 37% of 2 cores (74 s of CPU in 100 s); other processes used 55% of them.")
    assert CpuShare(74.0, 100.0, 2).busy_note() is not None  # what the others used unknown: the share alone says it


@pytest.mark.parametrize("share", [CpuShare(150.0, 100.0, 2, others_s=40.0),   # the search got most of the machine
                                   CpuShare(30.0, 100.0, 2, others_s=10.0),    # it idled itself; nobody else ran
                                   CpuShare(1.0, 5.0, 2, others_s=10.0)])      # too short to say
def test_no_busy_note_on_a_quiet_machine_or_a_short_search(share):
    assert share.busy_note() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="live children are read from /proc")
def test_a_running_child_counts_before_it_ends():
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(30)"
    before = cpu_time.cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        deadline = time.monotonic() + 60
        while cpu_time.live_children_cpu_s() < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cpu_time.live_children_cpu_s() >= 0.5  # still running: os.times() does not count it yet
        assert cpu_time.cpu_seconds() - before >= 0.5
    finally:
        child.kill()
        child.wait()
