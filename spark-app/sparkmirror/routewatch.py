"""Executor side: a lane watches its source for topics and partitions its epoch's plan does not cover.

A lane running its own copy loop takes its share of them in place (`RouteWatch.ready`): the partitions that
hash to it (lanes.lane_of, the same rule the driver plans with) are added to its clients mid-epoch as soon as
the target lists their remote partitions (the driver's topic sync creates them, at the same tick). Ending the
epoch for them instead cost a whole epoch boundary: at 10,000 partitions a new topic copied 5.7-12.9 s after
its creation, 4-9 s of it the boundary (bench/results/scale.md). The next epoch's plan holds them anyway, so
the lane's kept clients go on without a change (sessions.grows).

When the worker keeping the lane's clients runs the epoch for its task (delegate.py), that worker's own watch
takes them (the request carries the routes) and the task's watch stands aside (`elsewhere`). A watch without
a lane index ends the epoch early instead, and the driver plans the next one from a sync that has seen them
(`changed`).

The driver's TopicSync stays the only one that creates or syncs topics; the watch only reads.

With deletion propagation on (`deleteRemoteTopics`), a topic the source gained whose remote topic the target
already lists at the first look is left to the next epoch's plan: it may be a source topic created again whose
old remote topic the driver holds until the grace has passed (topicdeletion.py), and only the driver's sync
knows. Taking it in place would copy the new topic into the old remote one.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from .lanes import LanePartition, lane_of
from .liveroutes import last_tick
from .resource.flowgroup import FlowGroupConfig, Mirror

log = logging.getLogger("sparkmirror.routewatch")

_LOOKUPS = ThreadPoolExecutor(2, thread_name_prefix="route-watch")
"""Runs the watch's metadata requests, so a lane's copy loop never waits for one."""

TARGET_CHECK_S = 0.5
"""How often a lane asks the target whether the remote partitions it waits for exist yet."""

Key = tuple[str, int]


def _kept_admin(conf: dict[str, str]) -> AdminClient:
    from .copying.admins import kept_admin  # the copying package imports this module

    return kept_admin(conf)


class RouteWatch:
    """Has the source gained topics or partitions this epoch's plan does not cover, and which are this lane's?

    One AdminClient per cluster config in the (reused) Python worker, asked at the wall clock's multiples of
    `refreshTopicsIntervalSeconds`: every lane of the mirror looks at the same moments as the driver's topic
    sync (looking at random phases cost a new topic about half an interval more). Requests run on a thread and
    `changed()`/`ready()` only look at their answers: the copy loop asks every commit interval, and a request in
    the loop held every record for its round trip (the latency benchmark's 200-350-ms spikes every 5 s; 3.7 s at
    10,000 partitions).
    """

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, routes: tuple[tuple[str, str, int], ...],
                 lane: int | None = None) -> None:
        """`lane`: the lane's index, for taking its new partitions in place; without it every gain ends the
        epoch."""
        from .replication import policy_for, should_replicate_topic
        from .topicplan import topic_filter

        self.known = {s: n for s, _t, n in routes}
        self.remotes = {s: t for s, t, _n in routes}
        self.interval = mirror.refreshTopicsIntervalSeconds
        self.next_check = self._next_tick()
        self._source_conf = config.cluster(mirror.source).client_config()
        self._admin: AdminClient | None = None  # made at the first look: a watch that stands aside asks nothing
        self._target_conf = config.cluster(mirror.target).client_config()
        self.policy, self.filter, self.target = policy_for(mirror), topic_filter(config, mirror), mirror.target
        self.source = mirror.source
        self._should = should_replicate_topic
        self.lane, self.lanes = lane, config.lanes_of(mirror)
        self.growing = False  # set by the copier running this epoch's loop itself: it takes new partitions
        self.elsewhere = False  # set when another worker's copier runs this epoch (and watches for itself)
        self._asked: Future | None = None
        self._took = 0.0  # how long the last source answer took
        self._end = False  # the epoch is to end for what the source gained
        self._waiting: dict[Key, str] = {}  # this lane's new partitions -> remote topic, until the target lists them
        self._ready: list[LanePartition] = []
        self._next_target_check = 0.0
        self.deletion = mirror.deletion.enabled
        self._left: set[str] = set()  # gained topics left to the next epoch's plan (see the module's doc)

    @property
    def admin(self) -> AdminClient:
        """The worker's kept admin client for the source (tests put a slow one in its place)."""
        if self._admin is None:
            self._admin = _kept_admin(self._source_conf)
        return self._admin

    @admin.setter
    def admin(self, admin: AdminClient) -> None:
        self._admin = admin

    def _next_tick(self, after: float = 0.0) -> float:
        """The first multiple of the interval `after` s from now (all lanes, and the driver's topic sync, pick the
        same one: see liveroutes.py)."""
        return last_tick(self.interval, time.time() + after) + self.interval

    def routes(self) -> list[tuple[str, str, int]]:
        """(source topic, remote topic, partitions) as this watch knows them: for the watch of a served epoch."""
        return sorted((s, self.remotes[s], n) for s, n in self.known.items() if s in self.remotes)

    def changed(self) -> bool:
        """Should the epoch end for what the source gained? Only when the lane cannot take it in place."""
        self._poll()
        return self._end

    def ready(self) -> list[LanePartition]:
        """This lane's new partitions whose remote partitions the target lists now (each returned once)."""
        self._poll()
        out, self._ready = self._ready, []
        return out

    def _poll(self) -> None:
        if self.elsewhere:  # no asking: the worker running the epoch watches for itself
            return
        asked = self._asked
        if asked is not None and asked.done():
            self._asked = None
            gained, ready = asked.result()
            if gained is not None:  # a look at the source
                # at most a third of the time asking: at 10,000 partitions one answer took 3.7 s on a loaded
                # broker, and two lanes and the driver's topic sync asking every 5 s kept it busy answering
                self.next_check = max(self.next_check, self._next_tick(2 * self._took))
                self._gain(gained)
            self._take(ready)
        if self._asked is None and not self._end:
            now = time.time()
            if now >= self.next_check:
                self.next_check = self._next_tick()
                self._asked = _LOOKUPS.submit(self._look, dict(self.known), dict(self._waiting))
            elif self._waiting and now >= self._next_target_check:
                self._next_target_check = now + TARGET_CHECK_S
                self._asked = _LOOKUPS.submit(lambda w: (None, self._listed(w)), dict(self._waiting))

    def _look(self, known: Mapping[str, int], waiting: dict[Key, str]) -> tuple[dict[str, int] | None, dict[Key, str]]:
        """(source topics with more partitions than `known`, or None when the source did not answer; the
        `waiting` partitions the target lists now)."""
        t0 = time.monotonic()
        try:
            md = self.admin.list_topics(timeout=5)
        except Exception:  # noqa: BLE001 - the copy itself reports an unreachable source
            return None, self._listed(waiting)
        finally:
            self._took = time.monotonic() - t0
        gained = {name: len(t.partitions) for name, t in md.topics.items()
                  if t.error is None and len(t.partitions) > known.get(name, 0) and name not in self._left
                  and self._should(self.policy, self.filter, name, self.target)}
        if self.deletion:
            gained = self._not_held(gained, known)
        waiting.update(self._mine(gained))
        return gained, self._listed(waiting)

    def _not_held(self, gained: dict[str, int], known: Mapping[str, int]) -> dict[str, int]:
        """`gained` without the new topics whose remote topic is already there (or whose look failed): left to
        the next epoch's plan, as the driver's sync decides whether they are held."""
        fresh = {name: self._remote(name) for name in gained if name not in known}
        if not fresh:
            return gained
        try:
            futures = _kept_admin(self._target_conf).describe_topics(TopicCollection(sorted(set(fresh.values()))),
                                                                      request_timeout=5)
        except Exception:  # noqa: BLE001 - not known: left to the plan
            futures = {}
        for name, remote in fresh.items():
            fut = futures.get(remote)
            try:
                if fut is not None:
                    fut.result(timeout=5)
            except KafkaException:
                continue  # no such remote topic: a new topic, taken in place as usual
            except Exception:  # noqa: BLE001 - timed out: left to the plan
                pass
            self._left.add(name)
            log.info("source gained %s, whose remote topic %s exists already: left to the next epoch's plan "
                     "(deletion propagation may hold it)", name, remote)
        return {k: v for k, v in gained.items() if k not in self._left}

    def _gain(self, gained: dict[str, int]) -> None:
        if not gained:
            return
        if not self.growing or self.lane is None:
            name, n = sorted(gained.items())[0]
            log.info("source gained %s (%d partitions); ending the epoch early to re-plan", name, n)
            self._end = True
            return
        mine = self._mine(gained)
        for name, n in gained.items():
            self.known[name] = n
            self.remotes.setdefault(name, self._remote(name))
        fresh = {k: v for k, v in mine.items() if k not in self._waiting}
        if fresh:
            log.info("source gained %s: lane %d takes %d of their partitions in place once the target lists them",
                     ", ".join(f"{name} ({n} partitions)" for name, n in sorted(gained.items())), self.lane,
                     len(fresh))
        self._waiting.update(fresh)
        self._next_target_check = 0.0

    def _mine(self, gained: Mapping[str, int]) -> dict[Key, str]:
        """This lane's partitions of what the source gained -> their remote topic, as the driver routes them. A
        new topic whose remote name another topic has too (topicplan.plan_sync refuses one of them) is left to
        the next epoch's plan."""
        if self.lane is None or not self.growing:
            return {}
        remotes = {name: self.remotes.get(name) or self._remote(name) for name in gained}
        taken = Counter([t for s, t in self.remotes.items() if s not in gained] + list(remotes.values()))
        return {(name, p): remotes[name] for name, n in gained.items()
                if name in self.remotes or taken[remotes[name]] == 1
                for p in range(self.known.get(name, 0), n) if lane_of(name, p, self.lanes) == self.lane}

    def _remote(self, name: str) -> str:
        return self.policy.format_remote_topic(self.source, name)

    def _listed(self, waiting: dict[Key, str]) -> dict[Key, str]:
        """Those of `waiting` whose remote partition the target lists. DescribeTopics, not a metadata request
        naming them: that may auto-create a topic the driver's sync is about to create with the source's
        configs."""
        if not waiting:
            return {}
        admin = _kept_admin(self._target_conf)
        have: dict[str, set[int]] = {}
        try:
            futures = admin.describe_topics(TopicCollection(sorted(set(waiting.values()))), request_timeout=5)
        except Exception:  # noqa: BLE001 - the copy itself reports an unreachable target
            return {}
        for name, fut in futures.items():
            try:
                have[name] = {p.id for p in fut.result(timeout=5).partitions}
            except KafkaException:
                continue  # not created yet
            except Exception:  # noqa: BLE001 - timed out: asked again
                continue
        return {(t, p): r for (t, p), r in waiting.items() if p in have.get(r, ())}

    def _take(self, listed: dict[Key, str]) -> None:
        for k, remote in sorted(listed.items()):
            if self._waiting.pop(k, None) is not None:
                self._ready.append(LanePartition(k[0], k[1], remote))
