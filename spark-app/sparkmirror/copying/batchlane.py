"""A lane on the batch path (issue 36): `LaneCopy` with the batch path's parts. Kafka's record batches are
fetched (batchsource.py) and produced to the target as bytes under the lane's own producer id, epoch and
sequences (batchtarget.py, batchwriter.py): no record is decoded, decompressed or compressed unless its batch
must be rebuilt (rebuild.py). Everything else is the record path's: the start order that fences older copies
before the progress is read, the ledger and its progress records (the offset map), the committer, outages
ridden out, kept clients between epochs (sessions.py) and the epoch (epoch.py).

Partitions the plan gains reach a batch lane at its next epoch (`BatchGrowth`); the record path also takes them
mid-epoch (growth.py). A mirror under the identity replication policy copies records: provenance headers are
written into each record (`copypath.copy_path_of` says which path a mirror takes, and why)."""
from __future__ import annotations

import logging
import time

from ..copypath import copy_path_of
from ..resource.flowgroup import CopyPath, Delivery, FlowGroupConfig, Mirror
from .batchcommit import BatchAtLeastOnce, BatchExactlyOnce
from .batchloop import run_batch_loop
from .batchsource import BatchSource
from .batchtarget import BatchTarget
from .context import LaneContext
from .ledger import Ledger
from .lane import LaneCopy
from .shares import PartitionKey
from .start import lane_topic_ids, resume_positions

log = logging.getLogger(__name__)


class BatchGrowth:
    """Partitions a batch lane adds: those its kept clients did not copy yet, between epochs."""

    def __init__(self, ctx: LaneContext, source: BatchSource, target: BatchTarget, ledger: Ledger) -> None:
        self.ctx, self.source, self.target, self.ledger = ctx, source, target, ledger
        self.added: list[PartitionKey] = []
        self.preparing = False

    def kept(self, kept_route: dict[PartitionKey, str]) -> None:
        self.added = [k for k in self.ctx.route if k not in kept_route]

    def extend(self) -> None:
        """The added partitions' resume offsets from the progress topic, then read from there."""
        ctx, t0 = self.ctx, time.monotonic()
        route = {k: ctx.route[k] for k in self.added}
        self.ledger.topic_ids = lane_topic_ids(ctx.config, ctx.mirror, ctx.route)
        positions, totals = resume_positions(ctx.config, ctx.mirror, list(route), self.ledger.topic_ids, route)
        self.ledger.resumed(positions, totals)
        assert self.target.protocol is not None
        self.target.protocol.resumed({(ctx.mirror.source, t, p): o for (t, p), o in positions.items()
                                      if (t, p) in totals})
        self.source.add(positions)
        log.info("lane %s: %d partitions added in %.0f ms", ctx.tid, len(route), (time.monotonic() - t0) * 1000)
        self.added = []

    def grow(self, gained) -> None:
        """Mid-epoch gains wait for the next epoch's plan."""

    def grown(self, block: bool) -> None:
        pass

    def settle(self) -> None:
        pass


class BatchLaneCopy(LaneCopy):
    """Copies one lane's source partitions for one bounded epoch, as record batches."""

    path = "batches"

    def make_parts(self) -> None:
        ctx = self.ctx
        self.protocol_class = (BatchExactlyOnce if ctx.config.delivery == Delivery.EXACTLY_ONCE
                               else BatchAtLeastOnce)
        self.writer = BatchTarget(ctx, self.abort_quietly)  # type: ignore[assignment]
        self.reader = BatchSource(ctx, self.outage, self.backoff)  # type: ignore[assignment]
        self.growth = BatchGrowth(ctx, self.reader, self.writer, self.ledger)  # type: ignore[assignment]
        self.watch = None  # see BatchGrowth

    def copy(self, deadline: float) -> None:
        self.writer.guarded(run_batch_loop, self.reader, self.writer, self.committer, self.pauses,
                            self.should_stop, deadline)


def lane_copy(config: FlowGroupConfig, mirror: Mirror, *args, **kwargs) -> LaneCopy:
    """The lane of the path `mirror` takes (`copy_path_of`)."""
    path, _ = copy_path_of(config, mirror)
    cls = BatchLaneCopy if path == CopyPath.BATCHES else LaneCopy
    return cls(config, mirror, *args, **kwargs)
