"""Replication factors of the topics the mirror creates, and the refusal a target with too few brokers gets.

A remote topic takes its source topic's replication factor unless MM2's `replication.factor` says otherwise;
the internal topics take MM2's `heartbeats.topic.replication.factor`, `checkpoints.topic.replication.factor`
and the resource's `progressTopicReplicationFactor` (-1: the target broker's `default.replication.factor`).
A broker answers a factor above its broker count with INVALID_REPLICATION_FACTOR, whose text names neither
the setting nor the mirror: `refusal_text` says which topic, what factor, how many brokers, which key to set.
Shared by topic sync, checkpoints, heartbeats and the progress topic: imports no Spark.
"""
from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

class ReplicationFactorRefused(RuntimeError):
    """The target cannot hold a topic with the replication factor asked for: a change of settings or of the
    target's brokers is needed, so the mirror ends (names.EXIT_TOO_FEW_BROKERS)."""


REASON = ReplicationFactorRefused.__name__
"""The status' condition reason for it, and how it is told in an error that crossed Spark as text (its type
name, which Python's traceback puts before the message): by type, never by its words."""


def refusal_in(text: str) -> bool:
    """Whether `text` (a query's exception, a traceback) is a ReplicationFactorRefused."""
    return f"{REASON}: " in text


def source_factor(replicas: Mapping[int, object]) -> int | None:
    """A topic's replication factor from its partitions' metadata (`PartitionMetadata.replicas`): the fewest
    replicas any partition lists, as a reassignment in progress lists old and new replicas together."""
    counts = [len(getattr(p, "replicas", ()) or ()) for p in replicas.values()]
    counts = [c for c in counts if c > 0]
    return min(counts) if counts else None


def broker_count(admin: AdminClient, timeout: float) -> int | None:
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return None


def refusal_text(err: KafkaError | None, topic: str, factor: int, brokers: int | None, key: str, cluster: str,
                 origin: str = "") -> str:
    """What the refusal says: the topic, the factor wanted (and where it came from), the brokers there are, the
    key to set."""
    wanted = f"replication factor {factor}" if factor > 0 else "the broker's default.replication.factor"
    have = f"{brokers} broker(s)" if brokers is not None else "fewer brokers"
    most = f"at most {brokers}" if brokers is not None else "at most the broker count"
    return (f"topic {topic!r} needs {wanted}{f' ({origin})' if origin else ''} but cluster {cluster!r} has {have}: "
            f"set {key} to {most} (-1: the broker's default.replication.factor), or add brokers"
            + (f" (the broker said: {err.str()})" if err is not None else ""))


def refused(e: KafkaException, admin: AdminClient, topic: str, factor: int, key: str, cluster: str,
            timeout: float, origin: str = "") -> ReplicationFactorRefused | None:
    """The refusal to raise when creating `topic` failed for too few brokers, else None."""
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if err is None or err.code() != KafkaError.INVALID_REPLICATION_FACTOR:
        return None
    return ReplicationFactorRefused(refusal_text(err, topic, factor, broker_count(admin, timeout), key, cluster,
                                                 origin))
