"""A lane's RouteWatch sees the source gain a topic, and never holds the copy loop while it asks."""
from __future__ import annotations

import time

from sparkmirror.routewatch import RouteWatch

from .conftest import unique_name, wait_for


class _SlowAdmin:
    """The real admin client, answering `delay` s late (a loaded broker at 10,000 partitions took 3.7 s)."""

    def __init__(self, admin, delay: float) -> None:
        self.admin, self.delay, self.calls = admin, delay, 0

    def list_topics(self, *args, **kw):
        self.calls += 1
        time.sleep(self.delay)
        return self.admin.list_topics(*args, **kw)


def test_route_watch_sees_a_new_topic_without_holding_the_loop(kafka_a, topic, flowgroup):
    prefix = unique_name("rw")
    first = topic(kafka_a, 2, name=f"{prefix}-one")
    cfg = flowgroup(f"{prefix}-.*", mirror={"refreshTopicsIntervalSeconds": 1})
    watch = RouteWatch(cfg, cfg.mirrors[0], ((first, f"a.{first}", 2),))
    slow = watch.admin = _SlowAdmin(watch.admin, 2.0)

    longest = 0.0
    end = time.monotonic() + 4.5  # a request or two, answering nothing new
    while time.monotonic() < end:
        t0 = time.monotonic()
        assert not watch.changed()
        longest = max(longest, time.monotonic() - t0)
        time.sleep(0.01)
    assert slow.calls >= 1
    assert longest < 0.5, f"changed() held its caller {longest:.2f} s while the metadata request took 2 s"

    topic(kafka_a, 3, name=f"{prefix}-two")
    calls: list[bool] = []

    def gained() -> bool:
        calls.append(watch.changed())
        return calls[-1]

    wait_for(gained, 20, "the watch to see the new topic", interval=0.05)
    assert calls.count(True) == 1


def _drain(watch: RouteWatch, seconds: float) -> list:
    """What ready() hands over within `seconds`, asserting the epoch is never ended meanwhile."""
    got: list = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert not watch.changed(), "a lane taking new partitions in place ended its epoch"
        got += watch.ready()
        time.sleep(0.02)
    return got


def test_a_lane_takes_its_share_of_what_the_source_gained_once_the_target_lists_it(kafka_a, kafka_b, topic,
                                                                                  flowgroup):
    """The lane's partitions of a new topic, and of partitions added to a known one, are handed over once the
    target lists their remote partitions (the driver's sync creates them), each once; the other lane's never."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    from sparkmirror.lanes import lane_of

    prefix = unique_name("rwg")
    first = topic(kafka_a, 2, name=f"{prefix}-one")
    topic(kafka_b, 2, name=f"a.{first}")
    cfg = flowgroup(f"{prefix}-.*", mirror={"refreshTopicsIntervalSeconds": 1})
    assert cfg.lanes_of(cfg.mirrors[0]) == 2
    watches = [RouteWatch(cfg, cfg.mirrors[0], ((first, f"a.{first}", 2),), lane) for lane in (0, 1)]
    for w in watches:
        w.growing = True

    second = topic(kafka_a, 6, name=f"{prefix}-two")
    assert _drain(watches[0], 2.5) + _drain(watches[1], 0.5) == [], "handed over before the target had them"
    topic(kafka_b, 6, name=f"a.{second}")
    for lane, w in enumerate(watches):
        got: list = []
        wait_for(lambda: bool(got.extend(_drain(w, 0.2)) or got), 20, f"lane {lane}'s partitions of {second}")
        got += _drain(w, 1.5)  # and nothing more, nor twice
        assert [(p.source_topic, p.partition, p.target_topic) for p in got] == [
            (second, p, f"a.{second}") for p in range(6) if lane_of(second, p, 2) == lane]

    for cluster, name in ((kafka_a, first), (kafka_b, f"a.{first}")):
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_partitions([NewPartitions(name, 5)])[name].result(30)
    grown = [p for p in range(2, 5) if lane_of(first, p, 2) == 0]
    got = []
    wait_for(lambda: bool(got.extend(_drain(watches[0], 0.2)) or got), 20, f"lane 0's new partitions of {first}")
    assert sorted(p.partition for p in got + _drain(watches[0], 1.5)) == grown


def test_a_watch_that_cannot_take_them_ends_the_epoch(kafka_a, topic, flowgroup):
    """Without a lane index (or before its copier runs the loop) a gain ends the epoch, as before; a watch whose
    epoch another worker runs stands aside."""
    prefix = unique_name("rwe")
    first = topic(kafka_a, 2, name=f"{prefix}-one")
    cfg = flowgroup(f"{prefix}-.*", mirror={"refreshTopicsIntervalSeconds": 1})
    routes = ((first, f"a.{first}", 2),)
    ending, aside = RouteWatch(cfg, cfg.mirrors[0], routes, 0), RouteWatch(cfg, cfg.mirrors[0], routes, 0)
    aside.elsewhere = True
    topic(kafka_a, 2, name=f"{prefix}-two")
    wait_for(ending.changed, 20, "the watch to end the epoch", interval=0.05)
    assert not aside.changed() and aside.ready() == [] and aside._asked is None
    assert aside.routes() == [(first, f"a.{first}", 2)]
