"""The copy loop: one lane's cadence of read, write and commit until a deadline. It consumes for up to
~commitIntervalMs at a time (reader.py), writes each batch (writer.py) and hands the interval to the committer
(committer.py) once it ends; between intervals it probes a source that went away and takes in partitions the
source gained (growth.py)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .committer import IntervalCommitter
from .growth import Growth
from .ledger import Ledger
from .pauses import LoopPauses
from .reader import SourceReader
from .writer import RecordWriter

if TYPE_CHECKING:
    from ..routewatch import RouteWatch

CONSUME_SLICE_S = 0.01
"""Longest a lane waits for records in one call while none arrive (see reader.next_batch): the loop also has
acknowledged intervals to hand to the progress writer (at-least-once) between calls."""

READ_BATCH = 5000
"""Most records a lane takes from its consumer at once."""

EARLY_COMMIT = 0.25
"""An exactly-once interval commits once this share of commitIntervalMs has passed if the lane has read all the
source had for it (its last read came back short of READ_BATCH): its records become visible only at the commit,
and holding them for the whole interval at a low rate was most of their latency (visible p50 68-72 ms against
34 for MirrorMaker 2, which commits after every poll). A lane that keeps up with a high rate reads full batches
and still commits every commitIntervalMs: each commit waits for every ack of its records, and shorter
transactions there cost throughput (25-ms intervals: 69,000-81,000 records/s against 79,000-95,000)."""


def next_commit_at(last_began: float, now: float, interval: float, deadline: float) -> float:
    """When the interval that starts `now` commits: `interval` after the last commit began, so a commit that ran
    long (acks held up on a loaded target: 100-500 ms at times on the benchmark's 2 cores) shortens the next
    interval. The records that arrived during it already waited, and holding them for a whole interval more
    added up to 100 ms to the latency's tail. A tenth of the interval at least, so a batch still gathers; never
    past the epoch."""
    return min(max(last_began + interval, now + interval / 10), deadline)


def run_loop(reader: SourceReader, writer: RecordWriter, committer: IntervalCommitter, ledger: Ledger,
             growth: Growth, pauses: LoopPauses, should_stop: Callable[[], bool], watch: RouteWatch | None,
             abort: Callable[[], None], deadline: float) -> None:
    """Copy until `deadline` or `should_stop()`; every interval is committed (or sealed) when the loop returns."""
    protocol = writer.protocol
    assert reader.consumer is not None and protocol is not None
    interval = writer.ctx.config.commitIntervalMs / 1000.0
    early = None if protocol.pipelined else interval * EARLY_COMMIT  # see EARLY_COMMIT
    mark = time.monotonic()  # when the last commit began: commits begin every `interval`
    pauses.restart()  # the time before this call (a start, an outage's wait) is not the loop's

    def on_source_error(err, m) -> None:
        reader.source_error(err, m, ledger.committed_next, abort)

    while time.monotonic() < deadline and not should_stop():
        interval_end = next_commit_at(mark, time.monotonic(), interval, deadline)
        while True:
            left = interval_end - time.monotonic()
            if left <= 0:
                break
            pauses.turn()
            # returns at the first record (at-least-once makes it visible when acknowledged, not at the
            # commit), or after a slice without any
            msgs = reader.read(READ_BATCH, min(left, CONSUME_SLICE_S))
            pauses.mark("consume")
            if msgs:
                protocol.begin()
            writer.write(msgs, on_source_error)
            pauses.mark("copy")
            protocol.producer.poll(0)
            if committer.busy:
                committer.advance()
            pauses.mark("pipeline")
            if early is not None and len(msgs) < READ_BATCH and writer.interval \
                    and time.monotonic() >= mark + early:
                break
        mark = time.monotonic()
        pauses.mark(committer.end_interval(mark))
        reader.probe_when_due()
        if watch is not None and ((gained := watch.ready()) or growth.preparing):
            growth.grow(gained)
            pauses.mark("grow")
    growth.grown(block=True)  # what was prepared is copied from the next epoch (or the next loop) on
    committer.drain()
