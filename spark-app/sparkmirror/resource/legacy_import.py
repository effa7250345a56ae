"""The legacy MirrorMaker's command line (`kafka.tools.MirrorMaker`, removed in Kafka 4.0) to a resource.

The old tool wrote to the same topic names and committed its consumer group on the source, so the resource
uses the identity replication policy and `startFrom` that group: the switch neither re-copies nor skips.
Pure: the caller reads the two files; credentials are never inlined (as importer.py).
"""
from __future__ import annotations

import argparse
from typing import Any

from .clientconf import client_setting
from .documents import InputError
from .importer import Imported, _check, _credential_note, _is_credential, _resource, parse_properties

_SECURITY = ("security.protocol", "ssl.", "sasl.")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # a named error, not argparse's exit
        raise InputError(f"legacy MirrorMaker command line: {message}")


_FLAGS = {"consumer_config": "--consumer.config", "producer_config": "--producer.config",
          "whitelist": "--whitelist", "blacklist": "--blacklist", "num_streams": "--num.streams"}


def legacy_argv(parsed: dict[str, Any]) -> list[str]:
    """The legacy flags `sparkmirror import` was given (its parsed arguments), as the old tool's argv."""
    return [x for k, flag in _FLAGS.items() if parsed.get(k) is not None for x in (flag, str(parsed[k]))]


def parse_legacy_args(argv: list[str]) -> argparse.Namespace:
    """`--consumer.config F --producer.config F (--whitelist|--include R | --blacklist R) [--num.streams N]`."""
    p = _Parser(prog="kafka-mirror-maker", add_help=False)
    p.add_argument("--consumer.config", dest="consumer", required=True)
    p.add_argument("--producer.config", dest="producer", required=True)
    pattern = p.add_mutually_exclusive_group(required=True)
    pattern.add_argument("--whitelist", "--include", dest="include")
    pattern.add_argument("--blacklist", dest="exclude")
    p.add_argument("--num.streams", dest="streams", default="1")
    args = p.parse_args(argv)
    if not str(args.streams).isdigit():
        raise InputError(f"legacy MirrorMaker command line: --num.streams {args.streams}: not a number")
    args.streams = int(args.streams)
    if args.streams < 1:
        raise InputError(f"legacy MirrorMaker command line: --num.streams {args.streams}: must be at least 1")
    return args


def _cluster(alias: str, props: dict[str, str], label: str, out: Imported) -> dict[str, Any]:
    servers = props.get("bootstrap.servers", "").strip()
    if not servers:
        raise InputError(f"{label}: no bootstrap.servers: the legacy MirrorMaker's {alias} cluster is unknown")
    client = "consumer" if alias == "source" else "producer"
    config: dict[str, str] = {}
    for k, v in props.items():
        if _is_credential(k):
            out.notes.append(f"{label}: {_credential_note(k)}")
        elif k.startswith(_SECURITY):
            out.notes.append(f"{label}: {k}: security settings are not carried over: set tls/authentication")
        elif k == "bootstrap.servers" or (k == "group.id" and client == "consumer"):  # startFrom takes the group
            continue
        else:  # tuning keys go to the lanes' clients (docs/client-settings.md); what the mirror owns is said
            s = client_setting(client, k, v)
            if s.refused or s.not_applicable:
                out.notes.append(f"{label}: {k}: not carried over: {s.refused or s.not_applicable}")
            else:
                config[f"{client}.{k}"] = v
    return {"alias": alias, "bootstrapServers": servers, **({"config": config} if config else {})}


def import_legacy(argv: list[str], consumer_text: str, producer_text: str, *, name: str = "mirror",
                  namespace: str | None = None) -> Imported:
    """The resource for the legacy tool's `argv`, given the contents of its consumer and producer configs."""
    args = parse_legacy_args(argv)
    out = Imported()
    consumer, producer = parse_properties(consumer_text), parse_properties(producer_text)
    group = consumer.get("group.id", "").strip()
    mirror: dict[str, Any] = {"source": _cluster("source", consumer, args.consumer, out),
                              "sourceConnector": {"config": {
                                  "replication.policy.class":
                                      "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}}}
    if args.include is not None:
        mirror["topicsPattern"] = args.include
    else:
        mirror["topicsExcludePattern"] = args.exclude
    if group:
        mirror["startFrom"] = group
    else:
        out.notes.append(f"{args.consumer}: no group.id: the mirror starts every partition from the beginning")
    spec = {"target": _cluster("target", producer, args.producer, out), "mirrors": [mirror],
            "spark": {"parallelism": args.streams}}
    out.resources.append(_resource({"name": name, "namespace": namespace}, spec))
    _check(out)
    return out
