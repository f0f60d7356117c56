"""The ``ortlab`` command line: inspect, optimize, bench, compare, run, history, samples, analyze and tune (one
module each in this package; :mod:`ortlab.cli.common` holds what they share, :mod:`ortlab.cli.render` how they print).

Exit status: 0 success, 1 the work failed (bad model file, data that does not fit, ORT failure),
2 bad usage (unknown flags, missing files, a recipe that cannot work), 3 the result's verdict is at or worse
than ``--fail-on`` (optimize, compare, run). Errors print one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ortlab import __version__
from ortlab.api import UsageError
from ortlab.core.errors import Cancelled, OrtlabError, RecipeError, ShapeError
from ortlab.core.errors import OutputError
from ortlab.core.text import escape_controls, one_line
from ortlab.api import set_custom_op_libraries
from ortlab.api import CUSTOM_OPS_ENV
from ortlab.cli.common import PROG, Parser, existing_file, start_service
from ortlab.cli import bench, compare, history, inspect, optimize, samples, tune

COMMANDS = (inspect, optimize, bench, compare, history, samples, tune)


def build_parser() -> argparse.ArgumentParser:
    """The ``ortlab`` argument parser, one sub-command per module of :data:`COMMANDS`."""
    parser = Parser(prog=PROG, description="Quantize and graph-optimize ONNX models with ONNX Runtime, "
                                            "and show why the result is safe to ship.",
                     epilog="Exit status: 0 ok, 1 the work failed, 2 bad usage, 3 the verdict is at or worse "
                            "than --fail-on.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                        help="A custom-op shared library (.so/.dll/.dylib) registered in every ONNX Runtime session "
                             "(repeatable; give it before the command).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    for command in COMMANDS:
        command.add_command(sub)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 usage)."""
    parser = build_parser()
    os.umask(0o077)  # the workspace and every result ortlab writes are private to the user (0700/0600)
    saved_libraries = os.environ.get(CUSTOM_OPS_ENV)
    try:
        ns = parser.parse_args(argv)
        if ns.custom_op_library:
            set_custom_op_libraries([existing_file(p, "Custom-op library") for p in ns.custom_op_library])
        if ns.command in ("optimize", "run", "bench", "history"):
            start_service()
        code = int(ns.func(ns) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except (UsageError, RecipeError, OutputError, ShapeError) as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{PROG}: error: file not found: {escape_controls(str(exc.filename)) if exc.filename else one_line(exc)}",
              file=sys.stderr)
        return 2
    except (OrtlabError, Cancelled) as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("ORTLAB_DEBUG"):
            raise
        print(f"{PROG}: error: unexpected {type(exc).__name__}: {one_line(exc)} "
              f"(set ORTLAB_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    finally:  # in-process callers (tests, notebooks) get their environment back
        if saved_libraries is None:
            os.environ.pop(CUSTOM_OPS_ENV, None)
        else:
            os.environ[CUSTOM_OPS_ENV] = saved_libraries


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
