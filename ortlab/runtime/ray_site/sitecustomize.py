"""Run at the start of every Python process of a Ray node that ``ortlab cluster start`` started (this folder is
on its ``PYTHONPATH``): quiets Ray's outbound calls there (:mod:`ortlab.runtime.ray_quiet`)."""

import os

if os.environ.get("ORTLAB_RAY_QUIET") == "1":
    try:
        from ortlab.runtime.ray_quiet import quiet_ray
    except ImportError:  # ortlab is not importable in this interpreter: nothing to quiet with
        pass
    else:
        quiet_ray()
