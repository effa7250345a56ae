"""The same consumer group moved to the target by Apache Kafka's MirrorMaker 2 and by sparkmirror, side by side.

One source topic, mirrored into the same target cluster by MM2 (dedicated mode, its own alias, checkpoints every
second) and by sparkmirror. A group reads part of each partition on the source and commits. Each mirror's
translation then positions the group on its remote topic (MM2: its checkpoints through its own
`RemoteClusterUtils.translateOffsets`; sparkmirror: its checkpoints, from the progress topic's offset map), and
everything the group reads there is counted by sequence number: what it repeats (already read on the source)
and what it skips.
"""
from __future__ import annotations

import time

import pytest

from bench.contenders import MirrorMaker2, MirrorSetup
from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror_dev.testing import count_records, produce_numbered, unique_name

from .conftest import mirror_once
from .mm2java import run_java  # noqa: F401  (fixture)
from .test_checkpoints_translation import JAVA
from .test_failover import _read_as

N = 1000  # records per partition
READ = {0: 333, 1: 671}  # what the group reads on the source before the switch


class _Mm2(MirrorMaker2):
    """The benchmark's MM2, for one topic and one group, under an alias of its own, checkpoints every second."""

    def __init__(self, alias: str, topic: str, group: str) -> None:
        super().__init__(exactly_once=False)
        self.alias, self.topic, self.group = alias, topic, group

    def properties(self, s: MirrorSetup) -> dict[str, str]:
        props = super().properties(s)
        out = {}
        for k, v in props.items():  # the benchmark's aliases -> this test's
            k = k.replace("src->tgt", f"{self.alias}->tgt").replace("tgt->src", f"tgt->{self.alias}")
            out[f"{self.alias}.{k[4:]}" if k.startswith("src.") else k] = v
        out.update({"clusters": f"{self.alias}, tgt", f"{self.alias}->tgt.topics": self.topic,
                    f"{self.alias}->tgt.groups": self.group, f"{self.alias}->tgt.groups.exclude": "",
                    "emit.checkpoints.interval.seconds": "1", "refresh.groups.interval.seconds": "1",
                    "refresh.topics.interval.seconds": "1", "sync.topic.configs.enabled": "false"})
        return out


def _read_from(bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, list[int]]:
    """Sequences a consumer positioned at `offsets` reads to the end of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("count"), "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    out: dict[int, list[int]] = {p: [] for p in offsets}
    try:
        c.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
        todo, deadline = set(offsets), time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                if m.error():
                    todo.discard(m.partition())
                else:
                    out[m.partition()].append(int(m.value().decode().split(":")[1]))
        assert not todo, f"{topic}: partitions {todo} not read to the end"
    finally:
        c.close()
    return out


def _count(read: dict[int, list[int]]) -> tuple[int, int]:
    """(repeated, skipped): sequences the group had read on the source read again, and unread ones missing."""
    repeated = sum(1 for p, seqs in read.items() for s in seqs if s < READ[p])
    skipped = sum(len(set(range(READ[p], N)) - set(seqs)) for p, seqs in read.items())
    return repeated, skipped


@pytest.mark.kafka
def test_group_failover_counts_sparkmirror_against_mirrormaker2(kafka_a, kafka_b, topic, flowgroup, run_java,
                                                                 tmp_path, figure) -> None:
    src = topic(kafka_a, 2)
    group = unique_name("switch")
    produce_numbered(kafka_a.bootstrap, src, 2, 0, N)
    read_on_source = _read_as(kafka_a.bootstrap, group, src, READ)

    alias = unique_name("mm").replace("-", "")
    mm2 = _Mm2(alias, src, group)
    mm2.start(MirrorSetup(kafka_a.bootstrap, kafka_b.bootstrap, src, 2, tmp_path / "mm2"))
    try:
        cfg = flowgroup(src, mirror={"groups": group})
        routes = mirror_once(cfg)
        emitter = CheckpointEmitter(cfg, cfg.mirrors[0])
        try:
            ours = {cp.partition: cp.downstream_offset for cp in emitter.run_once()[group]}
        finally:
            emitter.close()

        mm2_topic = f"{alias}.{src}"
        deadline = time.monotonic() + 150
        theirs: dict[int, int] = {}
        while time.monotonic() < deadline and (len(theirs) < 2 or count_records(kafka_b.bootstrap, mm2_topic) < 2 * N):
            assert mm2.alive(), f"MirrorMaker 2 exited; see {mm2.log}"
            time.sleep(2)
            out = run_java("TranslateProbe", JAVA, kafka_b.bootstrap, alias, group).splitlines()
            theirs = {int(p): int(o) for t, p, o in (line.split("\t") for line in out) if t == mm2_topic}
        assert len(theirs) == 2, f"MirrorMaker 2 emitted no checkpoint for {group} in 150 s; see {mm2.log}"
    finally:
        mm2.stop()

    on_ours = _read_from(kafka_b.bootstrap, routes[0].target_topic, ours)
    on_theirs = _read_from(kafka_b.bootstrap, mm2_topic, theirs)
    assert {p: read_on_source[p] + on_ours[p] for p in READ} == {p: list(range(N)) for p in READ}
    mm2_repeated, mm2_skipped = _count(on_theirs)
    figure("failover_vs_mm2", f"failover of a group at source offsets {READ} of {N}: sparkmirror repeated 0, "
           f"skipped 0; MirrorMaker 2 repeated {mm2_repeated}, skipped {mm2_skipped} (translated to {theirs}, exact: "
           f"{READ})")
    assert _count(on_ours) == (0, 0)
    assert mm2_skipped == 0  # MM2 translates to the last offset sync at or below the group: it repeats, never skips
