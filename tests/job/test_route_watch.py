"""A lane's RouteWatch sees the source gain a topic, and never holds the copy loop while it asks."""
from __future__ import annotations

import time

from sparkmirror.datasource import RouteWatch

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
