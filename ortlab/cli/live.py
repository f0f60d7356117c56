"""Progress on the command line: one updating line per stage on a terminal, a log line per stage with ``-v``,
nothing when piped or with ``-q`` (:func:`reporter`)."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import Any

from ortlab.cli import PROG
from ortlab.core.progress import ProgressEvent, null_reporter
from ortlab.core.text import one_line


class LiveLine:
    """Progress on a terminal: one line per stage, rewritten in place (``\\r``) as the stage advances (at most ten
    times a second), ended when the next stage starts, when the stage is done, or before anything else is printed
    (:func:`reporter` routes stdout and stderr through :class:`_EndsLiveLine` while it is shown)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.stage = ""
        self.open = False
        self._last = 0.0

    def __call__(self, event: ProgressEvent) -> None:
        done = event.total is not None and event.done >= event.total
        now = time.monotonic()
        new_stage = event.stage != self.stage
        if not (new_stage or done or now - self._last >= 0.1):
            return
        if new_stage:
            self.end()
        count = f" {event.done}/{event.total}" if event.total and event.total > 1 else ""
        text = one_line(f"{PROG}: {event.stage}{count} {'done' if done else '…'} {event.message}".rstrip())
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        self.stream.write("\r" + (text if len(text) <= width else text[:width - 1] + "…") + "\x1b[K")
        self.open, self.stage, self._last = True, event.stage, now
        if done:
            self.end()
        self.stream.flush()

    def end(self) -> None:
        """End the line being rewritten (the next output starts on a line of its own)."""
        if self.open:
            self.open = False
            self.stream.write("\n")
            self.stream.flush()


class _EndsLiveLine:
    """A text stream that ends the live progress line before it writes (stdout and stderr while it shows)."""

    def __init__(self, stream: Any, live: LiveLine) -> None:
        self._stream, self.live = stream, live

    def write(self, text: str) -> int:
        if text:
            self.live.end()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def end_live_line() -> None:
    """End the live progress line, if one is being shown (before the command's last word)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _EndsLiveLine):
            stream.live.end()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def reporter(ns: argparse.Namespace, stream: Any = None):
    """How a command shows progress on ``stream`` (stderr): ``-q`` none; ``-v`` a line each time a stage starts or
    ends; else, on a terminal, one updating line per stage (:class:`LiveLine`), and none when piped."""
    stream = stream if stream is not None else sys.stderr
    if getattr(ns, "quiet", False):
        return null_reporter
    if not getattr(ns, "verbose", False):
        if not _is_terminal(stream):
            return null_reporter
        if isinstance(sys.stderr, _EndsLiveLine) and stream is sys.stderr:
            return sys.stderr.live
        live = LiveLine(stream)
        if stream is sys.stderr:  # the caller (main) puts both streams back when the command ends
            sys.stdout = _EndsLiveLine(sys.stdout, live)
            sys.stderr = _EndsLiveLine(sys.stderr, live)
        return live
    last: list[str] = [""]

    def report(event: ProgressEvent) -> None:
        done = event.total is not None and event.done >= event.total
        if event.stage != last[0] or done:
            count = f" {event.done}/{event.total}" if event.total and event.total > 1 else ""
            state = "done" if done else "…"
            print(f"{PROG}: {event.stage}{count} {state} {event.message}".rstrip(), file=sys.stderr, flush=True)
            last[0] = event.stage

    return report
