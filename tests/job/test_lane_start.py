"""A fresh lane's resume offsets on a real broker: a partition its consumer does not know yet is asked for
again (after a source outage the client's metadata can lag the plan), a partition that does not exist is an
error naming it."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from sparkmirror.copying.start import close_consumer, new_consumer, offsets_held

from .conftest import produce_numbered


def test_a_partition_the_consumer_does_not_know_yet_is_asked_for_again(kafka_a, topic) -> None:
    src = topic(kafka_a, 1)
    consumer = new_consumer({"bootstrap.servers": kafka_a.bootstrap}, "lane-start-test")
    try:
        assert offsets_held(consumer, src, 0) == (0, 0)  # the consumer now holds the topic's metadata: 1 partition
        admin = AdminClient({"bootstrap.servers": kafka_a.bootstrap})

        def grow() -> None:
            time.sleep(1.5)
            admin.create_partitions([NewPartitions(src, 2)])[src].result(30)
            produce_numbered(kafka_a.bootstrap, src, 2, 0, 3)

        grower = threading.Thread(target=grow)
        grower.start()
        t0 = time.monotonic()
        lo, hi = offsets_held(consumer, src, 1, timeout=30, sleep=0.2)
        grower.join()
        assert lo == 0 and hi in (0, 3) and 1.0 < time.monotonic() - t0 < 25
    finally:
        close_consumer(consumer)


def test_a_partition_that_does_not_exist_stays_an_error(kafka_a, topic) -> None:
    src = topic(kafka_a, 1)
    consumer = new_consumer({"bootstrap.servers": kafka_a.bootstrap}, "lane-start-test-2")
    try:
        t0 = time.monotonic()
        with pytest.raises(KafkaException, match="(?i)unknown partition"):
            offsets_held(consumer, src, 4, timeout=2, sleep=0.2)
        assert time.monotonic() - t0 < 10
    finally:
        close_consumer(consumer)
