"""The ``ortlab`` command line: inspect, optimize, bench, compare, run, history, samples, analyze and tune (one
module each in this package; :mod:`ortlab.cli.common` holds what they share, :mod:`ortlab.cli.render` how they print).

Exit status (:data:`EXIT_STATUS`): 0 success, 1 the work failed (bad model file, data that does not fit, ORT
failure), 2 bad usage (unknown flags, missing files or ``--shape``, a recipe that cannot work), 3 the result's
verdict is at or worse than ``--fail-on`` (optimize, compare, run), 4 tune found no recipe that meets the verdict
and the bar, 130 interrupted (Ctrl-C), 128 + N stopped by signal N (SIGTERM 143, SIGHUP 129). Errors print one
line on stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ortlab import __version__
from ortlab.api import UsageError
from ortlab.core.errors import Cancelled, OrtlabError, RecipeError, ShapeError
from ortlab.core.errors import OutputError
from ortlab.core.text import escape_controls, one_line
from ortlab import api
from ortlab.cli.live import end_live_line
from ortlab.cli.common import PROG, Parser, existing_file, start_service
from ortlab.cli.inputs import one_read_per_model
from ortlab.cli import bench, cluster, compare, history, inspect, optimize, samples, tune

COMMANDS = (inspect, optimize, bench, compare, history, samples, tune, cluster)
EXIT_STATUS = ("Exit status: 0 ok, 1 the work failed, 2 bad usage (a missing --shape included), 3 the verdict is at "
               f"or worse than --fail-on, {tune.EXIT_NO_RECOMMENDATION} tune found no recipe that meets the verdict "
               "and the bar, 130 interrupted, 143 stopped by SIGTERM.")


def build_parser() -> argparse.ArgumentParser:
    """The ``ortlab`` argument parser, one sub-command per module of :data:`COMMANDS`."""
    parser = Parser(prog=PROG, description="Quantize and graph-optimize ONNX models with ONNX Runtime, "
                                            "and show why the result is safe to ship.",
                     epilog=EXIT_STATUS)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                        help="A custom-op shared library (.so/.dll/.dylib) registered in every ONNX Runtime session "
                             "(repeatable; give it before the command).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    for command in COMMANDS:
        command.add_command(sub)
    return parser


NO_CALIBRATION_DATA_CLI = ("int8 static quantization needs calibration data: give --calibration DIR (a folder of "
                           "images, a .npy/.npz tensor file or a .txt file), or use --quant-mode dynamic, or "
                           "--allow-random-data (the result is then flagged).")
"""What the CLI says in place of the engine's :data:`NO_CALIBRATION_DATA`: the flags that fix it."""

# the engine's wording for the app, and the CLI's
_CLI_WORDS = (
    ("Upload a .onnx file", "Give a .onnx file"),
    ("Upload the complete file again.", "Export or copy the complete file again."),
    ("and upload a .zip with both files.", "beside the .onnx file, and give the .onnx file."),
    ("Upload a .zip containing the .onnx and its weight files.",
     "Give the .onnx file in the folder that holds its weight files."),
)


def error_text(exc: BaseException) -> str:
    """The one line the CLI prints for an engine error: in the CLI's words (its flags, not the app's buttons), and
    without the "validate" step name, which says nothing to a user (the checks before any work)."""
    message = exc.message if isinstance(exc, (OrtlabError, Cancelled)) and exc.step == "validate" else str(exc)
    if message == api.recipes.NO_CALIBRATION_DATA:
        message = NO_CALIBRATION_DATA_CLI
    for app_words, cli_words in _CLI_WORDS:
        message = message.replace(app_words, cli_words)
    return one_line(message) if message else one_line(exc)


def _pipe_closed() -> int:
    """The reader of stdout went away (``ortlab history | head -2``): stop quietly with status 0, as the reader got
    all it asked for (141, "killed by SIGPIPE", would fail a ``set -o pipefail`` script for no fault). Stdout is
    pointed at /dev/null so that Python's flush at exit does not print "Exception ignored … BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # an in-process caller's stdout without a file descriptor
        pass
    return 0


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP while a command runs: it stops as Ctrl-C stops it, with the run's child process (which,
    left alone, ran on to its end after the command was gone)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame) -> None:
    raise Stopped(signum)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """While the command runs, SIGTERM and SIGHUP raise :class:`Stopped` (where Python can take signals: the main
    thread); one that is ignored (``nohup``) or handled by the caller stays so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for number, handler in saved.items():
        if handler is signal.SIG_DFL:
            signal.signal(number, _stop)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (:data:`EXIT_STATUS`)."""
    parser = build_parser()
    os.umask(0o077)  # the workspace and every result ortlab writes are private to the user (0700/0600)
    saved_libraries = os.environ.get(api.machine.CUSTOM_OPS_ENV)
    streams = sys.stdout, sys.stderr  # a live progress line routes both through a wrapper while the command runs
    try:
        ns = parser.parse_args(argv)
        if ns.custom_op_library:
            api.machine.set_custom_op_libraries([existing_file(p, "Custom-op library") for p in ns.custom_op_library])
        if ns.command in ("optimize", "run", "bench", "history"):
            start_service()
        with _stopped_by_signals(), one_read_per_model():
            code = int(ns.func(ns) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except (UsageError, RecipeError, OutputError, ShapeError) as exc:
        print(f"{PROG}: error: {error_text(exc)}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{PROG}: error: file not found: {escape_controls(str(exc.filename)) if exc.filename else one_line(exc)}",
              file=sys.stderr)
        return 2
    except (OrtlabError, Cancelled) as exc:
        print(f"{PROG}: error: {error_text(exc)}", file=sys.stderr)
        return 1
    except Stopped as exc:
        api.machine.restore_native_stderr()  # a signal can land where ORT's output was being caught
        print(f"{PROG}: error: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        api.machine.restore_native_stderr()
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the last net: any failure becomes one line (ORTLAB_DEBUG shows the traceback)
        if os.environ.get("ORTLAB_DEBUG"):
            raise
        print(f"{PROG}: error: unexpected {type(exc).__name__}: {one_line(exc)} "
              f"(set ORTLAB_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    finally:  # in-process callers (tests, notebooks) get their environment back
        end_live_line()
        sys.stdout, sys.stderr = streams
        if saved_libraries is None:
            os.environ.pop(api.machine.CUSTOM_OPS_ENV, None)
        else:
            os.environ[api.machine.CUSTOM_OPS_ENV] = saved_libraries


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
