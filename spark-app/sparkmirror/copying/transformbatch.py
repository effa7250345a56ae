"""The batch path's record transforms (issue 38): a fetched batch decoded, the mirror's chain (`transforms.py`)
applied to its records, and then either forwarded as it was fetched (no record dropped or changed: the bytes go
as they are), rebuilt from the records kept, changed as the chain made them (counted as `reason="transformed"`),
or left out whole (every record dropped: its offsets still advance the interval's progress range, as on the record
path, so the offset map stays exact).

A rebuilt batch is v2 with the source batch's codec, CreateTime timestamps (the source's) and consecutive offset
deltas, as `rebuild.py` makes them. v2 batches are read with aiokafka's Cython record classes (`coalesce.py`:
about 1 us a record), older message sets with kafka-python's. Pure: bytes in, bytes out."""
from __future__ import annotations

from dataclasses import dataclass

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record import MemoryRecords

from ..transforms import RecordTransforms
from .batches import COMPRESSION_MASK, Batch, split_batches
from .rebuild import decoded

TRANSFORMED = "transformed"  # the rebuilt-batches label of batches a transform changed
_LEGACY_ATTRIBUTES_AT = 17  # offset int64, size int32, crc int32, magic int8, attributes int8


@dataclass(slots=True)
class Transformed:
    """What a batch became: `batch` None when every record was dropped, `touched` False when it goes as fetched
    (then `batch` is the fetched one)."""

    batch: Batch | None
    touched: bool
    source_first: int
    source_last: int
    dropped: int = 0


def _records(batch: Batch):
    if batch.magic >= 2:
        return DefaultRecordBatch(bytearray(batch.raw))
    return MemoryRecords(bytes(batch.raw)).next_batch() or ()


def _same(a, b) -> bool:
    return a is b or a == b


def transform_batch(batch: Batch, chain: RecordTransforms, topic: str, partition: int,
                    keep_from: int = 0) -> Transformed:
    """`batch`'s records at or past `keep_from` through `chain`. Untouched (every record kept as it was, none
    before `keep_from`): the fetched batch itself; the caller still rebuilds it for its own reasons
    (`Batch.unforwardable`). The source range is that of the records read, as `rebuild` gives it (a compressed
    legacy message set's header names its last offset only)."""
    seen: list[int] = []
    out: list[tuple] = []
    touched = batch.base_offset < keep_from
    apply = chain.apply
    for r in decoded(batch, _records):  # all read first: a batch that cannot be read stops before any transform
        off = r.offset
        if off < keep_from:
            continue
        seen.append(off)
        k, v, h = r.key, r.value, list(getattr(r, "headers", None) or ())
        ts = r.timestamp if r.timestamp is not None and r.timestamp >= 0 else 0
        made = apply(topic, partition, off, ts, k, v, h)
        if made is None:
            touched = True
            continue
        mk, mv, mh = made
        if not (_same(mk, k) and _same(mv, v) and _same(list(mh or ()), h)):
            touched = True
        out.append((ts, mk, mv, list(mh or ())))
    first = seen[0] if seen else max(batch.base_offset, keep_from)
    last = max(batch.last_offset, seen[-1] if seen else -1)
    if not touched:
        return Transformed(batch, False, first, last)
    dropped = len(seen) - len(out)
    if not out:
        return Transformed(None, True, first, last, dropped)
    codec = (batch.attributes if batch.magic >= 2 else batch.raw[_LEGACY_ATTRIBUTES_AT]) & COMPRESSION_MASK
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (ts, k, v, h) in enumerate(out):
        builder.append(i, timestamp=ts, key=k, value=v, headers=h)
    (made,) = split_batches(bytes(builder.build()))
    return Transformed(made, True, first, last, dropped)
