"""The batch path's coalescing (issue 36): a run of small uncompressed source batches of one partition becomes one
larger batch for the target, because a batch costs the target broker far more than merging costs the lane.

Measured (`python -m bench.batchcost`, Kafka 4.1.2, 2 cores, a warm target broker): 200,000 records of 1 KiB
as a stock Java producer batches them (16 KiB, 15 records) cost the target broker 2.42 CPU s forwarded one by
one and 0.95 s merged into 256 KiB batches, about 110 us a source batch, while the lane spent 0.33 and 0.32 s
(fewer, larger Produce requests pay for the merging); 400,000 of 100 B (140 records a batch): 1.12 and 0.35 s on
the broker, 0.12 and 0.15 s in the lane. Merging cost about 1 us a 1 KiB record through aiokafka's Cython
record classes (kafka-python's pure-Python ones: 5.4 us), so a batch of fewer than about 100 records is cheaper
merged than sent. The merge is now `_merge.c`'s, which copies each record's bytes past its three varints (and
leaves the CRC32C to the `crc32c` library); aiokafka's classes remain the way where it was not built (no compiler
where the package was installed), byte for byte the same batch. Hence: source batches under `COALESCE_BELOW` bytes are merged, consecutive ones of a partition, into batches of up to `COALESCE_INTO` bytes
(or the target topic's max.message.bytes, whichever is less). Compressed batches go as they are: merging them
means decompressing and compressing again (3.6 us a record with lz4), and a compressing producer's batches hold
more records already.

The records keep their keys, values, headers and CreateTime timestamps; their offsets become consecutive, as a
rebuilt batch's do (rebuild.py), and the lane's offset map is per range already (a share spans many batches).

Pure: bytes in, bytes out."""
from __future__ import annotations

import struct

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

from .batches import COMPRESSION_MASK, CRC_FROM, Batch, BatchFormatError, Unforwardable, split_batches

try:
    from ._merge import merge as _merge_in_c
except ImportError:  # built without a compiler: aiokafka's record classes merge instead
    _merge_in_c = None

IN_C = _merge_in_c is not None
"""Whether merges go through `_merge.c` (the package was built with a compiler)."""
_CRC_AT = struct.Struct(">I")

COALESCE_BELOW = 64 * 1024
"""A forwardable uncompressed source batch smaller than this (bytes, header included) is merged with its
neighbours."""
COALESCE_INTO = 256 * 1024
"""The most bytes a merged batch holds: large enough that a batch's fixed cost on the broker is small beside its
records', small enough to stay under a default max.message.bytes (1 MiB) with room to spare."""
_GROWTH = 4
"""Bytes a record may grow by when merged: its offset and timestamp deltas are larger varints in a longer batch."""


def mergeable(batch: Batch, why: Unforwardable | None, below: int = COALESCE_BELOW) -> bool:
    """A batch that goes as it is (`why`, its `unforwardable()`, is None), uncompressed and smaller than `below`:
    merged with its neighbours. The reason is the caller's, so a batch's is worked out once."""
    # the attribute bits, not `batch.codec`: making the Codec enum member cost 0.8 us a batch
    return why is None and batch.attributes & COMPRESSION_MASK == 0 and len(batch.raw) < below


Run = tuple[list[Batch], Unforwardable | None]
"""A group of batches and why its one batch must be rebuilt (None: it goes as it is, as a merged group does)."""


def runs(batches: list[Batch], limit: int) -> list[Run]:
    """`batches` (one partition's, in offset order) grouped: consecutive mergeable ones into groups of at most
    `limit` merged bytes, every other batch alone with its reason to be rebuilt. A group of one goes as it is
    unless it has one."""
    out: list[Run] = []
    group: list[Batch] = []
    size = 0
    for b in batches:
        why = b.unforwardable()
        if not mergeable(b, why):
            if group:
                out.append((group, None))
                group, size = [], 0
            out.append(([b], why))
            continue
        grown = len(b.raw) + _GROWTH * b.record_count
        if group and size + grown > limit:
            out.append((group, None))
            group, size = [], 0
        group.append(b)
        size += grown
    if group:
        out.append((group, None))
    return out


def merge(group: list[Batch]) -> Batch:
    """The group's records as one uncompressed v2 batch, in order, consecutive offset deltas from 0, the first
    record's timestamp its base."""
    if _merge_in_c is None:
        return merge_by_records(group)
    try:
        out = _merge_in_c([b.raw for b in group])
    except ValueError as e:
        raise BatchFormatError(f"batches from offset {group[0].base_offset} not merged: {e}") from None
    _CRC_AT.pack_into(out, 17, crc32c(memoryview(out)[CRC_FROM:]))
    (batch,) = split_batches(out)
    return batch


def merge_by_records(group: list[Batch]) -> Batch:
    """`merge` through aiokafka's Cython record classes: each record decoded and encoded again."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    i = 0
    for b in group:
        for r in DefaultRecordBatch(bytearray(b.raw)):
            builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
            i += 1
    out = split_batches(bytes(builder.build()))
    assert len(out) == 1, "a merged group is one batch"
    return out[0]
