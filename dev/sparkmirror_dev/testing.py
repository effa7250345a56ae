"""Helpers the tests (and the benchmark) share for giving each test its own topics and namespaces."""
from __future__ import annotations

import itertools
import os
import re
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """A name no other test or run uses: prefix, pid-local counter and a random tail, Kafka- and k8s-safe."""
    prefix = re.sub(r"[^a-z0-9-]", "-", prefix.lower()).strip("-")[:30] or "t"
    return f"{prefix}-{os.getpid() % 10000}-{next(_counter)}-{uuid.uuid4().hex[:5]}"


def create_topic(bootstrap: str, name: str, partitions: int = 3, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=timeout)[name]
    fut.result(timeout=timeout)
    return name


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
        todo = set()
        assign = []
        for p in md.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if hi > lo:
                todo.add(p)
                assign.append(TopicPartition(topic, p, lo))
        if assign:
            c.assign(assign)
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        todo.discard(m.partition())
                        continue
                    raise KafkaException(m.error())
                yield m
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
    """How many records a read_committed consumer reads to the end; 0 while the topic does not exist."""
    try:
        return sum(1 for _ in iter_records(bootstrap, topic, timeout))
    except KeyError:
        return 0


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
