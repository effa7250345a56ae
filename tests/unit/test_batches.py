"""The v2 batch header reader and rewriter (copying/batches.py), on batches kafka-python's own builder encodes:
the rewritten batch must decode, record for record, to what went in, under the new producer fields."""
from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sparkmirror.copying.batches import (CONTROL, HEADER_SIZE, BatchFormatError, Codec, Unforwardable, rewrite,
                                         split_batches)

RECORDS = [(1_700_000_000_000 + i, None if i == 1 else f"k{i}".encode(), None if i == 2 else b"v" * (i * 50),
            [("h", b"x"), ("empty", None)] if i % 2 else []) for i in range(6)]


def build(codec: Codec = Codec.NONE, base_offset: int = 0, producer: tuple[int, int, int] = (-1, -1, -1),
          transactional: bool = False, records=RECORDS) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec.value, transactional, *producer, batch_size=1 << 20)
    for i, (ts, k, v, h) in enumerate(records):
        b.append(i, ts, k, v, h)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)  # as a broker stamps it
    return bytes(buf)


def decoded(raw: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in DefaultRecordBatch(bytes(raw))]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_split_reads_every_header_field(codec: Codec) -> None:
    data = build(codec, 100, (7, 3, 40), True) + build(codec, 106)
    a, b = split_batches(data)
    assert (a.base_offset, a.last_offset, a.next_offset, a.record_count) == (100, 105, 106, 6)
    assert (a.producer_id, a.producer_epoch, a.base_sequence, a.is_transactional) == (7, 3, 40, True)
    assert (b.base_offset, b.producer_id, b.is_transactional, b.is_control) == (106, -1, False, False)
    assert a.codec is b.codec is codec and a.magic == 2
    assert (a.base_timestamp, a.max_timestamp) == (RECORDS[0][0], RECORDS[-1][0])
    assert a.crc_ok() and b.crc_ok() and a.unforwardable() is None
    assert bytes(a.raw) + bytes(b.raw) == data


def test_a_batch_cut_off_at_the_size_limit_is_left_for_the_next_fetch() -> None:
    one, two = build(base_offset=0), build(base_offset=6)
    assert [b.base_offset for b in split_batches(one + two[:-1])] == [0]
    assert [b.base_offset for b in split_batches(one + two[:HEADER_SIZE - 1])] == [0]
    assert split_batches(b"") == [] and split_batches(None) == []


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_rewrite_sets_producer_fields_and_keeps_every_record(codec: Codec) -> None:
    src = split_batches(build(codec, 5000, (99, 1, 12), False))[0]
    out = bytes(rewrite(src, producer_id=4242, producer_epoch=7, base_sequence=300, transactional=True))
    assert len(out) == len(src.raw)
    new = split_batches(out)[0]
    assert (new.base_offset, new.partition_leader_epoch) == (0, -1)
    assert (new.producer_id, new.producer_epoch, new.base_sequence, new.is_transactional) == (4242, 7, 300, True)
    assert new.crc_ok() and new.codec is codec and new.record_count == src.record_count
    lib = DefaultRecordBatch(out)
    assert lib.validate_crc() and lib.producer_id == 4242 and lib.base_sequence == 300 and lib.is_transactional
    assert decoded(out) == [(o - 5000, *rest) for o, *rest in decoded(bytes(src.raw))]
    assert out[HEADER_SIZE:] == bytes(src.raw)[HEADER_SIZE:]  # no record byte touched
    # the bit also clears (an at-least-once lane is idempotent, not transactional), and batches append
    into = bytearray(b"")
    rewrite(src, 1, 0, 0, False, into)
    rewrite(src, 1, 0, 6, False, into)
    two = split_batches(bytes(into))
    assert [(b.is_transactional, b.base_sequence, b.crc_ok()) for b in two] == [(False, 0, True), (False, 6, True)]


def test_what_cannot_forward_is_reported() -> None:
    gaps = bytearray(build())
    struct.pack_into(">i", gaps, 23, 9)  # lastOffsetDelta 9 for 6 records: a compacted batch
    assert split_batches(bytes(gaps))[0].unforwardable() is Unforwardable.OFFSET_GAPS
    log_append = bytearray(build())
    struct.pack_into(">h", log_append, 21, 0x08)
    assert split_batches(bytes(log_append))[0].unforwardable() is Unforwardable.LOG_APPEND_TIME
    # a magic 1 message: offset, size, crc, magic 1, attributes, timestamp, key -1, value 'v'
    body = struct.pack(">IbbqiI", 0, 1, 0, 0, -1, 1) + b"v"
    old = split_batches(struct.pack(">qi", 3, len(body)) + body)[0]
    assert (old.magic, old.base_offset, old.unforwardable()) == (1, 3, Unforwardable.OLD_MAGIC)
    control = bytearray(build())
    struct.pack_into(">h", control, 21, CONTROL)
    assert split_batches(bytes(control))[0].is_control
    with pytest.raises(BatchFormatError):
        split_batches(struct.pack(">qi", 0, 2) + b"\x00\x02")
