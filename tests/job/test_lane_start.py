"""A fresh lane's resume offsets on a real broker, asked for all its partitions at once: a partition the
cluster does not know yet is asked for again (after a source outage, or added a moment ago), a partition that
does not exist is an error naming it."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from sparkmirror.copying.reader import new_consumer, next_batch
from sparkmirror.copying.start import offsets_held, offsets_unsettled

from .conftest import produce_numbered

pytestmark = pytest.mark.minutes(0.9)


def test_a_lane_takes_a_record_when_it_arrives_and_then_all_that_are_queued(kafka_a, topic) -> None:
    """next_batch: a batch consume() waits out its whole timeout unless the batch fills; the lane's read returns
    at the first record, with every record already queued behind it, in order."""
    from confluent_kafka import TopicPartition

    src = topic(kafka_a, 1)
    consumer = new_consumer({"bootstrap.servers": kafka_a.bootstrap}, f"{src}.lane")
    try:
        consumer.assign([TopicPartition(src, 0, 0)])
        assert next_batch(consumer, 100, 0.2) == []
        arrived = threading.Timer(1.0, produce_numbered, (kafka_a.bootstrap, src, 1, 0, 1))
        arrived.start()
        t0 = time.monotonic()
        first = next_batch(consumer, 100, 20.0)
        waited = time.monotonic() - t0
        arrived.join()
        assert [m.offset() for m in first] == [0] and waited < 10  # not the 20 s a batch consume() waits
        produce_numbered(kafka_a.bootstrap, src, 1, 1, 7)
        got: list[int] = []
        while len(got) < 7:
            batch = next_batch(consumer, 5, 5.0)
            assert batch and len(batch) <= 5
            got += [m.offset() for m in batch]
        assert got == list(range(1, 8))
    finally:
        consumer.close()


def test_a_partition_not_known_yet_is_asked_for_again(kafka_a, topic) -> None:
    src = topic(kafka_a, 1)
    conf = {"bootstrap.servers": kafka_a.bootstrap}
    produce_numbered(kafka_a.bootstrap, src, 1, 0, 5)
    assert offsets_held(conf, [(src, 0)]) == {(src, 0): (0, 5)}
    admin = AdminClient(conf)

    def grow() -> None:
        time.sleep(1.5)
        admin.create_partitions([NewPartitions(src, 2)])[src].result(30)
        produce_numbered(kafka_a.bootstrap, src, 2, 5, 3)  # 3 a partition

    grower = threading.Thread(target=grow)
    grower.start()
    t0 = time.monotonic()
    held = offsets_held(conf, [(src, 0), (src, 1)], timeout=30, sleep=0.2)
    grower.join()
    assert held[(src, 0)][0] == 0 and held[(src, 1)][0] == 0 and held[(src, 1)][1] in (0, 3)
    assert 1.0 < time.monotonic() - t0 < 25


def test_a_partition_that_does_not_exist_stays_an_error_naming_it(kafka_a, topic) -> None:
    src = topic(kafka_a, 1)
    t0 = time.monotonic()
    with pytest.raises(KafkaException, match=rf"(?i)source partition {src}/4 .*not known after 2 s"):
        offsets_held({"bootstrap.servers": kafka_a.bootstrap}, [(src, 0), (src, 4)], timeout=2, sleep=0.2)
    assert time.monotonic() - t0 < 10


def test_a_partition_without_a_leader_is_a_fault_to_wait_out(tmp_path) -> None:
    """A partition the cluster lists but nobody leads (its only replica's broker is down) is a fault the lane
    rides out (`Unreachable`), never an error that ends the mirror: the chaos campaign's source once had none
    for 31 s after all its brokers were back, and the lane ended the mirror with `_NOENT`."""
    from confluent_kafka.admin import NewTopic

    from sparkmirror.copying.errors import Unreachable, talking_to
    from sparkmirror_dev.kafka import ReplicatedKafkaCluster

    cluster = ReplicatedKafkaCluster("leaderless", tmp_path / "k").start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("solo", 1, 1)])["solo"].result(30)
        produce_numbered(cluster.bootstrap, "solo", 1, 0, 3)
        md = admin.list_topics("solo", timeout=30)
        port = md.brokers[md.topics["solo"].partitions[0].leader].port
        cluster.kill([i for i, n in enumerate(cluster.nodes) if n.port == port][0])
        until = time.monotonic() + 90  # the controller fences the dead broker after its session times out
        while admin.list_topics("solo", timeout=30).topics["solo"].partitions[0].leader != -1:
            assert time.monotonic() < until, "the partition kept its dead leader"
            time.sleep(0.5)
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match=r"without a leader for 3 s"):
            with talking_to("source", "src", "reading the offsets of 1 partitions"):
                offsets_held({"bootstrap.servers": cluster.bootstrap}, [("solo", 0)], timeout=3, sleep=0.2)
        assert time.monotonic() - t0 < 30
    finally:
        cluster.stop()


def test_every_partition_of_a_large_lane_gets_its_own_offsets(kafka_a, topic) -> None:
    src = topic(kafka_a, 500)
    produce_numbered(kafka_a.bootstrap, src, 500, 0, 2)
    produce_numbered(kafka_a.bootstrap, src, 250, 2, 1)  # a third record in the first 250 partitions
    held = offsets_held({"bootstrap.servers": kafka_a.bootstrap}, [(src, p) for p in range(500)])
    assert held == {(src, p): (0, 3 if p < 250 else 2) for p in range(500)}


def test_sentinel_offsets_are_not_taken_for_offsets() -> None:
    """librdkafka's -1001 (OFFSET_INVALID) for an end offset, answered without an error right after a source
    broker restart, made a committed position look beyond the end: such partitions are asked for again."""
    held = {("a", 0): (0, 10), ("a", 1): (0, -1001), ("b", 0): (-1, 4), ("b", 1): (3, 3)}
    assert offsets_unsettled(held) == [("a", 1), ("b", 0)]
