"""Helpers the tests (and the benchmark) share for giving each test its own topics and namespaces."""
from __future__ import annotations

import itertools
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic

_counter = itertools.count()


def _watermarks(consumer, tp) -> tuple[int, int]:
    """(low, high) of a partition, asked again while its leader is still being elected (a topic just made) or
    moved (librdkafka does not flag NOT_LEADER_FOR_PARTITION retriable here; a loaded CI broker moved one)."""
    from confluent_kafka import KafkaError, KafkaException

    moving = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
    deadline = time.monotonic() + 30
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=30)
        except KafkaException as e:
            if not (e.args[0].retriable() or e.args[0].code() in moving) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def unique_name(prefix: str) -> str:
    """A name no other test or run uses: prefix, pid-local counter and a random tail, Kafka- and k8s-safe."""
    prefix = re.sub(r"[^a-z0-9-]", "-", prefix.lower()).strip("-")[:30] or "t"
    return f"{prefix}-{os.getpid() % 10000}-{next(_counter)}-{uuid.uuid4().hex[:5]}"


def open_transactions(bootstrap: str, topic: str, partitions: int,
                      admin: AdminClient | None = None) -> dict[int, int]:
    """partition -> offsets between the last stable offset and the end: >0 while a transaction is open there
    (read_committed consumers of that partition are held back until it ends). Pass `admin` to poll quickly."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = admin or AdminClient({"bootstrap.servers": bootstrap})

    def ends(level) -> dict[int, int]:
        res = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                 isolation_level=level, request_timeout=30)
        return {tp.partition: f.result(timeout=30).offset for tp, f in res.items()}

    hw, lso = ends(IsolationLevel.READ_UNCOMMITTED), ends(IsolationLevel.READ_COMMITTED)
    return {p: hw[p] - lso[p] for p in range(partitions) if hw[p] != lso[p]}


def create_topic(bootstrap: str, name: str, partitions: int = 3, config: dict[str, str] | None = None,
                 timeout: float = 30.0, replication_factor: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                        config=config or {})], operation_timeout=timeout)[name]
    fut.result(timeout=timeout)
    return name


def recreate_topic(bootstrap: str, name: str, partitions: int = 3, timeout: float = 30.0) -> str:
    """Delete a topic and create it again under its name (a new topic id); deletion is asynchronous in KRaft."""
    import time

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the deletion answers
    admin.delete_topics([name])[name].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return create_topic(bootstrap, name, partitions)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass(frozen=True)
class Rec:
    """A record as the tests compare it: everything mirroring must keep, nothing it may change."""

    key: bytes | None
    value: bytes | None
    headers: tuple | None
    timestamp: int
    offset: int


def iter_records(bootstrap: str, topic: str, timeout: float = 60.0, isolation: str = "read_committed",
                 partitions: list[int] | None = None):
    """Every message of every partition, up to the end offsets as they were when called (KeyError: no topic).
    `partitions`, when given, receives the topic's partition numbers before the first message."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
        if md.error is not None:
            raise KeyError(topic)
        if partitions is not None:
            partitions.extend(md.partitions)
        ends: dict[int, int] = {}  # the end offsets when called: a topic still written to never shows EOF
        assign = []
        for p in md.partitions:
            lo, hi = _watermarks(c, TopicPartition(topic, p))
            if hi > lo:
                ends[p] = hi
                assign.append(TopicPartition(topic, p, lo))
        if assign:
            c.assign(assign)
        todo = set(ends)
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        todo.discard(m.partition())
                        continue
                    raise KafkaException(m.error())
                if m.offset() < ends[m.partition()]:
                    yield m
                if m.offset() >= ends[m.partition()] - 1:
                    todo.discard(m.partition())
            if todo:  # past the end by control records (transaction markers) or aborted records
                for tp in c.position([TopicPartition(topic, p) for p in todo]):
                    if tp.offset >= ends[tp.partition]:
                        todo.discard(tp.partition)
        assert not todo, f"reading {topic} did not reach the end of partitions {todo}"
    finally:
        c.close()


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0, isolation: str = "read_committed"
               ) -> dict[int, list[Rec]]:
    """Every record of every partition, up to the end offsets as they were when called."""
    parts: list[int] = []
    out: dict[int, list[Rec]] = {}
    try:
        for m in iter_records(bootstrap, topic, timeout, isolation, parts):
            h = m.headers()
            out.setdefault(m.partition(), []).append(Rec(m.key(), m.value(), tuple(h) if h is not None else None,
                                                         m.timestamp()[1], m.offset()))
    except KeyError:
        return {}  # no such topic (yet)
    return {p: out.get(p, []) for p in sorted(parts)}


def count_records(bootstrap: str, topic: str, timeout: float = 60.0) -> int:
    """How many records a read_committed consumer reads to the end; 0 while the topic does not exist or has no
    leader yet."""
    try:
        return sum(1 for _ in iter_records(bootstrap, topic, timeout))
    except KeyError:
        return 0
    except KafkaException as e:  # a just-created topic without a leader yet: nothing readable so far
        if e.args and e.args[0].retriable() or e.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION:
            return 0
        raise


def produce_waiting(producer: Producer, topic: str, **record) -> None:
    """produce(), waiting while the client's queue is full (a preload faster than the broker takes it)."""
    while True:
        try:
            producer.produce(topic, **record)
            return
        except BufferError:
            producer.poll(0.05)


def produce_numbered(bootstrap: str, topic: str, partitions: int, start: int, count: int,
                     extra: dict | None = None) -> None:
    """Records whose value is b'<partition>:<sequence>' with sequences start..start+count-1 per partition."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **(extra or {})})
    for seq in range(start, start + count):
        for part in range(partitions):
            p.produce(topic, key=str(seq).encode(), value=f"{part}:{seq}".encode(), partition=part)
        if seq % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


class NumberedProducer(threading.Thread):
    """Writes b'<partition>:<seq>' to every partition of `topic` (`partitions` of them), `rate` sequences per
    second, until stopped; `sent` is then the number of sequences every partition got."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 200.0, partitions: int = 3,
                 config: dict | None = None,
                 record: Callable[[int, int], tuple[bytes | None, bytes | None, list | tuple | None]] | None = None
                 ) -> None:
        """record(partition, seq) -> (key, value, headers): what to write instead of the numbered default (a test
        whose records must carry more, e.g. JSON values and headers to transform)."""
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate, self.partitions = bootstrap, topic, rate, partitions
        self.config = config or {}  # producer settings on top of the defaults (e.g. to outlast a long outage)
        self.record = record or (lambda part, seq: (str(seq).encode(), f"{part}:{seq}".encode(), None))
        self.sent = 0
        self.errors: list = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "compression.type": "lz4", **self.config})
        seq = 0
        while not self._stop_evt.is_set():
            for part in range(self.partitions):
                key, value, headers = self.record(part, seq)
                p.produce(self.topic, key=key, value=value, headers=headers, partition=part,
                          on_delivery=lambda err, _m: err and self.errors.append(err))
            seq += 1
            if seq % 20 == 0:
                p.poll(0)
                time.sleep(20 / self.rate)
        assert p.flush(60) == 0
        self.sent = seq

    def stop(self) -> int:
        self._stop_evt.set()
        self.join(90)
        assert not self.errors, self.errors[:3]
        return self.sent


def numbered_counts(bootstrap: str, topic: str, partitions: int, sent: int) -> tuple[int, int]:
    """(missing, duplicated) sequence numbers over every partition of a topic written by NumberedProducer."""
    missing, dup, _ = numbered_audit(bootstrap, topic, partitions, sent)
    return missing, dup


def numbered_audit(bootstrap: str, topic: str, partitions: int, sent: int) -> tuple[int, int, int]:
    """(missing, duplicated, reordered) over every partition of a topic written by NumberedProducer (read_committed).
    Reordered counts the places where a sequence number, first seen, follows a higher one in its partition: the
    order the source wrote is the order a reader of the target must meet."""
    got = read_topic(bootstrap, topic)
    missing = dup = reordered = 0
    for part in range(partitions):
        seqs = [int(r.value.decode().split(":")[1]) for r in got.get(part, [])]
        missing += len(set(range(sent)) - set(seqs))
        dup += len(seqs) - len(set(seqs))
        first_seen = list(dict.fromkeys(seqs))
        reordered += sum(1 for a, b in zip(first_seen, first_seen[1:]) if b < a)
    return missing, dup, reordered


def check_numbered(bootstrap: str, topic: str, partitions: int, sent: int, exactly_once: bool = True) -> None:
    """Every sequence 0..sent-1 on every partition, in order; exactly once (or, at-least-once, none missing)."""
    got = read_topic(bootstrap, topic)
    for part in range(partitions):
        recs = got.get(part, [])
        seqs = [int(r.value.decode().split(":")[1]) for r in recs]
        assert all(r.value.decode().startswith(f"{part}:") for r in recs), f"partition {part} mixed up"
        if exactly_once:
            dupes = len(seqs) - len(set(seqs))
            assert seqs == list(range(sent)), (f"{topic} partition {part}: {len(seqs)} records for {sent} sequences, "
                                              f"{dupes} duplicates, missing {sorted(set(range(sent)) - set(seqs))[:10]}")
        else:
            assert set(seqs) == set(range(sent)), f"partition {part}: missing {sorted(set(range(sent)) - set(seqs))[:10]}"
            first_seen = list(dict.fromkeys(seqs))
            assert first_seen == list(range(sent)), f"partition {part}: out of order"


_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)


def commit_group(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], timeout: float = 60) -> None:
    """Commit (topic, partition) -> offset for `group`, as a consumer that read that far would.

    A broker just started is still loading its offsets partitions and answers NOT_COORDINATOR for a while
    (seen in CI): asked again until `timeout`, as a consumer would."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
                return
            except KafkaException as e:
                if e.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """`group`'s committed offsets: (topic, partition) -> offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer came: the future needs it
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def consume_as_group(bootstrap: str, group: str, topic: str, partitions: int,
                     value: Callable[[bytes], Any] = lambda v: int(v.decode().split(":")[1])) -> dict[int, list]:
    """What a consumer of `group` reads on `topic` from its committed offsets to the end, per partition: the
    sequence numbers of numbered records (or `value` of each record's value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True, "auto.offset.reset": "error"})
    out: dict[int, list] = {p: [] for p in range(partitions)}
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        assert all(tp.offset >= 0 for tp in committed), f"{group} has no committed offset on {committed}"
        c.assign(committed)
        todo = set(range(partitions))
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error():
                    todo.discard(m.partition())
                    continue
                out[m.partition()].append(value(m.value()))
        assert not todo, f"did not reach the end of {topic} partitions {todo}"
    finally:
        c.close()
    return out
