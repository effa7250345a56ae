"""`sparkmirror dev ...`: the local environment people and tests use."""
from __future__ import annotations

import argparse
import sys

from sparkmirror.output import add_output_flag, dump

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
    add_output_flag(up, "what was started (addresses, logs, kubeconfig)")
    up.set_defaults(func=_up)
    down = dsub.add_parser("down", help="stop everything and remove its data")
    down.set_defaults(func=_down)
    status = dsub.add_parser("status", help="what runs, where, and its log")
    add_output_flag(status, "what runs")
    status.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")
    status.set_defaults(func=_status)
    imgs = dsub.add_parser("images", help="build every image here (Debian base from debootstrap, the project's "
                                          "images, Kafka, the Spark operator, the kind node); cached by content")
    imgs.set_defaults(func=_images)
    kind = dsub.add_parser("kind", help="the whole product on a local kind cluster (images built here)")
    ksub = kind.add_subparsers(dest="kind_command", required=True)
    kup = ksub.add_parser("up", help="create the cluster, install the Spark operator, sparkmirror and two Kafka "
                                     "clusters (east plain, west TLS+SCRAM)")
    kup.add_argument("--name", default="sparkmirror-dev")
    kup.add_argument("--kubeconfig", help="where to write the kubeconfig (default: the cache)")
    kup.set_defaults(func=_kind_up)
    kdown = ksub.add_parser("down", help="delete the cluster (and stop a dockerd started for it)")
    kdown.add_argument("--name", default="sparkmirror-dev")
    kdown.set_defaults(func=_kind_down)


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
    if args.output:
        sys.stdout.write(dump({**st, "stateFile": str(env.state_file)}, args.output))
        return 0
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
    if args.output:
        sys.stdout.write(dump(st, args.output))
    elif not st:
        print("no local environment (start one with `sparkmirror dev up`)")
    for name, s in st.items() if not args.output else ():
        print(f"{name:<28} {'running' if s['running'] else 'STOPPED':<8} {s['address']:<26} log {s['log']}")
    return 0 if all(s["running"] for s in st.values()) else 1


def _images(args: argparse.Namespace) -> int:
    from . import docker, images, kindnode

    try:
        docker.ensure_engine()
        built = {"base": images.base_image(), **images.product_images(), "kafka": images.kafka_image()}
        built["spark-operator"] = images.spark_operator_image(built["spark"])
        built["kind-node"] = kindnode.node_image()
    except DevEnvError as e:
        print(f"sparkmirror dev images: {e}", file=sys.stderr)
        return 1
    for what, tag in built.items():
        print(f"{what:<15} {tag}")
    return 0


def _kind_up(args: argparse.Namespace) -> int:
    from pathlib import Path

    from . import docker, kindground, paths

    kubeconfig = Path(args.kubeconfig or paths.cache_dir() / "kind" / f"{args.name}.kubeconfig")
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    try:
        docker.ensure_engine()
        ground = kindground.up(kubeconfig, args.name, fresh=False)
    except (DevEnvError, AssertionError) as e:
        print(f"sparkmirror dev kind up: {e}", file=sys.stderr)
        return 1
    ground.stop_forwards()
    print(f"kind cluster {args.name} ready\n  export KUBECONFIG={kubeconfig}\n"
          f"  Kafka: {ground.east.internal_bootstrap} (plain), {ground.west.internal_bootstrap} (TLS + "
          f"SCRAM-SHA-512; Secrets west-ca and west-mirror-user in namespace {kindground.MIRROR_NS})\n"
          f"  Spark image for spec.spark.image: {ground.spark_image}")
    return 0


def _kind_down(args: argparse.Namespace) -> int:
    from . import kindground

    kindground.down(args.name)
    print(f"deleted kind cluster {args.name}")
    return 0
