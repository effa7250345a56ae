"""Lag in records per flow group, from Kafka: source end offsets against the progress topic on the target.

For every source partition a group's mirrors select, lag = high watermark - the next offset the progress
topic says is committed (or - the low watermark when nothing is committed yet), small lags counted in records
so that transaction markers on a transactional source do not count (`progress.partition_lag`, the figure
the driver's metrics and the run display show too). The operator's own Kafka
clients get credentials from the referenced Secrets in memory (PEM and password properties), never from or
into a log, status or file.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from sparkmirror.progress import LagCounter, lag_needs_count, partition_lag
from sparkmirror.resource.flowgroup import Cluster, FlowGroupConfig
from sparkmirror.replication import policy_for
from sparkmirror.topicsync import topic_filter

SECRET_REF_ROOT = "secret:"  # plan(secret_root=...) prefix: "secret:/<name>/<key>"
RATE_WINDOW_MS = 30_000  # records/s: what the progress topic says was committed in the last 30 s

SecretReader = Callable[[str, str], str]  # (secret name, key) -> value


class LagError(Exception):
    """Names what failed: the cluster (alias and bootstrap servers) or the flow group."""


@dataclass
class GroupLag:
    lag: int | None = None
    partitions: int = 0
    topics: list[str] = field(default_factory=list)
    last_commit_ms: int | None = None
    records_per_second: float | None = None
    error: str | None = None
    reason: str | None = None


def _secret(path: str, read: SecretReader) -> str:
    _, _, rest = path.partition(SECRET_REF_ROOT)
    name, _, key = rest.strip("/").partition("/")
    return read(name, key)


def kafka_config(cluster: Cluster, read: SecretReader, env_refs: dict[str, tuple[str, str]]) -> dict[str, str]:
    """librdkafka config for the operator's own clients (`Cluster.client_config`), secrets read in memory.

    The cluster comes from plan(secrets="env", secret_root=SECRET_REF_ROOT): files are "secret:/<name>/<key>"
    and env_refs maps env var names back to (secret, key)."""
    return cluster.client_config(files=lambda path: _secret(path, read), env=lambda name: read(*env_refs[name]))


_KAFKA_LOG = logging.getLogger("sparkmirror_operator.kafka")
_KAFKA_LOG.setLevel(logging.CRITICAL)  # connection errors are reported on the status, not every 50 ms in the log


def _consumer(conf: dict[str, str], errors: list[str] | None = None) -> Consumer:
    # librdkafka's own log goes to Python logging (DEBUG), not stderr: unreachable clusters are reported on
    # the resource's status instead. Its error callback keeps the cause (an authentication or TLS refusal)
    # that a failed call reports only as a transport failure.
    extra = {"error_cb": lambda err: errors.append(err.str())} if errors is not None else {}
    return Consumer({**conf, "group.id": f"sparkmirror-operator-lag-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "socket.timeout.ms": 5000,
                     "isolation.level": "read_committed", **extra}, logger=_KAFKA_LOG)


def _cause(e: KafkaException, errors: list[str], c: Consumer | None = None) -> str:
    """The refusal behind a failed call when the client saw one, else the call's own error."""
    if c is not None:
        c.poll(0.2)  # the error callback runs only while the client is polled
    refusals = [x for x in errors if failure_reason(x) in ("AuthenticationFailed", "TlsFailed")]
    return refusals[-1] if refusals else (e.args[0].str() if e.args else str(e))


def check_cluster(conf: dict[str, str], timeout: float) -> None:
    """Raises KafkaException naming why the cluster cannot be used (unreachable, refusing credentials or TLS)."""
    errors: list[str] = []
    c = _consumer(conf, errors)
    try:
        c.list_topics(timeout=timeout)
    except KafkaException as e:
        raise KafkaException(_cause(e, errors, c)) from None
    finally:
        c.close()


def source_end_offsets(conf: dict[str, str], topic_filter, cluster: Cluster, target_alias: str, policy,
                       timeout: float, where: str = "") -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (low, high) watermarks of the source topics the mirror selects."""
    from sparkmirror.replication import should_replicate_topic

    errors: list[str] = []
    c = _consumer(conf, errors)
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
        raise LagError(f"{where}cluster {cluster.alias!r} ({cluster.bootstrapServers}) {what}: "
                       f"{_cause(e, errors, c)}") from None
    finally:
        c.close()


def group_lag(cfg: FlowGroupConfig, read: SecretReader, env_refs: dict[str, tuple[str, str]],
              timeout: float = 5.0, fields: dict[str, str] | None = None) -> GroupLag:
    """Lag of one flow group; a failure is returned as .error/.reason naming the cluster, never raised."""
    from sparkmirror.progress import read_progress

    out = GroupLag(lag=0)
    target_alias = cfg.mirrors[0].target
    try:
        target_conf = kafka_config(cfg.cluster(target_alias), read, env_refs)
        ends: dict[tuple[str, str, int], tuple[int, int]] = {}
        for m in cfg.mirrors:
            src = cfg.cluster(m.source)
            flt = topic_filter(cfg, m)  # the job's own selection
            where = f"{fields[m.source]}.bootstrapServers: " if fields and m.source in fields else ""
            for (t, p), wm in source_end_offsets(kafka_config(src, read, env_refs), flt, src, target_alias,
                                                 policy_for(m), timeout, where).items():
                ends[(m.source, t, p)] = wm
        out.partitions = len(ends)
        out.topics = sorted({t for (_, t, _) in ends})
        target = f"spec.target.bootstrapServers: target cluster {target_alias!r} " \
                 f"({cfg.cluster(target_alias).bootstrapServers})"
        try:  # also with no topics yet: a target that refuses the mirror is the more urgent news
            check_cluster(target_conf, timeout)
        except KafkaException as e:
            raise LagError(f"{target}: {e.args[0] if e.args else e}") from None
        try:
            state = read_progress(target_conf, cfg.progressTopic, timeout=timeout)
        except RuntimeError:  # progress topic not created yet: nothing committed
            state = None
        except (KafkaException, TimeoutError) as e:
            raise LagError(f"{target}: cannot read progress topic {cfg.progressTopic!r}: {e}") from None
        if not ends:
            out.lag, out.reason = None, "NoTopics"
            out.error = (f"flow group {cfg.name!r}: no source topic matches its mirrors' topic patterns ("
                         + ", ".join(f"{m.source}: {m.topics!r}" for m in cfg.mirrors) + ")")
            return out
        counted = _count_small_lags(cfg, ends, state, read, env_refs, timeout)
        total, last, recent = 0, None, 0
        since = now_ms() - RATE_WINDOW_MS
        for (alias, t, p), (lo, hi) in ends.items():
            rec = state.latest.get((alias, t, p)) if state else None
            total += partition_lag(hi, rec.next_offset if rec else None, lo, counted.get((alias, t, p)))
            if rec:
                last = max(last or 0, rec.commit_ms)
                history = state.maps.get((alias, t, p))
                recent += sum(r.count for r in (history.records if history else []) if r.commit_ms >= since)
        out.lag, out.last_commit_ms = total, last
        out.records_per_second = round(recent / (RATE_WINDOW_MS / 1000), 1) if state else 0.0
    except LagError as e:
        out.lag, out.error, out.reason = None, str(e), failure_reason(str(e))
    except KeyError as e:  # a referenced Secret or key is missing
        out.lag, out.error, out.reason = None, f"secret {e.args[0]}", "SecretMissing"
    return out


def _count_small_lags(cfg: FlowGroupConfig, ends: dict[tuple[str, str, int], tuple[int, int]], state,
                      read: SecretReader, env_refs: dict[str, tuple[str, str]], timeout: float
                      ) -> dict[tuple[str, str, int], int]:
    """Small offset lags counted in records (transaction markers are not records: `progress.partition_lag`)."""
    out: dict[tuple[str, str, int], int] = {}
    for alias in sorted({a for (a, _, _) in ends}):
        todo = {}
        for (a, t, p), (lo, hi) in ends.items():
            rec = state.latest.get((a, t, p)) if state else None
            nxt = rec.next_offset if rec else None
            if a == alias and lag_needs_count(hi, nxt, lo):
                todo[(t, p)] = (lo if nxt is None else max(nxt, lo), hi)
        if not todo:
            continue
        counter = LagCounter(kafka_config(cfg.cluster(alias), read, env_refs), timeout)
        try:
            out.update({(alias, t, p): n for (t, p), n in counter.count(todo).items()})
        except KafkaException:
            pass  # the offsets' figure stands; reachability is reported by the calls above
        finally:
            counter.close()
    return out


def failure_reason(message: str) -> str:
    """The condition reason for a cluster the operator could not use: a refusal names itself."""
    text = message.lower()
    if "authentication" in text or "sasl" in text:
        return "AuthenticationFailed"
    if "ssl" in text or "certificate" in text:
        return "TlsFailed"
    if "authoriz" in text:
        return "AuthorizationFailed"
    return "ClusterUnreachable"


def now_ms() -> int:
    return int(time.time() * 1000)
