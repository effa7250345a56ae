"""The progress record's format: bytes were added within format version 1, so old and new readers agree."""
from __future__ import annotations

import json

from sparkmirror.progress.record import ProgressRecord


def test_bytes_round_trip_and_records_without_them_read_as_zero() -> None:
    rec = ProgressRecord("a", "t", 0, 11, 5, 10, "a.t", 20, 25, 6, 1_700_000_000_000, 2, "g", "m", 1, bytes=600)
    assert ProgressRecord.decode(rec.key(), rec.value()) == rec
    old = {k: v for k, v in json.loads(rec.value()).items() if k != "bytes"}  # written before bytes existed
    assert old["v"] == 1
    assert ProgressRecord.decode(rec.key(), json.dumps(old).encode()).bytes == 0
