"""The broker matrix: sparkmirror between Apache Kafka releases, each run from its Maven Central jars.

Per source -> target pair, one scenario on real brokers: an exactly-once copy (the job's real lanes, an epoch at a
time, as `mirror_once` runs them) with an aborted transaction on the source, the remote topic's configs and partition
count (grown in place), a consumer group's checkpoints, a `sparkmirror failover`, and then every record counted by
sequence number per partition, read_committed, on the target and across the group's move: 0 missing, 0 duplicated.
The group's consumers use KIP-848's protocol (`group.protocol=consumer`) on 4.x clusters, the classic one on 3.x.
What differed between releases is in README.md ("Kafka versions").
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions)

from sparkmirror.cli import main
from sparkmirror.mm2formats import Checkpoint
from sparkmirror.resource.flowgroup import DEFAULT_CONFIG_PROPERTIES_EXCLUDE, FlowGroupConfig
from sparkmirror.topicsync import TopicSync
from sparkmirror_dev import install
from sparkmirror_dev.kafka import KafkaCluster, java_cmd
from sparkmirror_dev.paths import KAFKA_MATRIX_VERSIONS, KAFKA_VERSION
from sparkmirror_dev.testing import (count_records, create_topic, group_offsets, produce_numbered, read_topic,
                                     unique_name)

from .conftest import close_kept_lanes, mirror_once

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(2.5)]

OLD, PREV = KAFKA_MATRIX_VERSIONS  # the last 3.x, the 4.x before the ground's
NEW = KAFKA_VERSION  # the ground's: the newest release
RELEASES = {"old-zk": (OLD, True), "old-kraft": (OLD, False), "new": (NEW, False), "new2": (NEW, False),
            "prev": (PREV, False)}
"""The matrix's clusters (name -> Kafka version, ZooKeeper mode), started together (the session's `a` and `b` would
start before them, not beside them)."""


def _pair(source: str, target: str):
    def label(name: str) -> str:
        version, zk = RELEASES[name]
        return f"{version.rsplit('.', 1)[0]}{'zk' if zk else 'kraft'}"

    return pytest.param(source, target, id=f"{label(source)}-to-{label(target)}")


PAIRS = [_pair("old-zk", "new"), _pair("new", "old-kraft"), _pair("new", "new2"), _pair("prev", "old-zk")]
"""Off an old ZooKeeper cluster; back to an old KRaft one (failback); between two of the newest; and from the
4.x before the ground's onto a ZooKeeper cluster."""

FIRST, LATER = 200, 100  # sequences per partition before and after the topic grows from 3 to 4 partitions
CONFIGS = {"retention.ms": "86400000", "max.message.bytes": "2000000"}
GONE_IN_4 = {"message.format.version": "2.8"}  # a topic config of 3.x that 4.0 removed (KIP-724)
READ_ON_SOURCE = {0: 50, 1: 150, 2: 1, 3: 30}  # what the group reads on the source; 1: past the aborted stretch


@pytest.fixture(autouse=True)
def _close_lanes() -> Iterator[None]:
    """mirror_once's lanes keep their clients between epochs (as a worker does): closed after each pair."""
    yield
    close_kept_lanes()


@pytest.fixture(scope="module")
def clusters(kafka_releases) -> dict[str, KafkaCluster]:
    """Every cluster of the matrix, started together once for the module."""
    return kafka_releases.start(RELEASES)


def _major(cluster: KafkaCluster) -> int:
    return int(cluster.version.split(".")[0])


def _label(cluster: KafkaCluster) -> str:
    return f"{cluster.version} {cluster.mode}"


def _partitions(cluster: KafkaCluster, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=30)
    return len(md.topics[topic].partitions)


def _dynamic_configs(cluster: KafkaCluster, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=30)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def _flowgroup(path, source: KafkaCluster, target: KafkaCluster, topic: str, exclude: list[str]) -> FlowGroupConfig:
    """The resource of a mirror source -> target of `topic` (config.properties.exclude: `exclude`), in a file at
    `path` (what `sparkmirror failover -f` reads), and its flow group."""
    from sparkmirror.runner.resources import load

    mirror = {"source": {"alias": source.name, "bootstrapServers": source.bootstrap}, "topicsPattern": topic,
              "groupsPattern": "mx-.*",
              "sourceConnector": {"config": {"config.properties.exclude": ",".join(exclude)}}}
    path.write_text(json.dumps({
        "apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
        "metadata": {"name": unique_name("mx"), "namespace": "matrix"},
        "spec": {"target": {"alias": target.name, "bootstrapServers": target.bootstrap}, "mirrors": [mirror]}}))
    return load([str(path)]).configs[0]


def _produce(source: KafkaCluster, topic: str) -> None:
    """Sequences 0..FIRST-1 on partitions 0-2, with an aborted transaction in the middle (source offsets and target
    offsets differ from there on)."""
    produce_numbered(source.bootstrap, topic, 3, 0, FIRST // 2)
    tx = Producer({"bootstrap.servers": source.bootstrap, "transactional.id": unique_name("mx-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(30):
        tx.produce(topic, value=f"{i % 3}:aborted".encode(), partition=i % 3)
    tx.flush(30)  # sent, then aborted
    tx.abort_transaction(30)
    produce_numbered(source.bootstrap, topic, 3, FIRST // 2, FIRST - FIRST // 2)


def _grow(source: KafkaCluster, topic: str) -> None:
    """A fourth partition, a changed config, then sequences FIRST..FIRST+LATER-1 on all four partitions."""
    admin = AdminClient({"bootstrap.servers": source.bootstrap})  # held until the answers: the futures need it
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "43200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    produce_numbered(source.bootstrap, topic, 4, FIRST, LATER)


def _protocol(cluster: KafkaCluster) -> str:
    """The consumer group protocol a consumer of this cluster uses: KIP-848's on 4.x (on 3.9 a consumer asking
    for it is never assigned anything, with no error), the classic one before."""
    return "consumer" if _major(cluster) >= 4 else "classic"


def _read_as_group(cluster: KafkaCluster, group: str, topic: str, counts: dict[int, int],
                   reset: str = "earliest") -> dict[int, list[int]]:
    """A subscribed consumer of `group` reads counts[p] records of each partition from the group's committed
    offsets and commits after them: the sequences it read, read_committed."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": _protocol(cluster),
                  "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": reset})
    out: dict[int, list[int]] = {p: [] for p in counts}
    last: dict[int, int] = {}
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 90
        while any(len(v) < counts[p] for p, v in out.items()) and time.monotonic() < deadline:
            for m in c.consume(200, 0.5):
                p = m.partition() if m.error() is None else None
                if p is not None and len(out[p]) < counts[p]:
                    out[p].append(int(m.value().decode().split(":")[1]))
                    last[p] = m.offset()
        c.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
    finally:
        c.close()
    assert {p: len(v) for p, v in out.items()} == counts, {p: len(v) for p, v in out.items()}
    return out


def _share_group(cluster: KafkaCluster, group: str, topic: str) -> str:
    """A share group (KIP-932) of `topic`, made by a share consumer subscribing (on by default in 4.4)."""
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        c.subscribe([topic])
        for _ in range(3):
            c.poll(1.0)
    finally:
        c.close()
    return group


def _share_group_exists(cluster: KafkaCluster, group: str) -> bool:
    """Asked through Kafka's own tool (librdkafka's ListGroups leaves share groups out)."""
    out = subprocess.run(java_cmd(install.kafka(cluster.version), "org.apache.kafka.tools.consumer.group."
                                  "ShareGroupCommand", "--bootstrap-server", cluster.bootstrap, "--list",
                                  heap="128m", log4j=False), capture_output=True, text=True, timeout=120)
    return group in out.stdout.split()


def _checkpoints(target: KafkaCluster, source_alias: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(remote topic, partition) -> (upstream, downstream) of `group`'s last checkpoints on the target."""
    out = {}
    for recs in read_topic(target.bootstrap, f"{source_alias}.checkpoints.internal").values():
        for r in recs:
            cp = Checkpoint.decode(r.key, r.value)
            if cp.group == group:
                out[(cp.topic, cp.partition)] = (cp.upstream_offset, cp.downstream_offset)
    return out


def _mirror(cfg: FlowGroupConfig, target: KafkaCluster, topic: str, records: int) -> None:
    """Epochs of the mirror's lanes until the target holds `records` (a loaded machine, or the first transaction on
    a fresh cluster, can take an epoch's seconds): what the running job does, an epoch after another."""
    for _ in range(5):
        mirror_once(cfg, epoch_seconds=2)
        if count_records(target.bootstrap, topic) >= records:
            return


def _tally(got: dict[int, list[int]], want: dict[int, list[int]]) -> dict[int, tuple[int, int]]:
    """partition -> (missing, duplicated) sequence numbers."""
    return {p: (len(set(want[p]) - set(got.get(p, []))), len(got.get(p, [])) - len(set(got.get(p, []))))
            for p in want}


@pytest.mark.parametrize(("source_name", "target_name"), PAIRS)
def test_pair_copies_syncs_checkpoints_and_fails_over_exactly(clusters, source_name, target_name, tmp_path, capfd,
                                                              figure) -> None:
    source, target = clusters[source_name], clusters[target_name]
    t0 = time.monotonic()
    cfg, path, src, dst = _copy_and_sync(source, target, tmp_path)
    t_copied = time.monotonic()
    moved = _checkpoint_and_fail_over(cfg, path, source, target, src, dst, tmp_path, capfd)
    figure(f"{_label(source)} -> {_label(target)}",
           f"{moved} records copied exactly once, 3 -> 4 partitions and configs synced in {t_copied - t0:.1f} s; "
           f"checkpoints and failover of a group ({_protocol(source)} protocol on the source, {_protocol(target)} "
           f"on the target) in {time.monotonic() - t_copied:.1f} s; every record read once across the move")


WANT = {p: list(range(0 if p < 3 else FIRST, FIRST + LATER)) for p in range(4)}
"""Every partition's sequences on the target, in order: 0..FIRST+LATER-1 on 0-2, FIRST.. on the grown one."""


def _copy_and_sync(source: KafkaCluster, target: KafkaCluster, tmp_path) -> tuple[FlowGroupConfig, Path, str, str]:
    """The remote topic made with the source's partitions and configs, the records copied; then the source grows
    (a partition, a changed config, more records): synced in place, copied on. (flow group, its resource file,
    source topic, remote topic)."""
    old_source = _major(source) < 4
    src = create_topic(source.bootstrap, unique_name("mx"), 3, {**CONFIGS, **(GONE_IN_4 if old_source else {})})
    dst = f"{source.name}.{src}"
    _produce(source, src)
    # MirrorMaker 2's default exclusions keep message.format.version, which a 4.x target does not know: the
    # remote topic is made without it, said once (KIP-724 removed it)
    path = tmp_path / "mirror.yaml"
    cfg = _flowgroup(path, source, target, src, DEFAULT_CONFIG_PROPERTIES_EXCLUDE)
    if old_source and _major(target) >= 4:
        sync = TopicSync(cfg, cfg.mirrors[0])
        sync.sync()
        assert sync.unknown_on_target == {"message.format.version"}
        assert [(p.kind, p.topic) for p in sync.problems] == [("unknownConfig", dst)]
        sync.close()

    _mirror(cfg, target, dst, 3 * FIRST)
    assert _partitions(target, dst) == 3
    assert _dynamic_configs(target, dst) == CONFIGS
    _grow(source, src)
    _mirror(cfg, target, dst, 3 * FIRST + 4 * LATER)
    assert _partitions(target, dst) == 4
    assert _dynamic_configs(target, dst) == {**CONFIGS, "retention.ms": "43200000"}
    copied = {p: [int(r.value.decode().split(":")[1]) for r in recs]
              for p, recs in read_topic(target.bootstrap, dst).items()}
    assert _tally(copied, WANT) == {p: (0, 0) for p in WANT}, "(missing, duplicated) per partition on the target"
    assert copied == WANT  # and in the source's order
    return cfg, path, src, dst


def _checkpoint_and_fail_over(cfg: FlowGroupConfig, path: Path, source: KafkaCluster, target: KafkaCluster,
                              src: str, dst: str, tmp_path, capfd) -> int:
    """A group reads part of the topic on the source; the mirror checkpoints it on the target; `sparkmirror
    failover` moves it there, where it reads the rest: each record once over both clusters. A share group of the
    same topic (4.4 sources, subscribed at `latest` on an idle topic: no start offsets yet), selected too, gives
    `shareGroups` nothing to carry, or rows the target takes. Records counted."""
    from sparkmirror.checkpoints import CheckpointEmitter

    group = unique_name("mx-app")
    read = _read_as_group(source, group, src, READ_ON_SOURCE)
    share = _share_group(source, f"{group}-share", src) if source.version == NEW else None
    emitter = CheckpointEmitter(cfg, cfg.mirrors[0])
    try:
        emitter.run_once(sync_offsets=False)
    finally:
        emitter.close()
    committed = {p: o for (t, p), o in group_offsets(source.bootstrap, group).items() if t == src}
    checkpoints = _checkpoints(target, source.name, group)
    assert {p: up for (t, p), (up, _down) in checkpoints.items() if t == dst} == committed

    capfd.readouterr()
    rc = main(["failover", "-f", str(path), "--mirror", source.name, "--groups", f"{re.escape(group)}(-share)?",
               "-o", "json", "--log-file", str(tmp_path / "failover.log")])
    doc = json.loads(capfd.readouterr().out)
    assert rc == 0 and doc["ok"], doc
    assert [g["group"] for g in doc["groups"]] == [group]  # the share group is not a consumer group: its rows are shareGroups
    if share is not None:
        assert _share_group_exists(source, share)
        # its start offsets are carried to a target with share groups, said `unsupported` by one without
        actions = {r["action"] for g in doc["shareGroups"] for r in g["partitions"]}
        print(f"{source.name} -> {target.name}: share group rows {sorted(actions)}; note {doc['shareGroupsNote']!r}")
        assert actions <= ({"set", "kept"} if _major(target) >= 4 else {"unsupported"}), doc["shareGroups"]
        assert [g["group"] for g in doc["shareGroups"]] in ([share], [])
    rows = {r["partition"]: r for g in doc["groups"] for r in g["partitions"]}
    assert {p: (r["action"], r["sourceOffset"]) for p, r in rows.items()} == \
        {p: ("committed", o) for p, o in committed.items()}
    assert {p: r["targetOffset"] for p, r in rows.items()} == {p: checkpoints[(dst, p)][1] for p in rows}
    assert group_offsets(target.bootstrap, group) == {(dst, p): r["targetOffset"] for p, r in rows.items()}
    # the rest, by a consumer of the group on the target (on 4.x a KIP-848 one joining the group failover made)
    rest = {p: len(WANT[p]) - n for p, n in READ_ON_SOURCE.items()}
    for p, seqs in _read_as_group(target, group, dst, rest, reset="error").items():
        read[p] += seqs
    assert _tally(read, WANT) == {p: (0, 0) for p in WANT}, "(missing, read twice) per partition over the move"
    assert read == WANT
    return sum(map(len, WANT.values()))
