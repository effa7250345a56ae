"""One lane for one epoch, made of its parts (executor side): who it is (context.py), where it reads (reader.py),
where it writes (writer.py), how an interval becomes durable (committer.py over commit.py's protocols), what it
committed (ledger.py), partitions it takes in place (growth.py) and the loop's cadence (loop.py). This module
starts the parts in the order exactly-once needs and rides out clusters that do not answer.

A fresh lane starts its commit protocol first (fencing older copies, see commit.py), then reads its resume
offsets from the progress topic and checks them against what the source still holds (start.py). A refused
record raises a `CopyError` (errors.py). A cluster that does not answer never ends the lane, and the lane says
so once when it stops answering and once when it answers again. A source away: its consumer keeps its position
and reconnects by itself (reader.py). A target away (`Unreachable`): the lane drops its clients (the open
transaction is aborted, or fenced by the next start), waits with capped backoff and starts afresh from the
progress topic, exactly where the last commit ended, unless a newer copy took the lane over meanwhile
(`check_not_taken_over`). How an epoch begins and ends (kept clients, another worker running it) is epoch.py's.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..lanes import LanePartition
from ..outage import Backoff, Outage
from ..progress import read_progress
from ..resource.flowgroup import FlowGroupConfig, Mirror
from .commit import commit_protocol
from .committer import IntervalCommitter
from .context import LaneContext
from .errors import LaneFenced, Superseded, Unreachable, answered, talking_to
from .growth import Growth, Regrow
from .ledger import Ledger, now_ms
from .loop import run_loop
from .pauses import LoopPauses
from .reader import SourceReader
from .shares import PartitionKey
from .start import lane_topic_ids, resume_positions
from .summary import PartitionSummary
from .writer import RecordWriter

if TYPE_CHECKING:
    from ..routewatch import RouteWatch

log = logging.getLogger(__name__)

_OUTAGES: dict[str, Outage] = {}
"""transactional.id -> what the lane waits for, kept by this worker across epochs: one log line per change."""


class LaneCopy:
    """Copies one lane's source partitions for one bounded epoch (run it with `epoch.run_epoch`)."""

    path = "records"
    """The copy path, as `copy` names it (batchlane.py's is `batches`)."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
                 epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None,
                 epoch: int | None = None, prev_epoch: int | None = None, attempt: int = 0,
                 carry_seconds: float = 0.0, stop_file: str | None = None, standby: bool = False,
                 watch: RouteWatch | None = None) -> None:
        """`epoch`/`prev_epoch` (Spark's epoch ids) let a lane keep its clients for its next epoch in this
        process and resume them there (sessions.py); without them (tests, tools) every run starts and closes
        its own. `watch` hands the lane the partitions the source gained mid-epoch (routewatch.py)."""
        self.ctx = ctx = LaneContext(config, mirror, lane, list(partitions))
        self.epoch, self.prev_epoch, self.attempt = epoch, prev_epoch, attempt
        self.carry_seconds, self.stop_file = carry_seconds, stop_file
        self.standby = standby  # planned before its generation took over: wait for the go mark first
        self.epoch_seconds = config.epochSeconds if epoch_seconds is None else epoch_seconds
        self.should_stop = should_stop or (lambda: False)
        self.watch = watch
        self.result: list[PartitionSummary] = []
        self.reused = False  # the lane's kept clients were resumed (see sessions.LaneSession)
        self.served = False  # run for a task in another worker: never starts afresh, ends instead (delegate.py)
        self.outage = _OUTAGES.setdefault(ctx.tid, Outage(f"mirror {mirror.name!r} lane {lane}"))
        self.backoff = Backoff()
        self.pauses = LoopPauses(ctx.tid)
        self.ledger = Ledger(ctx)
        self.make_parts()
        self.committer = IntervalCommitter(self.writer, self.ledger)

    def make_parts(self) -> None:
        """The path's own parts: its commit protocol, reader, writer and growth (the record path's here; the
        batch path's in batchlane.py)."""
        ctx = self.ctx
        self.protocol_class = commit_protocol(ctx.config.delivery)  # exactly-once or at-least-once
        self.writer = RecordWriter(ctx, self.abort_quietly)
        self.reader = SourceReader(ctx, self.outage, self.backoff)
        self.growth = Growth(ctx, self.reader, self.writer, self.ledger)

    # ---- who the lane is (read by sessions, delegation and the data source) --------------------------------

    @property
    def config(self) -> FlowGroupConfig:
        return self.ctx.config

    @property
    def mirror(self) -> Mirror:
        return self.ctx.mirror

    @property
    def lane(self) -> int:
        return self.ctx.lane

    @property
    def tid(self) -> str:
        return self.ctx.tid

    @property
    def route(self) -> dict[PartitionKey, str]:
        return self.ctx.route

    @property
    def partitions(self) -> list[LanePartition]:
        return self.ctx.partitions

    @property
    def summaries(self) -> dict[PartitionKey, PartitionSummary]:
        return self.ledger.summaries

    @summaries.setter
    def summaries(self, value: dict[PartitionKey, PartitionSummary]) -> None:
        self.ledger.summaries = value

    @property
    def commits(self) -> int:
        return self.ledger.commits

    @property
    def has_clients(self) -> bool:
        return self.reader.consumer is not None and self.writer.protocol is not None

    def successor(self, epoch: int, prev_epoch: int, epoch_seconds: float, should_stop: Callable[[], bool],
                  partitions: Sequence[LanePartition], watch: RouteWatch | None = None) -> LaneCopy:
        """The lane of this lane's next epoch (its task's `partitions`: these or more), run by this worker for a
        task in another (delegate.py)."""
        nxt = type(self)(self.config, self.mirror, self.lane, list(partitions), epoch_seconds, should_stop,
                         epoch=epoch, prev_epoch=prev_epoch, carry_seconds=self.carry_seconds,
                         stop_file=self.stop_file, watch=watch)
        nxt.served = True
        return nxt

    # ---- the clients -----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Fresh clients: producers, init_transactions (fences older copies), THEN progress, then assign."""
        t0 = time.monotonic()
        ctx = self.ctx
        ctx.reload()  # secrets as they are now: a Secret replaced since the lane began reaches its new clients
        if not self.standby:  # a standby belongs to the newest generation: it waited for its own go mark
            self.check_not_superseded()  # before anything holds the lane's id: a later generation's lane may
        self.writer.open(self.protocol_class)  # FIRST of the clients: aborts and fences older copies
        self.reader.open()
        # THEN the progress topic: it can no longer change under us
        self.ledger.topic_ids = lane_topic_ids(ctx.config, ctx.mirror, ctx.route)
        positions, totals = resume_positions(ctx.config, ctx.mirror, list(ctx.route), self.ledger.topic_ids,
                                             ctx.route)
        self.ledger.committed_next, self.ledger.committed_totals = dict(positions), totals
        assert self.writer.protocol is not None
        self.writer.protocol.resumed({(ctx.mirror.source, t, p): o for (t, p), o in positions.items()
                                      if (t, p) in totals})
        self.reader.assign(positions)
        self.growth.added = []  # a fresh start covers the whole plan
        log.info("lane %s: started in %.0f ms (%d partitions, copying %s)", ctx.tid, (time.monotonic() - t0) * 1000,
                 len(positions), self.path)

    def take_clients(self, kept: LaneCopy) -> None:
        """Continue with the clients and committed positions of this lane's previous copier (sessions.py), and
        the fingerprint of the secrets they were made with (what the next epoch's resume compares)."""
        self.ctx.credentials = kept.ctx.credentials
        self.writer.take(kept.writer)
        self.ledger.take(kept.ledger)
        self.committer.take(kept.committer)
        self.growth.kept(kept.route)  # the plan grew (sessions.grows)
        self.reader.take(kept.reader, self.ledger.committed_next)

    def close_clients(self) -> None:
        self.growth.settle()  # a preparation still running uses the producer
        self.committer.shutdown()  # a progress commit still running uses the fence producer
        self.reader.close(self.ledger.committed_next)
        self.writer.close()

    def drop_uncommitted(self) -> None:
        self.committer.drop_uncommitted()

    def abort_quietly(self) -> None:
        if self.writer.protocol is not None:
            self.writer.protocol.abort()
        self.committer.drop_uncommitted()

    def fenced(self) -> None:
        log.warning("lane %s fenced by a newer copy; stopping", self.tid)
        self.committer.drop_uncommitted()
        self.ledger.fenced()

    # ---- copying -----------------------------------------------------------------------------------------

    def copy(self, deadline: float) -> None:
        """The copy loop until `deadline`, its fatal errors mapped (writer.guarded)."""
        self.writer.guarded(run_loop, self.reader, self.writer, self.committer, self.ledger, self.growth,
                            self.pauses, self.should_stop, self.watch, self.abort_quietly, deadline)

    def copy_riding_out(self, deadline: float) -> None:
        """Copy until `deadline`, waiting out clusters that do not answer (see the module doc). The epoch's
        copy time counts from the first start: a slow start (clients, fencing, progress) must not eat it."""
        started = self.reused
        first_start = not started
        after_fault = False  # the next start follows a fault: another copy may have taken the lane over meanwhile
        while True:
            try:
                if not started:
                    t0 = time.monotonic()
                    if after_fault:
                        self.check_not_taken_over()
                    self.start()
                    started, after_fault = True, False
                    if first_start:
                        deadline += time.monotonic() - t0
                        first_start = False
                    self._answered()
                if self.growth.added:
                    self.growth.extend()
                with talking_to("target", self.mirror.target, "copying"):
                    self.copy(deadline)
                return
            except Regrow as e:
                if self.served:
                    raise
                log.info("lane %s: starting afresh for its new partitions: %s", self.tid, e)
                self.close_clients()
                self.reused = started = False
                self.growth.added = []
                continue
            except LaneFenced:
                if not self.reused or self.commits or self.served:
                    raise
                # kept clients fenced before they committed anything: another copy of this lane ran since our
                # last epoch. Start afresh (fencing it in turn).
                log.info("lane %s: kept clients were fenced since the last epoch; starting afresh", self.tid)
                self.drop_uncommitted()  # what the fenced clients read is not ours to commit
                self.writer.errors.clear()
                self.close_clients()
                # nothing was copied yet: the fresh start gets the whole epoch (its start time not counted)
                deadline, first_start = max(deadline, time.monotonic() + self.epoch_seconds), True
            except Unreachable as e:
                if self.served:  # its task waits the outage out with clients of its own (delegate.py)
                    if e.side == "source":
                        self.abort_quietly()  # the target answers: unblock its read_committed readers now
                    raise
                if self.reused and not self.commits and e.side == "target":
                    # kept clients that fail before their first commit were most likely fenced (the purge can
                    # be reported before the fatal error is): start afresh at once, as for LaneFenced
                    log.info("lane %s: kept clients failed before committing (%s); starting afresh", self.tid,
                             e.reason)
                    self.abort_quietly()
                    self.writer.errors.clear()
                    self.close_clients()
                    self.reused = started = False
                    deadline, first_start = max(deadline, time.monotonic() + self.epoch_seconds), True
                    continue
                if self.writer.protocol is not None and (e.side == "source" or answered(e)):
                    # the target answers: abort now, and learn whether a newer copy fenced this one
                    self.drop_uncommitted()  # a progress commit running on the fence ends first
                    self.writer.protocol.abort_checking_fence()
                line = self.outage.failed(e.side, e.what, e.reason)
                if line:
                    log.warning("%s", line)
                after_fault = True
                if not self._pause(self.backoff.next(), deadline):
                    return
            self.reused = started = False

    def _answered(self) -> None:
        """Both clusters just answered (a fresh start talks to both)."""
        self.backoff.reset()
        for line in self.outage.answered_all():
            log.warning("%s", line)

    def _pause(self, seconds: float, deadline: float) -> bool:
        """Drop the clients (an open transaction the caller could not abort is aborted by the next start's
        init_transactions) and wait; False when the epoch ends or the lane must stop first."""
        self.drop_uncommitted()
        self.writer.errors.clear()
        self.close_clients()
        until = time.monotonic() + seconds
        while time.monotonic() < min(until, deadline):
            if self.should_stop():
                return False
            time.sleep(min(0.2, max(until - time.monotonic(), 0.0)))
        return time.monotonic() < deadline and not self.should_stop()

    def _progress(self, partitions: list[PartitionKey]):
        cfg = self.config
        with talking_to("target", self.mirror.target, f"reading progress topic {cfg.progressTopic}"):
            return read_progress(self.ctx.target_conf, cfg.progressTopic, self.mirror.source, partitions,
                                 resource=cfg.resource)

    def _raise_if_superseded(self, state) -> None:
        cfg = self.config
        why = state.superseded_why(cfg.resource, cfg.resourceUid, cfg.name, cfg.worker.generation)
        if why is not None:
            raise Superseded(why)

    def check_not_superseded(self) -> None:
        """Before a fresh start: stop (Superseded) when a later worker generation marked the flow group as its
        own. The lane's init_transactions would fence the later generation's lane of the same transactional id,
        which starts copying once its takeover's go mark is written; the mark that supersedes this generation is
        written before that (handoff/takeover.py), so a lane that reads it here never fences the later one. One
        read of the progress topic's marks per fresh start (kept clients go on without one); the read after
        init_transactions (start.resume_positions) stays the backstop for a mark written in between."""
        self._raise_if_superseded(self._progress([]))

    def check_not_taken_over(self) -> None:
        """Before a start that follows a fault: stop (LaneFenced) rather than fence a copy that took the lane over
        while this one was away. Its init_transactions would fence whichever copy holds the lane's transactional
        id, and a newer copy's fencing does not always reach the older one as such: a broker answered an EndTxn
        that raced a newer copy's InitProducerId with UNKNOWN_SERVER_ERROR, and the older copy, starting afresh,
        fenced the newer one (CI, test_eos_fencing). The batch path asks the transaction coordinator who holds the
        id now (txnholder.py); either path reads the progress: progress past anything this copier read was
        committed by another copy; a later worker generation's mark means the lane is no longer this generation's."""
        if self.writer.taken_over():  # the batch path asks the coordinator (txnholder.py)
            log.warning("lane %s: another copy of the lane took its transactional id while this one was away; "
                        "stopping rather than fencing it", self.tid)
            raise LaneFenced()
        reach = {k: o for k, o in self.reader.reach.items() if k in self.route}
        if not reach:
            return
        state = self._progress(list(reach))
        self._raise_if_superseded(state)
        ahead = sorted((k, o) for k, o in state.resume_offsets(self.mirror.source).items()
                       if k in reach and o > reach[k])
        if ahead:
            (topic, part), offset = ahead[0]
            log.warning("lane %s: another copy of the lane committed %s/%d up to offset %d while this one was "
                        "away (it had read up to %d); stopping rather than fencing it", self.tid, topic, part,
                        offset, reach[(topic, part)])
            raise LaneFenced()

    # ---- the end of the epoch ------------------------------------------------------------------------------

    def end_figures(self) -> None:
        """The summaries' end figures (offsets, lag, what the lane waits for) and the task's rows."""
        end_ms = now_ms()
        self.committer.report_now()
        self.reader.end_offsets_and_lag(self.summaries, self.ledger.committed_next)
        waiting, since = self.outage.waiting, self.outage.since
        for s in self.summaries.values():
            s.epoch_end_ms = end_ms
            s.waiting, s.waiting_since_ms = waiting, int(since * 1000) if since else 0
        self.result = [replace(s) for s in self.ledger.worth_reporting()]  # the task's rows, whatever happens next
