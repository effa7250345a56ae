"""One lane's copy loop (executor side, all the I/O): source partitions -> same partitions of the remote topics.

A fresh lane starts its commit protocol first (fencing older copies, see commit.py), then reads its resume
offsets from the progress topic and checks them against what the source still holds (start.py). It then
consumes for up to ~commitIntervalMs at a time, produces each record to the same partition (key, value,
headers and timestamp kept) and hands the interval to the commit protocol once every record was acknowledged
(exactly-once waits for that; at-least-once copies on meanwhile, see "pipelined commits" below).
A refused record raises a `CopyError` (errors.py). A cluster that does not answer never ends the lane, and the
lane says so once when it stops answering and once when it answers again. A source away: its consumer keeps
its position and reconnects by itself, so the lane copies on when it returns (probing it meanwhile). A target
away (`Unreachable`): the lane drops its clients (the open transaction is aborted, or fenced by the next
start), waits with capped backoff and starts afresh from the progress topic, exactly where the last commit
ended, unless a newer copy took the lane over meanwhile (`_check_not_taken_over`). At the end of the epoch the
lane's clients are closed, or kept for its next epoch in this worker (sessions.py).
"""
from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, TopicPartition

from ..lanes import LanePartition
from ..outage import Backoff, Outage
from ..resource.names import transactional_id
from ..progress import ProgressRecord, partition_lag, read_progress
from ..refusal import write_refused
from ..replication import RecordStamper, policy_for
from ..resource.flowgroup import FlowGroupConfig, Mirror
from . import delegate, sessions
from .commit import CommitProtocol, commit_protocol
from .errors import (CopyError, Fault, LaneFenced, SourceGapError, Superseded, Unreachable, answered, classify,
                     describe, is_fenced, kafka_error, talking_to)
from .pauses import LoopPauses
from .start import (TopicIds, close_consumer, lane_topic_ids, new_consumer, new_producer, next_batch,
                    resume_positions, target_max_message_bytes)
from .summary import PartitionSummary, latency_le
from .workerproc import settle_worker

if TYPE_CHECKING:
    from ..routewatch import RouteWatch

_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)  # records dropped with their transaction
log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Pending:
    """One partition's share of the open commit interval, and the delivery reports of its records.

    The share itself is every one of its records' delivery callback (`__call__`): no object made per record,
    which was the copy loop's largest Python cost after produce() itself, and no reference cycle (a bound
    method kept on the share made every share cyclic garbage, about 1,900 an epoch per lane at 5,000
    records/s, which only Python's full collections freed). The idempotent producer reports a
    partition's records in the order they were produced, so the n-th report is the record at `offsets[n]`."""

    src_first: int
    topic: str
    partition: int
    errors: list[tuple[KafkaError, str, int, int]]  # the lane's: (error, topic, partition, source offset)
    src_last: int = -1
    count: int = 0
    nbytes: int = 0
    ts_sum: int = 0
    ts_min: int = -1
    timestamps: list[int] = field(default_factory=list)  # the records' own, for the latency histogram
    offsets: list[int] = field(default_factory=list)  # source offsets of the records produced, in order
    reports: int = 0
    tgt_first: int = -1
    tgt_last: int = -1

    @property
    def acknowledged(self) -> bool:
        """Every record produced for this share was reported (acknowledged, or failed: see the lane's errors)."""
        return self.reports >= self.count

    def absorb(self, later: _Pending) -> None:
        """Take in the same partition's share of a later interval (one progress record covers both)."""
        self.src_last = later.src_last
        self.count += later.count
        self.nbytes += later.nbytes
        self.ts_sum += later.ts_sum
        self.timestamps += later.timestamps
        if later.ts_min >= 0 and (self.ts_min < 0 or later.ts_min < self.ts_min):
            self.ts_min = later.ts_min
        if later.tgt_first >= 0 and (self.tgt_first < 0 or later.tgt_first < self.tgt_first):
            self.tgt_first = later.tgt_first
        self.tgt_last = max(self.tgt_last, later.tgt_last)

    def __call__(self, err: KafkaError | None, msg) -> None:
        """The delivery report of this share's next record."""
        n = self.reports
        self.reports = n + 1
        if err is not None:
            self.errors.append((err, self.topic, self.partition, self.offsets[n] if n < len(self.offsets) else -1))
            return
        off = msg.offset()
        if self.tgt_first < 0 or off < self.tgt_first:
            self.tgt_first = off
        if off > self.tgt_last:
            self.tgt_last = off


_OUTAGES: dict[str, Outage] = {}
"""transactional.id -> what the lane waits for, kept by this worker across epochs: one log line per change."""


CONSUME_SLICE_S = 0.01
"""Longest a lane waits for records in one call while none arrive (see start.next_batch): the loop also has
acknowledged intervals to hand to the progress writer (at-least-once) between calls."""


READ_BATCH = 5000
"""Most records a lane takes from its consumer at once."""

ONE_METADATA_REQUEST_ABOVE = 100
"""A lane that gains more topics than this asks the source for all topics' metadata once, not for each of them:
546 topics asked one by one held a lane's loop for 8.8 s at 10,000 partitions (16 ms each); all 10,000
partitions' metadata took 1.3-3.7 s."""

EARLY_COMMIT = 0.25
"""An exactly-once interval commits once this share of commitIntervalMs has passed if the lane has read all the
source had for it (its last read came back short of READ_BATCH): its records become visible only at the commit,
and holding them for the whole interval at a low rate was most of their latency (visible p50 68-72 ms against
34 for MirrorMaker 2, which commits after every poll). A lane that keeps up with a high rate reads full batches
and still commits every commitIntervalMs: each commit waits for every ack of its records, and shorter
transactions there cost throughput (25-ms intervals: 69,000-81,000 records/s against 79,000-95,000)."""


@dataclass
class _Prepared:
    """What adding partitions to a lane's kept clients asked the clusters (LaneCopier._prepare)."""

    route: dict[tuple[str, int], str]
    max_bytes: dict[str, int]
    ids: TopicIds
    positions: dict[tuple[str, int], int]
    totals: dict[tuple[str, int], tuple[int, int]]
    described_ms: float
    read_ms: float


_PREPARING = ThreadPoolExecutor(2, thread_name_prefix="lane-grow")
"""Prepares partitions a lane gains mid-epoch while its loop copies on (LaneCopier._grow)."""


class _Regrow(Exception):
    """Kept clients cannot take the lane's new partitions: the lane starts afresh."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def next_commit_at(last_began: float, now: float, interval: float, deadline: float) -> float:
    """When the interval that starts `now` commits: `interval` after the last commit began, so a commit that ran
    long (acks held up on a loaded target: 100-500 ms at times on the benchmark's 2 cores) shortens the next
    interval. The records that arrived during it already waited, and holding them for a whole interval more
    added up to 100 ms to the latency's tail. A tenth of the interval at least, so a batch still gathers; never
    past the epoch."""
    return min(max(last_began + interval, now + interval / 10), deadline)


def _commit_times(ms: list[float], pipelined: bool = False, acks_ms: list[float] | None = None) -> str:
    """How long the commits held the loop (records wait meanwhile): the figure behind the tail latency. Pipelined
    commits (at-least-once) hold nothing: theirs is the time from an interval's end to its progress committed.
    `acks_ms`: the part of each exactly-once commit spent waiting for its records' acks, before the progress
    records and the transaction's end (their target offsets go into the progress records, so that wait cannot
    overlap the commit)."""
    if not ms:
        return ""

    def spread(values: list[float]) -> tuple[float, float, float]:
        v = sorted(values)
        return v[len(v) // 2], v[min(len(v) - 1, len(v) * 99 // 100)], v[-1]

    what = "progress committed" if pipelined else "commits"
    p50, p99, top = spread(ms)
    acks = ""
    if acks_ms:
        a50, a99, atop = spread(acks_ms)
        acks = f" (of which waiting for acks {a50:.0f} ms median, {a99:.0f} ms p99, {atop:.0f} ms max)"
    return f", {what} {p50:.0f} ms median, {p99:.0f} ms p99, {top:.0f} ms max{acks}"


class LaneCopier:
    """Copies one lane's source partitions for one bounded epoch. Use `run()`; it returns the summaries."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
                 epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None,
                 epoch: int | None = None, prev_epoch: int | None = None, attempt: int = 0,
                 carry_seconds: float = 0.0, stop_file: str | None = None, standby: bool = False,
                 growth: RouteWatch | None = None) -> None:
        """`epoch`/`prev_epoch` (Spark's epoch ids) let a lane keep its clients for its next epoch in this
        process and resume them there (sessions.py); without them (tests, tools) every run starts and closes
        its own. `growth` hands the lane the partitions the source gained mid-epoch (routewatch.py)."""
        self.config = config
        self.epoch, self.prev_epoch, self.attempt = epoch, prev_epoch, attempt
        self.carry_seconds, self.stop_file = carry_seconds, stop_file
        self.standby = standby  # planned before its generation took over: wait for the go mark first
        self.result: list[PartitionSummary] = []
        self._commits = 0
        self._commit_ms: list[float] = []  # how long each commit held the loop (acks, progress, transaction)
        self._acks_ms: list[float] = []  # the part of each exactly-once commit spent waiting for acks
        # (next offset, source end, lag) per partition as last reported by this lane's clients: see _worth_reporting
        self.reported: dict[tuple[str, int], tuple[int, int, int]] = {}
        self.reused = False  # the lane's kept clients were resumed (see sessions.LaneSession)
        self.served = False  # run for a task in another worker: never starts afresh, ends instead (delegate.py)
        self.topic_ids = TopicIds()  # of the lane's topics at its start, stamped on its progress records
        self.mirror = mirror
        self.lane = lane
        self.partitions = list(partitions)
        self.epoch_seconds = config.epochSeconds if epoch_seconds is None else epoch_seconds
        self.should_stop = should_stop or (lambda: False)
        self.growth = growth
        self._protocol_class = commit_protocol(config.delivery)  # exactly-once or at-least-once
        self.source_conf = config.cluster(mirror.source).client_config()
        self.target_conf = config.cluster(mirror.target).client_config()
        self.tid = transactional_id(config.resource, config.name, mirror.name, lane)
        self.route = {(p.source_topic, p.partition): p.target_topic for p in self.partitions}
        self.summaries = {(p.source_topic, p.partition): PartitionSummary(
            mirror.name, lane, p.source_topic, p.partition, p.target_topic, generation=config.worker.generation)
            for p in self.partitions}
        self.max_bytes: dict[str, int] = {}
        stamper = RecordStamper.of(policy_for(mirror), mirror.source, mirror.target)
        # identity policy only: skip records that came from the target, stamp provenance on the rest
        self.stamper: RecordStamper | None = stamper if stamper.uses_provenance else None
        self._delivery_errors: list[tuple[KafkaError, str, int, int]] = []
        self._pending: dict[tuple[str, int], _Pending] = {}
        # pipelined commits (at-least-once): intervals ended, waiting for their acks, in order (when each ended,
        # its shares); and the one progress commit running in `_writer`'s thread (future, records, shares, when)
        self._sealed: list[tuple[float, dict[tuple[str, int], _Pending]]] = []
        self._inflight: tuple[Future, list[ProgressRecord], dict[tuple[str, int], _Pending], float] | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._committed_next: dict[tuple[str, int], int] = {}
        self._committed_totals: dict[tuple[str, int], tuple[int, int]] = {}  # (records, bytes) carried on
        # the furthest source offset this copier's clients read or committed, per partition: no progress of its
        # own lies beyond it (see _check_not_taken_over)
        self._reach: dict[tuple[str, int], int] = {}
        self._added: list[tuple[str, int]] = []  # partitions the kept clients did not copy yet (_extend)
        self._gaining: list[tuple[tuple[str, int], str]] = []  # gained mid-epoch, to prepare next (_grow)
        self._preparing: tuple[Future, float] | None = None  # their preparation running on a thread, since when
        self.protocol: CommitProtocol | None = None  # the producers, see commit.py
        self.consumer: Consumer | None = None
        self.outage = _OUTAGES.setdefault(self.tid, Outage(f"mirror {mirror.name!r} lane {lane}"))
        self.backoff = Backoff()
        self._next_source_probe = 0.0
        self.pauses = LoopPauses(self.tid)

    # ---- the epoch -----------------------------------------------------------------------------------------

    def successor(self, epoch: int, prev_epoch: int, epoch_seconds: float, should_stop: Callable[[], bool],
                  partitions: Sequence[LanePartition], growth: RouteWatch | None = None) -> LaneCopier:
        """The copier of this lane's next epoch (its task's `partitions`: these or more), run by this worker for
        a task in another (delegate.py)."""
        nxt = LaneCopier(self.config, self.mirror, self.lane, list(partitions), epoch_seconds, should_stop,
                         epoch=epoch, prev_epoch=prev_epoch, carry_seconds=self.carry_seconds,
                         stop_file=self.stop_file, growth=growth)
        nxt.served = True
        return nxt

    def run(self, kept: LaneCopier | None = None) -> list[PartitionSummary]:
        """Copy until the epoch ends, the lane is fenced or `should_stop()`; return per-partition summaries.

        The lane's clients come from `kept` (this worker runs the epoch for a task in another), from this
        worker's session of the lane, from the worker that keeps them (which then runs the epoch and returns
        its summaries, delegate.py), or are made afresh."""
        start_ms = _now_ms()
        for s in self.summaries.values():
            s.epoch_start_ms = start_ms
        if not self.partitions:
            return []
        if self.epoch is not None:  # a Spark task: this worker process lives on (tests and tools do not)
            settle_worker()
        keep = delegated = False
        if self.epoch is not None:
            log.info("lane %s: epoch %d starts in worker %d", self.tid, self.epoch, os.getpid())
        try:
            if self.standby:
                from .standby import wait_for_go

                stop_file = self.stop_file
                if not wait_for_go(self.config, self.mirror, self.tid, lambda: self.should_stop() or (
                        bool(stop_file) and os.path.exists(stop_file))):
                    raise LaneFenced()
                start_ms = _now_ms()
                for s in self.summaries.values():
                    s.epoch_start_ms = start_ms
            self.reused = sessions.adopt(self, kept) if kept is not None else sessions.resume(self)
            if not self.reused and (served := delegate.ask(self)) is not None:
                if served.failed:  # it ended early: go on from what it committed
                    sessions.count_committed(self, served.rows)
                else:
                    delegated = True
                    self.result = served.rows
                    if served.error:
                        self.summaries = {(r.source_topic, r.partition): r for r in served.rows}
                        raise CopyError(served.error)
            if not delegated:
                if self.growth is not None:  # this loop is the lane's: it takes new partitions in place
                    self.growth.growing, self.growth.elsewhere = True, False
                self._copy_riding_out(time.monotonic() + self.epoch_seconds)
                keep = True
        except LaneFenced:
            self._fenced()
        finally:
            finish_ms = 0.0
            if not delegated:
                t0 = time.monotonic()
                self._finish(keep)
                finish_ms = (time.monotonic() - t0) * 1000
            secs, records = (_now_ms() - start_ms) / 1000, sum(s.records for s in self.result)
            if delegated:  # the keeping worker logged its commits
                log.info("lane %s: epoch of %.1f s, %d records (run by the worker keeping the clients)", self.tid,
                         secs, records)
            else:
                log.info("lane %s: epoch of %.1f s, %d records in %d transactions%s, longest loop pause %s%s%s",
                         self.tid, secs, records, self._commits,
                         _commit_times(self._commit_ms, self._protocol_class.pipelined, self._acks_ms),
                         self.pauses.describe(),
                         " (kept clients)" if self.reused else "",
                         f"; ended in {finish_ms:.0f} ms" if finish_ms >= 100 else "")
        return self.result

    def _copy_riding_out(self, deadline: float) -> None:
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
                        self._check_not_taken_over()
                    self._start()
                    started, after_fault = True, False
                    if first_start:
                        deadline += time.monotonic() - t0
                        first_start = False
                    self._answered()
                if self._added:
                    self._extend()
                with talking_to("target", self.mirror.target, "copying"):
                    self._guarded(self._loop, deadline)
                return
            except _Regrow as e:
                if self.served:
                    raise
                log.info("lane %s: starting afresh for its new partitions: %s", self.tid, e)
                self._close_clients()
                self.reused = started = False
                self._added = []
                continue
            except LaneFenced:
                if not self.reused or self._commits or self.served:
                    raise
                # kept clients fenced before they committed anything: another copy of this lane ran since our
                # last epoch. Start afresh (fencing it in turn).
                log.info("lane %s: kept clients were fenced since the last epoch; starting afresh", self.tid)
                self._drop_uncommitted()  # what the fenced clients read is not ours to commit
                self._delivery_errors.clear()
                self._close_clients()
                # nothing was copied yet: the fresh start gets the whole epoch (its start time not counted)
                deadline, first_start = max(deadline, time.monotonic() + self.epoch_seconds), True
            except Unreachable as e:
                if self.served:  # its task waits the outage out with clients of its own (delegate.py)
                    if e.side == "source":
                        self._abort_quietly()  # the target answers: unblock its read_committed readers now
                    raise
                if self.reused and not self._commits and e.side == "target":
                    # kept clients that fail before their first commit were most likely fenced (the purge can
                    # be reported before the fatal error is): start afresh at once, as for LaneFenced
                    log.info("lane %s: kept clients failed before committing (%s); starting afresh", self.tid,
                             e.reason)
                    self._abort_quietly()
                    self._delivery_errors.clear()
                    self._close_clients()
                    self.reused = started = False
                    deadline, first_start = max(deadline, time.monotonic() + self.epoch_seconds), True
                    continue
                if self.protocol is not None and (e.side == "source" or answered(e)):
                    # the target answers: abort now, and learn whether a newer copy fenced this one
                    self._drop_uncommitted()  # a progress commit running on the fence ends first
                    self.protocol.abort_checking_fence()
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
        self._drop_uncommitted()
        self._delivery_errors.clear()
        self._close_clients()
        until = time.monotonic() + seconds
        while time.monotonic() < min(until, deadline):
            if self.should_stop():
                return False
            time.sleep(min(0.2, max(until - time.monotonic(), 0.0)))
        return time.monotonic() < deadline and not self.should_stop()

    def _check_not_taken_over(self) -> None:
        """Before a start that follows a fault: stop (LaneFenced) rather than fence a copy that took the lane over
        while this one was away. Its init_transactions would fence whichever copy holds the lane's transactional
        id, and a newer copy's fencing does not always reach the older one as such: a broker answered an EndTxn
        that raced a newer copy's InitProducerId with UNKNOWN_SERVER_ERROR, and the older copy, starting afresh,
        fenced the newer one (CI, test_eos_fencing). Progress past anything this copier read was committed by
        another copy; a later worker generation's mark means the lane is no longer this generation's."""
        reach = {k: o for k, o in self._reach.items() if k in self.route}
        if not reach:
            return
        with talking_to("target", self.mirror.target, f"reading progress topic {self.config.progressTopic}"):
            state = read_progress(self.target_conf, self.config.progressTopic, self.mirror.source, list(reach),
                                  resource=self.config.resource)
        why = state.superseded_why(self.config.resource, self.config.resourceUid, self.config.name,
                                   self.config.worker.generation)
        if why is not None:
            raise Superseded(why)
        ahead = sorted((k, o) for k, o in state.resume_offsets(self.mirror.source).items()
                       if k in reach and o > reach[k])
        if ahead:
            (topic, part), offset = ahead[0]
            log.warning("lane %s: another copy of the lane committed %s/%d up to offset %d while this one was "
                        "away (it had read up to %d); stopping rather than fencing it", self.tid, topic, part,
                        offset, reach[(topic, part)])
            raise LaneFenced()

    def _note_reach(self) -> None:
        """How far this copier's clients read (the consumer's positions) and committed, before they go."""
        reach = self._reach
        for k, o in self._committed_next.items():
            if o > reach.get(k, -1):
                reach[k] = o
        if self.consumer is None:
            return
        try:
            positions = self.consumer.position([TopicPartition(t, p) for t, p in self.route])
        except KafkaException:
            return  # the committed offsets stand; a start that follows fences as before
        for tp in positions:
            k = (tp.topic, tp.partition)
            if tp.offset > reach.get(k, -1):
                reach[k] = tp.offset

    def _start(self) -> None:
        """Fresh clients: producers, init_transactions (fences older copies), THEN progress, then assign."""
        t0 = time.monotonic()
        with talking_to("target", self.mirror.target, "starting the lane's producer"):
            self.max_bytes = target_max_message_bytes(self.target_conf, set(self.route.values()))
            make_producer = functools.partial(new_producer, self.config, self.target_conf, self.tid,
                                              self.max_bytes)
            self.protocol = self._protocol_class(make_producer, self.config.progressTopic)
            self._guarded(self.protocol.start)  # FIRST: aborts and fences older copies
        # the client reports "all brokers down" only to an error callback, never through consume()
        self.consumer = new_consumer({**self.source_conf, "error_cb": self._on_client_error}, self.tid)
        # THEN the progress topic: it can no longer change under us
        self.topic_ids = lane_topic_ids(self.config, self.mirror, self.route)
        positions, self._committed_totals = resume_positions(self.config, self.mirror, list(self.route),
                                                             self.topic_ids, self.route)
        self._committed_next = dict(positions)
        self.protocol.resumed({(self.mirror.source, t, p): o for (t, p), o in positions.items()
                               if (t, p) in self._committed_totals})
        self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        with talking_to("source", self.mirror.source, "reading the source's metadata"):
            # the offsets above came from an admin client: the consumer knows no leader yet, and for topics it
            # never heard of it waited seconds before fetching (a lane fenced and started afresh copied nothing
            # in a 2-s epoch). One metadata request tells it every assigned partition's leader now.
            self.consumer.list_topics(timeout=30)
        self._added = []  # a fresh start covers the whole plan
        log.info("lane %s: started in %.0f ms (%d partitions)", self.tid, (time.monotonic() - t0) * 1000,
                 len(positions))

    def take_clients(self, kept: LaneCopier) -> None:
        """Continue with the clients and committed positions of this lane's previous copier (sessions.py)."""
        assert kept.consumer is not None
        self.protocol, self.consumer = kept.protocol, kept.consumer
        self.reported = kept.reported
        self.max_bytes = kept.max_bytes
        self.topic_ids = kept.topic_ids
        self._committed_next = dict(kept._committed_next)
        self._committed_totals = dict(kept._committed_totals)
        kept.protocol = kept.consumer = None
        self._writer, kept._writer = kept._writer, None  # its progress thread (drained), not one per epoch
        self._added = [k for k in self.route if k not in kept.route]  # the plan grew (sessions.grows)
        self._rewind_to_committed()

    def _rewind_to_committed(self) -> None:
        """Kept clients go on from the committed offsets. Only the partitions the consumer read past them (an
        aborted interval) are assigned again, at their committed offset; a partition it read nothing from since
        it was assigned (position unset) is still at it. Assigning all of a lane's partitions again at every
        epoch made the consumer validate each one's position anew: at 5,000 partitions a lane, the next
        assignment (a topic the plan gained) then waited 19-26 s."""
        assert self.consumer is not None
        committed = self._committed_next
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        if not assigned:  # kept without copying on (sessions.keep): nothing is assigned
            self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in committed.items()])
            return
        moved = [TopicPartition(tp.topic, tp.partition, committed[(tp.topic, tp.partition)])
                 for tp in self.consumer.position([TopicPartition(t, p) for t, p in committed if (t, p) in assigned])
                 if tp.offset >= 0 and tp.offset != committed[(tp.topic, tp.partition)]]
        if moved:
            self.consumer.incremental_unassign(moved)
        missing = [TopicPartition(t, p, o) for (t, p), o in committed.items() if (t, p) not in assigned]
        if moved or missing:
            self.consumer.incremental_assign(moved + missing)

    def _extend(self) -> None:
        """Add the partitions the plan gained to the kept clients: the same start as a fresh lane's for just
        those (max.message.bytes, topic ids, resume offsets from the progress topic, read after the kept
        producer fenced this lane's older copies), without a new producer or init_transactions."""
        assert self.protocol is not None
        t0 = time.monotonic()
        self._take_prepared(self._prepare({k: self.route[k] for k in self._added}, self.protocol.producer), t0)

    def _prepare(self, route: dict[tuple[str, int], str], producer) -> _Prepared:
        """Everything adding `route`'s partitions asks the clusters, changing nothing of this copier: a lane
        growing mid-epoch runs it on a thread while its loop copies on (`_grow`)."""
        t0 = time.monotonic()
        with talking_to("target", self.mirror.target, "describing the lane's new remote topics"):
            max_bytes = target_max_message_bytes(self.target_conf, set(route.values()) - set(self.max_bytes))
        if min([1_000_000, *max_bytes.values()]) < min([1_000_000, *self.max_bytes.values()]):
            # the kept producer's batches would be too large for a new topic: only a new producer fits
            raise _Regrow(f"a new remote topic takes records up to {min(max_bytes.values())} bytes")
        ids = lane_topic_ids(self.config, self.mirror, route)
        known = TopicIds({**self.topic_ids.source, **ids.source}, {**self.topic_ids.target, **ids.target})
        t1 = time.monotonic()
        positions, totals = resume_positions(self.config, self.mirror, list(route), known, route)
        t2 = time.monotonic()
        with talking_to("target", self.mirror.target, "reading the target's metadata"):
            self._producer_knows(route, producer)
        return _Prepared(route, max_bytes, ids, positions, {k: v for k, v in totals.items() if k in route},
                         (t1 - t0) * 1000, (t2 - t1) * 1000)

    def _take_prepared(self, prep: _Prepared, t0: float) -> None:
        """Assign the prepared partitions (between two commit intervals) and count them in this epoch."""
        assert self.consumer is not None and self.protocol is not None
        t2 = time.monotonic()
        self.max_bytes.update(prep.max_bytes)
        self.topic_ids.source.update(prep.ids.source)
        self.topic_ids.target.update(prep.ids.target)
        start_ms = min((s.epoch_start_ms for s in self.summaries.values()), default=_now_ms())
        for (t, p), remote in prep.route.items():
            if (t, p) not in self.route:  # grown mid-epoch (_grow); a planned one is in the route already
                self.partitions.append(LanePartition(t, p, remote))
                self.route[(t, p)] = remote
                s = self.summaries[(t, p)] = PartitionSummary(self.mirror.name, self.lane, t, p, remote,
                                                              generation=self.config.worker.generation)
                s.epoch_start_ms = start_ms
        self._committed_next.update(prep.positions)
        self._committed_totals.update(prep.totals)
        self.protocol.resumed({(self.mirror.source, t, p): o for (t, p), o in prep.positions.items()
                               if (t, p) in prep.totals})
        # only the new ones: the kept partitions go on from where take_clients() assigned them
        self.consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in prep.positions.items()])
        with talking_to("source", self.mirror.source, "reading the source's metadata"):
            topics = sorted({t for t, _ in prep.route})  # the new topics' leaders, now (see _start)
            if len(topics) > ONE_METADATA_REQUEST_ABOVE:
                self.consumer.list_topics(timeout=30)
            else:
                for topic in topics:
                    self.consumer.list_topics(topic, timeout=30)
        t3 = time.monotonic()
        log.info("lane %s: %d partitions added to its kept clients in %.0f ms (topics described in %.0f ms, "
                 "progress and offsets read in %.0f ms, assigned in %.0f ms)", self.tid, len(prep.route),
                 (t3 - t0) * 1000, prep.described_ms, prep.read_ms, (t3 - t2) * 1000)
        self._added = [k for k in self._added if k not in prep.route]

    def _grow(self, gained: list[LanePartition]) -> None:
        """Take partitions the source gained into this epoch: prepared on a thread while the loop copies on (the
        progress read alone took 0.4-0.8 s at 10,000 partitions), then assigned between two commit intervals
        (nothing of them is in a transaction yet). The plan of the lane's next epoch holds them too
        (routewatch.py)."""
        growing = {k for k, _ in self._gaining}
        self._gaining += [((p.source_topic, p.partition), p.target_topic) for p in gained
                          if (p.source_topic, p.partition) not in self.route
                          and (p.source_topic, p.partition) not in growing]
        self._grown(block=False)

    def _grown(self, block: bool) -> None:
        """Take the prepared partitions in when ready (`block`: wait for them, at the end of the loop) and start
        preparing the next ones."""
        if self._preparing is not None:
            fut, t0 = self._preparing
            if not fut.done() and not block:
                return
            self._preparing = None
            self._take_prepared(fut.result(), t0)  # its errors are the loop's: an outage, a regrow, ...
        if self._gaining and not block and self.protocol is not None:
            route, self._gaining = dict(self._gaining), []
            self._preparing = (_PREPARING.submit(self._prepare, route, self.protocol.producer), time.monotonic())

    def _settle_growth(self) -> None:
        """No preparation outlives the loop that asked for it (it uses the lane's producer)."""
        if self._preparing is not None:
            wait_for([self._preparing[0]])
            self._preparing = None

    def _producer_knows(self, route: dict[tuple[str, int], str], producer) -> None:
        """The kept producer learns the remote partitions it is to write now: it refuses a partition missing from
        the metadata it holds (_UNKNOWN_PARTITION) and looks again only every topic.metadata.refresh.interval.ms,
        so a partition added to a topic it already wrote failed the lane. A remote partition the target's answer
        does not list (topic sync saw it on another broker) starts the lane afresh, as a changed plan does."""
        for topic in sorted(set(route.values())):
            have = producer.list_topics(topic, timeout=30).topics.get(topic)
            missing = sorted(p for (_, p), t in route.items()
                             if t == topic and (have is None or p not in have.partitions))
            if missing:
                raise _Regrow(f"the target does not list partitions {missing} of {topic!r} yet")

    def _guarded(self, op: Callable, *args) -> None:
        """Fatal errors surface from flush()/poll()/init as exceptions, sometimes a bare SystemError: map fencing
        to LaneFenced and give the rest their KafkaError, so they can be classified."""
        try:
            op(*args)
        except (KafkaException, SystemError) as e:
            err = kafka_error(e) or self._fatal_error()
            if err is None:
                raise
            if is_fenced(err):
                raise LaneFenced() from e
            if isinstance(e, KafkaException):
                raise
            raise KafkaException(err) from e

    def _fatal_error(self) -> KafkaError | None:
        if self._inflight is not None:  # the fence's transactional calls are not to overlap
            wait_for([self._inflight[0]])
        return self.protocol.fatal_error() if self.protocol is not None else None

    def _close_clients(self) -> None:
        self._settle_growth()  # a preparation still running uses the producer
        self._gaining = []
        self._drop_uncommitted()  # a progress commit still running uses the fence producer
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None
        self._note_reach()
        if self.consumer is not None:
            close_consumer(self.consumer)
        if self.protocol is not None:
            self.protocol.close()
        self.protocol = self.consumer = None

    def _fenced(self) -> None:
        log.warning("lane %s fenced by a newer copy; stopping", self.tid)
        self._drop_uncommitted()
        for s in self.summaries.values():
            s.fenced = True

    # ---- the loop ----------------------------------------------------------------------------------------

    def _loop(self, deadline: float | None = None) -> None:
        assert self.consumer is not None and self.protocol is not None
        protocol = self.protocol
        interval = self.config.commitIntervalMs / 1000.0
        early = None if protocol.pipelined else interval * EARLY_COMMIT  # see EARLY_COMMIT
        deadline = time.monotonic() + self.epoch_seconds if deadline is None else deadline
        mark = time.monotonic()  # when the last commit began: commits begin every `interval`
        pauses = self.pauses
        pauses.restart()  # the time before this call (a start, an outage's wait) is not the loop's
        while time.monotonic() < deadline and not self.should_stop():
            interval_end = next_commit_at(mark, time.monotonic(), interval, deadline)
            while True:
                left = interval_end - time.monotonic()
                if left <= 0:
                    break
                pauses.turn()
                # returns at the first record (at-least-once makes it visible when acknowledged, not at the
                # commit), or after a slice without any
                msgs = next_batch(self.consumer, READ_BATCH, min(left, CONSUME_SLICE_S))
                pauses.mark("consume")
                if msgs:
                    protocol.begin()
                    if "source" in self.outage.down:  # maybe fetched before it went away: ask it before saying so
                        self._next_source_probe = 0.0
                self._copy(msgs)
                pauses.mark("copy")
                protocol.producer.poll(0)
                if self._sealed or self._inflight is not None:
                    self._advance_pipeline()
                pauses.mark("pipeline")
                if early is not None and len(msgs) < READ_BATCH and self._pending \
                        and time.monotonic() >= mark + early:
                    break
            mark = time.monotonic()
            if self._pending:
                if protocol.pipelined:
                    self._sealed.append((mark, self._pending))
                    self._pending = {}
                    self._advance_pipeline()
                    pauses.mark("pipeline")
                else:
                    self._commit()
                    pauses.mark("commit")
            else:
                protocol.end_empty()
                pauses.mark("commit")
            if "source" in self.outage.down and time.monotonic() >= self._next_source_probe:
                self._probe_source()
            if self.growth is not None and ((gained := self.growth.ready()) or self._preparing is not None):
                self._grow(gained)
                pauses.mark("grow")
        self._grown(block=True)  # what was prepared is copied from the next epoch (or the next loop) on
        self._drain_pipeline()

    def _copy(self, msgs: list) -> None:
        assert self.protocol is not None
        producer = self.protocol.producer
        for m in msgs:
            err = m.error()
            if err is not None:
                self._source_error(err, m)
                continue
            key = (m.topic(), m.partition())
            off = m.offset()
            pend = self._pending.get(key)
            if pend is None:
                pend = self._pending[key] = _Pending(off, key[0], key[1], self._delivery_errors)
            k, v, h = m.key(), m.value(), m.headers()
            ts_type, ts = m.timestamp()
            pend.src_last = off
            if self.stamper is not None:
                if not self.stamper.should_copy(h, (key[0], key[1], off)):
                    continue  # came from the target: copying it back would loop; progress still advances
                h = self.stamper.headers_for(h)
            pend.count += 1
            pend.nbytes += (len(k) if k else 0) + (len(v) if v else 0)
            pend.ts_sum += ts
            pend.timestamps.append(ts)
            pend.offsets.append(off)
            if pend.ts_min < 0 or ts < pend.ts_min:
                pend.ts_min = ts
            while True:
                try:
                    producer.produce(self.route[key], value=v, key=k, partition=key[1], headers=h,
                                     timestamp=ts if ts_type != TIMESTAMP_NOT_AVAILABLE else 0, on_delivery=pend)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as e:
                    err = e.args[0]
                    if err.code() == KafkaError._FATAL:  # "Unable to produce message": the cause is behind it
                        err = self._fatal_error() or err
                    fault = classify(err)
                    if fault is Fault.FENCED:
                        raise LaneFenced() from e
                    if fault is Fault.TRANSIENT:
                        raise Unreachable("target", self.mirror.target, f"producing: {describe(err)}") from e
                    self._abort_quietly()
                    self._raise_refused(err, key[0], key[1], off)

    def _source_error(self, err: KafkaError, m) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._LOG_TRUNCATION):
            self._abort_quietly()
            topic, part = m.topic(), m.partition()
            nxt = self._committed_next.get((topic, part), -1)
            lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            raise SourceGapError(f"mirror {self.mirror.name!r}: source {self.mirror.source}/{topic} partition "
                                 f"{part}: offset out of range while copying (next to copy {nxt}, source holds "
                                 f"{lo}..{hi - 1}): records were deleted or the log truncated before being "
                                 f"mirrored ({err.str()})")
        fault = classify(err)
        if fault is Fault.TRANSIENT:  # one broker or connection: the client retries and moves on by itself
            log.debug("lane %s: source error, retried by the client: %s", self.tid, describe(err))
            return
        self._abort_quietly()
        topic, part = m.topic(), m.partition()
        where = (f"topic {topic} partition {part} offset {self._committed_next.get((topic, part), -1)}" if topic
                 else f"partitions {', '.join(f'{t}/{p}@{o}' for (t, p), o in sorted(self._committed_next.items()))}")
        raise CopyError(f"mirror {self.mirror.name!r}: consuming from source cluster {self.mirror.source!r}, "
                        f"{where} failed: {describe(err)}")

    # ---- the source going away and coming back: its consumer keeps its position and reconnects by itself ----

    def _on_client_error(self, err: KafkaError) -> None:
        """The source consumer's error callback (runs inside consume())."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN and "source" not in self.outage.down:
            line = self.outage.failed("source", f"source cluster {self.mirror.source!r}", describe(err))
            if line:
                log.warning("%s", line)
            self.backoff.reset()
            self._next_source_probe = time.monotonic() + self.backoff.next()

    def _probe_source(self) -> None:
        """While the source is away: does it answer a metadata request yet?"""
        assert self.consumer is not None
        try:
            self.consumer.list_topics(next(iter(self.route))[0], timeout=2)
        except KafkaException:
            self._next_source_probe = time.monotonic() + self.backoff.next()
            return
        self._source_answered()

    def _source_answered(self) -> None:
        line = self.outage.answered("source")
        if line:
            log.warning("%s", line)

    def _commit(self) -> None:
        """Wait for the records' acks, then have the protocol commit them with their progress."""
        assert self.protocol is not None
        t0 = time.monotonic()
        while self.protocol.producer.flush(30) > 0:
            pass
        self._acks_ms.append((time.monotonic() - t0) * 1000)
        self._check_delivery()
        recs = self._progress_records(self._pending)
        try:
            self.protocol.commit(recs, self._on_progress_delivery)
        except KafkaException as e:
            self._commit_failed(e, recs)
        self._check_delivery()
        pending, self._pending = self._pending, {}
        self._committed(recs, pending, t0)

    def _progress_records(self, pending: dict[tuple[str, int], _Pending]) -> list[ProgressRecord]:
        commit_ms = _now_ms()
        totals = self._committed_totals
        return [ProgressRecord(self.mirror.source, topic, part, pend.src_last + 1, pend.src_first, pend.src_last,
                               self.route[(topic, part)], pend.tgt_first, pend.tgt_last, pend.count, commit_ms,
                               self.config.worker.generation, self.config.name, self.mirror.name, self.lane,
                               pend.nbytes, self.config.resource, self.topic_ids.source.get(topic, ""),
                               self.topic_ids.target.get(self.route[(topic, part)], ""),
                               totals.get((topic, part), (0, 0))[0] + pend.count,
                               totals.get((topic, part), (0, 0))[1] + pend.nbytes)
                for (topic, part), pend in pending.items()]

    def _commit_failed(self, e: KafkaException, recs: list[ProgressRecord]) -> None:
        """The commit can fail before the records' own delivery reports are served: theirs name the cause."""
        assert self.protocol is not None
        self.protocol.producer.poll(0)
        self._check_delivery()
        self._raise_if_write_refused(e.args[0], [rec.target_topic for rec in recs])
        raise e

    def _committed(self, recs: Iterable[ProgressRecord], pending: dict[tuple[str, int], _Pending],
                   t0: float) -> None:
        """The records of `pending` and their progress are durable: count them in the summaries."""
        done_ms = _now_ms()
        for rec in recs:
            key = (rec.source_topic, rec.partition)
            pend = pending[key]
            s = self.summaries[key]
            if s.source_first < 0:
                s.source_first, s.target_first = rec.source_first, rec.target_first
            s.source_last, s.target_last, s.next_offset = rec.source_last, rec.target_last, rec.next_offset
            s.records += pend.count
            s.bytes += pend.nbytes
            s.transactions += 1
            if pend.count:
                s.latency_ms_sum += pend.count * done_ms - pend.ts_sum
                s.latency_ms_max = max(s.latency_ms_max, done_ms - pend.ts_min)
                s.latency_le = [a + b for a, b in zip(s.latency_le, latency_le(done_ms, pend.timestamps))]
            self._committed_next[key] = rec.next_offset
            self._committed_totals[key] = (rec.records_total, rec.bytes_total)
        self._commits += 1
        self._commit_ms.append((time.monotonic() - t0) * 1000)

    # ---- pipelined commits (at-least-once) ------------------------------------------------------------------
    # At-least-once records are visible once acknowledged; only their progress waits. Flushing and writing the
    # progress inside the loop held every record that arrived meanwhile (commits of 5-14 ms median and up to
    # 900 ms at 5,000 records/s on the benchmark's 2 cores), so the loop now seals each interval and copies on;
    # the intervals whose records were all acknowledged get their progress written in order, one progress
    # transaction at a time, by the fence producer in a thread of their own (the client releases the GIL
    # while it waits). Progress still never covers a record that was not acknowledged.

    def _advance_pipeline(self, block: bool = False) -> None:
        """Count the running progress commit when it is done (or wait for it: `block`); then start the next
        for the sealed intervals whose records are all acknowledged."""
        if self._delivery_errors:
            self._check_delivery()
        if self._inflight is not None:
            fut, recs, pending, t0 = self._inflight
            if not fut.done() and not block:
                return
            self._inflight = None
            try:
                fut.result()
            except KafkaException as e:
                self._commit_failed(e, recs)
            self._check_delivery()
            self._committed(recs, pending, t0)
        ready = 0
        while ready < len(self._sealed) and all(p.acknowledged for p in self._sealed[ready][1].values()):
            ready += 1
        if not ready:
            return
        intervals, self._sealed = self._sealed[:ready], self._sealed[ready:]
        pending = intervals[0][1]
        for _, later in intervals[1:]:
            for key, share in later.items():
                if key in pending:
                    pending[key].absorb(share)
                else:
                    pending[key] = share
        assert self.protocol is not None
        recs = self._progress_records(pending)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"progress-{self.lane}")
        self._inflight = (self._writer.submit(self.protocol.commit, recs, self._on_progress_delivery), recs,
                          pending, intervals[0][0])

    def _drain_pipeline(self) -> None:
        """The epoch ends: every sealed interval's records acknowledged and its progress committed."""
        assert self.protocol is not None
        while self._sealed or self._inflight is not None:
            if self._sealed and not all(p.acknowledged for p in self._sealed[0][1].values()):
                self.protocol.producer.flush(30)
            self._advance_pipeline(block=True)

    def _drop_uncommitted(self) -> None:
        """Forget what was copied but not committed (the lane gives it up, and a fresh start copies it again);
        a progress commit that was running is waited for, and counted when it went through."""
        self._pending.clear()
        self._sealed.clear()
        if self._inflight is not None:
            fut, recs, pending, t0 = self._inflight
            self._inflight = None
            wait_for([fut])
            if fut.exception() is None:
                self._committed(recs, pending, t0)

    # ---- delivery reports --------------------------------------------------------------------------------

    def _on_progress_delivery(self, err: KafkaError | None, _msg) -> None:
        if err is not None:
            self._delivery_errors.append((err, "<progress>", -1, -1))

    def _check_delivery(self) -> None:
        if not self._delivery_errors:
            return
        # a purged record only says its transaction went: another record's error, if any, is the cause
        err, topic, part, off = next((e for e in self._delivery_errors if e[0].code() not in _PURGED),
                                     self._delivery_errors[0])
        self._delivery_errors.clear()
        if err.code() in (*_PURGED, KafkaError._FATAL) or err.fatal():
            err = self._fatal_error() or err  # a fenced producer purges its queue: report the cause
        fault = classify(err)
        if fault is Fault.FENCED:
            raise LaneFenced()
        if fault is Fault.TRANSIENT:  # the client's own retries ran out: start afresh from the last commit
            written = self.config.progressTopic if topic == "<progress>" else self.route.get((topic, part))
            keys = {*self._pending, *(k for _, shares in self._sealed for k in shares)}
            batch = [self.route[k] for k in keys if k in self.route]  # every topic of the transaction
            self._raise_if_write_refused(err, sorted({*([written] if written else []), *batch}))
            what = self.config.progressTopic if topic == "<progress>" else f"{topic}/{part} offset {off}"
            raise Unreachable("target", self.mirror.target, f"delivering {what}: {describe(err)}") \
                from KafkaException(err)  # the error, for `answered`
        self._abort_quietly()
        if topic == "<progress>":
            raise CopyError(f"mirror {self.mirror.name!r}: writing progress to {self.mirror.target}/"
                            f"{self.config.progressTopic} failed: {describe(err)}")
        self._raise_refused(err, topic, part, off)

    def _raise_if_write_refused(self, err: KafkaError, written: list[str]) -> None:
        """ACLs: a refused AddPartitionsToTxn leaves only an invalid transaction state, which looks transient;
        the cluster is asked whether the mirror's principal may write the topics, so a refusal stops the mirror
        instead of being waited on."""
        if err.code() not in (KafkaError.INVALID_TXN_STATE, *_PURGED) or not written:
            return
        topic = write_refused(self.target_conf, written)
        if topic is not None:
            self._abort_quietly()
            raise CopyError(f"mirror {self.mirror.name!r}: target cluster {self.mirror.target!r} refuses to let "
                            f"the mirror write topic {topic!r} (TOPIC_AUTHORIZATION_FAILED: no WRITE permission "
                            f"for the mirror's principal); {describe(err)}")

    def _raise_refused(self, err: KafkaError, topic: str, part: int, offset: int) -> None:
        target = self.route.get((topic, part), "?")
        extra = ""
        if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
            limit = self.max_bytes.get(target)
            extra = f" (target topic max.message.bytes={limit})" if limit else " (target max.message.bytes)"
        raise CopyError(f"mirror {self.mirror.name!r}: the target refused the record at source "
                        f"{self.mirror.source}/{topic} partition {part} offset {offset} -> "
                        f"{self.mirror.target}/{target}: {err.name()}: {err.str()}{extra}; "
                        f"the transaction was aborted and nothing after the last commit was skipped")

    def _abort_quietly(self) -> None:
        if self.protocol is not None:
            self.protocol.abort()
        self._drop_uncommitted()

    # ---- the end of the epoch ------------------------------------------------------------------------------

    def _finish(self, keep: bool = False) -> None:
        """Summaries' end figures; then keep the clients for this lane's next epoch, or close them."""
        end_ms = _now_ms()
        if self.consumer is not None:
            self._end_offsets_and_lag()
        waiting, since = self.outage.waiting, self.outage.since
        for s in self.summaries.values():
            s.epoch_end_ms = end_ms
            s.waiting, s.waiting_since_ms = waiting, int(since * 1000) if since else 0
        self.result = [replace(s) for s in self._worth_reporting()]  # the task's rows, whatever happens next
        if keep and self.epoch is not None and self.consumer is not None and self.protocol is not None:
            sessions.keep(self)
        else:
            self._close_clients()

    def _worth_reporting(self) -> list[PartitionSummary]:
        """The rows this epoch yields: partitions that copied, or whose offsets or lag moved since this lane's
        clients last reported them (all of them after a fresh start), or that carry a state (fenced, waiting,
        error); and the lane's first partition always, so an idle lane still reports its epoch. At 10,000 partitions
        an idle epoch was 10,000 rows saying nothing new, and handing 2,250 of them to Spark took a lane 1-2 s at
        its epoch's end (bench/scale.py); the driver keeps the last row of each partition."""
        out = []
        for i, (key, s) in enumerate(self.summaries.items()):
            now = (s.next_offset, s.source_end, s.lag)
            if i == 0 or s.records or s.transactions or s.fenced or s.error or s.waiting or \
                    self.reported.get(key) != now:
                out.append(s)
                self.reported[key] = now
        return out

    def _end_offsets_and_lag(self) -> None:
        """Each summary's source end offset, next offset and lag as the epoch ends.

        The offsets are the ones the consumer's last fetch of each partition brought (log start and high
        watermark), not asked for: a request per partition cost a lane of 500 partitions 29 s at every epoch
        end (bench/scale.py). A partition not fetched yet reports no lag (-1). These figures only stand in until
        the driver's monitor, which lists every partition's offsets itself (batched, committed records counted),
        has seen the partition."""
        assert self.consumer is not None
        for (topic, part), s in self.summaries.items():
            try:
                lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            except KafkaException:
                lo, hi = 0, -1
            if lo < 0:  # the fetch did not carry the log start offset: the position is the next offset anyway
                lo = 0
            s.source_end = hi
            s.next_offset = self._committed_next.get((topic, part), s.next_offset)
            # in offsets (-1: unknown); the driver's live monitor counts the small ones exactly
            s.lag = partition_lag(lo, hi, s.next_offset) if hi >= 0 and s.next_offset >= 0 else -1


def copy_lane(config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
              epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None
              ) -> list[PartitionSummary]:
    """Run one lane for one epoch, with clients of its own (tests and tools; Spark tasks use LaneCopier)."""
    return LaneCopier(config, mirror, lane, partitions, epoch_seconds, should_stop).run()
