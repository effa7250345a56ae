"""Waiting out what does not answer: capped exponential backoff, and who says so once per change.

Pure (no clients): the lanes (a cluster they copy from or to), the driver's planning (topic management) and
the driver's services (live lag, heartbeats, checkpoints) each keep an `Outage` and log only what it returns:
one line when something stops answering, one when it answers again, never one per retry.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("sparkmirror.outage")


@dataclass
class Backoff:
    """Delays of `first`, doubling up to `cap` seconds, each with up to `jitter` of itself added (so lanes that
    failed together do not retry together)."""

    first: float = 0.5
    cap: float = 30.0
    jitter: float = 0.2
    attempts: int = 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2 ** min(self.attempts, 30))
        self.attempts += 1
        return delay * (1 + self.jitter * random.random())

    def reset(self) -> None:
        self.attempts = 0


@dataclass
class Down:
    what: str        # e.g. "target cluster 'b'"
    reason: str
    since: float     # wall-clock seconds


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


@dataclass
class Outage:
    """What `who` is waiting for, by key (a cluster side, a service): each key is down or up."""

    who: str
    down: dict[str, Down] = field(default_factory=dict)

    def failed(self, key: str, what: str, reason: str, now: float | None = None) -> str | None:
        """`key` failed (transiently): the line to log when it was up until now, else None."""
        if key in self.down:
            self.down[key].reason = reason
            return None
        now = time.time() if now is None else now
        self.down[key] = Down(what, reason, now)
        return f"{self.who}: {what} unreachable since {_clock(now)} ({reason}), retrying"

    def answered(self, key: str, now: float | None = None) -> str | None:
        """`key` worked: the line to log when it was down until now, else None."""
        d = self.down.pop(key, None)
        if d is None:
            return None
        now = time.time() if now is None else now
        return f"{self.who}: {d.what} reachable again after {now - d.since:.0f} s"

    def answered_all(self, now: float | None = None) -> list[str]:
        return [line for k in list(self.down) if (line := self.answered(k, now))]

    @property
    def waiting(self) -> str | None:
        """What is being waited for, the longest first: "target cluster 'b' unreachable"; None when nothing."""
        if not self.down:
            return None
        d = min(self.down.values(), key=lambda d: d.since)
        return f"{d.what} unreachable"

    @property
    def since(self) -> float | None:
        return min((d.since for d in self.down.values()), default=None)


class Retrying:
    """Runs an operation that talks to clusters; a transient failure (`transient(exc)` is true) is logged once,
    retried no sooner than the backoff says, and logged again once it works. Other errors propagate."""

    def __init__(self, who: str, what: str, transient: Callable[[BaseException], object],
                 backoff: Backoff | None = None) -> None:
        self.outage, self.what, self.transient = Outage(who), what, transient
        self.backoff = backoff or Backoff(first=1.0)
        self.next_try = 0.0

    def __call__(self, op: Callable[[], object]) -> bool:
        """True when `op` ran; False when it failed transiently now or its next try is not due yet."""
        now = time.monotonic()
        if now < self.next_try:
            return False
        try:
            op()
        except Exception as e:  # noqa: BLE001 - only transient failures are kept; the rest propagate
            if not self.transient(e):
                raise
            self.next_try = now + self.backoff.next()
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            line = self.outage.failed("op", self.what, reason)
            if line:
                log.warning("%s", line)
            return False
        self.backoff.reset()
        line = self.outage.answered("op")
        if line:
            log.warning("%s", line)
        return True
