"""Switching from the legacy MirrorMaker: a consume-produce loop committing its group on the source after
producing (as `kafka.tools.MirrorMaker` did) is stopped mid-stream, then the mirror starts from that group
(`startFrom`) into the same topic (identity policy): nothing is lost, and the only duplicates are the records
the old tool produced but had not committed."""
from __future__ import annotations

from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from sparkmirror_dev.testing import create_topic
from .conftest import close_kept_lanes, mirror_once, numbered_sequences, produce_numbered, unique_name

PARTS = 3
LEGACY_PARTS = 2  # the legacy copy never reached (committed) the last partition: it starts from the beginning
RECORDS = 300
COMMITTED = 120  # records per partition the legacy copy produced and committed
UNCOMMITTED = 30  # further records per partition it produced but was stopped before committing


def legacy_copy(source: str, target: str, topic: str, group: str) -> None:
    """The old tool's loop: poll, produce to the same topic name, flush, commit; stopped after producing
    COMMITTED + UNCOMMITTED records per partition with only the first COMMITTED committed."""
    c = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": target, "enable.idempotence": True})
    c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in range(LEGACY_PARTS)])
    produced: Counter[int] = Counter()
    try:
        while any(produced[q] < COMMITTED + UNCOMMITTED for q in range(LEGACY_PARTS)):
            for m in c.consume(100, timeout=1.0):
                if m.error() is not None or produced[m.partition()] >= COMMITTED + UNCOMMITTED:
                    continue
                p.produce(topic, key=m.key(), value=m.value(), partition=m.partition())
                produced[m.partition()] += 1
                if produced[m.partition()] == COMMITTED:  # commit after the flush, as MirrorMaker did
                    assert p.flush(30) == 0
                    c.commit(offsets=[TopicPartition(topic, m.partition(), m.offset() + 1)], asynchronous=False)
        assert p.flush(30) == 0  # produced, never committed: the old tool stopped here
    finally:
        c.close()


def test_mirror_takes_over_from_a_legacy_group(kafka_a, kafka_b, flowgroup) -> None:
    topic, group = unique_name("legacy"), unique_name("legacy-mm")
    create_topic(kafka_a.bootstrap, topic, PARTS)
    create_topic(kafka_b.bootstrap, topic, PARTS)
    produce_numbered(kafka_a.bootstrap, topic, PARTS, 0, RECORDS)
    legacy_copy(kafka_a.bootstrap, kafka_b.bootstrap, topic, group)

    cfg = flowgroup(topic, mirror={"replicationPolicy": "identity", "startFrom": group})
    try:
        routes = mirror_once(cfg)
    finally:
        close_kept_lanes()
    assert [r.target_topic for r in routes] == [topic]

    got = numbered_sequences(kafka_b.bootstrap, topic)
    for part in range(PARTS):
        counts = Counter(got[part])
        lost = [s for s in range(RECORDS) if counts[s] == 0]
        dups = sorted(s for s, n in counts.items() if n > 1)
        assert lost == [], f"partition {part}: lost {lost[:10]}"
        again = list(range(COMMITTED, COMMITTED + UNCOMMITTED)) if part < LEGACY_PARTS else []
        assert dups == again, f"partition {part}: duplicates {dups[:10]}"
        assert len(got[part]) == RECORDS + len(again)
        print(f"partition {part}: {RECORDS} source records, {len(got[part])} on the target, 0 lost, "
              f"{len(dups)} duplicates (all produced but not committed by the legacy copy)")
