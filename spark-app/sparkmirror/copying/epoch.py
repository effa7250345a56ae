"""A lane task's epoch: where its clients come from and where they go.

The clients come from the lane that ran the previous epoch in this worker (kept and copying on between epochs,
sessions.py), from the worker that keeps them (which then runs the epoch and returns its summaries,
delegate.py), or are made afresh (lane.py). After a whole epoch they are kept for the next one in this worker;
otherwise closed. A standby lane (planned before its worker generation took over) first waits for its go mark.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from ..lanes import LanePartition
from ..resource.flowgroup import FlowGroupConfig, Mirror
from . import delegate, sessions
from .batchlane import lane_copy
from .errors import CopyError, LaneFenced
from .lane import LaneCopy
from .ledger import commit_times, now_ms
from .standby import wait_for_go
from .summary import PartitionSummary
from .workerproc import settle_worker

log = logging.getLogger(__name__)


def run_epoch(lane: LaneCopy, kept: LaneCopy | None = None) -> list[PartitionSummary]:
    """Copy until the epoch ends, the lane is fenced or `should_stop()`; return per-partition summaries.

    The lane's clients come from `kept` (this worker runs the epoch for a task in another), from this
    worker's session of the lane, from the worker that keeps them, or are made afresh."""
    start_ms = now_ms()
    lane.ledger.epoch_started(start_ms)
    if not lane.partitions:
        return []
    if lane.epoch is not None:  # a Spark task: this worker process lives on (tests and tools do not)
        settle_worker()
        log.info("lane %s: epoch %d starts in worker %d", lane.tid, lane.epoch, os.getpid())
    keep = delegated = False
    try:
        if lane.standby:
            stop_file = lane.stop_file
            if not wait_for_go(lane.config, lane.mirror, lane.tid, lambda: lane.should_stop() or (
                    bool(stop_file) and os.path.exists(stop_file))):
                raise LaneFenced()
            start_ms = now_ms()
            lane.ledger.epoch_started(start_ms)
        lane.reused = sessions.adopt(lane, kept) if kept is not None else sessions.resume(lane)
        if not lane.reused and (served := delegate.ask(lane)) is not None:
            if served.failed:  # it ended early: go on from what it committed
                sessions.count_committed(lane, served.rows)
            else:
                delegated = True
                lane.result = served.rows
                if served.error:
                    lane.summaries = {(r.source_topic, r.partition): r for r in served.rows}
                    raise CopyError(served.error)
        if not delegated:
            if lane.watch is not None:  # this loop is the lane's: it takes new partitions in place
                lane.watch.growing, lane.watch.elsewhere = True, False
            lane.copy_riding_out(time.monotonic() + lane.epoch_seconds)
            keep = True
    except LaneFenced:
        lane.fenced()
    finally:
        finish_ms = 0.0
        if not delegated:
            t0 = time.monotonic()
            _finish(lane, keep)
            finish_ms = (time.monotonic() - t0) * 1000
        secs, records = (now_ms() - start_ms) / 1000, sum(s.records for s in lane.result)
        if delegated:  # the keeping worker logged its commits
            log.info("lane %s: epoch of %.1f s, %d records (run by the worker keeping the clients)", lane.tid,
                     secs, records)
        else:
            ledger = lane.ledger
            log.info("lane %s: epoch of %.1f s, %d records in %d transactions%s, longest loop pause %s%s%s",
                     lane.tid, secs, records, ledger.commits,
                     commit_times(ledger.commit_ms, lane.protocol_class.pipelined, ledger.acks_ms),
                     lane.pauses.describe(), " (kept clients)" if lane.reused else "",
                     f"; ended in {finish_ms:.0f} ms" if finish_ms >= 100 else "")
    return lane.result


def _finish(lane: LaneCopy, keep: bool) -> None:
    """Summaries' end figures; then keep the clients for this lane's next epoch, or close them."""
    lane.end_figures()
    if keep and lane.epoch is not None and lane.has_clients:
        sessions.keep(lane, run_epoch)
    else:
        lane.close_clients()


def copy_lane(config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
              epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None
              ) -> list[PartitionSummary]:
    """Run one lane for one epoch, with clients of its own (tests and tools; Spark tasks keep theirs)."""
    return run_epoch(lane_copy(config, mirror, lane, partitions, epoch_seconds, should_stop))
