"""MM2 heartbeats on a real target: topic shape and records MM2 can read."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from sparkmirror.heartbeats import HeartbeatEmitter
from sparkmirror.mm2formats import Heartbeat

from .conftest import read_topic
from .mm2java import run_java  # noqa: F401


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


REMOTE_CLUSTER_UTILS = """
import java.util.*;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Topology {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        System.out.println(RemoteClusterUtils.upstreamClusters(props) + "\\t"
                           + RemoteClusterUtils.replicationHops(props, args[1]));
    }
}
"""


def test_a_one_way_mirror_is_seen_upstream_by_mm2_remote_cluster_utils(kafka_a, kafka_b, flowgroup, run_java) -> None:
    """MM2 writes heartbeats into the source too (its disabled reverse flow keeps heartbeats on), so the
    source's heartbeats, mirrored as `a.heartbeats`, tell RemoteClusterUtils on the target where data comes
    from. The same from sparkmirror (emitHeartbeatsUpstream), read by MM2's own RemoteClusterUtils."""
    cfg = flowgroup("heartbeats", mirror={"emitHeartbeatsUpstream": True})
    mirror = cfg.mirrors[0]
    try:
        _upstream_heartbeats_seen(kafka_a, kafka_b, cfg, mirror, run_java)
    finally:  # the shared source must not carry a heartbeats topic into other tests' mirrors
        for bootstrap, t in ((kafka_a.bootstrap, "heartbeats"), (kafka_b.bootstrap, "a.heartbeats")):
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.delete_topics([t])[t].result(30)


def _upstream_heartbeats_seen(kafka_a, kafka_b, cfg, mirror, run_java) -> None:
    from sparkmirror.copying import copy_lane
    from sparkmirror.lanes import plan_lanes
    from sparkmirror.progress import ensure_progress_topic
    from sparkmirror.topicsync import TopicSync

    hb = HeartbeatEmitter(cfg, mirror)
    hb.emit()
    hb.close()
    assert (hb.sent, hb.sent_upstream) == (1, 1)
    got = [Heartbeat.decode(r.key, r.value) for r in read_topic(kafka_a.bootstrap, "heartbeats")[0]]
    assert Heartbeat("b", "a", got[-1].timestamp) in got  # the reverse flow's heartbeat, on the source
    # the mirror copies the source's heartbeats topic like data (MM2's shouldReplicateTopic)
    routes = TopicSync(cfg, mirror).sync()
    assert [(r.source_topic, r.target_topic) for r in routes] == [("heartbeats", "a.heartbeats")]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [("heartbeats", "a.heartbeats", 1)])[0].partitions)
    assert sum(s.records for s in copy_lane(cfg, mirror, 0, parts, 2.0)) >= 1
    upstream, hops = run_java("Topology", REMOTE_CLUSTER_UTILS, kafka_b.bootstrap, "a").strip().split("\t")
    # the shared target may carry other tests' `<alias>.heartbeats` too: only `a` is this test's
    assert "a" in upstream.strip("[]").split(", ")
    assert hops == "1"


def test_upstream_heartbeats_are_off_by_default(kafka_a, kafka_b, flowgroup) -> None:
    cfg = flowgroup("none")
    mirror = cfg.mirrors[0]
    hb = HeartbeatEmitter(cfg, mirror)
    hb.emit()
    hb.close()
    assert (hb.sent, hb.sent_upstream, hb.upstream) == (1, 0, None)
