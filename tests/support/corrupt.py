"""A record batch corrupted in a real broker's log: the broker serves its segment as it is (it checks CRCs only
as it appends), so a reader meets the bad batch exactly as it would after a disk or page-cache fault."""
from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from sparkmirror.copying.batches import Batch, split_batches


AT = {
    "value": lambda raw: len(raw) - 50,  # inside its last record's value
    "last_offset_delta": lambda raw: 23,  # lastOffsetDelta's first byte: negative, the batch seems to end before it begins
}
"""Where in the batch the byte is flipped; both lie inside what its CRC32C covers."""


def second_of_three_batches_corrupted(bootstrap: str, home: Path, topic: str, where: str = "value") -> Batch:
    """Writes three batches of 10 records to partition 0 of `topic` (offsets 0..29, keys `n-i`), flips a byte
    of the second one (`AT[where]`) in the broker's segment file and returns that batch as it was."""
    for n in range(3):  # each batch's records queued, then flushed: one batch each. The partition's leader is
        # known first: records produced before it is sent the first one alone now and then ([1, 9])
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10_000})
        p.list_topics(topic, timeout=30)
        for i in range(10):
            p.produce(topic, key=f"{n}-{i}".encode(), value=b"v" * 200, partition=0)
        assert p.flush(30) == 0
    segment = home / "data" / f"{topic}-0" / "00000000000000000000.log"
    batches = split_batches(segment.read_bytes())
    assert [b.record_count for b in batches] == [10, 10, 10], [(b.base_offset, b.record_count) for b in batches]
    second = batches[1]
    flip(segment, len(batches[0].raw) + AT[where](second.raw))
    return second


def flip(segment: Path, at: int) -> None:
    """Inverts every bit of the byte at `at` (twice: as it was)."""
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
