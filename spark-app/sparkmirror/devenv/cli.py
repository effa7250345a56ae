"""`sparkmirror dev ...`: the local environment people and tests use."""
from __future__ import annotations

import argparse
import json
import sys

from .env import DEFAULT_CLUSTERS, default_env
from .procs import DevEnvError


def add_parser(sub: argparse._SubParsersAction) -> None:
    dev = sub.add_parser("dev", help="local Kafka clusters and Kubernetes API server")
    dsub = dev.add_subparsers(dest="dev_command", required=True)
    up = dsub.add_parser("up", help="start N local KRaft clusters and a Kubernetes API server")
    up.add_argument("-n", "--clusters", type=int, default=2, help="number of Kafka clusters (default 2)")
    up.add_argument("--names", help="comma-separated cluster names (default source,target,c3,...)")
    up.add_argument("--base-port", type=int, help="fixed ports from here (default: free ports)")
    up.add_argument("--no-kube", action="store_true", help="Kafka only")
    up.set_defaults(func=_up)
    down = dsub.add_parser("down", help="stop everything and remove its data")
    down.set_defaults(func=_down)
    status = dsub.add_parser("status", help="what runs, where, and its log")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)


def _names(args: argparse.Namespace) -> list[str]:
    if args.names:
        return [n.strip() for n in args.names.split(",") if n.strip()]
    return [*DEFAULT_CLUSTERS, *[f"c{i + 1}" for i in range(len(DEFAULT_CLUSTERS), args.clusters)]][: args.clusters]


def _up(args: argparse.Namespace) -> int:
    env = default_env()
    try:
        st = env.up(_names(args), kube=not args.no_kube, base_port=args.base_port)
    except DevEnvError as e:
        print(f"sparkmirror dev up: {e}", file=sys.stderr)
        return 1
    for name, c in st["kafka"].items():
        print(f"kafka {name:<10} bootstrap {c['bootstrap']:<22} ({c['startup_s']}s)  log {c['log']}")
    if st["kube"]:
        k = st["kube"]
        print(f"kubernetes {k['url']} ({k['startup_s']}s)\n  export KUBECONFIG={k['kubeconfig']}")
    print(f"state: {env.state_file}; stop with `sparkmirror dev down`")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = default_env().down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _status(args: argparse.Namespace) -> int:
    st = default_env().status()
    if args.json:
        print(json.dumps(st, indent=2))
    elif not st:
        print("no local environment (start one with `sparkmirror dev up`)")
    for name, s in st.items() if not args.json else ():
        print(f"{name:<28} {'running' if s['running'] else 'STOPPED':<8} {s['address']:<26} log {s['log']}")
    return 0 if all(s["running"] for s in st.values()) else 1
