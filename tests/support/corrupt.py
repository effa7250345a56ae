"""A record batch corrupted in a real broker's log: the broker serves its segment as it is (it checks CRCs only
as it appends), so a reader meets the bad batch exactly as it would after a disk or page-cache fault."""
from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from sparkmirror.copying.batches import Batch, split_batches


def second_of_three_batches_corrupted(bootstrap: str, home: Path, topic: str) -> Batch:
    """Writes three batches of 10 records to partition 0 of `topic` (offsets 0..29, keys `n-i`), flips a byte
    inside the second one's last value in the broker's segment file and returns that batch as it was."""
    for n in range(3):  # a producer flushed per batch: three batches
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(10):
            p.produce(topic, key=f"{n}-{i}".encode(), value=b"v" * 200, partition=0)
        assert p.flush(30) == 0
    segment = home / "data" / f"{topic}-0" / "00000000000000000000.log"
    batches = split_batches(segment.read_bytes())
    assert [b.record_count for b in batches] == [10, 10, 10]
    second = batches[1]
    at = len(batches[0].raw) + len(second.raw) - 50  # inside its last record's value
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    return second
