"""MM2 heartbeats (driver side): one record every `emitHeartbeatsIntervalSeconds` into `heartbeats` on the
target and, as MirrorMaker 2's dedicated mode does, one into `heartbeats` on the source.

Like MM2's MirrorHeartbeatConnector: key `{sourceClusterAlias, targetClusterAlias}`, value `{timestamp}`
(`mm2formats.Heartbeat`), topic compacted with one partition, created if missing. For a mirror A->B:
- on B: `heartbeats` with (A, B): the flow A->B is alive;
- on A: `heartbeats` with (B, A), with `emitHeartbeatsUpstream` (default off, as Strimzi's Connect-based MM2,
  whose source users are often read-only): MM2's dedicated mode writes it from the flow B->A whose
  replication is disabled but whose heartbeats are not. The mirror copies A's `heartbeats` like
  data (`A.heartbeats` on B), and that remote heartbeats topic is what lets MM2's
  `RemoteClusterUtils.upstreamClusters` / `replicationHops` on B find A, also for a one-way mirror.
Writing to the source needs the right to create and write its `heartbeats` topic: refused, the upstream
heartbeat is dropped with one warning and the mirror goes on (a read-only source is common).
"""
from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from .checkpoints import MM2_INTERNAL_TOPIC_CONFIG, ensure_topic
from .copying.errors import Fault, classify, describe
from .kafkaerror import kafka_error
from .mm2formats import Heartbeat
from .replication import policy_for
from .resource.flowgroup import FlowGroupConfig, Mirror

log = logging.getLogger(__name__)


class _Writer:
    """One cluster's `heartbeats` topic and an idempotent producer for it."""

    def __init__(self, conf: dict[str, str], topic: str, replication_factor: int, timeout: float, key: str,
                 cluster: str) -> None:
        self.topic, self.replication_factor, self.timeout = topic, replication_factor, timeout
        self.key, self.cluster = key, cluster
        self.admin = AdminClient(conf)
        self.producer = Producer({**conf, "enable.idempotence": True, "linger.ms": 0})
        self.ready = False

    def write(self, hb: Heartbeat) -> bool:
        """False when not delivered within the timeout."""
        if not self.ready:
            ensure_topic(self.admin, self.topic, MM2_INTERNAL_TOPIC_CONFIG, self.replication_factor, self.timeout,
                         self.key, self.cluster)
            self.ready = True
        errors: list = []
        self.producer.produce(self.topic, key=hb.key(), value=hb.value(), partition=0,
                              on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
        if self.producer.flush(self.timeout):
            return False
        if errors:
            raise KafkaException(errors[0])
        return True

    def close(self) -> None:
        self.producer.flush(self.timeout)


class HeartbeatEmitter:
    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0) -> None:
        self.mirror, self.timeout = mirror, timeout
        self.topic = policy_for(mirror).heartbeats_topic()
        key = f"heartbeats.topic.replication.factor in mirrors[{mirror.name}]'s connector config"
        factor = mirror.heartbeatsTopicReplicationFactor
        self.target = _Writer(config.cluster(mirror.target).client_config(), self.topic, factor, timeout, key,
                              mirror.target)
        self.upstream = _Writer(config.cluster(mirror.source).client_config(), self.topic, factor, timeout, key,
                                mirror.source) if mirror.emitHeartbeatsUpstream else None
        self.sent = self.sent_upstream = 0

    def emit(self, now_ms: int | None = None) -> Heartbeat:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        hb = Heartbeat(self.mirror.source, self.mirror.target, now_ms)
        if not self.target.write(hb):  # a TimeoutError: the services wait it out, it is no error
            raise TimeoutError(f"mirrors[{self.mirror.name}]: heartbeat not delivered to {self.topic!r} on "
                               f"cluster {self.mirror.target!r} within {self.timeout:.0f}s")
        self.sent += 1
        self._emit_upstream(now_ms)
        return hb

    def _emit_upstream(self, now_ms: int) -> None:
        if self.upstream is None:
            return
        try:
            if self.upstream.write(Heartbeat(self.mirror.target, self.mirror.source, now_ms)):
                self.sent_upstream += 1
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and classify(err) is Fault.TRANSIENT:
                return  # the source is away: the mirror says so itself; the next beat tries again
            log.warning("mirrors[%s]: heartbeats into %r on the source cluster %r are refused (%s): stopped; "
                        "MM2's RemoteClusterUtils on %r will not see this hop. Allow the mirror's source user to "
                        "create and write that topic, or set emitHeartbeatsUpstream: false", self.mirror.name,
                        self.topic, self.mirror.source, describe(err) if err is not None else e,
                        self.mirror.target)
            self.upstream.close()
            self.upstream = None

    def close(self) -> None:
        self.target.close()
        if self.upstream is not None:
            self.upstream.close()
