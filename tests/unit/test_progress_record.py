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


def test_a_failover_mark_stops_every_generation_until_undone() -> None:
    from sparkmirror.progress.record import decode_mark_key, failover_key, generation_key
    from sparkmirror.progress.state import ProgressState

    of = ("ns/r", "uid", "fg")
    assert decode_mark_key(failover_key(*of)) == ("failoverOf", of)
    assert decode_mark_key(generation_key(*of)) == ("generationOf", of)
    assert decode_mark_key(b'["a","t",0]') is None
    st = ProgressState()
    st.mark_generation(of, 3, {"b": ["t.lane-0"]}, True)
    assert st.superseded_why(*of, 3) is None and st.may_copy(*of, 3)
    st.mark_failover(of, {"active": True, "atMs": 1_700_000_000_000, "mirrors": ["a-to-b"]})
    why = st.superseded_why(*of, 3)
    assert why is not None and "was failed over at 2023-11-14 22:13:20 UTC" in why and "a-to-b" in why
    assert "failover --undo" in why
    # a later generation taking over (a rollout, a handoff) does not undo it: no generation may copy
    st.mark_generation(of, 4, {"b": ["t.lane-0"]}, True)
    assert "failed over" in (st.superseded_why(*of, 4) or "") and st.may_copy(*of, 4) is False
    st.mark_failover(of, {"active": False, "atMs": 1_700_000_100_000, "mirrors": []})  # --undo
    assert of not in st.failovers
    assert st.superseded_why(*of, 4) is None and "taken over by worker generation 4" in (st.superseded_why(*of, 3) or "")


def test_acl_records_and_unknown_mark_kinds_are_told_apart_from_progress() -> None:
    """An ACL record's key is a mark of its own kind (never a progress key, never a ValueError); a kind a later
    version adds is (its kind, ()) for readers to skip."""
    from sparkmirror.progress.record import acls_key, acls_value, decode_mark_key

    assert decode_mark_key(acls_key("ns/r", "a-to-b")) == ("aclsOf", ("ns/r", "a-to-b"))
    assert decode_mark_key(b'{"somethingLaterOf":["ns/r"]}') == ("somethingLaterOf", ())
    row = ["TOPIC", "a.t", "LITERAL", "User:alice", "*", "READ", "ALLOW"]
    assert json.loads(acls_value([row], 5)) == {"v": 1, "bindings": [row], "atMs": 5}
