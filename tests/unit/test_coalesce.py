"""Coalescing small source batches (copying/coalesce.py): the records of a merged batch are the source batches'
records, in order, field for field, read back by another library (kafka-python) than the one that wrote them."""
from __future__ import annotations

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from crc32c import crc32c

from sparkmirror.copying.batches import Batch, BatchFormatError, Codec, Unforwardable, split_batches
from sparkmirror.copying.coalesce import COALESCE_BELOW, IN_C, merge, merge_by_records, mergeable, runs


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


def test_the_c_merge_makes_the_batch_aiokafka_makes_byte_for_byte():
    """`_merge.c` against aiokafka's record classes (the way where it is not built): the same bytes, through deltas
    that change their varint's size (offset deltas past 63 and 8,191, timestamps before and long after the
    first record's), null keys and values, headers."""
    assert IN_C, "the package was installed without its C merge (make setup builds it)"
    cases = [[_batch(0, 15), _batch(15, 15), _batch(31, 4)],
             [_batch(i * 100, 100, value_size=10) for i in range(90)],  # 9,000 records: offset deltas of 3 bytes
             [_batch(0, 1)],
             [_batch(5, 3), _batch(1_000_000, 70, value_size=0)]]  # timestamp deltas of 3 bytes and more
    for group in cases:
        fast, slow = merge(group), merge_by_records(group)
        assert bytes(fast.raw) == bytes(slow.raw)
        assert fast.crc_ok() and fast.record_count == sum(b.record_count for b in group)
        assert _records(fast) == [r for b in group for r in _records(b)]


def test_a_batch_that_does_not_hold_what_it_says_is_refused_by_name():
    good = _batch(40, 5)

    def bent(at: int, value: bytes, cut: int = 0):
        raw = bytearray(good.raw)
        raw[at:at + len(value)] = value
        if cut:
            del raw[-cut:]
            raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
        return split_batches(bytes(raw))[0]

    for broken, why in [(bent(57, (6).to_bytes(4, "big")), ", record 5: its length runs past the batch"),
                        (bent(57, (4).to_bytes(4, "big")), ": bytes after its last record"),
                        (bent(61, bytes([0xfe, 0x7f])), ", record 0: its length runs past the batch"),
                        (bent(0, b"", cut=3), ", record 4: its length runs past the batch"),
                        (bent(21, (0x20).to_bytes(2, "big")), ": compressed, LogAppendTime or a control batch")]:
        with pytest.raises(BatchFormatError, match=f"batches from offset 0 not merged: batch 1 of the group{why}"):
            merge([_batch(0, 3), broken])


def _target(abort=lambda: None, **mirror):
    """The lane's target writer for mirror m (a -> b, topic t), not connected: planning needs no broker."""
    from sparkmirror.copying.batchtarget import BatchTarget
    from sparkmirror.copying.context import LaneContext
    from sparkmirror.lanes import LanePartition
    from sparkmirror.resource.flowgroup import FlowGroupConfig

    cfg = FlowGroupConfig.model_validate({
        "name": "fg", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                   {"alias": "b", "bootstrapServers": "127.0.0.1:2"}],
        "mirrors": [{"name": "m", "source": "a", "target": "b", "topics": "t", **mirror}], "progressTopic": "p"})
    return BatchTarget(LaneContext(cfg, cfg.mirrors[0], 0, [LanePartition("t", 0, "a.t")]), abort)


def test_a_group_the_merge_refuses_goes_one_batch_at_a_time():
    """The lane's target writer: batches the source took and whose CRCs hold, but that the merge refuses, are
    forwarded as they are (the target broker judges them), none left out."""
    from sparkmirror.copying.batchreader import Fetched
    from sparkmirror.copying.coalesce import COALESCE_INTO

    target = _target()
    first, lying = _batch(0, 3), bytearray(_batch(3, 5).raw)
    lying[61:63] = bytes([0xfe, 0x7f])  # its first record's length runs past the batch; the header is consistent
    group = [first, split_batches(bytes(lying))[0]]
    with pytest.raises(BatchFormatError):
        merge(group)
    planned = target._forwardable(Fetched(batches=group, next_offset=8, fetch_offset=0), COALESCE_INTO, ("t", 0))
    assert [(b.raw, lo, hi, why, n) for b, lo, hi, why, n in planned] == \
        [(g.raw, g.base_offset, g.last_offset, None, 1) for g in group]
    assert target.forwarded == 2 and not target.rebuilt


def test_the_c_merge_never_reads_past_what_it_was_given():
    """Bytes flipped and batches cut anywhere, the header's fields too (its length kept true): every
    merge returns a batch or refuses by name, never reads past its buffers (a crash would end the interpreter)."""
    import random

    rng = random.Random(36)
    good = [_batch(0, 15), _batch(15, 15)]
    for _ in range(3000):
        raw = bytearray(good[1].raw)
        for _flip in range(rng.randint(1, 4)):
            raw[rng.randrange(61, len(raw))] = rng.randrange(256)
        if rng.random() < 0.3:
            del raw[rng.randrange(62, len(raw)):]
        if rng.random() < 0.3:  # the header after its length: magic, CRC, attributes, deltas, timestamps, count
            raw[rng.randrange(16, 61)] = rng.randrange(256)
        raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
        try:
            merged = merge([good[0], split_batches(bytes(raw))[0]])
        except BatchFormatError:
            continue
        assert merged.crc_ok() and merged.record_count == 15 + int.from_bytes(raw[57:61], "big")


def _unreadable(codec: int) -> Batch:
    """A batch its producer wrote wrong: the CRC32C holds, the records (a codec frame) do not; LogAppendTime, so
    the lane must read its records to rebuild it."""
    raw = bytearray(_batch(20, 4, codec).raw)
    raw[21:23] = (int.from_bytes(raw[21:23], "big") | 0x08).to_bytes(2, "big")  # LogAppendTime
    raw[61:] = bytes(range(256)) * ((len(raw) - 61) // 256) + bytes(range((len(raw) - 61) % 256))
    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    (b,) = split_batches(bytes(raw))
    assert b.crc_ok()
    return b


@pytest.mark.parametrize("codec", [1, 3, 4], ids=["gzip", "lz4", "zstd"])
def test_a_batch_to_rebuild_whose_records_cannot_be_read_ends_the_copy_naming_it(codec):
    """No traceback, nothing skipped: the open interval is given up and the error names mirror, cluster,
    partition and offset; the transforms' reading of a batch says the same."""
    from sparkmirror.copying.batchreader import Fetched
    from sparkmirror.copying.coalesce import COALESCE_INTO
    from sparkmirror.copying.errors import CorruptBatch
    from sparkmirror.copying.rebuild import UndecodableBatch
    from sparkmirror.copying.transformbatch import transform_batch
    from sparkmirror.resource.flowgroup import Mirror
    from sparkmirror.transforms import compiled

    aborted = []
    target = _target(lambda: aborted.append(1))
    good, bad = _batch(0, 20, codec), _unreadable(codec)
    with pytest.raises(CorruptBatch, match=r"mirror 'm': source cluster 'a': t\[0\] the record batch at offset 20 has "
                       r"a valid CRC32C but its records cannot be read \(.+\); nothing from offset 20 on was copied"):
        target._forwardable(Fetched(batches=[good, bad], next_offset=24, fetch_offset=0), COALESCE_INTO, ("t", 0))
    assert aborted == [1]
    chain = compiled(Mirror(name="m", source="a", target="b", transforms=[{"type": "dropRecords", "header": "h"}]))
    with pytest.raises(UndecodableBatch, match="offset 20"):
        transform_batch(bad, chain, "t", 0)
