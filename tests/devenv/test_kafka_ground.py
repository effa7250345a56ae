"""The local Kafka clusters are real brokers: plain and transactional produce/consume on two at once."""
from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from sparkmirror_dev.kafka import KafkaCluster


def _consume_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed") -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, empty = [], 0
    while empty < 6:
        msgs = c.consume(500, timeout=0.5)
        empty = 0 if msgs else empty + 1
        for m in msgs:
            assert m.error() is None, m.error()
            out.append((m.partition(), m.key(), m.value(), m.headers()))
    c.close()
    return out


def test_produce_and_consume_on_two_clusters(kafka_a: KafkaCluster, kafka_b: KafkaCluster, topic) -> None:
    assert kafka_a.bootstrap != kafka_b.bootstrap
    for cluster in (kafka_a, kafka_b):
        t = topic(cluster, partitions=2)
        p = Producer({"bootstrap.servers": cluster.bootstrap})
        for i in range(20):
            p.produce(t, key=f"k{i}".encode(), value=f"{cluster.name}-{i}".encode(), partition=i % 2,
                      headers=[("h", b"v")])
        assert p.flush(10) == 0
        got = _consume_all(cluster.bootstrap, t, 2)
        assert sorted(v for _, _, v, _ in got) == sorted(f"{cluster.name}-{i}".encode() for i in range(20))
        assert all(h == [("h", b"v")] for *_, h in got)


def test_transactions_commit_and_abort(kafka_a: KafkaCluster, topic) -> None:
    t = topic(kafka_a, partitions=1)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(t, value=b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(t, value=b"aborted")
    p.flush(10)
    p.abort_transaction(30)
    assert [v for _, _, v, _ in _consume_all(kafka_a.bootstrap, t, 1)] == [b"committed"]
    assert [v for _, _, v, _ in _consume_all(kafka_a.bootstrap, t, 1, "read_uncommitted")] == [b"committed",
                                                                                              b"aborted"]
