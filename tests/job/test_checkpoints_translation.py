"""Exact consumer-group offset translation: pure offset maps, then the real copier + brokers + MM2's own client."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror.checkpoints import CheckpointEmitter, offsets_to_sync, translate
from sparkmirror.replication import GroupFilter
from sparkmirror.copying import copy_lane
from sparkmirror_dev.testing import commit_group, unique_name
from sparkmirror.lanes import plan_lanes
from sparkmirror.mm2formats import Checkpoint
from sparkmirror.progress import OffsetMap, ProgressRecord, ensure_progress_topic
from sparkmirror.topicsync import TopicSync

from .conftest import read_topic
from .mm2java import run_java  # noqa: F401  (fixture)


def rec(src: tuple[int, int], tgt: tuple[int, int], count: int) -> ProgressRecord:
    return ProgressRecord("a", "t", 0, src[1] + 1, src[0], src[1], "a.t", tgt[0], tgt[1], count, 0, 1)


def test_translate_is_exact_on_dense_ranges_and_never_skips_in_gapped_ones() -> None:
    # source 0..9 -> target 100..109 (dense); source 10..19 held 8 records (gaps) -> target 111..118
    m = OffsetMap([rec((0, 9), (100, 109), 10), rec((10, 19), (111, 118), 8)])
    maps = {("t", 0): m}
    cps = {o: translate("g", {("t", 0): (o, "md")}, maps) for o in (0, 5, 9, 10, 15, 19, 20, 500)}
    assert [cps[o][0].downstream_offset for o in (0, 5, 9)] == [100, 105, 109]   # the record that was o
    assert cps[10][0].downstream_offset == 111     # a commit boundary: exact
    assert cps[15][0].downstream_offset == 111     # inside a gapped range, not knowing more: repeat, never skip
    assert cps[19][0].downstream_offset == 111
    # knowing which source offsets the range copied (the source was read: 10,11,13,14,15,17,18,19), exact
    copied = [10, 11, 13, 14, 15, 17, 18, 19]
    inside = lambda r, o: sum(1 for x in copied if x < o)  # noqa: E731
    exact = {o: translate("g", {("t", 0): (o, "")}, maps, inside)[0].downstream_offset for o in range(10, 21)}
    assert exact == {10: 111, 11: 112, 12: 113, 13: 113, 14: 114, 15: 115, 16: 116, 17: 116, 18: 117, 19: 118,
                     20: 119}
    assert cps[20][0].downstream_offset == 119     # everything mirrored: just past the end
    assert cps[500][0].downstream_offset == 119    # not mirrored yet: the next target record will be it
    assert cps[5][0] == Checkpoint("g", "a.t", 0, 5, 105, "md")
    # a range whose records were all filtered (identity loops) wrote nothing: the next target record
    skipped = OffsetMap([rec((0, 9), (100, 109), 10), rec((10, 14), (-1, -1), 0)])
    assert [translate("g", {("t", 0): (o, "")}, {("t", 0): skipped})[0].downstream_offset for o in (10, 12, 15)] == \
        [110, 110, 110]
    assert translate("g", {("t", 0): (3, "")}, {("t", 0): OffsetMap([rec((0, 9), (-1, -1), 0)])}) == []
    # partitions without progress, or older than the history held, get no checkpoint at all
    late = OffsetMap([rec((50, 59), (0, 9), 10)])
    assert translate("g", {("t", 0): (10, ""), ("u", 1): (3, "")}, {("t", 0): late}) == []


def test_offsets_to_sync_never_rewinds() -> None:
    cps = [Checkpoint("g", "a.t", 0, 10, 7), Checkpoint("g", "a.t", 1, 10, 7), Checkpoint("g", "a.t", 2, 1, 1)]
    assert offsets_to_sync(cps, {("a.t", 0): 9, ("a.t", 1): 3}) == {("a.t", 1): 7, ("a.t", 2): 1}


def test_group_filter() -> None:
    f = GroupFilter(None, r"console-consumer-.*|connect-.*|__.*")
    assert f.matches("orders-app") and not f.matches("console-consumer-1") and not f.matches("connect-x")
    assert not GroupFilter("app-.*").matches("other")
    assert not GroupFilter(None, None, own="app-lag").matches("app-lag")  # the mirror's lag report
    with pytest.raises(ValueError, match="groups: invalid regex"):
        GroupFilter("[")


def _fill_with_gaps(bootstrap: str, topic: str, partitions: int) -> None:
    """Plain records, an aborted transaction, a committed one, plain again: source offsets with holes."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(40):
        for p in range(partitions):
            plain.produce(topic, key=f"a{i}".encode(), value=f"{p}:a{i}".encode(), partition=p)
    assert plain.flush(30) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("ckpt-tx")})
    tx.init_transactions(30)
    for what, n in (("abort", 15), ("commit", 25)):
        tx.begin_transaction()
        for i in range(n):
            for p in range(partitions):
                tx.produce(topic, key=f"{what}{i}".encode(), value=f"{p}:{what}{i}".encode(), partition=p)
        tx.flush(30)
        (tx.abort_transaction if what == "abort" else tx.commit_transaction)(30)
    for i in range(30):
        for p in range(partitions):
            plain.produce(topic, key=f"b{i}".encode(), value=f"{p}:b{i}".encode(), partition=p)
    assert plain.flush(30) == 0


def _first_committed(bootstrap: str, topic: str, partition: int, offset: int) -> bytes | None:
    """The value a read_committed consumer positioned at `offset` reads first (None at the end)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("peek"), "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        while True:
            m = c.poll(10)
            assert m is not None, "no record and no end of partition within 10s"
            if m.error():
                return None  # end of partition
            return m.value()
    finally:
        c.close()


JAVA = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateProbe {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> out = RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(30));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : out.entrySet())
            System.out.println(e.getKey().topic() + "\t" + e.getKey().partition() + "\t" + e.getValue().offset());
    }
}
"""


@pytest.mark.kafka
def test_checkpoints_translate_exactly_and_sync_groups(kafka_a, kafka_b, topic, flowgroup, run_java) -> None:
    src = topic(kafka_a, 2)
    cfg = flowgroup(src, mirror={"syncGroupOffsets": True, "groups": "ckpt-.*"})
    mirror = cfg.mirrors[0]
    _fill_with_gaps(kafka_a.bootstrap, src, 2)
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    dst = routes[0].target_topic
    assert dst == f"a.{src}"
    for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror), [(r.source_topic, r.target_topic, r.partitions) for r in routes]):
        if lane.partitions:
            copy_lane(cfg, mirror, lane.index, list(lane.partitions), 3.0)

    g1, g2, other = unique_name("ckpt-g1"), unique_name("ckpt-g2"), unique_name("nope")
    # g1: inside the first plain range (p0) and at the first record of the committed transaction (p1);
    # g2: at the very end (everything consumed); `other` is not selected by groups
    c = Consumer({"bootstrap.servers": kafka_a.bootstrap, "group.id": "x"})
    ends = {p: c.get_watermark_offsets(TopicPartition(src, p), timeout=10)[1] for p in (0, 1)}
    c.close()
    committed_txn_first = 40 + 15 + 1  # 40 plain, 15 aborted, 1 abort marker
    commit_group(kafka_a.bootstrap, g1, {(src, 0): 17, (src, 1): committed_txn_first})
    commit_group(kafka_a.bootstrap, g2, {(src, 0): ends[0], (src, 1): ends[1]})
    commit_group(kafka_a.bootstrap, other, {(src, 0): 3})

    emitter = CheckpointEmitter(cfg, mirror)
    try:
        cps = emitter.run_once()
    finally:
        emitter.close()
    assert set(cps) >= {g1, g2} and other not in cps
    for group in (g1, g2):
        for cp in cps[group]:
            assert cp.topic == dst
            # the record a consumer reads next is the same on both sides (or both are at the end)
            assert _first_committed(kafka_b.bootstrap, dst, cp.partition, cp.downstream_offset) == \
                _first_committed(kafka_a.bootstrap, src, cp.partition, cp.upstream_offset), (group, cp)
    g1cps = {cp.partition: cp for cp in cps[g1]}
    assert _first_committed(kafka_a.bootstrap, src, 1, g1cps[1].upstream_offset) == b"1:commit0"
    assert g1cps[1].downstream_offset == 40  # target holds no aborted records: exact position, not approximate

    # syncGroupOffsets: the idle groups now sit at the translated offsets on the target
    admin_b = AdminClient({"bootstrap.servers": kafka_b.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    for group in (g1, g2):
        res = admin_b.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
        got = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
        assert got == {(dst, cp.partition): cp.downstream_offset for cp in cps[group]}

    # emit.checkpoints.enabled=false, sync.group.offsets.enabled=true: the group is synced, no checkpoint written
    g3 = unique_name("ckpt-g3")
    commit_group(kafka_a.bootstrap, g3, {(src, 0): 17})
    quiet = CheckpointEmitter(cfg, mirror.model_copy(update={"emitCheckpoints": False}))
    try:
        assert g3 in quiet.run_once()
    finally:
        quiet.close()
    res = admin_b.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g3)])[g3].result(30)
    assert {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions} == \
        {(dst, 0): g1cps[0].downstream_offset}
    written = {Checkpoint.decode(r.key, r.value).group for r in read_topic(kafka_b.bootstrap, "a.checkpoints.internal")[0]}
    assert g1 in written and g3 not in written

    # MM2's own client reads our checkpoints topic and agrees
    out = run_java("TranslateProbe", JAVA, kafka_b.bootstrap, "a", g1).splitlines()
    java = {(t, int(p)): int(o) for t, p, o in (line.split("\t") for line in out)}
    assert java == {(dst, cp.partition): cp.downstream_offset for cp in cps[g1]}


def _raw_progress_values(bootstrap: str, topic: str, key: bytes) -> int:
    """How many values of one key the progress topic still holds (compaction drops older ones)."""
    return sum(1 for r in read_topic(bootstrap, topic)[0] if r.key == key)


@pytest.mark.kafka
def test_translation_stays_exact_after_the_progress_topic_compacted(kafka_a, kafka_b, topic, flowgroup,
                                                                     monkeypatch, figure) -> None:
    """A group far behind: the ranges it sits in were compacted away; anchors and counting on both clusters
    still give the exact target position for every offset."""
    import sparkmirror.progress.record as record
    from sparkmirror.progress import PROGRESS_TOPIC_CONFIG, progress_key, read_progress
    from sparkmirror_dev.testing import create_topic

    monkeypatch.setattr(record, "ANCHOR_EVERY", 100)  # an anchor per 100 source offsets (50,000 in production)
    src = topic(kafka_a, 1)
    cfg = flowgroup(src, mirror={"groups": "lagging-.*"})
    mirror = cfg.mirrors[0]
    create_topic(kafka_b.bootstrap, cfg.progressTopic, 1,
                 {**PROGRESS_TOPIC_CONFIG, "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01"})
    routes = TopicSync(cfg, mirror).sync()
    dst = routes[0].target_topic
    tx = Producer({"bootstrap.servers": kafka_a.bootstrap, "transactional.id": unique_name("anchor-tx")})
    tx.init_transactions(30)
    plain = Producer({"bootstrap.servers": kafka_a.bootstrap})
    for chunk in range(12):  # ~12+ ranges, with aborted records and transaction markers inside them
        for i in range(25):
            plain.produce(src, value=f"{chunk}:p{i}".encode(), partition=0)
        assert plain.flush(30) == 0
        for what in ("abort", "commit"):
            tx.begin_transaction()
            for i in range(7):
                tx.produce(src, value=f"{chunk}:{what}{i}".encode(), partition=0)
            tx.flush(30)
            (tx.abort_transaction if what == "abort" else tx.commit_transaction)(30)
        lane = plan_lanes(mirror.name, 1, [(src, dst, 1)])[0]
        copy_lane(cfg, mirror, lane.index, list(lane.partitions), 0.5)

    key = progress_key("a", src, 0, cfg.resource)
    written = 12  # at least a range per chunk
    import time
    t0 = time.monotonic()
    for _ in range(90):  # the broker compacts the progress topic (a segment per 200 ms, cleaner every 1 s)
        plain.produce(src, value=b"tick", partition=0)  # later records roll the segments the cleaner may take
        plain.flush(30)
        lane = plan_lanes(mirror.name, 1, [(src, dst, 1)])[0]
        copy_lane(cfg, mirror, lane.index, list(lane.partitions), 0.2)
        if _raw_progress_values(kafka_b.bootstrap, cfg.progressTopic, key) <= 3:
            break
    figure("compaction_time", f"compacted after {time.monotonic() - t0:.1f}s, {_} rounds")
    held = read_progress(cfg.cluster("b").client_config(), cfg.progressTopic, "a", resource=cfg.resource)
    m = held.maps[("a", src, 0)]
    total_ranges = held.latest[("a", src, 0)]
    assert _raw_progress_values(kafka_b.bootstrap, cfg.progressTopic, key) <= 3, "the progress topic did not compact"
    assert 3 <= len(m) < written, f"{len(m)} ranges held of {written}+ written: anchors expected"

    source = {r.offset: r.value for r in read_topic(kafka_a.bootstrap, src)[0]}
    target = [(r.offset, r.value) for r in read_topic(kafka_b.bootstrap, dst)[0]]
    end = max(source) + 1
    assert [v for _o, v in target] == [source[o] for o in sorted(source)]

    def expected(o: int) -> int:
        """The target offset of the first record at or after source offset `o` (the end: past the last)."""
        rest = [v for s, v in sorted(source.items()) if s >= o]
        return next(t for t, v in target if v == rest[0]) if rest else target[-1][0] + 1

    def reads_first(t: int) -> int:
        """What a consumer at target offset `t` reads first (a transaction marker's offset reads the next)."""
        return next((x for x, _v in target if x >= t), target[-1][0] + 1)

    emitter = CheckpointEmitter(cfg, mirror)
    try:
        maps = {(src, 0): m}
        offsets = sorted(set(range(0, end + 1, 7)) | {end})
        got = {o: translate("lagging-g", {(src, 0): (o, "")}, maps, emitter.counter, emitter.counter.between)
               for o in offsets}
        wrong = {o: (got[o][0].downstream_offset if got[o] else None, expected(o)) for o in offsets
                 if not got[o] or reads_first(got[o][0].downstream_offset) != expected(o)}
        assert not wrong, f"translated / exact: {wrong}"
        figure("translation_time", f"translated {len(offsets)} offsets in {time.monotonic() - t0:.1f}s; "
               f"{len(m)} ranges held")
        # without counting across the dropped ranges a lagging group would repeat records: the holes are real
        plain_map = {o: translate("lagging-g", {(src, 0): (o, "")}, maps, emitter.counter) for o in offsets}
        assert sum(reads_first(plain_map[o][0].downstream_offset) != expected(o) for o in offsets) > len(offsets) // 3

        # a lagging group gets its checkpoint from the emitter itself, read from the compacted topic
        g = unique_name("lagging-g")
        commit_group(kafka_a.bootstrap, g, {(src, 0): 40})
        cps = emitter.run_once()
        assert [(cp.upstream_offset, reads_first(cp.downstream_offset)) for cp in cps[g]] == [(40, expected(40))]

        # the whole failover for a group further behind: it moves to the target and reads the rest there, once
        from sparkmirror.failover.run import failover, undo_all
        from sparkmirror_dev.testing import consume_as_group

        behind = unique_name("lagging-g")
        commit_group(kafka_a.bootstrap, behind, {(src, 0): 23})
        t1 = time.monotonic()
        doc = failover([cfg], mirror, lambda name: name == behind, timeout=30)
        took = time.monotonic() - t1
        assert doc["ok"] and [(r["sourceOffset"], r["action"]) for x in doc["groups"] for r in x["partitions"]] == \
            [(23, "committed")], doc
        assert consume_as_group(kafka_b.bootstrap, behind, dst, 1, value=bytes) == \
            {0: [source[o] for o in sorted(source) if o >= 23]}
        figure("compacted_failover", f"failover of a group behind the compacted history: {took:.1f} s from the "
               f"command to consumers able to move; it read the {sum(1 for o in source if o >= 23)} records it had "
               "not read, each once")
        undo_all([cfg], mirror)  # a drill: the mirror copies on below

        # the target's retention deletes the older records: their anchors are removed, the newest stays
        newest = m.records[-1]
        admin = AdminClient({"bootstrap.servers": kafka_b.bootstrap})  # held until the answer: the future needs it
        cut = TopicPartition(dst, 0, newest.target_first)
        admin.delete_records([cut])[cut].result(30)
        assert emitter.prune_anchors() == len({b for b in (record.anchor_block(r.source_first) for r in m.records)
                                               if b < record.anchor_block(newest.source_first)}) > 0
        assert emitter.prune_anchors() == 0  # once
        for _ in range(60):
            plain.produce(src, value=b"tick", partition=0)
            plain.flush(30)
            copy_lane(cfg, mirror, lane.index, list(lane.partitions), 0.2)
            now = read_progress(cfg.cluster("b").client_config(), cfg.progressTopic, "a", resource=cfg.resource)
            if now.maps[("a", src, 0)].records[0].source_first >= newest.source_first:
                break
        assert now.maps[("a", src, 0)].records[0].source_first >= newest.source_first
    finally:
        emitter.close()
    assert total_ranges.next_offset == end
