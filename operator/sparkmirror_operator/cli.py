"""`sparkmirror operator` (run the operator against the current kubeconfig) and `sparkmirror import FILE`."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from sparkmirror.output import add_output_flag, dump


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    op = subparsers.add_parser("operator", help="run the KafkaMirrorMaker2 operator against the current kubeconfig")
    op.add_argument("-n", "--namespace", action="append", default=[],
                    help="watch only this namespace (repeatable); default all namespaces")
    op.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
    op.add_argument("--status-interval", type=float, help="seconds between status and lag refreshes (default 30)")
    op.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    op.add_argument("--metrics-port", type=int, default=None,
                    help="serve the operator's Prometheus metrics on this port (default: none)")
    op.add_argument("--metrics-bind", default="0.0.0.0", help="address of the metrics endpoint (default 0.0.0.0)")
    op.add_argument("--verbose", action="store_true")
    le = op.add_argument_group("leader election (several replicas, one acts; on a coordination.k8s.io Lease)")
    le.add_argument("--leader-elect", action="store_true",
                    help="act only while holding the Lease; stand by otherwise")
    le.add_argument("--leader-elect-resource-name", default=None, help="the Lease's name "
                    "(default sparkmirror-operator-leader)")
    le.add_argument("--leader-elect-resource-namespace", default=None,
                    help="the Lease's namespace (default $POD_NAMESPACE, else the first --namespace, else default)")
    le.add_argument("--leader-elect-lease-duration", type=float, default=15.0,
                    help="seconds a standby waits after the last renewal before taking over (default 15)")
    le.add_argument("--leader-elect-renew-deadline", type=float, default=10.0,
                    help="seconds the leader keeps trying to renew before it stops acting (default 10)")
    le.add_argument("--leader-elect-retry-period", type=float, default=2.0,
                    help="seconds between renewals and between a standby's tries (default 2)")
    op.set_defaults(func=run_operator)

    imp = subparsers.add_parser("import", help="convert a Strimzi KafkaMirrorMaker2 (v1, v1beta2) or an "
                                               "mm2.properties file into a sparkmirror resource")
    imp.add_argument("file", nargs="?", help="the manifest or properties file ('-' for stdin); not with the "
                                             "legacy MirrorMaker's flags")
    legacy = imp.add_argument_group("the legacy MirrorMaker's command line (kafka.tools.MirrorMaker)")
    legacy.add_argument("--consumer.config", dest="consumer_config", metavar="FILE")
    legacy.add_argument("--producer.config", dest="producer_config", metavar="FILE")
    legacy.add_argument("--whitelist", "--include", dest="whitelist", metavar="REGEX")
    legacy.add_argument("--blacklist", dest="blacklist", metavar="REGEX")
    legacy.add_argument("--num.streams", dest="num_streams", metavar="N")
    add_output_flag(imp, "the resource (default yaml; several resources in json form a kubectl List)")
    imp.add_argument("--output-file", metavar="FILE", help="write the resource here instead of stdout")
    imp.add_argument("--name", help="name of the resource (default the manifest's, or 'mirror')")
    imp.add_argument("--namespace", help="namespace to set on the resource")
    imp.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    """Exit 0 converted; 2 bad input (unreadable file, broken YAML, nothing to convert, an invalid result)."""
    from sparkmirror.inputs import USAGE_EXIT, InputError, read_text
    from sparkmirror.resource.importer import import_text
    from sparkmirror.resource.legacy_import import import_legacy, legacy_argv

    try:
        argv = legacy_argv(vars(args))
        if argv and args.file:
            raise InputError(f"{args.file}: a file and the legacy MirrorMaker's flags: give one of them")
        if argv:
            result = import_legacy(argv, read_text(args.consumer_config) if args.consumer_config else "",
                                   read_text(args.producer_config) if args.producer_config else "",
                                   name=args.name or "mirror", namespace=args.namespace)
            args.file = args.consumer_config
        elif not args.file:
            raise InputError("no input: give a manifest or properties file, or the legacy MirrorMaker's "
                             "--consumer.config/--producer.config/--whitelist flags")
        else:
            result = import_text(read_text(args.file), name=args.name, namespace=args.namespace,
                                 label="stdin" if args.file == "-" else args.file)
    except InputError as e:
        print(f"sparkmirror import: {e}", file=sys.stderr)
        return USAGE_EXIT
    if args.output == "json":
        doc = result.resources[0] if len(result.resources) == 1 else \
            {"apiVersion": "v1", "kind": "List", "items": result.resources}
        text_out = dump(doc, "json")
    else:
        text_out = result.to_yaml()  # several resources: one YAML document each, as kubectl apply -f reads
    if args.output_file:
        try:
            Path(args.output_file).write_text(text_out)
        except OSError as e:
            print(f"sparkmirror import: {args.output_file}: cannot write: {e.strerror or e}", file=sys.stderr)
            return USAGE_EXIT
    else:
        sys.stdout.write(text_out)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if not result.resources:
        print(f"sparkmirror import: {args.file}: nothing to convert", file=sys.stderr)
        return USAGE_EXIT
    if any(": error: " in n for n in result.notes):
        print(f"sparkmirror import: {args.file}: the converted resource does not validate (errors above)",
              file=sys.stderr)
        return USAGE_EXIT
    return 0


def run_operator(args: argparse.Namespace) -> int:
    """Exit 0 stopped by a signal; 1 leadership lost (restart: the new process stands by); 2 bad options."""
    from .leader import DEFAULT_LEASE, Timing

    timing = Timing(args.leader_elect_lease_duration, args.leader_elect_renew_deadline,
                    args.leader_elect_retry_period)
    if args.leader_elect and timing.problems():
        for problem in timing.problems():
            print(f"sparkmirror operator: {problem}", file=sys.stderr)
        return 2
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(Path(args.kubeconfig).resolve())
    if args.status_interval:
        os.environ["SPARKMIRROR_STATUS_INTERVAL"] = str(args.status_interval)
    import logging

    import kopf

    from . import handlers  # noqa: F401 - registers the handlers
    from .metrics import serve

    level = "DEBUG" if args.verbose else os.environ.get("SPARKMIRROR_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=getattr(logging, level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.metrics_port is not None:
        logging.getLogger(__name__).info("operator metrics on http://%s:%d/metrics", args.metrics_bind,
                                         serve(args.metrics_port, args.metrics_bind))

    def operate(loop: Any = None, stop_flag: Any = None) -> None:
        # standalone: no kopf peering; with --leader-elect the Lease decides who runs at all
        kopf.run(clusterwide=not args.namespace, namespaces=args.namespace, standalone=True,
                 liveness_endpoint=args.liveness, loop=loop, stop_flag=stop_flag)

    if not args.leader_elect:
        operate()
        return 0
    from .kubeapi import KubeApi, api_client
    from .leader import LeaderElector, run_elected

    namespace = (args.leader_elect_resource_namespace or os.environ.get("POD_NAMESPACE")
                 or (args.namespace or ["default"])[0])
    elector = LeaderElector(KubeApi(api_client(), timeout=max(1.0, timing.renew_deadline / 2)), namespace,
                            args.leader_elect_resource_name or DEFAULT_LEASE, timing=timing)
    return run_elected(elector, operate, args.liveness)
