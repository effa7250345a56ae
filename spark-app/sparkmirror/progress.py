"""The progress store: where mirroring stands, kept on the *target* cluster in a compacted topic.

Each transaction of a lane writes, beside the mirrored records, one progress record per source partition it
copied: the next source offset to read, the source range copied and the target range it became. Because the
records and their progress commit atomically, a read_committed reader of this topic knows exactly what the
target holds; the Spark checkpoint is not needed for correctness.

Format (versioned, JSON):
  key   = JSON ["<source cluster alias>", "<source topic>", <partition>]    (compaction keeps the latest)
  value = {"v": 1, "next": n, "src": [first, last], "tgt": [first, last], "tgtTopic": "...", "count": k,
           "commitMs": t, "gen": worker generation, "fg": flow group, "mirror": "...", "lane": i}
Ranges are inclusive offsets; `count` is how many records the range held (ranges can contain gaps: source
transaction markers, aborted records; target transaction markers). Until compaction removes older values,
the values of one key form the *dense offset map* used for exact consumer-offset translation.

This module is the one owner of that topic: the record format, one way to fold what is read into a
`ProgressState` (used by the bounded `read_progress` and by the follower `ProgressTail`), the offset map and
its exact translation, and lag (`partition_lag`, with `LagCounter` for the transaction-marker case) for the
operator's status, the driver's metrics and the run display alike.
"""
from __future__ import annotations

import json
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

PROGRESS_FORMAT_VERSION = 1

# Compacted, and compacted soon enough that reading it back at lane start stays cheap.
PROGRESS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.1",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": str(24 * 3600 * 1000),
}


def progress_key(source_cluster: str, topic: str, partition: int) -> bytes:
    """Deterministic bytes, so compaction keeps exactly one latest value per source partition."""
    return json.dumps([source_cluster, topic, partition], separators=(",", ":")).encode()


@dataclass(frozen=True)
class ProgressRecord:
    """What one transaction committed for one source partition."""

    source_cluster: str
    source_topic: str
    partition: int
    next_offset: int
    source_first: int
    source_last: int
    target_topic: str
    target_first: int
    target_last: int
    count: int
    commit_ms: int
    generation: int
    flow_group: str = ""
    mirror: str = ""
    lane: int = -1

    def key(self) -> bytes:
        return progress_key(self.source_cluster, self.source_topic, self.partition)

    def value(self) -> bytes:
        return json.dumps({
            "v": PROGRESS_FORMAT_VERSION, "next": self.next_offset,
            "src": [self.source_first, self.source_last], "tgt": [self.target_first, self.target_last],
            "tgtTopic": self.target_topic, "count": self.count, "commitMs": self.commit_ms,
            "gen": self.generation, "fg": self.flow_group, "mirror": self.mirror, "lane": self.lane,
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "ProgressRecord":
        cluster, topic, partition = json.loads(key)
        v = json.loads(value)
        if v.get("v") != PROGRESS_FORMAT_VERSION:
            raise ValueError(f"progress record for {cluster}/{topic}/{partition} has format version "
                             f"{v.get('v')!r}; this job reads version {PROGRESS_FORMAT_VERSION}")
        return cls(cluster, topic, int(partition), int(v["next"]), int(v["src"][0]), int(v["src"][1]),
                   v["tgtTopic"], int(v["tgt"][0]), int(v["tgt"][1]), int(v["count"]), int(v["commitMs"]),
                   int(v["gen"]), v.get("fg", ""), v.get("mirror", ""), int(v.get("lane", -1)))


Inside = Callable[[ProgressRecord, int], "int | None"]
"""inside(range, o): how many records of `range` the copier wrote for source offsets below `o` (None: unknown)."""

MAX_HISTORY = 200_000  # progress records kept per source partition for translation (oldest dropped first)


@dataclass
class OffsetMap:
    """Source range -> target range history of one source partition, in commit order."""

    records: list[ProgressRecord] = field(default_factory=list)

    def translate(self, offset: int, inside: Inside | None = None) -> int | None:
        """The target offset a consumer at source `offset` (next to read) continues from, exactly.

        At range boundaries and in gap-free ranges this is arithmetic. In a range with gaps on the source side
        (aborted records, transaction markers, records filtered as loops) the position inside the range is
        `target_first + inside(range, offset)`; the copier writes each range in one transaction, so its target
        offsets are consecutive. Without `inside`, or if it cannot tell, the range's first target offset (a few
        records repeated, none skipped). A range that wrote nothing maps to the next record the target gets.
        None when `offset` is older than the history held, or nothing was written yet.
        """
        if not self.records:
            return None
        i = bisect_right([r.source_first for r in self.records], offset) - 1
        if i < 0:
            return None
        r = self.records[i]
        if offset > r.source_last or r.count == 0:
            return self._target_next(i)
        if offset == r.source_first:
            return r.target_first
        if r.source_last - r.source_first + 1 == r.count == r.target_last - r.target_first + 1:
            return r.target_first + (offset - r.source_first)
        if inside is not None and r.target_last - r.target_first + 1 == r.count:
            n = inside(r, offset)
            if n is not None and 0 <= n <= r.count:
                return r.target_first + n
        return r.target_first

    def _target_next(self, i: int) -> int | None:
        """The target offset after the last record written by ranges up to `i` (None: none wrote any yet)."""
        for r in reversed(self.records[: i + 1]):
            if r.count > 0 and r.target_last >= 0:
                return r.target_last + 1
        return None


Key = tuple[str, str, int]  # (source cluster, source topic, partition)


@dataclass
class ProgressState:
    """The progress topic folded: latest record, offset map and records mirrored per source partition.

    One set of rules for every reader: a tombstone resets its key (progress deliberately dropped); a record
    whose source range starts before the previous one's starts a new history (the topic was recreated and
    mirroring restarted); history is bounded by `max_history` records per partition.
    """

    latest: dict[Key, ProgressRecord] = field(default_factory=dict)
    maps: dict[Key, OffsetMap] = field(default_factory=dict)
    totals: dict[Key, int] = field(default_factory=dict)
    max_history: int = MAX_HISTORY

    def add(self, rec: ProgressRecord) -> None:
        k = (rec.source_cluster, rec.source_topic, rec.partition)
        m = self.maps.setdefault(k, OffsetMap())
        if m.records and rec.source_first < m.records[-1].source_first:
            m.records.clear()
            self.totals[k] = 0
        m.records.append(rec)
        if len(m.records) > self.max_history:
            del m.records[: len(m.records) - self.max_history]
        self.latest[k] = rec
        self.totals[k] = self.totals.get(k, 0) + rec.count

    def drop(self, k: Key) -> None:
        for d in (self.latest, self.maps, self.totals):
            d.pop(k, None)

    def apply(self, key: bytes, value: bytes | None, source_cluster: str | None = None,
              wanted: set[tuple[str, int]] | None = None) -> bool:
        """Fold one message of the topic in (filtered by source cluster and (topic, partition)); True if kept."""
        if value is None:
            c, t, part = json.loads(key)
            k = (c, t, int(part))
        else:
            rec = ProgressRecord.decode(key, value)
            k = (rec.source_cluster, rec.source_topic, rec.partition)
        if (source_cluster is not None and k[0] != source_cluster) or (wanted is not None and k[1:] not in wanted):
            return False
        if value is None:
            self.drop(k)
        else:
            self.add(rec)
        return True

    def resume_offsets(self, source_cluster: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> next source offset to copy, for one source cluster."""
        return {(t, p): r.next_offset for (c, t, p), r in self.latest.items() if c == source_cluster}

    def of_source(self, source_cluster: str, what: dict) -> dict:
        """`what` (latest, maps or totals) of one source cluster, keyed (topic, partition)."""
        return {(t, p): v for (c, t, p), v in what.items() if c == source_cluster}


def ensure_progress_topic(target_conf: dict[str, str], topic: str, partitions: int = 1,
                          replication_factor: int = -1, timeout: float = 30.0) -> None:
    """Create the compacted progress topic if missing; refuse one that exists but is not compacted."""
    admin = AdminClient(target_conf)
    md = admin.list_topics(timeout=timeout)
    if topic not in md.topics:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                                            config=PROGRESS_TOPIC_CONFIG)], operation_timeout=timeout)[topic]
        try:
            fut.result(timeout=timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        return
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = admin.describe_configs([res])[res].result(timeout=timeout)
    policy = cfg["cleanup.policy"].value or ""
    if "compact" not in policy:
        raise RuntimeError(f"progress topic {topic!r} exists with cleanup.policy={policy}; it must be compacted "
                           "(cleanup.policy=compact) or progress would be deleted by retention")


def read_progress(target_conf: dict[str, str], topic: str, source_cluster: str | None = None,
                  source_partitions: Iterable[tuple[str, int]] | None = None,
                  timeout: float = 60.0) -> ProgressState:
    """Read the progress topic read_committed up to its end into a ProgressState.

    Call it only after `init_transactions()` of the lane that will use the result: that aborts the lane's own
    open transaction, so what is read here cannot change under the lane any more. Filters by source cluster
    and, if given, by (topic, partition).
    """
    wanted = set(source_partitions) if source_partitions is not None else None
    consumer = Consumer({**target_conf, "group.id": f"sparkmirror-progress-reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 16 * 1024 * 1024})
    state = ProgressState()
    try:
        deadline = time.monotonic() + min(timeout, 15.0)
        while True:  # a just-created topic takes a moment to appear in metadata
            tmd = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if (tmd is not None and tmd.error is None) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if tmd is None or tmd.error is not None:
            raise RuntimeError(f"progress topic {topic!r} not found on the target: "
                               f"{tmd.error if tmd is not None else 'missing'}")
        # Read up to the end offsets seen now. Not "until EOF": while other lanes keep committing small
        # transactions, a read_committed consumer never gets PARTITION_EOF (the open transaction always sits
        # at the end); everything below `ends` is decided once those transactions resolve, and this lane's
        # own open transaction was already aborted by its init_transactions().
        ends: dict[int, int] = {}
        assign = []
        for p in tmd.partitions:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if hi > lo:
                ends[p] = hi
                assign.append(TopicPartition(topic, p, lo))
        if not assign:
            return state
        consumer.assign(assign)
        todo = set(ends)
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading progress topic {topic!r} did not reach its end in {timeout:.0f}s")
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
            if not todo:
                break
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(msg.partition())
                        continue
                    raise KafkaException(err)
                if msg.offset() >= ends.get(msg.partition(), 0):
                    continue  # committed after this read began: the next read sees it
                state.apply(msg.key(), msg.value(), source_cluster, wanted)
    finally:
        consumer.close()
    return state


class ProgressTail:
    """Follows the progress topic on the target (read_committed) and keeps the state of one source cluster."""

    def __init__(self, target_conf: dict[str, str], topic: str, source_cluster: str) -> None:
        self.topic, self.source_cluster = topic, source_cluster
        self.state = ProgressState()
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
                n += self.state.apply(msg.key(), msg.value(), self.source_cluster)
        return n

    def maps(self) -> dict[tuple[str, int], OffsetMap]:
        return self.state.of_source(self.source_cluster, self.state.maps)

    def latest(self) -> dict[tuple[str, int], ProgressRecord]:
        return self.state.of_source(self.source_cluster, self.state.latest)

    @property
    def totals(self) -> dict[tuple[str, int], int]:
        """Records mirrored per source partition, as read so far."""
        return self.state.of_source(self.source_cluster, self.state.totals)

    def close(self) -> None:
        self.consumer.close()


# ------------------------------------------------------------------------------------------------- lag

EXACT_LAG_BELOW = 1000  # offset lags this small are counted record by record (`LagCounter`)


def partition_lag(end_offset: int, next_offset: int | None, start_offset: int = 0,
                  counted: int | None = None) -> int:
    """Records left to mirror in one source partition: the one lag everybody reports.

    `end - position` in offsets, where the position is the next offset the progress topic says to copy (the
    partition's start while nothing is committed). Offsets also count transaction markers and aborted
    records: a source that is itself a transactional target (the second hop of a pipe, identity
    active/active) ends with a commit marker, so `end - next` stays >= 1 with nothing left to copy. When
    `counted` (the read_committed records from the position to the end, see `LagCounter`) is known, it is
    the answer.
    """
    if counted is not None:
        return counted
    position = start_offset if next_offset is None else max(next_offset, start_offset)
    return max(0, end_offset - position)


def lag_needs_count(end_offset: int, next_offset: int | None, start_offset: int = 0) -> bool:
    """Whether the offset lag is small enough to count the records behind it exactly (and worth it)."""
    return 0 < partition_lag(end_offset, next_offset, start_offset) <= EXACT_LAG_BELOW


class LagCounter:
    """Counts, read_committed on the source, the records between a position and the end of partitions.

    Results are cached per (position, end): a mirror that is caught up asks the same question every poll.
    """

    def __init__(self, source_conf: dict[str, str], timeout: float = 5.0) -> None:
        self.source_conf, self.timeout = source_conf, timeout
        self._consumer: Consumer | None = None
        self._cache: dict[tuple[str, int], tuple[int, int, int]] = {}  # tp -> (position, end, records)

    def count(self, todo: dict[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> records left, for the partitions of `todo` ((position, end)) read to the end."""
        out = {tp: c[2] for tp, (pos, end) in todo.items() if (c := self._cache.get(tp)) and c[:2] == (pos, end)}
        todo = {tp: v for tp, v in todo.items() if tp not in out}
        if not todo:
            return out
        if self._consumer is None:
            self._consumer = Consumer({**self.source_conf, "group.id": f"sparkmirror-lag-{uuid.uuid4().hex[:8]}",
                                       "enable.auto.commit": False, "isolation.level": "read_committed",
                                       "enable.partition.eof": True})
        c = self._consumer
        c.assign([TopicPartition(t, p, pos) for (t, p), (pos, _end) in todo.items()])
        counts = {tp: 0 for tp in todo}
        open_ = set(todo)
        deadline = time.monotonic() + self.timeout
        try:
            while open_ and time.monotonic() < deadline:
                for m in c.consume(num_messages=EXACT_LAG_BELOW, timeout=0.5):
                    tp = (m.topic(), m.partition())
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            open_.discard(tp)
                        continue
                    if tp in open_ and m.offset() < todo[tp][1]:
                        counts[tp] += 1
                    if m.offset() >= todo[tp][1] - 1:
                        open_.discard(tp)
        finally:
            c.unassign()
        for tp in set(todo) - open_:  # only partitions read to their end are exact
            out[tp] = counts[tp]
            self._cache[tp] = (*todo[tp], counts[tp])
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
