"""MM2 heartbeats (driver side): one record every `emitHeartbeatsIntervalSeconds` into `heartbeats` on the target.

Like MM2's MirrorHeartbeatConnector: key `{sourceClusterAlias, targetClusterAlias}`, value `{timestamp}`
(`mm2formats.Heartbeat`), topic compacted with one partition, created if missing. Heartbeats topics of the
source are mirrored like data (`A.heartbeats` on the target), which is what lets MM2's
`RemoteClusterUtils.upstreamClusters` / `replicationHops` see the replication topology.
"""
from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from .checkpoints import MM2_INTERNAL_TOPIC_CONFIG, ensure_topic
from .resource.flowgroup import FlowGroupConfig, Mirror
from .mm2formats import Heartbeat
from .replication import policy_for


class HeartbeatEmitter:
    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0) -> None:
        self.mirror, self.timeout = mirror, timeout
        self.topic = policy_for(mirror).heartbeats_topic()
        conf = config.cluster(mirror.target).client_config()
        self.admin = AdminClient(conf)
        self.producer = Producer({**conf, "enable.idempotence": True, "linger.ms": 0})
        self._topic_ready = False
        self.sent = 0

    def emit(self, now_ms: int | None = None) -> Heartbeat:
        if not self._topic_ready:
            ensure_topic(self.admin, self.topic, MM2_INTERNAL_TOPIC_CONFIG, self.mirror.replicationFactor,
                         self.timeout)
            self._topic_ready = True
        hb = Heartbeat(self.mirror.source, self.mirror.target, int(time.time() * 1000) if now_ms is None else now_ms)
        self.producer.produce(self.topic, key=hb.key(), value=hb.value(), partition=0)
        if self.producer.flush(self.timeout):  # a TimeoutError: the services wait it out, it is no error
            raise TimeoutError(f"mirrors[{self.mirror.name}]: heartbeat not delivered to {self.topic!r} on "
                               f"cluster {self.mirror.target!r} within {self.timeout:.0f}s")
        self.sent += 1
        return hb

    def close(self) -> None:
        self.producer.flush(self.timeout)
