"""Which of the partitions the source gained a lane takes in place (routewatch.RouteWatch._mine): its own, by the
driver's rule, to the remote topic the driver routes them to; none whose remote name another topic has."""
from __future__ import annotations

from sparkmirror.lanes import lane_of
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.routewatch import RouteWatch


def _watch(lane: int) -> RouteWatch:
    cfg = FlowGroupConfig.model_validate({
        "name": "fg", "lanes": 3, "progressTopic": "progress",
        "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"}, {"alias": "b", "bootstrapServers": "127.0.0.1:1"}],
        "mirrors": [{"name": "a-to-b", "source": "a", "target": "b", "topics": ".*"}]})
    # "y" is routed to the remote name a new topic "x" would get: the driver's sync refuses one of the two
    w = RouteWatch(cfg, cfg.mirrors[0], (("orders", "a.orders", 4), ("y", "a.x", 2)), lane)
    w.growing = True
    return w


def test_a_lane_takes_only_its_own_new_partitions_to_their_remote_topics() -> None:
    shares = [_watch(lane)._mine({"orders": 10, "fresh": 5}) for lane in range(3)]
    assert sorted(k for s in shares for k in s) == sorted([("orders", p) for p in range(4, 10)] +
                                                          [("fresh", p) for p in range(5)])
    for lane, share in enumerate(shares):
        assert all(lane_of(t, p, 3) == lane for t, p in share)
        assert all(r == f"a.{t}" for (t, _p), r in share.items())


def test_a_new_topic_whose_remote_name_is_taken_is_left_to_the_next_plan() -> None:
    assert not any(_watch(lane)._mine({"x": 3}) for lane in range(3))


def test_a_watch_not_growing_takes_nothing() -> None:
    w = _watch(0)
    w.growing = False
    assert w._mine({"fresh": 5}) == {}
