"""``python -m ortlab`` runs the command line."""

import sys

from ortlab.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
