"""MirrorMaker 2's config keys in a resource's connectors, onto the job's `Mirror` fields (pure): which keys mean
something here and how their values convert, which must keep MM2's value, which are Connect's and do not apply,
and the per-client keys handed to the lanes' clients (clientconf.py)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .clientconf import JAVA_TO_LIBRDKAFKA, Client, ClientKey, ClientKeys, connector_prefix
from .flowgroup import Cluster, ReplicationPolicy
from .model import ConnectorSpec, MirrorSpec
from .planresult import Plan, Problem
from .transforms import TRANSFORM_HELP

DEFAULT_POLICY_CLASSES = {"org.apache.kafka.connect.mirror.DefaultReplicationPolicy": ReplicationPolicy.DEFAULT,
                          "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": ReplicationPolicy.IDENTITY}


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(f"expected true or false, got {v!r}")


def _float(v: Any) -> float:
    f = float(v)
    if f <= 0:
        raise ValueError(f"must be > 0, got {v!r}")
    return f


def _factor(v: Any) -> int:
    """A replication factor key: an integer, -1 (the broker's default) or at least 1."""
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ValueError(f"expected an integer replication factor, got {v!r}") from None
    if n == 0 or n < -1:
        raise ValueError(f"a replication factor must be -1 (the broker's default) or at least 1, got {v!r}")
    return n


def mm2_list_regex(v: Any) -> str:
    """MM2 list-of-regex (comma separated, as ConfigDef.Type.LIST splits it) -> one alternation."""
    parts = [p.strip() for p in str(v).split(",") if p.strip()]
    return parts[0] if len(parts) == 1 else "|".join(f"(?:{p})" for p in parts)


def _policy(v: Any) -> ReplicationPolicy:
    name = str(v).strip()
    for cls, policy in DEFAULT_POLICY_CLASSES.items():
        if name in (cls, cls.rsplit(".", 1)[1]):
            return policy
    raise LookupError(f"replication policy {name!r} is not supported (only DefaultReplicationPolicy and "
                      "IdentityReplicationPolicy)")


# key -> (Mirror field, converter); None field = accepted, no effect needed
MIRROR_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "replication.policy.class": ("replicationPolicy", _policy),
    "replication.policy.separator": ("separator", str),
    "refresh.topics.interval.seconds": ("refreshTopicsIntervalSeconds", _float),
    "sync.topic.configs.enabled": ("syncTopicConfigs", _bool),
    "sync.topic.configs.interval.seconds": ("syncTopicConfigsIntervalSeconds", _float),
    "sync.topic.acls.enabled": ("syncTopicAcls", _bool),
    "sync.topic.acls.interval.seconds": ("syncTopicAclsIntervalSeconds", _float),
    "config.properties.exclude": ("configPropertiesExclude", lambda v: [p.strip() for p in str(v).split(",")
                                                                        if p.strip()]),
    "replication.factor": ("replicationFactor", _factor),
    "heartbeats.topic.replication.factor": ("heartbeatsTopicReplicationFactor", _factor),
    "checkpoints.topic.replication.factor": ("checkpointsTopicReplicationFactor", _factor),
    "emit.heartbeats.enabled": ("emitHeartbeats", _bool),
    "emit.heartbeats.interval.seconds": ("emitHeartbeatsIntervalSeconds", _float),
    # not an MM2 key: MM2 writes upstream heartbeats from the disabled reverse flow (B->A.emit.heartbeats.enabled)
    "sparkmirror.emit.heartbeats.upstream.enabled": ("emitHeartbeatsUpstream", _bool),
    "emit.checkpoints.enabled": ("emitCheckpoints", _bool),
    "emit.checkpoints.interval.seconds": ("emitCheckpointsIntervalSeconds", _float),
    "sync.group.offsets.enabled": ("syncGroupOffsets", _bool),
    "sync.group.offsets.interval.seconds": ("syncGroupOffsetsIntervalSeconds", _float),
    "topics": ("topics", mm2_list_regex),
    "topics.exclude": ("topicsExclude", mm2_list_regex),
    "groups": ("groups", mm2_list_regex),
    "groups.exclude": ("groupsExclude", mm2_list_regex),
}
# keys that must have a given value to mean what sparkmirror does; another value is unsupported
MIRROR_KEYS_FIXED: dict[str, Any] = {
    "refresh.topics.enabled": True,
    "refresh.groups.enabled": True,
}
# MM2 keys that are about Connect or MM2 internals that sparkmirror replaces (offset syncs -> dense progress map)
MIRROR_KEYS_NOT_APPLICABLE_PREFIXES = (
    "offset-syncs.", "offset.lag.max", "checkpoints.topic.", "heartbeats.topic.", "tasks.max",
    "refresh.groups.interval.seconds", "key.converter", "value.converter", "header.converter",
    "exactly.once.support", "transaction.boundary", "emit.offset-syncs.",
    "errors.", "consumer.poll.timeout.ms", "admin.timeout.ms", "replication.policy.internal.topic.separator",
)
# Kafka Connect worker properties in a cluster's config: accepted, not applicable; the rest goes to the clients
CLUSTER_KEYS_NOT_APPLICABLE_PREFIXES = (
    "config.storage.", "offset.storage.", "status.storage.", "key.converter", "value.converter",
    "header.converter", "plugin.", "connector.client.config.override.policy", "offset.flush.", "task.",
    "group.id", "exactly.once.source.support", "rest.", "listeners", "scheduled.rebalance.", "connect.",
    "worker.", "metrics.", "config.providers", "offset.storage",
)


def connector_config(mirror: MirrorSpec, path: str, out: Plan, exactly_once: bool = True,
                      sides: dict[str, ClientKeys] | None = None) -> dict[str, Any]:
    """Merge both connectors' configs into Mirror fields; conflicting values are errors. Per-client keys go to
    `sides` ("source", "target") as librdkafka settings."""
    sides = sides if sides is not None else {"source": ClientKeys(), "target": ClientKeys()}
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for conn_name in ("sourceConnector", "checkpointConnector"):
        conn: ConnectorSpec | None = getattr(mirror, conn_name)
        if conn is None:
            continue
        for key, raw in conn.config.items():
            where = f"{path}.{conn_name}.config[{key}]"
            if key in MIRROR_KEYS:
                fname, convert = MIRROR_KEYS[key]
                try:
                    value = convert(raw)
                except LookupError as e:
                    out.unsupported.append(f"{where}: {e.args[0]}")
                    out.errors.append(Problem(where, e.args[0]))
                    continue
                except (TypeError, ValueError) as e:
                    out.errors.append(Problem(where, str(e)))
                    continue
                if fname in values and values[fname] != value:
                    out.errors.append(Problem(where, f"conflicts with {origin[fname]}"))
                    continue
                values[fname], origin[fname] = value, where
            elif key in MIRROR_KEYS_FIXED:
                try:
                    ok = _bool(raw) == MIRROR_KEYS_FIXED[key]
                except ValueError as e:
                    out.errors.append(Problem(where, str(e)))
                    continue
                if not ok:
                    out.unsupported.append(f"{where}={raw} (only {str(MIRROR_KEYS_FIXED[key]).lower()} is "
                                           "supported)")
            elif key in ("transforms", "predicates") or key.startswith(("transforms.", "predicates.")):
                out.unsupported.append(f"{where}: Kafka Connect transforms: {TRANSFORM_HELP}")
            elif key.startswith(MIRROR_KEYS_NOT_APPLICABLE_PREFIXES):
                out.not_applicable.append(where)
            elif (prefixed := connector_prefix(key)) is not None:
                side, client, sub = prefixed
                take_client_key(client, sub, raw, where, exactly_once, getattr(sides[side], client), out)
            else:
                out.unsupported.append(where)
    return values


def take_client_key(client: Client, key: str, raw: Any, where: str, exactly_once: bool, into: dict[str, tuple[str, str]],
          out: Plan, record: bool = True) -> None:
    """One client key taken into `into` (clientconf.ClientKeys.take), or its error / not-applicable line."""
    said = ClientKeys.take(client, key, raw, where, exactly_once, into)
    if said is None:
        if record:
            name = JAVA_TO_LIBRDKAFKA.get(key, key)
            out.client_keys.append(ClientKey(where, client, name, into[name][0]))
        return
    kind, message = said
    if kind == "error":
        out.errors.append(Problem(where, message))
    else:
        out.not_applicable.append(f"{where}: {message}")


def with_admin(cluster: Cluster, keys: ClientKeys, out: Plan) -> Cluster:
    """A connector's admin keys (`source.admin.*`, `target.admin.*`) in its cluster's connection settings."""
    if not keys.admin:
        return cluster
    config, conflicts = keys.merge_admin(cluster.config)
    out.errors += [Problem(where, message) for where, message in conflicts]
    return cluster.model_copy(update={"config": config})
