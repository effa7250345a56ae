"""Pure planning: lane assignment stability, transactional ids, progress format and offset translation."""
from __future__ import annotations

import pytest

from sparkmirror.lanes import LanePlanner, lane_of, plan_lanes
from sparkmirror.resource.names import transactional_id
from sparkmirror.progress import OffsetMap, ProgressRecord, progress_key


def _owner(lanes) -> dict:
    return {(p.source_topic, p.partition): lane.index for lane in lanes for p in lane.partitions}


def test_adding_topics_and_partitions_never_moves_a_partition():
    before = _owner(plan_lanes("m", 4, [("orders", "a.orders", 6), ("users", "a.users", 3)]))
    after = _owner(plan_lanes("m", 4, [("audit", "a.audit", 5), ("orders", "a.orders", 12),
                                       ("users", "a.users", 3)]))
    assert all(after[k] == v for k, v in before.items())
    assert len(after) == 20 and len(set(after.values())) == 4  # new ones spread over every lane


def test_a_topics_partitions_are_balanced_over_lanes():
    for topic in ("orders", "users", "x", "payments-eu"):
        counts = [len(lane.partitions) for lane in plan_lanes("m", 3, [(topic, f"a.{topic}", 7)])]
        assert sorted(counts) == [2, 2, 3]


def test_plan_is_deterministic_and_complete():
    routes = [(f"t{i}", f"a.t{i}", 8) for i in range(10)]
    a, b = plan_lanes("m", 3, routes), plan_lanes("m", 3, list(reversed(routes)))
    assert a == b and len(a) == 3
    assert sorted(k for lane in a for k in [(p.source_topic, p.partition) for p in lane.partitions]) == sorted(
        (f"t{i}", p) for i in range(10) for p in range(8))
    assert all(lane_of("t1", 3, 3) == lane_of("t1", 3, 3) for _ in range(3))
    assert all(lane.index == lane_of(p.source_topic, p.partition, 3) for lane in a for p in lane.partitions)
    assert all(list(lane.partitions) == sorted(lane.partitions) for lane in a)  # the dataclass order
    with pytest.raises(ValueError):
        lane_of("t", 0, 0)
    with pytest.raises(ValueError):
        plan_lanes("m", 0, routes)


def test_a_planner_splits_only_the_routes_that_changed():
    """A kept planner plans what a fresh one does as routes come and go, reusing the split of unchanged routes."""
    planner = LanePlanner("m", 3)
    routes = [(f"t{i:03d}", f"a.t{i:03d}", 1 + i % 7) for i in range(200)]
    first = planner.plan(routes)
    assert first == plan_lanes("m", 3, list(reversed(routes)))
    grown = [r for r in routes if r[0] != "t005"] + [("t100", "a.t100", 9), ("new", "a.new", 4)]
    grown.remove(("t100", "a.t100", 3))
    second = planner.plan(grown)
    assert second == plan_lanes("m", 3, grown)
    kept = {(p.source_topic, p.partition): p for lane in first for p in lane.partitions}
    assert all(p is kept[(p.source_topic, p.partition)] for lane in second for p in lane.partitions
               if p.source_topic not in ("t100", "new"))  # unchanged routes: the same objects, not split again
    assert not any(p.source_topic == "t005" for lane in second for p in lane.partitions)


def test_transactional_id_is_stable_and_safe():
    assert transactional_id("ns/res", "fg", "a-to-b", 3) == "sparkmirror.ns.res.fg.a-to-b.lane-3"
    assert transactional_id("ns/res", "fg one", "a/b", 0) == "sparkmirror.ns.res.fg_one.a_b.lane-0"
    # two resources with the same flow groups and aliases never share (and fence) a lane's id
    assert transactional_id("ns/one", "fg", "m", 0) != transactional_id("ns/two", "fg", "m", 0)


def _rec(src: tuple[int, int], tgt: tuple[int, int], count: int) -> ProgressRecord:
    return ProgressRecord("a", "t", 0, src[1] + 1, src[0], src[1], "a.t", tgt[0], tgt[1], count, 1, 1)


def test_progress_record_round_trip_and_version():
    r = _rec((10, 19), (31, 40), 10)
    assert ProgressRecord.decode(r.key(), r.value()) == r
    assert r.key() == progress_key("a", "t", 0) == b'["a","t",0]'  # written before resources were named
    with pytest.raises(ValueError, match="format version"):
        ProgressRecord.decode(r.key(), r.value().replace(b'"v":1', b'"v":99'))


def test_offset_translation_is_exact_at_boundaries_and_never_skips():
    m = OffsetMap([_rec((0, 9), (0, 9), 10),          # dense: exact inside
                   _rec((10, 19), (11, 21), 8),       # gaps (markers, aborted records): conservative inside
                   _rec((25, 29), (23, 27), 5)])      # source gap 20..24 (markers) between commits
    assert m.translate(0) == 0 and m.translate(5) == 5 and m.translate(10) == 11
    assert m.translate(15) == 11                      # start of its range: repeats, never skips
    assert m.translate(20) == 22 and m.translate(24) == 22
    assert m.translate(30) == 28                      # the committed end
    assert OffsetMap().translate(3) is None


def test_progress_state_one_tombstone_and_reset_rule_and_bounded_history():
    from sparkmirror.progress import ProgressState

    s = ProgressState(max_history=3)
    for first in range(0, 50, 10):
        s.add(_rec((first, first + 9), (first, first + 9), 10))
    k = ("a", "t", 0)
    assert [r.source_first for r in s.maps[k].records] == [20, 30, 40]      # bounded: oldest dropped
    assert s.latest[k].next_offset == 50 and s.totals[k] == 50               # totals count everything read
    assert s.maps[k].translate(45) == 45 and s.maps[k].translate(10) is None  # older than the history held
    s.add(_rec((0, 4), (100, 104), 5))                                       # went backwards: started over
    assert [r.source_first for r in s.maps[k].records] == [0] and s.totals[k] == 5
    s.reset(k)                                                               # a tombstone: all of it gone
    assert k not in s.latest and k not in s.maps and k not in s.totals
    assert s.resume_offsets("a") == {}


def test_progress_totals_are_the_running_totals_the_records_carry():
    """Compaction leaves only the latest records: the totals come from what they carry, not from a sum."""
    from dataclasses import replace

    from sparkmirror.progress import ProgressState

    k = ("a", "t", 0)
    r = replace(_rec((90, 99), (95, 104), 10), bytes=1000, records_total=100, bytes_total=10_000)
    assert ProgressRecord.decode(r.key(), r.value()) == r
    s = ProgressState()
    s.add(r)                                            # all a compacted topic still holds of this key
    assert s.totals[k] == 100 and s.bytes_totals[k] == 10_000
    assert s.resume_totals("a") == {("t", 0): (100, 10_000)} and s.resume_totals("b") == {}
    s.add(replace(_rec((100, 104), (105, 109), 5), bytes=500, records_total=105, bytes_total=10_500))
    assert s.resume_totals("a") == {("t", 0): (105, 10_500)}
    old = ProgressState()                               # records written before the totals: summed, as before
    old.add(_rec((0, 9), (0, 9), 10))
    old.add(replace(_rec((10, 19), (10, 19), 10), bytes=7))
    assert old.resume_totals("a") == {("t", 0): (20, 7)}


def test_latency_buckets_are_cumulative_per_bound():
    from sparkmirror.copying.summary import LATENCY_BUCKETS_MS, latency_le

    le = latency_le(10_000, [10_000, 9_996, 9_990, 9_000, 0])  # latencies 0, 4, 10, 1000 and 10000 ms
    assert dict(zip(LATENCY_BUCKETS_MS, le)) == {5: 2, 10: 3, 25: 3, 50: 3, 100: 3, 250: 3, 500: 3, 1000: 4,
                                                 2500: 4, 5000: 4, 10_000: 5, 30_000: 5, 60_000: 5, 300_000: 5}


def test_partition_lag_counts_records_when_known():
    from sparkmirror.progress import EXACT_LAG_BELOW, partition_lag, partition_lags, should_count

    assert partition_lag(0, 11, None) == 11 and partition_lag(0, 11, None, counted=10) == 10
    assert partition_lag(5, 11, 3) == 6                                      # below the low watermark: from it
    assert partition_lag(0, 11, 12) == 0                                     # never negative
    assert should_count(0, 11, 10) and not should_count(0, 11, 11) and not should_count(0, EXACT_LAG_BELOW + 1, 0)
    spans = []
    lags = partition_lags({"x": (0, 11), "y": (0, 5000), "z": (0, 7)}, {"x": 10, "z": 7},
                          lambda s: spans.append(s) or {"x": 0})
    assert lags == {"x": 0, "y": 5000, "z": 0} and spans == [{"x": (10, 11)}]


def test_takeover_fences_old_lanes_whose_partitions_move():
    """Same lanes: the new lanes fence their own ids as they start. Another lane count or flow group: every old
    id is fenced before any new lane reads the progress topic (a partition moves to another lane id)."""
    from sparkmirror.handoff.takeover import _to_fence
    from sparkmirror.resource.flowgroup import FlowGroupConfig, Predecessor
    from sparkmirror.resource.names import transactional_ids

    def cfg(name: str, lanes: int) -> FlowGroupConfig:
        return FlowGroupConfig.model_validate({
            "name": name, "resource": "ns/r", "lanes": lanes,
            "clusters": [{"alias": "a", "bootstrapServers": "a:1"}, {"alias": "b", "bootstrapServers": "b:1"}],
            "mirrors": [{"name": "m", "source": "a", "target": "b"}]})

    def pred(c: FlowGroupConfig) -> Predecessor:
        return Predecessor(flowGroup=c.name, generation=1,
                           transactionalIds=transactional_ids(c.resource, c.name, c.lane_routes()))

    assert _to_fence(cfg("g", 2), [pred(cfg("g", 2))], {"a", "b"}) == set()
    assert _to_fence(cfg("g", 3), [pred(cfg("g", 2))], {"a", "b"}) == {
        ("b", "sparkmirror.ns.r.g.m.lane-0"), ("b", "sparkmirror.ns.r.g.m.lane-1")}
    assert len(_to_fence(cfg("g-1", 2), [pred(cfg("g", 2))], {"a", "b"})) == 2  # a split: other ids
    assert _to_fence(cfg("g", 3), [pred(cfg("g", 2))], {"a"}) == set()  # that target is not written any more


def test_offset_history_is_bounded_and_small(figure):
    """The driver follows every partition's progress for hours: what it holds per committed range is bounded
    by `spark.offsetHistory` and small (integer columns, not record objects), and trimming stays cheap. Sized by
    the columns' own allocations: tracemalloc in a process with Spark's threads can crash CPython 3.11."""
    import sys

    from sparkmirror.progress import ProgressState

    s = ProgressState(max_history=20_000)
    recs = [_rec((i * 10, i * 10 + 9), (i * 11, i * 11 + 9), 10) for i in range(60_000)]
    for r in recs:
        s.add(r)
    m = s.maps[("a", "t", 0)]
    held = sum(sys.getsizeof(c) for c in m._cols)
    assert len(m) == 20_000 and m.records[0].source_first == 400_000 and m.records[-1].source_first == 599_990
    assert m.translate(400_005) == 440_005 and m.translate(399_999) is None and m.translate(600_000) == 659_999
    figure("bytes_per_range", f"{held / 20_000:.0f} bytes held per range kept")
    assert held < 20_000 * 100  # columns of 7 integers, with at most an eighth more held between trims
