"""The batch loop: one batch lane's cadence of fetch, produce and commit until a deadline (loop.py's for
records). Each turn takes the answer of the Fetch under way and sends the next (batchsource.py), produces the
batches (batchtarget.py; `produce` returns once they are acknowledged) and, once the interval ends, hands it to
the committer (committer.py): exactly-once commits it in the loop with its progress in the same transaction,
at-least-once seals it and its progress follows in the committer's thread. Like the record loop, an
exactly-once interval commits early once the lane has caught up with its source (loop.EARLY_COMMIT). Between
intervals it takes in partitions the source gained (growth.py, as the record loop does)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .batchsource import BatchSource
from .batchtarget import BatchTarget
from .committer import IntervalCommitter
from .growth import Growth
from .loop import EARLY_COMMIT, next_commit_at
from .pauses import LoopPauses

if TYPE_CHECKING:
    from ..routewatch import RouteWatch


def run_batch_loop(source: BatchSource, target: BatchTarget, committer: IntervalCommitter, growth: Growth,
                   pauses: LoopPauses, should_stop: Callable[[], bool], watch: RouteWatch | None,
                   deadline: float) -> None:
    """Copy until `deadline` or `should_stop()`; every interval is committed (or sealed, then drained) when the
    loop returns."""
    protocol = target.protocol
    assert source.consumer is not None and protocol is not None
    interval = target.ctx.config.commitIntervalMs / 1000.0
    early = None if protocol.pipelined else interval * EARLY_COMMIT
    mark = time.monotonic()
    pauses.restart()
    while time.monotonic() < deadline and not should_stop():
        interval_end = next_commit_at(mark, time.monotonic(), interval, deadline)
        while time.monotonic() < interval_end:
            pauses.turn()
            fetched = source.read()
            pauses.mark("consume")
            target.write(fetched)
            pauses.mark("copy")
            if committer.busy:
                committer.advance()
                pauses.mark("pipeline")
            caught_up = all(f.next_offset >= f.high_watermark for f in fetched.values())
            if early is not None and caught_up and target.interval and time.monotonic() >= mark + early:
                break
        mark = time.monotonic()
        pauses.mark(committer.end_interval(mark))
        if watch is not None and ((gained := watch.ready()) or growth.preparing):
            growth.grow(gained)  # taken between two intervals: nothing of the new partitions is in a transaction
            pauses.mark("grow")
    growth.grown(block=True)  # what was prepared is copied from the next epoch (or the next loop) on
    committer.drain()
