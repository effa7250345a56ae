"""The C scan, rewrite and CRC32C (copying/_batchscan.c), Produce request and answer (_produce.c, _answers.c) and
per-partition checks, sequences and sums (_forwarding.c) against their Python references, on real batches of
every codec, control and old-magic ones, corrupt CRCs, partial last batches and thousands of bent ones.
Run under AddressSanitizer too (test_merge_asan.py): the buffers are also given as `array`s, whose storage is
exactly their length, so a read one byte past lands in a red zone."""
from __future__ import annotations

import random
import struct
from array import array

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from sparkmirror.copying import batches as B
from sparkmirror.copying import forwarding as F
from sparkmirror.copying.batches import CONTROL, BatchFormatError, Codec

pytestmark = pytest.mark.skipif(not B.IN_C, reason="the _merge extension is not built")


def build(codec: Codec, base_offset: int, count: int, seed: int, transactional: bool = False,
          producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    rng = random.Random(seed)
    b = DefaultRecordBatchBuilder(2, codec.value, transactional, *producer, batch_size=1 << 22)
    for i in range(count):
        size = rng.choice([0, 1, 100, 1024])
        half = rng.randbytes((size + 1) // 2)
        b.append(i, 1_700_000_000_000 + i, str(i).encode() if i % 3 else None, (half * 2)[:size],
                 [("h", b"x")] if i % 2 else [])
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)  # as a broker stamps them: offset, leader epoch
    struct.pack_into(">i", buf, 12, rng.randrange(-1, 50))
    return bytes(buf)


def recrc(raw: bytearray) -> bytearray:
    struct.pack_into(">I", raw, 17, crc32c(raw[21:]))
    return raw


def old_message(offset: int, magic: int) -> bytes:
    body = struct.pack(">IbbqiI", 0, magic, 0, 0, -1, 1) + b"v"
    return struct.pack(">qi", offset, len(body)) + body


REAL = [build(codec, 15 * i, 15, i, transactional=i % 2 == 1, producer=(1000 + i, i % 3, 15 * i))
        for i, codec in enumerate([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD, Codec.LZ4])]
CONTROL_BATCH = bytes(recrc(bytearray(build(Codec.NONE, 90, 1, 99))[:21] + struct.pack(">h", CONTROL)
                            + bytearray(build(Codec.NONE, 90, 1, 99))[23:]))


def fields(b: B.Batch) -> tuple:
    return (b.base_offset, b.length, b.partition_leader_epoch, b.magic, b.crc, b.attributes, b.last_offset_delta,
            b.base_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence, b.record_count,
            bytes(b.raw))


def outcome(f, records) -> tuple:
    """What `f` gives: the batches' fields (and scan's bad index and CRC), or the error's type and message."""
    try:
        got = f(records)
    except (BatchFormatError, ValueError) as e:
        return type(e), str(e)
    if isinstance(got, tuple):
        return [fields(b) for b in got[0]], got[1], got[2]
    return [fields(b) for b in got]


def same(records: bytes) -> None:
    for given in (records, array("B", records), memoryview(records)):
        assert outcome(B.split_batches, given) == outcome(B.split_batches_by_python, records)
        assert outcome(B.scan, given) == outcome(B.scan_by_python, records)


def test_real_batches_of_every_codec_read_as_in_python() -> None:
    data = b"".join(REAL) + CONTROL_BATCH + old_message(91, 0) + old_message(92, 1)
    got = B.split_batches(data)
    assert [fields(b) for b in got] == [fields(b) for b in B.split_batches_by_python(data)]
    assert type(got[0]) is B.Batch and got[0] == B.split_batches_by_python(data)[0]
    assert [b.codec for b in got[:6]] == [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD, Codec.LZ4]
    assert got[6].is_control and [b.magic for b in got[-2:]] == [0, 1] and B.scan(data)[1:] == (-1, 0)
    for cut in range(len(data) - 300, len(data) + 1):
        same(data[:cut])  # a partial last batch left out, whatever its cut
    assert B.split_batches(None) == [] and B.split_batches(b"") == [] and B.scan(None) == ([], -1, 0)


def test_a_corrupt_crc_is_found_at_the_first_bad_batch_with_what_its_bytes_give() -> None:
    for at in range(len(REAL)):
        bent = [bytearray(r) for r in REAL]
        bent[at][200] ^= 0x40
        data = b"".join(bent)
        batches, bad, found = B.scan(data)
        assert (bad, found) == (at, crc32c(bytes(bent[at][21:]))) and len(batches) == len(REAL)
        same(data)
    bent = bytearray(REAL[0])
    bent[17] ^= 1  # the CRC field itself
    assert B.scan(bytes(bent) + REAL[1])[1] == 0


def test_malformed_lengths_raise_naming_the_offset() -> None:
    for length in (-5, 0, 2, 4, 40, 48):
        data = REAL[0] + struct.pack(">qi", 77, length) + b"\x00" * 4 + b"\x02" + b"\x00" * 60
        with pytest.raises(BatchFormatError, match="offset 77 is"):
            B.split_batches(data)
        same(data)


def test_bent_batches_read_as_in_python_and_never_past_the_buffer() -> None:
    rng = random.Random(36)
    for _ in range(3000):
        parts = [bytearray(rng.choice(REAL + [CONTROL_BATCH])) for _ in range(rng.randint(1, 3))]
        for raw in parts:
            for _flip in range(rng.randint(0, 3)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            if rng.random() < 0.3:  # magic 0, 1, 2, 3 or one past 127 (read signed, as the struct reads it)
                raw[16] = rng.choice([0, 1, 2, 3, 0x80, 0xFF])
            if rng.random() < 0.3:
                del raw[rng.randrange(len(raw)):]
            if rng.random() < 0.5:
                raw[8:12] = (len(raw) - 12).to_bytes(4, "big", signed=True) if len(raw) >= 12 else raw[8:12]
            if rng.random() < 0.5 and len(raw) > 21:
                recrc(raw)
        same(b"".join(parts))


def test_rewrite_writes_what_python_writes() -> None:
    rng = random.Random(7)
    batches = B.split_batches(b"".join(REAL) + CONTROL_BATCH)
    for _ in range(500):
        b = rng.choice(batches)
        args = (rng.choice([-1, 0, 2**63 - 1, rng.randrange(2**40)]), rng.choice([-1, 0, 32767, rng.randrange(99)]),
                rng.choice([0, 2**31 - 1, rng.randrange(2**31)]), rng.random() < 0.5)
        prefix = rng.randbytes(rng.randrange(40))
        c_out, py_out = bytearray(prefix), bytearray(prefix)
        assert B.rewrite(b, *args, into=c_out) is c_out
        B.rewrite_by_python(b, *args, into=py_out)
        assert c_out == py_out
        (new,) = B.split_batches(bytes(c_out[len(prefix):]))
        assert new.crc_ok() and (new.producer_id, new.producer_epoch, new.base_sequence) == args[:3]
    assert B.rewrite(batches[0], 1, 2, 3, True) == B.rewrite_by_python(batches[0], 1, 2, 3, True)


def test_rewrite_refuses_what_is_not_one_whole_batch() -> None:
    b = B.split_batches(REAL[0])[0]
    for raw in (bytes(b.raw)[:60], bytes(b.raw)[:-1], bytes(b.raw) + b"x"):
        with pytest.raises(ValueError):
            B._rewrite_into(bytearray(), raw, 1, 0, 0, False)
        with pytest.raises(ValueError):
            B._rewrite_into(bytearray(), array("B", raw), 1, 0, 0, False)


def test_the_crc32c_is_the_librarys_at_every_length_and_alignment() -> None:
    from sparkmirror.copying import _merge

    rng = random.Random(1)
    data = rng.randbytes(10_000)
    for n in list(range(0, 800)) + [rng.randrange(10_000) for _ in range(300)]:
        start = rng.randrange(8)
        piece = data[start:start + n]
        assert _merge.crc32c(piece) == crc32c(piece)
        assert _merge.crc32c(array("B", piece)) == crc32c(piece)


def test_the_produce_request_is_byte_for_byte_produce_builders() -> None:
    from sparkmirror.copying import protocol

    rng = random.Random(11)
    batches = B.split_batches(b"".join(REAL) + CONTROL_BATCH)
    for _ in range(400):
        topics = rng.sample(["t", "ünïcode-topic", "x" * 200, "mirror.orders"], rng.randint(1, 3))
        keys = [(t, p) for t in topics for p in sorted(rng.sample(range(300), rng.randint(1, 4)))]
        picked = [rng.choice(batches) for _ in keys]
        args = (rng.choice([3, 7, 8, 9, 11]), rng.randrange(2**31), rng.choice(["", "client-1", "x" * 130]),
                rng.choice([None, "", "lane-7", "y" * 140]), rng.choice([-1, 0, 1]), rng.randrange(2**31), keys,
                picked, rng.randrange(2**40), rng.randrange(100), [rng.randrange(2**31) for _ in keys],
                rng.random() < 0.5)
        assert protocol.produce_request(*args) == protocol.produce_request_by_python(*args)
    one = batches[:2]
    apart = [("a", 0), ("b", 0), ("a", 1)]  # a topic's partitions not together
    for build_request in (protocol.produce_request, protocol.produce_request_by_python):
        with pytest.raises(ValueError):
            build_request(9, 1, "c", None, -1, 1000, apart, one + one[:1], 1, 0, [0, 0, 0], False)
    with pytest.raises(ValueError):
        protocol.produce_request(9, 1, "c", None, -1, 1000, [("a", 0)], one, 1, 0, [0], False)
    short = B.split_batches_by_python(REAL[0])[0]
    short.raw = short.raw[:-1]
    with pytest.raises(ValueError):
        protocol.produce_request(9, 1, "c", None, -1, 1000, [("a", 0)], [short], 1, 0, [0], False)


def _produce_answer(rng: random.Random, version: int) -> bytes:
    """A Produce answer as a broker encodes it (kafka-python's classes, from Kafka's schemas): random topics,
    partitions, errors, record errors, messages and, from v10, the current-leader tagged field."""
    from kafka.protocol.producer import ProduceResponse as R

    P = R.TopicProduceResponse.PartitionProduceResponse
    topics = []
    for name in rng.sample(["t", "ünïcode-topic", "x" * 200, ""], rng.randint(0, 3)):
        parts = []
        for index in rng.sample(range(2**31), rng.randint(0, 4)):
            failed = rng.random() < 0.3
            p = P(index=index, error_code=rng.choice([2, 6, 45, 87]) if failed else 0,
                  base_offset=-1 if failed else rng.randrange(2**62), log_append_time_ms=-1, log_start_offset=0,
                  record_errors=[P.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=rng.choice(
                      [None, "crc", "ünï"])) for i in range(rng.randint(0, 2) if failed else 0)],
                  error_message=rng.choice([None, "", "refused"]) if failed else None)
            if version >= 10 and failed and rng.random() < 0.5:
                p.current_leader = P.LeaderIdAndEpoch(leader_id=2, leader_epoch=8)
            parts.append(p)
        topics.append(R.TopicProduceResponse(name=name, partition_responses=parts))
    return bytes(R(responses=topics, throttle_time_ms=rng.randrange(100)).encode(version=version))


def test_the_produce_answer_parses_as_in_python_and_a_short_one_is_refused() -> None:
    from sparkmirror.copying import protocol

    rng = random.Random(12)
    for _ in range(300):
        version = rng.choice(list(protocol.PRODUCE_VERSIONS))
        body = _produce_answer(rng, version)
        want = protocol.parse_produce_by_python(memoryview(body), version)
        for given in (body, array("B", body), memoryview(body)):  # an array: ASan's red zone right past its end
            assert protocol.parse_produce(given, version) == want
        for cut in rng.sample(range(len(body)), min(len(body), 8)):  # never a read past the end of a short one
            try:
                protocol.parse_produce(array("B", body[:cut]), version)
            except protocol.ProtocolError:
                pass
    with pytest.raises(protocol.ProtocolError, match="past its end"):
        protocol.parse_produce(b"\x00\x00\x00\x01\x00\x05ab", 3)


def _patched(raw: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, at, value)
    return bytes(recrc(out))


LOG_APPEND = _patched(REAL[0], 21, ">h", struct.unpack_from(">h", REAL[0], 21)[0] | 0x08)
GAPPED = _patched(REAL[1], 23, ">i", struct.unpack_from(">i", REAL[1], 23)[0] + 3)  # lastOffsetDelta past the count
HIGH_MAGIC = REAL[2][:16] + b"\x82" + REAL[2][17:]  # magic 0x82: -126 as the header's signed field reads it, an old one
KINDS = [*REAL, CONTROL_BATCH, LOG_APPEND, GAPPED, HIGH_MAGIC, old_message(7, 0), old_message(8, 1)]


def _batches(rng: random.Random, kinds: list[bytes]) -> list[B.Batch]:
    return [B.split_batches_by_python(rng.choice(kinds))[0] for _ in range(rng.randint(0, 12))]


def test_the_first_batch_not_as_it_is_is_found_as_in_python() -> None:
    rng = random.Random(5)
    sizes = sorted({len(r) for r in REAL})
    for _ in range(2000):
        bs = _batches(rng, KINDS if rng.random() < 0.5 else REAL)
        below = rng.choice([0, sizes[0], sizes[len(sizes) // 2] + 1, 1 << 16])
        assert F.first_not_as_is(bs, below) == F.first_not_as_is_by_python(bs, below), (below, [b.raw[:61] for b in bs])
    assert F.first_not_as_is([B.split_batches_by_python(LOG_APPEND)[0]]) == 0
    assert F.first_not_as_is([B.split_batches_by_python(r)[0] for r in REAL] + [
        B.split_batches_by_python(GAPPED)[0]]) == len(REAL)


def test_sequences_as_in_python_wrapping_at_2_31() -> None:
    rng = random.Random(6)
    for _ in range(500):
        bs = _batches(rng, REAL)
        first = rng.choice([0, 7, 2**31 - 20, 2**31 - 1])
        assert F.sequences(bs, first) == F.sequences_by_python(bs, first)


def test_tally_as_in_python_and_past_2_63() -> None:
    rng = random.Random(7)
    for _ in range(500):
        bs = _batches(rng, REAL)
        written = [rng.randrange(2**40) for _ in bs]
        ts_min = rng.choice([-1, 0, 1_700_000_000_005, 2**50])
        mine, theirs = [5], [5]
        assert F.tally(bs, written, mine, ts_min) == F.tally_by_python(bs, written, theirs, ts_min)
        assert mine == theirs
    # 4,000,000 records at a timestamp of 2**52: a sum past 2**63
    header = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", header, 0, 0, 49, -1, 2, 0, 0, 39_999, 2**52, 2**52, -1, -1, -1, 40_000)
    big = [B.split_batches_by_python(bytes(header))[0] for _ in range(100)]
    written = [40_000 * i for i in range(100)]
    mine, theirs = [], []
    got = F.tally(big, written, mine, -1)
    assert got == F.tally_by_python(big, written, theirs, -1) and got[2] == 4_000_000 * 2**52 > 2**63
    assert len(mine) == 4_000_000 and mine == theirs
    with pytest.raises(ValueError):
        F.tally(big, written[:1], [], -1)
