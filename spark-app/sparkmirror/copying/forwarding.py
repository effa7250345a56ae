"""A partition's run of batches forwarded as they are, taken whole: whether every batch of it goes as it is, the
producer sequences the batches take, and what they add to the interval's share. One call a partition, in C
(`_forwarding.c`) where the extension was built; the Python below is the reference the tests compare it with, and
the way where no compiler built it. On a compressed topic every source batch goes alone, so these are the lane's
per-batch steps."""
from __future__ import annotations

from collections.abc import Sequence

from .batches import Batch
from .coalesce import mergeable

try:
    from ._merge import first_not_as_is as _first_in_c
    from ._merge import sequences as _sequences_in_c
    from ._merge import tally as _tally_in_c
except ImportError:  # built without a compiler
    _first_in_c = _sequences_in_c = _tally_in_c = None


Tally = tuple[int, int, int, int, int, int]
"""(records, bytes, sum of the records' timestamps, the share's earliest timestamp, first and last target
offset)."""


def first_not_as_is(batches: Sequence[Batch], merge_below: int = 0) -> int:
    """The index of the first batch that must be rebuilt (`Batch.unforwardable`) or, with `merge_below`, would be
    merged (uncompressed and shorter: coalesce.mergeable); -1 when every one goes as it is."""
    if _first_in_c is not None:
        return _first_in_c(batches, merge_below)
    return first_not_as_is_by_python(batches, merge_below)


def first_not_as_is_by_python(batches: Sequence[Batch], merge_below: int = 0) -> int:
    for i, b in enumerate(batches):
        why = b.unforwardable()
        if why is not None or (merge_below and mergeable(b, why, merge_below)):
            return i
    return -1


def sequences(batches: Sequence[Batch], first: int) -> tuple[list[int], int]:
    """Each batch's base sequence from `first` on, and the next one (wrapping at 2**31, as the broker does)."""
    if _sequences_in_c is not None:
        return _sequences_in_c(batches, first)
    return sequences_by_python(batches, first)


def sequences_by_python(batches: Sequence[Batch], first: int) -> tuple[list[int], int]:
    out, seq = [], first
    for b in batches:
        out.append(seq)
        seq = (seq + b.record_count) & 0x7FFFFFFF
    return out, seq


def tally(batches: Sequence[Batch], written: Sequence[int], timestamps: list[int], ts_min: int) -> Tally:
    """What acknowledged batches (`written[i]`: the target base offset batch i got) add to their share; every
    record's timestamp (its batch's max) is appended to `timestamps`, and `ts_min` carried through each batch's
    first timestamp."""
    if _tally_in_c is not None:
        return _tally_in_c(batches, written, timestamps, ts_min)
    return tally_by_python(batches, written, timestamps, ts_min)


def tally_by_python(batches: Sequence[Batch], written: Sequence[int], timestamps: list[int],
                    ts_min: int) -> Tally:
    if len(batches) != len(written):
        raise ValueError("batches and written differ in length")
    records = nbytes = ts_sum = 0
    first = last = -1
    for b, w in zip(batches, written):
        n, ts = b.record_count, b.max_timestamp
        records += n
        nbytes += len(b.raw)
        ts_sum += n * ts
        timestamps += [ts] * n
        if ts_min < 0 or b.base_timestamp < ts_min:
            ts_min = b.base_timestamp
        if first < 0:
            first = w
        last = w + n - 1
    return records, nbytes, ts_sum, ts_min, first, last
