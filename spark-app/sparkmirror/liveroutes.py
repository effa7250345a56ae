"""The routes a mirror plans its epochs from, kept fresh by topic management on a thread of its own.

Planning an epoch must not wait for topic management: at 1,000 topics one `TopicSync.sync()` (list, create,
compare configs) took 0.3-7 s, and every epoch planned behind one started that much later (bench/scale.py).
The thread syncs at the wall clock's multiples of `refreshTopicsIntervalSeconds`, the moments the lanes'
RouteWatch looks at the source too: when a lane ends its epoch for a new topic, the sync begun at the same tick
has seen it, and the next epoch is planned once that sync ends rather than after one more whole sync (at 1,000
topics on the loaded benchmark machine the planner waited 3-7 s for it); and that sync hands its routes over
once they are decided, before its ACL sync and recreated-topic check. It rides out clusters that do not
answer (said once, retried with backoff, the last routes kept), and keeps a permanent error for the planner to
raise, which stops the query as a synchronous sync did.
"""
from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable

from .lanes import Route
from .outage import Retrying

Publish = Callable[[list[Route]], None]
"""Given to the sync: it hands its routes over as soon as they are decided, before its slower checks."""


class LiveRoutes:
    """`sync(publish)` returns the routes, and may publish them earlier; `retrying` decides which of its errors
    are transient."""

    def __init__(self, sync: Callable[[Publish], list[Route]], interval: float, retrying: Retrying,
                 name: str = "topic-sync") -> None:
        self._sync, self.interval, self._retrying = sync, interval, retrying
        self._cond = threading.Condition()
        self._routes: list[Route] | None = None
        self._failure: BaseException | None = None
        self._begun = 0    # syncs begun
        self._begun_at = float("-inf")  # wall-clock time the last one began
        self._ended = 0    # the number of the last sync that ended (well or not)
        self._published = 0  # the number of the last sync whose routes are known (published or returned)
        self._wanted = 0   # a sync numbered this high is asked for
        self._closed = False
        self.syncs = 0     # syncs that returned routes
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def current(self, wait: float = 0.0) -> list[Route] | None:
        """The latest routes, waiting up to `wait` s while there are none yet (None: still none); raises the
        permanent error that ended topic management."""
        with self._cond:
            self._cond.wait_for(lambda: self._routes is not None or self._failure is not None or self._closed,
                                wait)
            if self._failure is not None:
                raise self._failure
            return self._routes

    def fresh(self, timeout: float, since: float | None = None) -> list[Route] | None:
        """Routes from a sync begun at wall-clock time `since` or later (default: after this call), waiting up to
        `timeout` s for it (else the latest): when a lane saw the source gain topics at `since`, the next epoch
        should have them. A topic created in the instant between the sync's look and the lane's is planned an
        interval later, when the lane sees it again."""
        with self._cond:
            running_since = self._begun_at >= since if since is not None else False
            want = self._begun if running_since else self._begun + 1
            self._wanted = max(self._wanted, want)
            self._cond.notify_all()
            self._cond.wait_for(lambda: max(self._ended, self._published) >= want or self._failure is not None
                                or self._closed, timeout)
        return self.current()

    def _publish(self, number: int, routes: list[Route]) -> None:
        with self._cond:
            self._routes, self._published = routes, number
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                self._begun += 1
                number, self._begun_at = self._begun, time.time()
            got: list[list[Route]] = []
            try:
                ran = self._retrying(lambda: got.append(self._sync(functools.partial(self._publish, number))))
            except BaseException as e:  # noqa: BLE001 - permanent: kept for the planner, which stops the query
                with self._cond:
                    self._failure, self._ended = e, number
                    self._cond.notify_all()
                return
            with self._cond:
                if ran:
                    self._routes, self._published = got[0], number
                    self.syncs += 1
                self._ended = number
                self._cond.notify_all()
                pause = until_tick(self.interval) if ran else max(self._retrying.next_try - time.monotonic(), 0.2)
                self._cond.wait_for(lambda: self._closed or self._wanted > self._begun, pause)


def last_tick(interval: float, now: float | None = None) -> float:
    """The latest wall-clock multiple of `interval` at or before `now`: the moment the lanes last looked."""
    return math.floor((time.time() if now is None else now) / interval) * interval


def until_tick(interval: float) -> float:
    """Seconds to the next wall-clock multiple of `interval` (RouteWatch looks then as well)."""
    now = time.time()
    return last_tick(interval, now) + interval - now
