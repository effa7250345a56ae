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
"""
from __future__ import annotations

import json
import time
import uuid
from bisect import bisect_right
from collections.abc import Iterable
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


@dataclass
class OffsetMap:
    """Source range -> target range history of one source partition, in commit order."""

    records: list[ProgressRecord] = field(default_factory=list)

    def translate(self, source_offset: int) -> int | None:
        """The target offset a consumer at `source_offset` (next to read) should continue from.

        Exact at every commit boundary, and inside a range when both sides are gap-free (count equals the
        range lengths). Inside a range with gaps it returns the range's first target offset: repeats a few
        records, never skips one. None when the offset is older than the history still held.
        """
        if not self.records:
            return None
        firsts = [r.source_first for r in self.records]
        i = bisect_right(firsts, source_offset) - 1
        if i < 0:
            return None
        r = self.records[i]
        if source_offset > r.source_last:  # between ranges or past the last: the next target offset
            return r.target_last + 1
        dense = r.source_last - r.source_first + 1 == r.count == r.target_last - r.target_first + 1
        return r.target_first + (source_offset - r.source_first) if dense else r.target_first


@dataclass
class ProgressState:
    """The progress topic read back: latest record per source partition, and each partition's offset map."""

    latest: dict[tuple[str, str, int], ProgressRecord] = field(default_factory=dict)
    maps: dict[tuple[str, str, int], OffsetMap] = field(default_factory=dict)

    def add(self, rec: ProgressRecord) -> None:
        k = (rec.source_cluster, rec.source_topic, rec.partition)
        self.latest[k] = rec
        self.maps.setdefault(k, OffsetMap()).records.append(rec)

    def resume_offsets(self, source_cluster: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> next source offset to copy, for one source cluster."""
        return {(t, p): r.next_offset for (c, t, p), r in self.latest.items() if c == source_cluster}


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
                if msg.value() is None:  # a tombstone: progress deliberately reset for this key
                    c, t, part = json.loads(msg.key())
                    state.latest.pop((c, t, int(part)), None)
                    continue
                rec = ProgressRecord.decode(msg.key(), msg.value())
                if source_cluster is not None and rec.source_cluster != source_cluster:
                    continue
                if wanted is not None and (rec.source_topic, rec.partition) not in wanted:
                    continue
                state.add(rec)
    finally:
        consumer.close()
    return state
