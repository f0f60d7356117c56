"""``python -m ortlab`` runs the command line (through :mod:`ortlab.cli.entry`: Ctrl-C while it loads is clean)."""

import sys

from ortlab.cli.entry import run

if __name__ == "__main__":
    sys.exit(run())
