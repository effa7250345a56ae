"""Kafka v2 record batches as bytes (the batch path, issue 36): split a Fetch partition's records into batches,
read their 61-byte headers, and rewrite a batch for the target without decoding its records.

Pure: no I/O, no Kafka client. The header layout (big-endian) is Kafka's RecordBatch v2:

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

The CRC32C covers attributes..end, so a rewrite of producer id, epoch, sequence or the transactional bit
recomputes it; baseOffset and partitionLeaderEpoch lie before the CRC and change freely. Written by hand: no
maintained Python library (kafka-python's `DefaultRecordBatch` included) rewrites a batch's producer fields in
place without decoding and re-encoding its records.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from crc32c import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after them
CRC_FROM = 21  # attributes' offset: the CRC covers from here to the batch's end
_MAGIC_AT = 16
_FRONT = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_I16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

NO_PRODUCER_ID = -1


class Codec(Enum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class Unforwardable(Enum):
    """Why a batch cannot go to the target as it is: rebuilt (rebuild.py), counted per reason in metrics."""
    OLD_MAGIC = "magic below 2"
    LOG_APPEND_TIME = "LogAppendTime timestamps (the target would stamp its own)"
    OFFSET_GAPS = "offset gaps (compacted): the target refuses lastOffsetDelta + 1 != recordCount"
    STARTS_BEFORE = "begins before the position (a compressed batch fetched from inside it)"

    @property
    def label(self) -> str:
        """The metric label: short, stable."""
        return self.name.lower()


@dataclass(slots=True)
class Batch:
    """One v2 batch of a Fetch response: its header fields, and where its bytes lie in the response's buffer.
    Not frozen: a frozen dataclass sets each of its 14 fields through `object.__setattr__`, a cost per batch."""
    base_offset: int
    length: int  # batchLength: bytes after baseOffset and batchLength
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    raw: memoryview  # the whole batch, header included, as fetched

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & COMPRESSION_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    def crc_ok(self) -> bool:
        return crc32c(self.raw[CRC_FROM:]) == self.crc

    def unforwardable(self) -> Unforwardable | None:
        """Why this batch must be rebuilt before the target takes it, or None when it forwards as it is."""
        if self.magic < 2:
            return Unforwardable.OLD_MAGIC
        if self.attributes & TIMESTAMP_LOG_APPEND:
            return Unforwardable.LOG_APPEND_TIME
        if self.last_offset_delta + 1 != self.record_count:
            return Unforwardable.OFFSET_GAPS
        return None


class BatchFormatError(ValueError):
    """The bytes are not v2 record batches (a broker answered with something this path does not read)."""


def split_batches(records: bytes | memoryview | None) -> list[Batch]:
    """The whole batches in a Fetch partition's records (`split_batches_by_python`, in C when built)."""
    if _scan is None:
        return split_batches_by_python(records)
    return _scan(records, False)[0]


def scan(records: bytes | memoryview | None) -> tuple[list[Batch], int, int]:
    """`split_batches`, each v2 batch's CRC32C checked up to the first that fails: (the batches, that batch's
    index or -1, the CRC32C its bytes give). The reader's one pass over a fetch (in C when built)."""
    if _scan is None:
        return scan_by_python(records)
    return _scan(records, True)


def scan_by_python(records: bytes | memoryview | None) -> tuple[list[Batch], int, int]:
    """`scan` in Python: the reference the C scan is tested against."""
    batches = split_batches_by_python(records)
    for i, b in enumerate(batches):
        if b.magic >= 2 and (found := crc32c(b.raw[CRC_FROM:])) != b.crc:
            return batches, i, found
    return batches, -1, 0


def split_batches_by_python(records: bytes | memoryview | None) -> list[Batch]:
    """The whole batches in a Fetch partition's records; a batch cut off at the response's size limit is left
    out (the broker may return a partial last batch, fetched again from its offset). Old-format message sets
    (magic 0/1) come back as header-only `Batch`es with magic set, so `unforwardable` reports them."""
    if not records:
        return []
    buf = memoryview(records)
    out: list[Batch] = []
    pos, end = 0, len(buf)
    while pos + LOG_OVERHEAD <= end:
        base_offset, length = struct.unpack_from(">qi", buf, pos)
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            break  # partial batch at the size limit
        if length + LOG_OVERHEAD < _MAGIC_AT + 1:
            raise BatchFormatError(f"batch at offset {base_offset} is {length} bytes long")
        magic = buf[pos + _MAGIC_AT]
        if magic < 2:
            out.append(Batch(base_offset, length, -1, magic, 0, 0, 0, -1, -1, -1, -1, -1, 1, buf[pos:stop]))
        else:
            if length + LOG_OVERHEAD < HEADER_SIZE:
                raise BatchFormatError(f"v2 batch at offset {base_offset} is {length} bytes long")
            out.append(Batch(*HEADER.unpack_from(buf, pos), buf[pos:stop]))  # type: ignore[call-arg]
        pos = stop
    return out


_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence (at offset 43)
_PRODUCER_AT = 43
_CRC = struct.Struct(">I")


def rewrite(batch: Batch, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool,
            into: bytearray | None = None) -> bytearray:
    """`rewrite_by_python`, in C when built: the batch's bytes copied once, fields and CRC32C set in place."""
    if _rewrite_into is None:
        return rewrite_by_python(batch, producer_id, producer_epoch, base_sequence, transactional, into)
    out = into if into is not None else bytearray()
    _rewrite_into(out, batch.raw, producer_id, producer_epoch, base_sequence, transactional)
    return out


def rewrite_by_python(batch: Batch, producer_id: int, producer_epoch: int, base_sequence: int,
                      transactional: bool, into: bytearray | None = None) -> bytearray:
    """The batch as the target takes it from this lane's producer: baseOffset 0, partitionLeaderEpoch -1, the
    lane's producer id, epoch and base sequence, the transactional bit as asked, CRC32C recomputed; every
    record byte kept. Appended to `into` (one Produce partition's records) when given: the batch's one copy."""
    out = into if into is not None else bytearray()
    start = len(out)
    out += batch.raw
    attributes = batch.attributes
    attributes = (attributes | TRANSACTIONAL) if transactional else (attributes & ~TRANSACTIONAL)
    _FRONT.pack_into(out, start, 0, batch.length, -1)
    _I16.pack_into(out, start + CRC_FROM, attributes)
    _PRODUCER.pack_into(out, start + _PRODUCER_AT, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(out, start + 17, crc32c(memoryview(out)[start + CRC_FROM:start + LOG_OVERHEAD + batch.length]))
    return out


try:  # the C scan and rewrite (_batchscan.c, in the `_merge` extension): no Python code runs per batch
    from . import _merge as _c

    _c.register(Batch, Batch.__slots__, BatchFormatError)
    _scan, _rewrite_into = _c.scan, _c.rewrite_into
except (ImportError, AttributeError):  # built without a compiler (or an older build): the Python above does the same
    _scan = _rewrite_into = None

IN_C = _scan is not None
"""Whether `split_batches`, `scan` and `rewrite` run in C."""
