"""LaneCopy sessions: a lane's clients kept by a (reused) Python worker between epochs, copying on meanwhile.

Creating the clients, init_transactions and reading the progress topic cost from a fraction of a second to
seconds per epoch; keeping them saves that when the lane's next task lands in this worker. A task resumes
kept clients only when no other copy can have run the lane since (`resume`); exactly-once adds fencing as the
backstop, and the lane starts afresh when the kept producer turns out fenced (lane.py).

Lanes also keep COPYING between epochs (`LaneSession.carry_on`): Spark's boundary between two epochs (finish
the batch, run the sink, write the checkpoint, plan, launch tasks) takes seconds, and every record produced
meanwhile would wait for it. The carrying thread is just one more copy of the lane: the lane's next task
either releases it here (it stops at a transaction boundary and hands over its clients) or, in another
worker, fences it with init_transactions and reads the progress it committed (at-least-once: the fenced
carrier's next progress write fails, so it repeats at most one commit interval of records). It stops by
itself after `carry_seconds` or when the stop file (the driver's drain file) appears. When the lane's next
task lands in another worker, the carrying thread runs that epoch for it (delegate.py).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import delegate
from .errors import CopyError, LaneFenced, Unreachable
from .plans import grows, plan_key, session_key
from .summary import PartitionSummary
from ..routewatch import RouteWatch

if TYPE_CHECKING:
    from .lane import LaneCopy

RunEpoch = Callable[["LaneCopy", "LaneCopy"], list[PartitionSummary]]
"""`run(lane, kept)`: runs `lane`'s epoch with `kept`'s clients (epoch.run_epoch, handed in by the caller so
that sessions need not import the epoch that uses them)."""

log = logging.getLogger(__name__)


class LaneSession:
    """A lane with its clients, kept between epochs; optionally copying on in a daemon thread."""

    def __init__(self, key: tuple, last_epoch: int, copier: LaneCopy, run: RunEpoch) -> None:
        self.key, self.last_epoch, self.copier, self._run = key, last_epoch, copier, run
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._released = False
        self._usable = True
        self._asked = False
        self._deadline = 0.0
        self._plan = ""
        self._me: delegate.Proc | None = None
        self._token: str | None = None

    def carry_on(self, seconds: float, stop_file: str | None) -> None:
        """Copy on for up to `seconds`, in a daemon thread, and tell tasks in other workers so (delegate.py)."""
        c = self.copier

        def should_stop() -> bool:
            if self._stop.is_set() or (bool(stop_file) and os.path.exists(stop_file)):
                return True
            self._asked = delegate.asked(c.tid, self._me)
            return self._asked

        c.should_stop = should_stop
        c.watch = None  # its task's watch: the next epoch's plan holds what the source gains from here on
        self._deadline = time.monotonic() + seconds
        self._plan = plan_key(c.tid, c.config, c.ctx.credentials)
        self._me = delegate.Proc.me()
        self._token = delegate.announce(c.tid, self.last_epoch, self._plan)
        self._thread = threading.Thread(target=self._carry, name=f"carry-{c.tid}", daemon=True)
        self._thread.start()

    def _carry(self) -> None:
        c = self.copier
        try:
            while True:
                self._asked = False
                c.copy(self._deadline)
                if not self._asked or self._stop.is_set():
                    break
                if self._serve():  # the lane's next epoch ran here; its copier keeps the clients now
                    return
        except LaneFenced:
            log.info("lane %s: copying between epochs ended: the lane's next copy took over", c.tid)
            self._usable = False
        except Unreachable as e:  # the lane's next task waits it out
            line = c.outage.failed(e.side, e.what, e.reason)
            if line:
                log.warning("%s", line)
            self._usable = False
            if e.side == "source":
                c.abort_quietly()  # the target answers: unblock its read_committed readers now
        except Exception as e:  # noqa: BLE001 - the next task meets it again and reports it
            log.warning("lane %s: copying between epochs stopped: %s", c.tid, e)
            self._usable = False
            c.abort_quietly()
        delegate.retire(c.tid, self._token)
        if not self._released:  # ended by itself (time, drain, fencing): nobody will take the clients
            self._usable = False
        if not self._usable:
            c.close_clients()

    def _serve(self) -> bool:
        """Run the epoch a task in another worker asks for with these clients, if it follows theirs (delegate.py).
        False when the request was withdrawn or refused, or a task here took the clients first."""
        c = self.copier
        with _SESSIONS_LOCK:
            if self._released or _SESSIONS.get(c.tid) is not self or self._me is None:
                return False
            req = delegate.take(c.tid, self._me, self.last_epoch, self._plan, c.route)
            if req is None:
                return False
            del _SESSIONS[c.tid]
            self._released = True
        delegate.retire(c.tid, self._token)  # the served epoch's copier announces itself when it keeps them
        tid, task = c.tid, req.task
        served = delegate.Served(req.epoch)
        nxt: LaneCopy | None = None
        try:  # stops early once its task is gone: the task's retry starts afresh, and must not be fenced back
            nxt = c.successor(req.epoch, req.prev_epoch, max(req.deadline - time.time(), 0.0),
                              lambda: delegate.stop_asked(tid) or not task.alive(), req.partitions,
                              None if req.routes is None else RouteWatch(c.config, c.mirror, req.routes, c.lane))
            served.rows = self._run(nxt, c)
        except CopyError as e:
            assert nxt is not None
            served.rows, served.error = nxt.result, str(e)
        except Exception as e:  # noqa: BLE001 - the task starts afresh and meets it again
            log.warning("lane %s: epoch %d for worker %d ended early: %s", tid, req.epoch, task.pid, e)
            served.failed = str(e) or type(e).__name__
            if nxt is None:
                c.close_clients()
            else:  # its clients are closed (run() keeps them only after a whole epoch); what it committed counts
                served.rows = nxt.result
        delegate.publish(tid, served)
        return True

    def release(self) -> LaneCopy | None:
        """Stop copying between epochs (at a transaction boundary) and hand the copier over, if still usable."""
        self._released = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            if self._thread.is_alive():
                log.warning("lane %s: copying between epochs did not stop; starting afresh", self.copier.tid)
                return None
        return self.copier if self._usable else None


_SESSIONS: dict[str, LaneSession] = {}
"""transactional.id -> the lane's kept clients, in this Python worker process."""
_SESSIONS_LOCK = threading.Lock()


def resume(copier: LaneCopy) -> bool:
    """Hand `copier` this lane's clients kept by this worker process, if they ran exactly the previous epoch.

    Only when no other copy can have run the lane since: the kept session ended at `prev_epoch` (the start of
    this epoch) and this is the task's first attempt. Exactly-once adds fencing as the backstop: if another
    copy did run, its init_transactions fenced the kept producer and the lane starts afresh.
    """
    if copier.prev_epoch is None:
        return False
    with _SESSIONS_LOCK:
        session = _SESSIONS.pop(copier.tid, None)
    if session is None:
        log.info("lane %s: no kept clients in this worker", copier.tid)
        return False
    kept = session.release()  # stops copying between epochs at a transaction boundary
    key = session_key(copier.tid, copier.config, copier.ctx.credentials)
    same = kept is not None and session.key[:2] == key[:2] and grows(kept.route, copier.route)
    renewed = same and session.key[2] != key[2]  # a Secret replaced: fresh clients, fencing the kept ones
    why = ("they stopped" if kept is None else "plan changed" if not same else
           "the cluster credentials changed since they were made" if renewed else
           f"they ran epoch {session.last_epoch}, this one follows {copier.prev_epoch}"
           if session.last_epoch != copier.prev_epoch else f"task attempt {copier.attempt}" if copier.attempt
           else "")
    if why:
        log.info("lane %s: not resuming kept clients (%s)", copier.tid, why)
        if kept is not None:
            kept.close_clients()
        return False
    assert kept is not None
    return adopt(copier, kept)


def adopt(copier: LaneCopy, kept: LaneCopy) -> bool:
    """`copier` continues with the clients `kept` copied with between the epochs, counting what they copied."""
    copier.take_clients(kept)
    _count_carried(copier.summaries, kept.summaries)
    return True


def count_committed(copier: LaneCopy, rows: list[PartitionSummary]) -> None:
    """Rows of an epoch another worker began and could not finish count in `copier`'s, which goes on from there."""
    _count_carried(copier.summaries, {(r.source_topic, r.partition): r for r in rows
                                      if (r.source_topic, r.partition) in copier.summaries})


def _count_carried(mine: dict[tuple[str, int], PartitionSummary],
                   carried: dict[tuple[str, int], PartitionSummary]) -> None:
    """Records copied between the epochs count in the epoch that follows them."""
    for k, c in carried.items():
        m = mine[k]
        for f in ("records", "bytes", "transactions", "latency_ms_sum", "batches"):
            setattr(m, f, getattr(m, f) + getattr(c, f))
        m.latency_ms_max = max(m.latency_ms_max, c.latency_ms_max)
        for why, n in c.rebuilt.items():
            m.rebuilt[why] = m.rebuilt.get(why, 0) + n
        for what, n in c.transformed.items():
            m.transformed[what] = m.transformed.get(what, 0) + n
        m.latency_le = [x + y for x, y in zip(m.latency_le, c.latency_le)]
        if c.source_first >= 0:
            m.source_first, m.target_first = c.source_first, c.target_first
            m.source_last, m.target_last = c.source_last, c.target_last


def keep(copier: LaneCopy, run: RunEpoch) -> None:
    """Keep the lane's clients in this worker for its next epoch, copying on until then (`carry_seconds`); `run`
    runs an epoch a task in another worker asks for (delegate.py)."""
    assert copier.epoch is not None and copier.has_clients
    copier.ledger.next_epoch()  # what is copied between epochs counts in the next one
    session = LaneSession(session_key(copier.tid, copier.config, copier.ctx.credentials), copier.epoch, copier, run)
    with _SESSIONS_LOCK:
        old = _SESSIONS.pop(copier.tid, None)
        _SESSIONS[copier.tid] = session
    if old is not None:
        stale = old.release()
        if stale is not None:
            stale.close_clients()
    if copier.carry_seconds > 0:
        session.carry_on(copier.carry_seconds, copier.stop_file)
    else:
        copier.reader.unassign()
