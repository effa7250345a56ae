"""Consumer-group offset translation (driver side): MM2 checkpoints and, optionally, group offset sync.

For every consumer group of the source that the mirror's `groups`/`groupsExclude` select, the committed
source offsets of mirrored partitions are translated into target offsets with the progress topic's dense
offset map (`translate_offset`): a group committed at source offset `o` continues at the target offset of
the record that was `o`, or just past the end of the mapped range when `o` is past what has been mirrored
so far. This is exact, not MM2's approximate offset-syncs: a consumer that fails over to the target repeats
nothing and skips nothing. Inside a range whose source side has gaps (aborted records, transaction markers,
records filtered as loops) the position is found by counting that range's records on the source
(`SourceCounter`); a range is one transaction, so this reads at most ~100 ms of data.

Each translation is written as an MM2 `Checkpoint` record (`mm2formats`) to `<source>.checkpoints.internal`
on the target (compacted, one partition, created if missing), so Java's `RemoteClusterUtils.translateOffsets`
works against our mirror. With `syncGroupOffsets`, translated offsets are also committed to the same group
on the target, like MM2's `sync.group.offsets.enabled`: only for groups with no active members on the
target, and never moving a group's committed offset backwards.

Pure parts: `GroupFilter`, `translate()`, `offsets_to_sync()`. I/O: `ProgressTail` (incremental
read_committed reader of the progress topic), `CheckpointEmitter`.
"""
from __future__ import annotations

import logging
import re
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

from .resource.flowgroup import FlowGroupConfig, Mirror
from .mm2formats import Checkpoint
from .replication import RecordStamper, policy_for
from .progress import OffsetMap, ProgressRecord, ProgressState

log = logging.getLogger(__name__)

MM2_INTERNAL_TOPIC_CONFIG = {"cleanup.policy": "compact"}
MAX_HISTORY = 200_000  # progress records kept per source partition for translation (oldest dropped first)


# ------------------------------------------------------------------------------------------------- pure

@dataclass(frozen=True)
class GroupFilter:
    """MM2's DefaultGroupFilter: whole-name match of `groups` (default `.*`) minus `groupsExclude`."""

    include: str | None = None
    exclude: str | None = None

    def __post_init__(self) -> None:
        for field, rx in (("groups", self.include), ("groupsExclude", self.exclude)):
            if rx is not None:
                try:
                    re.compile(rx)
                except re.error as e:
                    raise ValueError(f"{field}: invalid regex {rx!r}: {e}") from e

    @classmethod
    def of(cls, mirror: Mirror) -> "GroupFilter":
        return cls(mirror.groups, mirror.groupsExclude)

    def matches(self, group: str) -> bool:
        if self.exclude and re.fullmatch(self.exclude, group):
            return False
        return re.fullmatch(self.include or ".*", group) is not None


Inside = Callable[[ProgressRecord, int], "int | None"]
"""inside(range, o): how many records of `range` the copier wrote for source offsets below `o` (None: unknown)."""


def translate_offset(m: OffsetMap, offset: int, inside: Inside | None = None) -> int | None:
    """The target offset a consumer at source `offset` (next to read) continues from, exactly.

    At range boundaries and in gap-free ranges this is arithmetic. In a range with gaps on the source side
    (aborted records, transaction markers, records filtered as loops) the position inside the range is
    `target_first + inside(range, offset)`; the copier writes each range in one transaction, so its target
    offsets are consecutive. Without `inside`, or if it cannot tell, the range's first target offset (a few
    records repeated, none skipped). None when `offset` is older than the history held.
    """
    if not m.records:
        return None
    firsts = [r.source_first for r in m.records]
    i = bisect_right(firsts, offset) - 1
    if i < 0:
        return None
    r = m.records[i]
    if offset > r.source_last or r.count == 0:
        # past the range, or a range that wrote nothing (all skipped): the next record the target gets
        return _target_next(m, i)
    if offset == r.source_first:
        return r.target_first
    if r.source_last - r.source_first + 1 == r.count == r.target_last - r.target_first + 1:
        return r.target_first + (offset - r.source_first)
    if inside is not None and r.target_last - r.target_first + 1 == r.count:
        n = inside(r, offset)
        if n is not None and 0 <= n <= r.count:
            return r.target_first + n
    return r.target_first


def _target_next(m: OffsetMap, i: int) -> int | None:
    """The target offset after the last record written by ranges up to `i` (None: none wrote any yet)."""
    for r in reversed(m.records[: i + 1]):
        if r.count > 0 and r.target_last >= 0:
            return r.target_last + 1
    return None


def translate(group: str, committed: Mapping[tuple[str, int], tuple[int, str]],
              maps: Mapping[tuple[str, int], OffsetMap], inside: Inside | None = None) -> list[Checkpoint]:
    """Checkpoints for one group: committed[(source topic, partition)] = (offset, metadata).

    Partitions with no progress yet (nothing mirrored) or whose offset is older than the history held are
    left out: no checkpoint is better than a wrong one.
    """
    out = []
    for (topic, partition), (offset, metadata) in sorted(committed.items()):
        if offset < 0:
            continue
        m = maps.get((topic, partition))
        if m is None or not m.records:
            continue
        downstream = translate_offset(m, offset, inside)
        if downstream is None:
            continue
        out.append(Checkpoint(group, m.records[-1].target_topic, partition, offset, downstream, metadata or ""))
    return out


def offsets_to_sync(checkpoints: Iterable[Checkpoint], target_committed: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Target (topic, partition) -> offset to commit: new partitions, or offsets ahead of the group's own."""
    out = {}
    for cp in checkpoints:
        have = target_committed.get((cp.topic, cp.partition), -1)
        if cp.downstream_offset > have:
            out[(cp.topic, cp.partition)] = cp.downstream_offset
    return out


# ------------------------------------------------------------------------------------------------- I/O

class ProgressTail:
    """Follows the progress topic on the target (read_committed) and keeps the offset maps of one source."""

    def __init__(self, target_conf: dict[str, str], topic: str, source_cluster: str) -> None:
        self.topic, self.source_cluster = topic, source_cluster
        self.state = ProgressState()
        self.totals: dict[tuple[str, int], int] = {}  # records mirrored per source partition, as read so far
        self.consumer = Consumer({**target_conf, "group.id": f"sparkmirror-progress-tail-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        self._assigned: set[int] = set()

    def _assign_new_partitions(self, timeout: float) -> bool:
        md = self.consumer.list_topics(self.topic, timeout=timeout)
        t = md.topics.get(self.topic)
        if t is None or t.error is not None:
            return False  # not created yet: the first lane creates it
        new = [TopicPartition(self.topic, p, -2) for p in t.partitions if p not in self._assigned]  # -2: beginning
        if new:
            self.consumer.incremental_assign(new)
            self._assigned.update(tp.partition for tp in new)
        return bool(new)

    def poll(self, timeout: float = 10.0) -> int:
        """Read what was committed since the last call until the topic goes quiet; returns records read."""
        fresh = self._assign_new_partitions(timeout)
        if not self._assigned:
            return 0
        n, eof, deadline = 0, set(), time.monotonic() + timeout
        while time.monotonic() < deadline and eof != self._assigned:
            msgs = self.consumer.consume(num_messages=10000, timeout=2.0 if fresh else 0.3)
            fresh = False
            if not msgs:
                break  # caught up: nothing more committed right now
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    raise KafkaException(err)
                eof.discard(msg.partition())
                if msg.value() is None:
                    continue
                rec = ProgressRecord.decode(msg.key(), msg.value())
                if rec.source_cluster == self.source_cluster:
                    self._add(rec)
                    n += 1
        return n

    def _add(self, rec: ProgressRecord) -> None:
        k = (rec.source_cluster, rec.source_topic, rec.partition)
        m = self.state.maps.get(k)
        if m is not None and m.records and rec.source_first < m.records[-1].source_first:
            # progress reset (e.g. the topic was recreated and mirroring restarted): keep the new history only
            m.records.clear()
            self.totals[(rec.source_topic, rec.partition)] = 0
        self.state.add(rec)
        tp = (rec.source_topic, rec.partition)
        self.totals[tp] = self.totals.get(tp, 0) + rec.count
        m = self.state.maps[k]
        if len(m.records) > MAX_HISTORY:
            del m.records[: len(m.records) - MAX_HISTORY]

    def maps(self) -> dict[tuple[str, int], OffsetMap]:
        return {(t, p): m for (c, t, p), m in self.state.maps.items() if c == self.source_cluster}

    def latest(self) -> dict[tuple[str, int], ProgressRecord]:
        return {(t, p): r for (c, t, p), r in self.state.latest.items() if c == self.source_cluster}

    def close(self) -> None:
        self.consumer.close()


def ensure_topic(admin: AdminClient, topic: str, config: dict[str, str], replication_factor: int = -1,
                 timeout: float = 15.0) -> None:
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    fut = admin.create_topics([NewTopic(topic, 1, replication_factor, config=config)],
                              operation_timeout=timeout)[topic]
    try:
        fut.result(timeout=timeout)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class SourceCounter:
    """`Inside` for gapped ranges: counts, on the source, the records the copier wrote below an offset.

    Reads the range read_committed from its first offset (ranges are one transaction: ~100 ms of data) and
    counts the records the copier copies (all of them, or under the identity policy those the provenance
    header lets through). Results are cached per (range, offset): groups usually sit still.
    """

    def __init__(self, source_conf: dict[str, str], stamper: RecordStamper | None = None, timeout: float = 15.0) -> None:
        self.stamper, self.timeout = stamper, timeout
        self.consumer = Consumer({**source_conf, "group.id": f"sparkmirror-ckpt-count-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": True})
        self._cache: dict[tuple, int | None] = {}

    def __call__(self, r: ProgressRecord, offset: int) -> int | None:
        k = (r.source_topic, r.partition, r.source_first, r.source_last, offset)
        if k not in self._cache:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[k] = self._count(r, offset)
        return self._cache[k]

    def _count(self, r: ProgressRecord, offset: int) -> int | None:
        self.consumer.assign([TopicPartition(r.source_topic, r.partition, r.source_first)])
        n, deadline = 0, time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline:
                for m in self.consumer.consume(num_messages=1000, timeout=0.5):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            return None  # the range is no longer (or not yet) all there
                        raise KafkaException(m.error())
                    if m.offset() >= offset:
                        return n
                    if self.stamper is None or self.stamper.should_copy(m.headers()):
                        n += 1
            return None
        except KafkaException as e:
            log.warning("counting %s[%d] from %d on the source failed: %s", r.source_topic, r.partition,
                        r.source_first, e)
            return None
        finally:
            self.consumer.unassign()

    def close(self) -> None:
        self.consumer.close()


class CheckpointEmitter:
    """One mirror's checkpoints (and group offset sync); call `run_once()` every emitCheckpointsIntervalSeconds."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0,
                 tail: ProgressTail | None = None) -> None:
        """tail: a ProgressTail of this mirror to share (the driver's MirrorMonitor has one); else its own."""
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.policy = policy_for(mirror)
        self.groups = GroupFilter.of(mirror)
        self.topic = self.policy.checkpoints_topic(mirror.source)
        target_conf = config.cluster(mirror.target).client_config()
        self.source_admin = AdminClient(config.cluster(mirror.source).client_config())
        self.target_admin = AdminClient(target_conf)
        self.producer = Producer({**target_conf, "enable.idempotence": True, "linger.ms": 5})
        self._own_tail = tail is None
        self.tail = ProgressTail(target_conf, config.progressTopic, mirror.source) if tail is None else tail
        stamper = RecordStamper.of(self.policy, mirror.source, mirror.target)
        self.counter = SourceCounter(config.cluster(mirror.source).client_config(),
                                     stamper if stamper.uses_provenance else None, timeout)
        self._emitted: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._topic_ready = False
        self.last: dict[str, list[Checkpoint]] = {}

    def source_groups(self) -> list[str]:
        res = self.source_admin.list_consumer_groups(request_timeout=self.timeout).result(timeout=self.timeout)
        return sorted(g.group_id for g in res.valid if self.groups.matches(g.group_id))

    def _committed(self, admin: AdminClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=self.timeout)[group]
        try:
            res = fut.result(timeout=self.timeout)
        except KafkaException as e:
            if e.args[0].code() in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.COORDINATOR_NOT_AVAILABLE):
                return {}
            raise
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in res.topic_partitions
                if tp.error is None}

    def translate_all(self) -> dict[str, list[Checkpoint]]:
        """group -> checkpoints, from the source's committed offsets and the progress read so far."""
        self.tail.poll(self.timeout)
        maps = self.tail.maps()
        out = {}
        for group in self.source_groups():
            committed = {k: v for k, v in self._committed(self.source_admin, group).items() if k in maps}
            cps = translate(group, committed, maps, self.counter)
            if cps:
                out[group] = cps
        return out

    def emit(self, checkpoints: Mapping[str, list[Checkpoint]]) -> int:
        if not self._topic_ready:
            ensure_topic(self.target_admin, self.topic, MM2_INTERNAL_TOPIC_CONFIG, self.mirror.replicationFactor,
                         self.timeout)
            self._topic_ready = True
        n = 0
        for cps in checkpoints.values():
            for cp in cps:
                k = (cp.group, cp.topic, cp.partition)
                if self._emitted.get(k) == (cp.upstream_offset, cp.downstream_offset):
                    continue  # unchanged since the last emission (MM2 emits only changes too)
                self.producer.produce(self.topic, key=cp.key(), value=cp.value(), partition=0)
                self._emitted[k] = (cp.upstream_offset, cp.downstream_offset)
                n += 1
        left = self.producer.flush(self.timeout)
        if left:
            raise RuntimeError(f"mirrors[{self.mirror.name}]: {left} checkpoints not delivered to {self.topic!r}")
        return n

    def _inactive_on_target(self, groups: list[str]) -> set[str]:
        if not groups:
            return set()
        out = set()
        for g, fut in self.target_admin.describe_consumer_groups(groups, request_timeout=self.timeout).items():
            try:
                d = fut.result(timeout=self.timeout)
            except KafkaException as e:
                if e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                    out.add(g)
                    continue
                raise
            if d.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN) \
                    and not d.members:
                out.add(g)
        return out

    def sync_group_offsets(self, checkpoints: Mapping[str, list[Checkpoint]]) -> dict[str, dict[tuple[str, int], int]]:
        """Commit translated offsets to groups idle on the target; returns what was committed per group."""
        done = {}
        for group in sorted(self._inactive_on_target(sorted(checkpoints))):
            have = {k: off for k, (off, _md) in self._committed(self.target_admin, group).items()}
            todo = offsets_to_sync(checkpoints[group], have)
            if not todo:
                continue
            req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(todo.items())])
            res = self.target_admin.alter_consumer_group_offsets([req], request_timeout=self.timeout)[group]
            try:
                res.result(timeout=self.timeout)
            except KafkaException as e:
                # a consumer joined the group meanwhile: MM2 skips the group this round too
                log.warning("mirrors[%s]: syncing offsets of group %s on the target failed: %s",
                            self.mirror.name, group, e)
                continue
            done[group] = todo
        return done

    def run_once(self, sync_offsets: bool | None = None) -> dict[str, list[Checkpoint]]:
        cps = self.translate_all()
        if self.mirror.emitCheckpoints:  # emit.checkpoints.enabled=false: translated for the offset sync only
            self.emit(cps)
        if self.mirror.syncGroupOffsets if sync_offsets is None else sync_offsets:
            self.sync_group_offsets(cps)
        self.last = cps
        return cps

    def close(self) -> None:
        self.producer.flush(self.timeout)
        if self._own_tail:
            self.tail.close()
        self.counter.close()
