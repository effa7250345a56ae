"""Replication factors against real multi-broker KRaft clusters (issue 37 item 5): remote topics take their
source topic's factor, or MM2's `replication.factor`; the heartbeats, checkpoints and progress topics their own
keys; a target with fewer brokers than a factor is refused naming the topic, the factor, the broker count and
the key to set."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from sparkmirror_dev.env import start_all
from sparkmirror_dev.kafka import KafkaCluster, ReplicatedKafkaCluster
from sparkmirror_dev.testing import create_topic, unique_name
from tests.support.waiting import wait_for
from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror.heartbeats import HeartbeatEmitter
from sparkmirror.preview import observe, preview
from sparkmirror.progress import ensure_progress_topic
from sparkmirror.replicas import ReplicationFactorRefused
from sparkmirror.resource.names import EXIT_TOO_FEW_BROKERS
from sparkmirror.resource.flowgroup import Cluster, FlowGroupConfig, Mirror
from sparkmirror.topicsync import TopicSync, TopicSyncError

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(1.1)]


@pytest.fixture(scope="module")
def grounds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A 3-broker source, a 3-broker target and a 1-broker target, started together, for the whole module."""
    root: Path = tmp_path_factory.mktemp("rf")
    parts = {"source": ReplicatedKafkaCluster("rf-src", root / "src", heap="256m"),
             "target": ReplicatedKafkaCluster("rf-tgt", root / "tgt", heap="256m"),
             "small": KafkaCluster("rf-small", root / "small", heap="256m")}
    start_all(list(parts.values()))
    try:
        yield parts
    finally:
        for p in parts.values():  # SIGKILL: a controlled shutdown of 7 nodes took 40 s, and nothing is kept
            if isinstance(p, ReplicatedKafkaCluster):
                p.kill_all()
            else:
                p.kill()


def flow(source, target, prefix: str, progress_factor: int = -1, **mirror) -> FlowGroupConfig:
    return FlowGroupConfig(name="fg", clusters=[Cluster(alias="A", bootstrapServers=source.bootstrap),
                                                Cluster(alias="B", bootstrapServers=target.bootstrap)],
                           mirrors=[Mirror(name="a-b", source="A", target="B", topics=re.escape(prefix) + ".*",
                                           emitHeartbeats=False, **mirror)],
                           progressTopicReplicationFactor=progress_factor)


def factors(cluster, topics: list[str], timeout: float = 90.0) -> dict[str, int]:
    """topic -> replicas of each of its partitions (all equal, or the test says so), once all are listed (a broker
    of a loaded machine learnt of a created topic more than 20 s after its creation was acknowledged)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=10)
        if all(t in md.topics and md.topics[t].partitions for t in topics) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    out = {}
    unlisted = [t for t in topics if t not in md.topics or not md.topics[t].partitions]
    assert not unlisted, f"not listed {timeout:.0f} s after their creation: {unlisted}"
    for t in topics:
        counts = {len(p.replicas) for p in md.topics[t].partitions.values()}
        assert len(counts) == 1, f"{t}: partitions with different replica counts {counts}"
        out[t] = counts.pop()
    return out


def sources(cluster, prefix: str, rfs: tuple[int, ...]) -> list[str]:
    """Source topics of these factors, once the broker the sync asks lists them (creation answers first)."""
    names = [create_topic(cluster.bootstrap, f"{prefix}rf{rf}", partitions=2, replication_factor=rf) for rf in rfs]
    assert factors(cluster, names) == dict(zip(names, rfs))
    return names


def planned(sync: TopicSync, count: int) -> dict[str, int]:
    """remote topic -> factor the sync plans to create, once it plans `count` of them: the source broker it
    asks may learn of a topic later than the one `sources` asked (each pass of a running mirror asks again)."""
    return wait_for(f"{count} remote topics planned", lambda: len(p := {
        c.name: c.replication_factor for c in sync.plan().create}) == count and p, timeout=90)


def synced(sync: TopicSync, count: int) -> None:
    """Sync until nothing is left to create (what the mirror's next passes would do)."""
    planned(sync, count)
    wait_for("every remote topic created", lambda: sync.sync() is not None and not sync.plan().create, timeout=90)


def test_remote_topics_take_the_source_topics_factor(grounds, record_property) -> None:
    src, tgt = grounds["source"], grounds["target"]
    prefix = unique_name("keep") + "."
    names = sources(src, prefix, (1, 2, 3))
    sync = TopicSync(flow(src, tgt, prefix), flow(src, tgt, prefix).mirrors[0])
    assert planned(sync, 3) == {f"A.{n}": rf for n, rf in zip(names, (1, 2, 3))}
    synced(sync, 3)
    got = factors(tgt, [f"A.{n}" for n in names])
    record_property("remote replication factors", got)
    assert got == {f"A.{n}": rf for n, rf in zip(names, (1, 2, 3))}


def test_replication_factor_key_overrides_the_source(grounds) -> None:
    src, tgt = grounds["source"], grounds["target"]
    prefix = unique_name("set") + "."
    names = sources(src, prefix, (1, 3))
    cfg = flow(src, tgt, prefix, replicationFactor=2)
    synced(TopicSync(cfg, cfg.mirrors[0]), 2)
    assert factors(tgt, [f"A.{n}" for n in names]) == {f"A.{n}": 2 for n in names}
    prefix = unique_name("dflt") + "."
    names = sources(src, prefix, (1,))
    cfg = flow(src, tgt, prefix, replicationFactor=-1)  # -1: the target's default.replication.factor (3 here)
    synced(TopicSync(cfg, cfg.mirrors[0]), 1)
    assert factors(tgt, [f"A.{names[0]}"]) == {f"A.{names[0]}": 3}


def test_internal_topics_take_their_keys(grounds) -> None:
    """The heartbeats and checkpoints topics through their emitters, the progress topic through the call the job
    makes with the flow group's field (the target is this module's own: nobody else makes "heartbeats")."""
    src, tgt = grounds["source"], grounds["target"]
    cfg = flow(src, tgt, "none.", progress_factor=2, heartbeatsTopicReplicationFactor=2,
               checkpointsTopicReplicationFactor=1)
    mirror = cfg.mirrors[0].model_copy(update={"emitHeartbeats": True})
    emitter = HeartbeatEmitter(cfg, mirror)
    try:
        emitter.emit()
    finally:
        emitter.close()
    checkpoints = CheckpointEmitter(cfg, mirror)
    try:
        assert checkpoints.emit({}) == 0  # no group yet: the topic is made all the same
    finally:
        checkpoints.close()
    assert checkpoints.topic == "A.checkpoints.internal"
    progress = unique_name("progress")
    ensure_progress_topic(cfg.cluster("B").client_config(), progress,
                          replication_factor=cfg.progressTopicReplicationFactor)
    assert factors(tgt, ["heartbeats", progress, checkpoints.topic]) == \
        {"heartbeats": 2, progress: 2, checkpoints.topic: 1}


def test_too_few_target_brokers_is_refused_by_name(grounds) -> None:
    src, small = grounds["source"], grounds["small"]
    prefix = unique_name("big") + "."
    names = sources(src, prefix, (3,))
    cfg = flow(src, small, prefix)
    (conflict,) = wait_for("plan's conflict", lambda: preview(observe([cfg])).conflicts, timeout=90)  # said first
    assert conflict["kind"] == "replication-factor" and conflict["topic"] == f"A.{names[0]}", conflict
    with pytest.raises(TopicSyncError) as e:
        TopicSync(cfg, cfg.mirrors[0]).sync()
    msg = str(e.value)
    assert f"remote topic 'A.{names[0]}' not created: topic 'A.{names[0]}' needs replication factor 3 (the source " \
           "topic's) but cluster 'B' has 1 broker(s): set replication.factor in mirrors[a-b]'s connector config " \
           "to at most 1" in msg, msg
    assert f"A.{names[0]}" not in AdminClient({"bootstrap.servers": small.bootstrap}).list_topics(timeout=10).topics

    cfg = flow(src, small, prefix, replicationFactor=1)  # what the refusal says to set: it copies
    TopicSync(cfg, cfg.mirrors[0]).sync()
    assert factors(small, [f"A.{names[0]}"]) == {f"A.{names[0]}": 1}

    hb = flow(src, small, prefix, heartbeatsTopicReplicationFactor=3).mirrors[0].model_copy(
        update={"emitHeartbeats": True})
    with pytest.raises(ReplicationFactorRefused, match=re.escape(
            "topic 'heartbeats' needs replication factor 3 but cluster 'B' has 1 broker(s): set "
            "heartbeats.topic.replication.factor in mirrors[a-b]'s connector config to at most 1")):
        emitter = HeartbeatEmitter(cfg, hb)
        try:
            emitter.emit()
        finally:
            emitter.close()
    cp = CheckpointEmitter(cfg, flow(src, small, prefix, checkpointsTopicReplicationFactor=3).mirrors[0])
    try:
        with pytest.raises(ReplicationFactorRefused, match=re.escape(
                "topic 'A.checkpoints.internal' needs replication factor 3 but cluster 'B' has 1 broker(s): set "
                "checkpoints.topic.replication.factor in mirrors[a-b]'s connector config to at most 1")):
            cp.emit({})
    finally:
        cp.close()
    with pytest.raises(ReplicationFactorRefused, match=re.escape(
            f"topic '{prefix}progress' needs replication factor 3 but cluster '{small.bootstrap}' has 1 broker(s): "
            "set spec.progressTopicReplicationFactor to at most 1")):
        ensure_progress_topic({"bootstrap.servers": small.bootstrap}, f"{prefix}progress", replication_factor=3)


def test_the_job_ends_with_the_refusal(grounds, job) -> None:
    """The real job on a 1-broker target, a source topic of factor 3: the mirror ends (EXIT_TOO_FEW_BROKERS, which
    the operator's status names by its own reason) with the refusal as its reason, the line the driver prints and
    reports; no remote topic is made."""
    src, small = grounds["source"], grounds["small"]
    prefix = unique_name("e2e") + "."
    name = sources(src, prefix, (3,))[0]
    cfg = FlowGroupConfig.model_validate({
        "name": unique_name("fg"), "clusters": [{"alias": "A", "bootstrapServers": src.bootstrap},
                                                {"alias": "B", "bootstrapServers": small.bootstrap}],
        "mirrors": [{"name": "a-b", "source": "A", "target": "B", "topics": re.escape(prefix) + ".*",
                     "emitHeartbeats": False, "emitCheckpoints": False}],
        "lanes": 1, "epochSeconds": 3, "progressTopic": unique_name("progress")})
    jp = job(cfg)
    jp.proc.wait(240)
    log = jp.log()
    assert jp.proc.returncode == EXIT_TOO_FEW_BROKERS, log[-3000:]
    line = next((ln for ln in log.splitlines() if ln.startswith("sparkmirror: mirror")), "")
    assert f"topic 'A.{name}' needs replication factor 3 (the source topic's) but cluster 'B' has 1 broker(s): " \
           "set replication.factor in mirrors[a-b]'s connector config to at most 1" in line, line or log[-3000:]
    assert f"A.{name}" not in AdminClient({"bootstrap.servers": small.bootstrap}).list_topics(timeout=10).topics
