"""Coalescing small source batches (copying/coalesce.py): the records of a merged batch are the source batches'
records, in order, field for field, read back by another library (kafka-python) than the one that wrote them."""
from __future__ import annotations

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from sparkmirror.copying.batches import Codec, Unforwardable, split_batches
from sparkmirror.copying.coalesce import COALESCE_BELOW, merge, mergeable, runs


def _batch(base: int, n: int, codec: int = 0, value_size: int = 100):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=7,
                                  producer_epoch=1, base_sequence=base, batch_size=1 << 30)
    for i in range(n):
        k = None if i % 3 == 0 else f"k{base + i}".encode()
        v = None if i % 5 == 4 else bytes([i % 256]) * value_size
        b.append(i, 1_700_000_000_000 + (base + i) * 7 - (i % 2) * 50, k, v, [("h", f"{base + i}".encode())] * (i % 2))
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")  # as fetched: the source's base offset
    return split_batches(bytes(raw))[0]


def _records(batch) -> list[tuple]:
    src = MemoryRecords(bytes(batch.raw)).next_batch()
    return [(r.timestamp, r.key, r.value, list(r.headers)) for r in src]


def test_merged_records_are_the_sources_in_order():
    group = [_batch(0, 15), _batch(15, 15), _batch(31, 4)]  # offset 30 a control marker on the source
    merged = merge(group)
    assert merged.record_count == 34 and merged.last_offset_delta == 33 and merged.codec is Codec.NONE
    assert merged.unforwardable() is None and merged.crc_ok()
    assert _records(merged) == [r for b in group for r in _records(b)]
    assert merged.base_timestamp == min(b.base_timestamp for b in group)
    assert merged.max_timestamp == max(b.max_timestamp for b in group)


def test_runs_merge_only_small_uncompressed_neighbours_within_the_limit():
    small = [_batch(i * 10, 10) for i in range(6)]
    lz4 = _batch(60, 10, codec=3)
    big = _batch(70, 1, value_size=COALESCE_BELOW)
    tail = [_batch(71, 10), _batch(81, 10)]
    assert all(mergeable(b, b.unforwardable()) for b in small)
    assert not mergeable(lz4, lz4.unforwardable()) and not mergeable(big, big.unforwardable())
    limit = 2 * max(len(b.raw) for b in small) + 100  # room for two, not three
    groups = runs([*small, lz4, big, *tail], limit)
    assert [[b.base_offset for b in g] for g, _why in groups] == [[0, 10], [20, 30], [40, 50], [60], [70], [71, 81]]
    assert all(why is None for _g, why in groups)
    assert all(len(merge(g).raw) <= limit for g, _why in groups if len(g) > 1)


def test_a_compacted_batch_is_not_merged():
    b = _batch(0, 10)
    raw = bytearray(b.raw)
    raw[23:27] = (12).to_bytes(4, "big")  # lastOffsetDelta past the record count: offset gaps
    gappy = split_batches(bytes(raw))[0]
    assert not mergeable(gappy, gappy.unforwardable())
    assert runs([gappy], COALESCE_BELOW) == [([gappy], Unforwardable.OFFSET_GAPS)]  # alone, with its reason
