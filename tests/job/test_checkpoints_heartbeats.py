"""MM2 heartbeats on a real target: topic shape and records MM2 can read."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from sparkmirror.heartbeats import HeartbeatEmitter
from sparkmirror.mm2formats import Heartbeat

from .conftest import read_topic


def test_heartbeats_on_target(kafka_a, kafka_b, flowgroup) -> None:
    cfg = flowgroup("none")
    mirror = cfg.mirrors[0]
    hb = HeartbeatEmitter(cfg, mirror)
    marks = [hb.emit(now_ms=1_000_000_000_000 + i).timestamp for i in range(3)]
    hb.close()
    admin = AdminClient({"bootstrap.servers": kafka_b.bootstrap})
    md = admin.list_topics("heartbeats", timeout=10).topics["heartbeats"]
    assert len(md.partitions) == 1
    res = ConfigResource(ConfigResource.Type.TOPIC, "heartbeats")
    assert admin.describe_configs([res])[res].result(10)["cleanup.policy"].value == "compact"
    got = [Heartbeat.decode(r.key, r.value) for r in read_topic(kafka_b.bootstrap, "heartbeats")[0]]
    assert [h for h in got if h.timestamp in marks] == [Heartbeat("a", "b", t) for t in marks]
