"""The ``ortlab`` command line (:mod:`ortlab.cli.main`)."""

PROG = "ortlab"  # the command's name, as its messages begin
