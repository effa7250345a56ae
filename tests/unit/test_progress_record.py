"""The progress record's format: bytes were added within format version 1, so old and new readers agree."""
from __future__ import annotations

import json

from sparkmirror.progress.record import ProgressRecord
from sparkmirror.progress.state import ProgressState


def test_bytes_round_trip_and_records_without_them_read_as_zero() -> None:
    rec = ProgressRecord("a", "t", 0, 11, 5, 10, "a.t", 20, 25, 6, 1_700_000_000_000, 2, "g", "m", 1, bytes=600)
    assert ProgressRecord.decode(rec.key(), rec.value()) == rec
    old = {k: v for k, v in json.loads(rec.value()).items() if k != "bytes"}  # written before bytes existed
    assert old["v"] == 1
    assert ProgressRecord.decode(rec.key(), json.dumps(old).encode()).bytes == 0


def test_a_failover_mark_stops_every_generation_until_undone() -> None:
    from sparkmirror.progress.record import decode_mark_key, failover_key, generation_key

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


def test_anchors_extend_the_offset_map_beyond_compaction_and_never_reset_it() -> None:
    from sparkmirror.progress import ProgressRecord, ProgressState
    from sparkmirror.progress.record import anchor_key, decode_mark_key

    def rec(first: int, last: int, tgt: int, src_id: str = "id1") -> ProgressRecord:
        n = last - first + 1
        return ProgressRecord("a", "t", 0, last + 1, first, last, "a.t", tgt, tgt + n - 1, n, 0, 1,
                              source_topic_id=src_id, records_total=last + 1)

    assert decode_mark_key(anchor_key("a", "t", 3, "ns/r", 7)) == ("anchorOf", ("a", "t", 3, "ns/r", 7))
    assert decode_mark_key(rec(0, 9, 0).anchor_key()) == ("anchorOf", ("a", "t", 0, "", 0))
    # what a compacted topic holds, in log order: anchors of old blocks, then the latest record and its anchor
    s = ProgressState()
    for r in (rec(0, 9, 0), rec(60_000, 60_009, 61_000)):
        s.add_anchor(r)
    latest = rec(120_000, 120_009, 122_000)
    s.add(latest)
    s.add_anchor(latest)  # written right after its progress record: already held
    m = s.maps[("a", "t", 0)]
    assert [r.source_first for r in m.records] == [0, 60_000, 120_000]
    assert s.latest[("a", "t", 0)] == latest and s.totals[("a", "t", 0)] == 120_010
    # read in commit order, a later anchor of other offsets or another topic id is newer history: it starts over
    s.add_anchor(rec(30_000, 30_009, 30_500))
    assert [r.source_first for r in s.maps[("a", "t", 0)].records] == [30_000]
    s.add(rec(40_000, 40_009, 40_500))
    s.add_anchor(rec(130_000, 130_009, 132_000, src_id="id2"))
    assert [r.source_first for r in s.maps[("a", "t", 0)].records] == [130_000]
    # a progress record of a recreated topic does too
    s.add(rec(0, 4, 200_000, src_id="id3"))
    assert [r.source_first for r in s.maps[("a", "t", 0)].records] == [0]


def test_translation_counts_across_dropped_ranges_only_where_records_were_copied() -> None:
    from sparkmirror.progress import OffsetMap, ProgressRecord

    def rec(first: int, last: int, tgt_first: int, tgt_last: int, count: int) -> ProgressRecord:
        return ProgressRecord("a", "t", 0, last + 1, first, last, "a.t", tgt_first, tgt_last, count, 0, 1)

    # held: source 0..9 -> target 0..9, then (ranges dropped) source 500..509 -> target 480..489
    m = OffsetMap([rec(0, 9, 0, 9, 10), rec(11, 19, 11, 19, 9), rec(500, 509, 480, 489, 10)])
    calls = []

    def between(before, after, start, o):
        calls.append((before.source_last, after.source_first, start, o))
        return start + (o - 20)  # pretend the stretch copied every offset from 20 on

    assert m.translate(10, None, between) == 10   # a marker between adjacent ranges: no counting
    assert m.translate(300, None, between) == 20 + 280
    assert calls == [(19, 500, 20, 300)]
    assert m.translate(300) == 20                  # not counting: repeat, never skip
    assert m.translate(300, None, lambda *a: 10_000) == 20  # an answer outside the stretch is not believed
    assert m.translate(505, None, between) == 485  # inside a held range: arithmetic


def test_dead_anchor_blocks_are_those_before_the_target_retention() -> None:
    from sparkmirror.progress import OffsetMap, ProgressRecord
    from sparkmirror.progress.record import ANCHOR_EVERY

    def rec(first: int, tgt: int) -> ProgressRecord:
        return ProgressRecord("a", "t", 0, first + 10, first, first + 9, "a.t", tgt, tgt + 9, 10, 0, 1)

    b = ANCHOR_EVERY
    m = OffsetMap([rec(0, 0), rec(b, 1_000), rec(2 * b + 5, 2_000), rec(3 * b, 3_000), rec(3 * b + 20, 3_020)])
    assert m.dead_blocks(0) == []            # retention deleted nothing
    assert m.dead_blocks(500) == []          # inside block 0's stretch: it still translates
    assert m.dead_blocks(1_000) == [0]
    assert m.dead_blocks(2_500) == [0, 1]
    assert m.dead_blocks(10**9) == [0, 1, 2]  # the newest block stays whatever retention did


def test_a_stretch_translates_only_when_both_sides_hold_the_same_records(monkeypatch) -> None:
    """Counting across dropped ranges reads both sides whole: a compacted topic (fewer records on one side)
    gives no answer rather than a position that would skip records."""
    from array import array

    from sparkmirror.sourcecounter import SourceCounter
    from sparkmirror.progress import Range

    before = Range(0, 9, 0, 9, 10, 0, 0, "a.t", "t", 0, "m", "a")
    after = Range(100, 109, 17, 26, 10, 0, 0, "a.t", "t", 0, "m", "a")
    counter = SourceCounter({"bootstrap.servers": "127.0.0.1:1"}, target_conf={"bootstrap.servers": "127.0.0.1:1"})
    sides = {"t": array("q", [10, 12, 13, 50, 98]), "a.t": array("q", [11, 12, 13, 14, 15])}
    monkeypatch.setattr(counter, "_offsets", lambda c, topic, *a: sides[topic])
    assert [counter.between(before, after, 10, o) for o in (10, 11, 13, 14, 51, 99)] == [11, 12, 13, 14, 15, 17]
    counter._stretches.clear()
    sides["a.t"] = array("q", [11, 12, 14, 15])  # one record less on the target (compacted away)
    assert counter.between(before, after, 10, 51) is None
    counter.close()


def test_a_take_back_outranks_the_revoked_generation_even_when_its_mark_comes_late() -> None:
    """Generation 2 took over from 1 and failed before its first commit; 1 takes the flow group back (revoking
    2): 2's lanes may not copy, also after a late mark of 2's driver; a later generation 3 outranks the take-back.
    The same read from the records a reader sees (compaction keeps the last per key)."""
    from sparkmirror.progress.record import generation_value

    of = ("ns/r", "uid", "fg")
    st = ProgressState()
    st.mark_generation(of, 1, {"b": ["l-0"]}, True)
    st.mark_generation(of, 2, {"b": ["l2-0"]}, False)
    st.mark_generation(of, 2, {"b": ["l2-0"]}, True)
    assert st.may_copy(*of, 2) is True and st.may_copy(*of, 1) is False
    st.mark_generation(of, 1, {"b": ["l-0"]}, False, revoked=2)  # take-back, phase 1
    assert st.may_copy(*of, 1) is None and st.may_copy(*of, 2) is False
    assert "generation 2 of flow group 'fg' was rolled back" in (st.superseded_why(*of, 2) or "")
    assert st.superseded_why(*of, 1) is None and st.rolled_back(*of, 2) and not st.rolled_back(*of, 3)
    st.mark_generation(of, 2, {"b": ["l2-0"]}, True)  # generation 2's driver, late: ignored
    st.mark_generation(of, 1, {"b": ["l-0"]}, True, revoked=2)  # take-back, phase 2
    assert st.may_copy(*of, 1) is True and st.may_copy(*of, 2) is False and st.generation(*of) == 1
    assert st.generation_ids[of] == {"b": ["l-0"]} and st.ceiling(*of) == 2
    assert st.may_copy(*of, 3) is None  # a future standby waits for its own go
    st.mark_generation(of, 3, {"b": ["l3-0"]}, True)  # the next handoff
    assert st.may_copy(*of, 3) is True and st.may_copy(*of, 1) is False and not st.rolled_back(*of, 2)
    assert "taken over by worker generation 3" in (st.superseded_why(*of, 2) or "")
    v = json.loads(generation_value(1, "fg", 0, {}, True, revoked=2))
    assert v["revoked"] == 2 and "revoked" not in json.loads(generation_value(3, "fg", 0, {}, True))


def test_commit_spans_keep_each_generations_first_and_last_commit_of_records_per_partition() -> None:
    """What a handoff's visible pause is read from (handoff/pause.py): per flow group, generation and source
    partition, the first and last commitMs of ranges that committed records; a range that committed none shows
    nothing to a reader. The pause is the longest per-partition gap: on kind a generation's second lane took its
    partitions over 23 s after the first, so flow-group-wide spans overlapped and no pause was reported."""
    from sparkmirror.handoff.pause import visible_pause

    def rec(first: int, count: int, at_ms: int, gen: int, group: str = "g", p: int = 0) -> ProgressRecord:
        return ProgressRecord("a", "t", p, first + 10, first, first + 9, "a.t", first, first + 9, count, at_ms, gen,
                              group)

    state = ProgressState()
    for r in (rec(0, 10, 1_000, 1), rec(10, 10, 1_100, 1), rec(20, 0, 2_500, 1), rec(20, 10, 2_900, 2),
              rec(30, 10, 3_000, 2), rec(40, 10, 3_050, 2, "other"), rec(0, 10, 1_000, 1, p=1),
              rec(10, 10, 2_950, 1, p=1)):  # partition 1's lane handed over later than partition 0's
        state.add(r)
    p0, p1 = ("a", "t", 0), ("a", "t", 1)
    assert state.commit_spans == {("g", 1, p0): (1_000, 1_100), ("g", 2, p0): (2_900, 3_000),
                                  ("other", 2, p0): (3_050, 3_050), ("g", 1, p1): (1_000, 2_950)}
    assert visible_pause(state.commit_spans, ("g", 2), {("g", 1)}) == 1_800  # p0 (as after a split: p1 elsewhere)
    state.add(rec(20, 10, 3_400, 2, p=1))
    assert visible_pause(state.commit_spans, ("g", 2), {("g", 1)}) == 1_800  # p0: 1,800; p1: 450
    assert visible_pause(state.commit_spans, ("g", 3), {("g", 2)}) is None
    assert visible_pause(state.commit_spans, ("g", 1), {("g", 2)}) is None  # below 0: a reused topic
