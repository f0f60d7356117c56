"""``ortlab cluster``: start and stop a private Ray node for ``--ray`` (and the app's ``$ORTLAB_CLUSTER``): token
authentication on, every port fixed and listed, no dashboard, no usage statistics, no outbound call."""

from __future__ import annotations

import argparse
import json

from ortlab import api
from ortlab.api import UsageError
from ortlab.cli.common import PROG


def add_command(sub) -> None:
    """Register the command's parser."""
    p = sub.add_parser("cluster", help="Start or stop a private Ray node on this machine (for --ray).",
                       description="Starts a Ray node that only the cluster's machines may use: Ray's token "
                                   "authentication on (the token file: $ORTLAB_CLUSTER_TOKEN, default "
                                   "~/.ortlab/cluster/auth_token, which the head writes and every other machine "
                                   "needs a copy of), every port fixed and listed, no dashboard, no usage "
                                   "statistics and no outbound connection. A cluster trusts all its members: each "
                                   "node can run code in every process connected to it.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    start = actions.add_parser("start", help="Start the head (--head) or a node that joins one (--join HOST:PORT).")
    where = start.add_mutually_exclusive_group(required=True)
    where.add_argument("--head", action="store_true", help="Start the cluster's head (it writes the token if none).")
    where.add_argument("--join", metavar="HOST:PORT", help="Join the cluster whose head listens there.")
    start.add_argument("--ip", default="127.0.0.1",
                       help="This machine's address on the cluster's network (default 127.0.0.1: a cluster on this "
                            "machine alone, whose ports listen on loopback only).")
    start.add_argument("--port", type=int, default=api.machine.DEFAULT_CLUSTER_PORT,
                       help=f"The head's port (default {api.machine.DEFAULT_CLUSTER_PORT}); the node's other ports follow it "
                            "(PORT+1 … PORT+8, workers PORT+100 … PORT+199); a second node on the same "
                            "machine needs another --port.")
    start.add_argument("--num-cpus", type=int, default=None, help="The CPUs ortlab may use on this node.")
    start.add_argument("--resources", default="{}", metavar="JSON",
                       help="Custom resources that name this kind of machine, e.g. '{\"cpu_epyc\": 1}'.")
    start.set_defaults(func=cmd_start)
    stop = actions.add_parser("stop", help="Stop this machine's Ray nodes and remove the folders stopped trials left.")
    stop.set_defaults(func=cmd_stop)


def _resources(text: str) -> dict[str, float]:
    try:
        got = json.loads(text)
    except json.JSONDecodeError:
        got = None
    if not isinstance(got, dict) or not all(isinstance(v, (int, float)) for v in got.values()):
        raise UsageError(f"--resources {text!r} is not a JSON object of numbers, e.g. '{{\"cpu_epyc\": 1}}'.")
    return {str(k): float(v) for k, v in got.items()}


def cmd_start(ns: argparse.Namespace) -> int:
    """`ortlab cluster start`: a private head or node."""
    try:
        plan = api.machine.plan_node(ip=ns.ip, join=ns.join, port=ns.port, num_cpus=ns.num_cpus,
                                     resources=_resources(ns.resources))
    except api.NodeSettingError as err:
        raise UsageError(err.message) from None
    token, made = api.machine.ensure_cluster_token(create=plan.head)
    api.machine.start_node(plan)
    print(f"{'Head' if plan.head else 'Node'} started at {plan.ip} (cluster {plan.head_address}); token "
          f"authentication on, token file {token}{' (new)' if made else ''}.")
    print(f"Its ports, on {plan.listens_on()}:")
    for name, port in plan.ports():
        print(f"  {port:>5}  {name}")
    if plan.head:
        print(f"Join from another machine (after copying {token} there, mode 0600):\n"
              f"  {PROG} cluster start --join {plan.head_address} --ip THAT_MACHINES_IP --port {plan.port}")
        print(f"Use it: {PROG} tune MODEL --out DIR --ray {plan.head_address}   "
              f"(the app's server: ORTLAB_CLUSTER={plan.head_address})")
    return 0


def cmd_stop(ns: argparse.Namespace) -> int:
    """`ortlab cluster stop`: stop this machine's nodes; remove what stopped trials left."""
    api.machine.stop_node()
    removed = api.machine.remove_stale_trial_folders()
    print(f"Ray stopped on this machine; {len(removed)} folder{'' if len(removed) == 1 else 's'} of stopped "
          "trials removed.")
    return 0
