"""Routes kept fresh on their own thread: planning reads them without waiting for a sync, a lane's early end
asks for a fresh one, outages keep the last routes, a permanent error reaches the planner."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying.errors import transient_reason
from sparkmirror.liveroutes import LiveRoutes, last_tick
from sparkmirror.outage import Backoff, Retrying


def _retrying(first: float = 0.05) -> Retrying:
    return Retrying("mirror 'm' topic management", "a cluster", transient_reason, Backoff(first=first, jitter=0.0))


class Source:
    """What `TopicSync.sync()` would answer, one answer per call, each call taking `seconds`."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds, self.calls, self.topics = seconds, 0, ["t0"]
        self.fail: BaseException | None = None
        self.release = threading.Event()
        self.release.set()
        self.checks = threading.Event()  # what holds the checks a sync runs after publishing its routes
        self.checks.set()

    def sync(self, publish=None) -> list[tuple[str, str, int]]:
        self.calls += 1
        self.release.wait(10)
        time.sleep(self.seconds)
        if self.fail is not None:
            raise self.fail
        routes = [(t, f"a.{t}", 1) for t in self.topics]
        if publish is not None:
            publish(routes)
        self.checks.wait(10)
        return routes


def test_planning_reads_the_last_routes_while_a_sync_runs() -> None:
    src = Source()
    live = LiveRoutes(src.sync, interval=0.2, retrying=_retrying())
    try:
        assert live.current(wait=5) == [("t0", "a.t0", 1)]
        src.release.clear()  # the next sync hangs, as one of 1,000 topics with a slow cluster would
        time.sleep(0.4)
        t0 = time.monotonic()
        assert live.current() == [("t0", "a.t0", 1)]
        assert time.monotonic() - t0 < 0.05
    finally:
        src.release.set()
        live.close()


def test_a_fresh_sync_sees_what_the_source_gained_before_the_interval() -> None:
    src = Source(seconds=0.1)
    live = LiveRoutes(src.sync, interval=60.0, retrying=_retrying())
    try:
        assert live.current(wait=5) == [("t0", "a.t0", 1)]
        src.topics.append("t1")
        assert live.current() == [("t0", "a.t0", 1)]  # the next periodic sync is a minute away
        assert live.fresh(timeout=5) == [("t0", "a.t0", 1), ("t1", "a.t1", 1)]
        assert src.calls == 2
    finally:
        live.close()


def test_a_fresh_sync_asked_during_one_waits_for_the_next() -> None:
    """A sync begun before the lane saw the new topic may have missed it: the answer comes from a later one."""
    src = Source()
    live = LiveRoutes(src.sync, interval=60.0, retrying=_retrying())
    try:
        live.current(wait=5)
        src.release.clear()
        live.fresh(timeout=0.2)  # begins sync 2, which hangs before listing
        src.topics.append("t1")  # ... so sync 2 might not see this; ask again
        got: list = []
        asker = threading.Thread(target=lambda: got.append(live.fresh(timeout=5)))
        asker.start()
        time.sleep(0.2)
        src.release.set()
        asker.join(10)
        assert got == [[("t0", "a.t0", 1), ("t1", "a.t1", 1)]] and src.calls == 3
    finally:
        live.close()


def test_an_outage_keeps_the_last_routes_and_a_refusal_reaches_the_planner(caplog) -> None:
    src = Source()
    live = LiveRoutes(src.sync, interval=0.05, retrying=_retrying())
    try:
        assert live.current(wait=5) == [("t0", "a.t0", 1)]
        with caplog.at_level("WARNING", logger="sparkmirror.outage"):
            src.fail = KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
            calls = src.calls
            deadline = time.monotonic() + 5
            while src.calls < calls + 3 and time.monotonic() < deadline:
                assert live.current() == [("t0", "a.t0", 1)]
                time.sleep(0.02)
            assert src.calls >= calls + 3, "retried"
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and "unreachable since" in said[0] and "1/1 brokers are down" in said[0], said
        src.fail = PermissionError("clusters[b]: SASL authentication failed")
        with pytest.raises(PermissionError, match="clusters\\[b\\]"):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                live.current()
                time.sleep(0.02)
    finally:
        live.close()


def test_close_ends_the_thread() -> None:
    src = Source()
    live = LiveRoutes(src.sync, interval=60.0, retrying=_retrying(), name="topic-sync-close-test")
    live.current(wait=5)
    live.close()
    deadline = time.monotonic() + 5
    while any(t.name == "topic-sync-close-test" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name == "topic-sync-close-test" for t in threading.enumerate())


def test_a_fresh_sync_since_the_lanes_looked_is_the_one_running() -> None:
    """The lanes looked at the tick the running sync began at: its answer has what they saw, so the planner waits
    for it to end, not for another whole sync after it (3-7 s at 1,000 topics on a loaded machine)."""
    src = Source()
    live = LiveRoutes(src.sync, interval=60.0, retrying=_retrying())
    try:
        live.current(wait=5)
        src.release.clear()
        live.fresh(timeout=0.2)  # sync 2 begins now and hangs before listing: as one begun at the lanes' tick
        looked = time.time()
        src.topics.append("t1")
        got: list = []
        asker = threading.Thread(target=lambda: got.append(live.fresh(timeout=5, since=looked - 1.0)))
        asker.start()
        time.sleep(0.2)
        src.release.set()
        asker.join(10)
        assert got == [[("t0", "a.t0", 1), ("t1", "a.t1", 1)]] and src.calls == 2, "waited for sync 2 only"
        assert live.fresh(timeout=5, since=time.time()) == got[0] and src.calls == 3, "a later look: a new sync"
    finally:
        live.close()


def test_syncs_begin_at_the_ticks_the_lanes_look_at() -> None:
    src = Source()
    began: list[float] = []
    sync = src.sync
    live = LiveRoutes(lambda publish: (began.append(time.time()), sync(publish))[1], interval=0.5,
                      retrying=_retrying())
    try:
        deadline = time.monotonic() + 5
        while len(began) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(began) >= 4
        for t in began[1:]:  # the first begins at once
            assert t - last_tick(0.5, t) < 0.1, began
    finally:
        live.close()


def test_a_fresh_sync_answers_once_its_routes_are_decided() -> None:
    """TopicSync hands its routes over before its ACL sync and recreated-topic check (2-3 s at 10,000 partitions)."""
    src = Source()
    live = LiveRoutes(src.sync, interval=60.0, retrying=_retrying())
    try:
        live.current(wait=5)
        src.checks.clear()  # the next sync's checks hang
        src.topics.append("t1")
        t0 = time.monotonic()
        assert live.fresh(timeout=5) == [("t0", "a.t0", 1), ("t1", "a.t1", 1)]
        assert time.monotonic() - t0 < 2, "waited for the checks"
    finally:
        src.checks.set()
        live.close()


def test_an_early_end_whose_tick_sync_missed_the_new_topic_asks_once_more() -> None:
    """The lanes ask the source up to a commit interval after the tick; a sync begun at the tick may have listed it
    before the new topic existed. Planning with the same routes again would cost another tick and epoch end."""
    from sparkmirror.datasource import MirrorStreamReader
    from sparkmirror.resource.flowgroup import FlowGroupConfig

    cfg = FlowGroupConfig.model_validate({
        "name": "fg", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                   {"alias": "b", "bootstrapServers": "127.0.0.1:2"}],
        "mirrors": [{"name": "a-to-b", "source": "a", "target": "b", "topics": "t.*"}], "epochSeconds": 30})
    src = Source()
    live = LiveRoutes(src.sync, interval=3600.0, retrying=_retrying())  # sync 1 begins after the hour's tick
    try:
        reader = MirrorStreamReader({"config": cfg.model_dump_json(), "mirror": "a-to-b"})
        reader._live = live
        reader._plan = (tuple(live.current(wait=5)), [])  # the running epoch's routes
        src.topics.append("t1")  # what the lanes saw after sync 1 had listed the source
        reader._planned_at = time.monotonic()  # ... so they ended the epoch early
        reader.latestOffset()
        assert src.calls == 2 and live.current() == [("t0", "a.t0", 1), ("t1", "a.t1", 1)]
    finally:
        live.close()
