"""The ``ortlab`` command's entry point. The CLI's imports (ONNX Runtime, onnx, numpy) take seconds on a loaded
machine; they happen inside it, so Ctrl-C from the first instant ends with one line and status 130, never a
traceback."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

INTERRUPTED = 130
_pressed: list[int] = []  # Ctrl-C seen between this import and run()'s handler: run() acts on it


def _remember(signum, frame) -> None:
    _pressed.append(signum)


# A Ctrl-C in the few instructions between this module's import and run()'s ``try`` would escape as a traceback
# (seen once under load); from here it is only remembered. An ignored SIGINT stays ignored.
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _remember)


def _forget_caught_interrupt() -> None:
    """CPython ends a process with SIGINT (status -2, not 130) when a KeyboardInterrupt once escaped one of its
    ``PyRun_*`` calls (a C extension's import can run code through them), even after Python code caught it; an
    empty ``PyRun_SimpleString`` clears that mark."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (ImportError, AttributeError):  # not CPython, or no ctypes: the status may then be -2
        pass


def _load() -> Callable[[], int]:
    from ortlab.cli.main import main

    return main


def run() -> int:
    """Import the CLI and run it (:func:`ortlab.cli.main.main`); Ctrl-C while importing: "interrupted", 130 (also
    when an import swallowed the KeyboardInterrupt, as code that clears a pending error does, or turned it into its own
    error, as a C extension's initialisation does: the signal itself is remembered)."""
    pressed = _pressed

    def on_ctrl_c(signum, frame):
        pressed.append(signum)
        raise KeyboardInterrupt

    try:
        # an ignored SIGINT stays ignored
        watching = signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _remember)
        if watching:
            signal.signal(signal.SIGINT, on_ctrl_c)
        try:
            if pressed:  # before run() began
                raise KeyboardInterrupt
            main = _load()
        # an import Ctrl-C broke (ONNX Runtime: "ImportError: initialization failed"; Python 3.11 wraps one that lands
        # in a class attribute's __set_name__, as a dataclass field's, in RuntimeError)
        except (ImportError, SystemError, RuntimeError):
            if not pressed:
                raise
            raise KeyboardInterrupt from None
        finally:
            if watching:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        if pressed:
            raise KeyboardInterrupt
        code = main()
    except KeyboardInterrupt:
        print("ortlab: error: interrupted", file=sys.stderr)
        code = INTERRUPTED
    pressed.clear()
    if code == INTERRUPTED:
        _forget_caught_interrupt()
    return code
