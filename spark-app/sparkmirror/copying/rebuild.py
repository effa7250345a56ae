"""The batch path's rebuild (issue 36): a source batch that cannot go to the target as it is becomes a new v2
batch of the same records, decoded and encoded by kafka-python's record classes (`MemoryRecords`,
`DefaultRecordBatchBuilder`), with the source batch's codec. Why a batch is rebuilt is `batches.Unforwardable`:

- magic below 2 (a message set written by a pre-0.11 client): the v2 format the target's producer id needs;
- LogAppendTime: the target would stamp its own time; the records keep the source's as CreateTime, as
  MirrorMaker 2 keeps it;
- offset gaps (a compacted source): the broker refuses a batch whose offset range differs from its record
  count, so the records get consecutive offset deltas (the offset map is per range, as on the record path);
- a compressed batch that begins before the lane's position (a resume inside it): only its records at or past
  the position are kept.

Pure: bytes in, bytes out."""
from __future__ import annotations

from dataclasses import dataclass

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from .batches import COMPRESSION_MASK, Batch, split_batches

_LEGACY_ATTRIBUTES_AT = 17  # offset int64, size int32, crc int32, magic int8, attributes int8
_NO_LIMIT = 1 << 30  # the builder's size bound: a rebuilt batch holds what its source batch held


class UndecodableBatch(ValueError):
    """A batch whose CRC32C holds but whose records cannot be read: its producer wrote it wrong (a codec frame or
    a record length that does not hold). Forwarded as it is, the target broker would judge it; rebuilt or
    transformed, its records are needed, so the copy stops there, naming it (batchtarget.py)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


def decoded(batch: Batch, reader=None) -> list:
    """Every record of `batch` read at once (kafka-python's record classes, or `reader(batch)`'s iterable), or
    `UndecodableBatch` naming its offset. Any exception is taken: the codecs and kafka-python raise many kinds
    for bytes that do not hold (CorruptRecordError, struct.error, ValueError, zlib, lz4 and zstd errors)."""
    try:
        if reader is not None:
            return list(reader(batch))
        source = MemoryRecords(bytes(batch.raw)).next_batch()
        return [] if source is None else list(source)
    except Exception as e:
        raise UndecodableBatch(batch.base_offset, f"the record batch at offset {batch.base_offset} has a valid CRC32C "
                               f"but its records cannot be read ({type(e).__name__}: {e})") from e


@dataclass(slots=True)
class Rebuilt:
    """A rebuilt batch and the source offsets its records came from."""
    batch: Batch
    source_first: int
    source_last: int


def rebuild(batch: Batch, keep_from: int = 0) -> Rebuilt | None:
    """`batch`'s records at or past `keep_from` as one v2 batch (None when none is), CreateTime timestamps,
    consecutive offsets, the source codec (a legacy message set's codec ids are v2's too)."""
    records = [r for r in decoded(batch) if r.offset >= keep_from]
    if not records:
        return None
    codec = (batch.attributes if batch.magic >= 2 else batch.raw[_LEGACY_ATTRIBUTES_AT]) & COMPRESSION_MASK
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=_NO_LIMIT)
    for i, r in enumerate(records):
        headers = list(getattr(r, "headers", None) or [])
        builder.append(i, r.timestamp if r.timestamp is not None and r.timestamp >= 0 else 0, r.key, r.value,
                       headers)
    out = split_batches(builder.build())
    assert len(out) == 1, "a rebuilt batch is one batch"
    # a compacted batch keeps its header's last offset when its last records went: the range covers it
    return Rebuilt(out[0], records[0].offset, max(batch.last_offset, records[-1].offset))
