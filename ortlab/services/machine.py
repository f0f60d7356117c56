"""This machine and its cluster: the execution providers that work, its CPU's int8 abilities, OpenVINO, custom
operator libraries, and the Ray nodes ortlab starts and stops."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ortlab.runs.trial_folders import remove_stale_trial_folders as remove_stale
from ortlab.runtime.cluster_setting import configured_cluster
from ortlab.runtime.hardware import advise, detect
from ortlab.runtime.openvino import INSTALL_HINT, available
from ortlab.runtime.providers import CPU, CUDA, CUSTOM_OPS_ENV, TRT
from ortlab.runtime.providers import claimed_providers, custom_op_libraries, restore_native_stderr
from ortlab.runtime.providers import set_custom_op_libraries, working_providers
from ortlab.runtime.ray_node import DEFAULT_PORT, ensure_token, plan_node, start_node, stop_node


def remove_stale_trial_folders() -> list:
    """Removes the folders that stopped cluster trials left in this machine's temp folder; what was removed."""
    return remove_stale(Path(tempfile.gettempdir()))


class ThisMachine:
    """What runs here (providers, hardware, OpenVINO, custom ops) and the Ray cluster this machine joins."""

    CPU, CUDA, TRT = CPU, CUDA, TRT
    CUSTOM_OPS_ENV = CUSTOM_OPS_ENV
    OPENVINO_INSTALL_HINT = INSTALL_HINT
    DEFAULT_CLUSTER_PORT = DEFAULT_PORT

    working_providers = staticmethod(working_providers)
    claimed_providers = staticmethod(claimed_providers)
    custom_op_libraries = staticmethod(custom_op_libraries)
    set_custom_op_libraries = staticmethod(set_custom_op_libraries)
    restore_native_stderr = staticmethod(restore_native_stderr)
    detect_hardware = staticmethod(detect)
    hardware_advice = staticmethod(advise)
    openvino_available = staticmethod(available)
    configured_cluster = staticmethod(configured_cluster)
    plan_node = staticmethod(plan_node)
    start_node = staticmethod(start_node)
    stop_node = staticmethod(stop_node)
    ensure_cluster_token = staticmethod(ensure_token)
    remove_stale_trial_folders = staticmethod(remove_stale_trial_folders)


machine = ThisMachine()
