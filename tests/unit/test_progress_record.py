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


def test_a_failover_mark_stops_older_generations_until_a_later_mark_clears_it() -> None:
    from sparkmirror.progress.state import ProgressState

    of = ("ns/r", "uid", "fg")
    st = ProgressState()
    st.mark_generation(of, 3, {"b": ["t.lane-0"]}, True)
    assert st.superseded_why(*of, 3) is None
    st.mark_generation(of, 4, {}, False, {"atMs": 1_700_000_000_000, "mirrors": ["a-to-b"]})
    why = st.superseded_why(*of, 3)
    assert why is not None and "was failed over at 2023-11-14 22:13:20 UTC" in why and "a-to-b" in why
    assert "failover --undo" in why
    st.mark_generation(of, 4, {}, True)  # the same generation again (its go mark): still failed over
    assert "failed over" in (st.superseded_why(*of, 3) or "")
    st.mark_generation(of, 5, {}, False)  # --undo
    assert of not in st.failovers
    assert st.superseded_why(*of, 5) is None and "taken over by worker generation 5" in (st.superseded_why(*of, 4) or "")
