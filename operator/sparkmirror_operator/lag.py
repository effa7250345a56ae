"""Lag in records per flow group, from Kafka: source end offsets against the progress topic on the target.

For every source partition a group's mirrors select, lag is `sparkmirror.progress.partition_lag`: high
watermark - the next offset the progress topic says is committed (or - the low watermark when nothing is
committed yet), small ones counted record by record (transaction markers are offsets, not records). The
operator's own Kafka clients get credentials from the referenced Secrets in memory through
`Cluster.client_config(secret_resolver(...))` (PEM and password properties), never from or into a log, status
or file.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror import refusal
from sparkmirror.consumerlag import ConsumerLag, committed_offsets, consumer_lags, matching_groups
from sparkmirror.progress import CommittedCounter, partition_lags, read_progress
from sparkmirror.resource.flowgroup import (Cluster, FlowGroupConfig, SecretResolver, SecretUnreadable,
                                            SecretValue)
from sparkmirror.replication import policy_for
from sparkmirror.topicplan import topic_filter

SECRET_REF_ROOT = "secret:"  # plan(secret_root=...) prefix: "secret:/<name>/<key>"
RATE_WINDOW_MS = 30_000  # records/s: what the progress topic says was committed in the last 30 s

SecretReader = Callable[[str, str], str]  # (secret name, key) -> value


class LagError(Exception):
    """Names what failed: the cluster (alias and bootstrap servers) or the flow group; `kind` is the condition
    reason (refusal.kind_of: told by error code)."""

    def __init__(self, message: str, kind: str = "ClusterUnreachable") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class GroupLag:
    lag: int | None = None
    partitions: int = 0
    topics: list[str] = field(default_factory=list)
    last_commit_ms: int | None = None
    records_per_second: float | None = None
    error: str | None = None
    reason: str | None = None
    consumer_groups: list[ConsumerLag] | None = None  # checkpointed groups, the most lagging first


def secret_resolver(read: SecretReader, env_refs: dict[str, tuple[str, str]]) -> SecretResolver:
    """What `Cluster.client_config(resolve)` needs for the operator's own clients: the references of
    plan(secrets="env", secret_root=SECRET_REF_ROOT) resolved from Secrets in memory. A file is
    "secret:/<name>/<key>"; env_refs maps an environment variable name back to (secret, key). A missing Secret
    or key raises KeyError."""
    def resolve(ref: SecretValue) -> str:
        if ref.env is not None:
            return read(*env_refs[ref.env])
        _, _, rest = (ref.file or "").partition(SECRET_REF_ROOT)
        name, _, key = rest.strip("/").partition("/")
        return read(name, key)
    return resolve


_LOG = logging.getLogger(__name__)
_KAFKA_LOG = logging.getLogger("sparkmirror_operator.kafka")
_KAFKA_LOG.setLevel(logging.CRITICAL)  # connection errors are reported on the status, not every 50 ms in the log


def check_cluster(conf: dict[str, str], timeout: float) -> None:
    """Raises KafkaException naming why the cluster cannot be used (unreachable, refusing credentials or TLS)."""
    refusal.check_cluster(conf, timeout, _KAFKA_LOG)


def source_end_offsets(conf: dict[str, str], topic_filter, cluster: Cluster, target_alias: str, policy,
                       timeout: float, where: str = "") -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (low, high) watermarks of the source topics the mirror selects."""
    from sparkmirror.replication import should_replicate_topic

    errors: list[KafkaError] = []
    try:
        c = refusal.probe_consumer(conf, errors, _KAFKA_LOG)
    except KafkaException as e:  # e.g. a CA or key from a Secret that is not PEM: librdkafka refuses the config
        failure = refusal.creation_failure(e, conf)
        raise LagError(f"{where}cluster {cluster.alias!r} ({cluster.bootstrapServers}): cannot create a client: "
                       f"{failure.text}", failure.kind) from None
    what = "is unreachable"
    try:
        md = c.list_topics(timeout=timeout)
        out = {}
        for topic, tmd in md.topics.items():
            if tmd.error is not None or policy.is_heartbeats_topic(topic):
                continue
            if not should_replicate_topic(policy, topic_filter, topic, target_alias):
                continue
            for p in tmd.partitions:
                what = f"did not give the end offsets of {topic}[{p}]"  # e.g. a partition without a leader
                out[(topic, p)] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
        return out
    except KafkaException as e:
        failure = refusal.cause(e, errors, c)
        raise LagError(f"{where}cluster {cluster.alias!r} ({cluster.bootstrapServers}) {what}: {failure.text}",
                       failure.kind) from None
    finally:
        c.close()


def group_lag(cfg: FlowGroupConfig, read: SecretReader, env_refs: dict[str, tuple[str, str]],
              timeout: float = 5.0, fields: dict[str, str] | None = None) -> GroupLag:
    """Lag of one flow group; a failure is returned as .error/.reason naming the cluster, never raised.

    Per partition `progress.partition_lag`: small offset lags are counted read_committed on the source, so a
    transactional source (its commit markers) shows 0 once everything is mirrored."""
    out = GroupLag(lag=0)
    target_alias = cfg.mirrors[0].target
    resolve = secret_resolver(read, env_refs)
    try:
        target_conf = cfg.cluster(target_alias).client_config(resolve)
        ends: dict[str, dict[tuple[str, int], tuple[int, int]]] = {}  # source alias -> (topic, p) -> watermarks
        source_confs: dict[str, dict[str, str]] = {}
        for m in cfg.mirrors:
            src = cfg.cluster(m.source)
            source_confs[m.source] = src.client_config(resolve)
            flt = topic_filter(cfg, m)  # the job's own selection
            where = f"{fields[m.source]}.bootstrapServers: " if fields and m.source in fields else ""
            ends.setdefault(m.source, {}).update(source_end_offsets(source_confs[m.source], flt, src, target_alias,
                                                                    policy_for(m), timeout, where))
        out.partitions = sum(len(e) for e in ends.values())
        out.topics = sorted({t for e in ends.values() for (t, _) in e})
        target = f"spec.target.bootstrapServers: target cluster {target_alias!r} " \
                 f"({cfg.cluster(target_alias).bootstrapServers})"
        try:  # also with no topics yet: a target that refuses the mirror is the more urgent news
            check_cluster(target_conf, timeout)
        except refusal.ClusterFailure as e:
            raise LagError(f"{target}: {e.failure.text}", e.failure.kind) from None
        try:
            state = read_progress(target_conf, cfg.progressTopic, timeout=timeout, resource=cfg.resource)
        except RuntimeError:  # progress topic not created yet: nothing committed
            state = None
        except (KafkaException, TimeoutError) as e:
            raise LagError(f"{target}: cannot read progress topic {cfg.progressTopic!r}: {e}") from None
        if not out.partitions:
            out.lag, out.reason = None, "NoTopics"
            out.error = (f"flow group {cfg.name!r}: no source topic matches its mirrors' topic patterns ("
                         + ", ".join(f"{m.source}: {m.topics!r}" for m in cfg.mirrors) + ")")
            return out
        total, last, recent = 0, None, 0
        since = now_ms() - RATE_WINDOW_MS
        for alias, marks in ends.items():
            latest = {(t, p): state.latest.get((alias, t, p)) if state else None for (t, p) in marks}
            counter = None

            def count(spans: dict[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], int]:
                nonlocal counter
                counter = CommittedCounter(source_confs[alias], min(timeout, 5.0), logger=_KAFKA_LOG)
                return counter.count(spans)

            try:
                lags = partition_lags(marks, {k: r.next_offset if r else None for k, r in latest.items()}, count)
            finally:
                if counter is not None:
                    counter.close()
            total += sum(lags.values())
            for (t, p), rec in latest.items():
                if rec:
                    last = max(last or 0, rec.commit_ms)
                    history = state.maps.get((alias, t, p))
                    recent += sum(r.count for r in (history.records if history else []) if r.commit_ms >= since)
        out.lag, out.last_commit_ms = total, last
        out.consumer_groups = consumer_group_lags(cfg, source_confs, ends, timeout)
        out.records_per_second = round(recent / (RATE_WINDOW_MS / 1000), 1) if state else 0.0
    except LagError as e:
        out.lag, out.error, out.reason = None, str(e), e.kind
    except KeyError as e:  # a referenced Secret or key is missing
        out.lag, out.error, out.reason = None, f"secret {e.args[0]}", "SecretMissing"
    except SecretUnreadable as e:  # a value that is not text: named, never shown
        out.lag, out.error, out.reason = None, str(e), "SecretInvalid"
    return out


def consumer_group_lags(cfg: FlowGroupConfig, source_confs: dict[str, dict[str, str]],
                        ends: dict[str, dict[tuple[str, int], tuple[int, int]]], timeout: float) -> list[ConsumerLag] | None:
    """Source-side lag of the groups the flow group's mirrors checkpoint (`sparkmirror.consumerlag`); None when
    no mirror checkpoints or a source did not answer the group requests (the flow group's own lag stands)."""
    from sparkmirror.replication import GroupFilter

    mirrors = [m for m in cfg.mirrors if m.emitCheckpoints or m.syncGroupOffsets]
    if not mirrors:
        return None
    out: list[ConsumerLag] = []
    for m in mirrors:
        admin = AdminClient({**source_confs[m.source], "logger": _KAFKA_LOG})
        try:
            committed = {g: {tp: off for tp, (off, _md) in committed_offsets(admin, g, timeout).items()}
                         for g in matching_groups(admin, GroupFilter.of(m).matches, timeout)}
        except (KafkaException, TimeoutError) as e:
            _LOG.debug("flow group %s: consumer groups of %s not read: %s", cfg.name, m.source, e)
            return None
        counter = CommittedCounter(source_confs[m.source], min(timeout, 5.0), logger=_KAFKA_LOG)
        try:
            out += consumer_lags(committed, ends.get(m.source, {}), count_source=counter.count)
        finally:
            counter.close()
    return sorted(out, key=lambda c: (-c.lag, c.group))


def now_ms() -> int:
    return int(time.time() * 1000)
