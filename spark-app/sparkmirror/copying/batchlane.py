"""A lane on the batch path (issue 36): `LaneCopy` with the batch path's parts. Kafka's record batches are
fetched (batchsource.py) and produced to the target as bytes under the lane's own producer id, epoch and
sequences (batchtarget.py, batchwriter.py): no record is decoded, decompressed or compressed unless its batch
must be rebuilt (rebuild.py). Everything else is the record path's: the start order that fences older copies
before the progress is read, the ledger and its progress records (the offset map), the committer, outages
ridden out, kept clients between epochs (sessions.py) and the epoch (epoch.py).

Partitions the lane gains are taken in place as on the record path (growth.py): the plan's, between epochs, and the
source's, mid-epoch (routewatch.py), prepared on a thread while the loop copies on and taken in between two commit
intervals (`BatchGrowth`). A mirror under the identity replication policy copies records: provenance headers are
written into each record (`copypath.copy_path_of` says which path a mirror takes, and why)."""
from __future__ import annotations

from ..copypath import copy_path_of
from ..resource.flowgroup import CopyPath, Delivery, FlowGroupConfig, Mirror
from .batchcommit import BatchAtLeastOnce, BatchExactlyOnce
from .batchloop import run_batch_loop
from .batchsource import BatchSource
from .batchtarget import BatchTarget
from .growth import Growth
from .lane import LaneCopy
from .shares import PartitionKey


class BatchGrowth(Growth):
    """Partitions a batch lane adds to its kept connections: growth.py's, the kept producer being the wire's.

    Exactly-once holds as on the record path: a new partition's resume offset is read from the progress topic
    after the lane's InitProducerId fenced its older copies; its first batches join the open transaction
    (AddPartitionsToTxn) when first produced, under sequences from 0, and its progress record goes in the same
    transaction. A lane that stops before that commit leaves neither its batches nor its progress."""

    def fits(self, max_bytes: dict[str, int], have: dict[str, int]) -> None:
        """Always: batches are sized per remote topic (batchtarget.py reads `max_bytes` per batch), no producer
        setting holds a size."""

    def producer_knows(self, route: dict[PartitionKey, str], producer) -> None:
        """Nothing to teach: the wire producer asks the target's metadata for a partition new to it when it first
        produces there, and waits for one not listed yet as for a leader moving (batchwriter.py)."""


class BatchLaneCopy(LaneCopy):
    """Copies one lane's source partitions for one bounded epoch, as record batches."""

    path = "batches"

    def make_parts(self) -> None:
        ctx = self.ctx
        self.protocol_class = (BatchExactlyOnce if ctx.config.delivery == Delivery.EXACTLY_ONCE
                               else BatchAtLeastOnce)
        self.writer = BatchTarget(ctx, self.abort_quietly)  # type: ignore[assignment]
        self.reader = BatchSource(ctx, self.outage, self.backoff)  # type: ignore[assignment]
        self.growth = BatchGrowth(ctx, self.reader, self.writer, self.ledger)

    def copy(self, deadline: float) -> None:
        self.writer.guarded(run_batch_loop, self.reader, self.writer, self.committer, self.growth, self.pauses,
                            self.should_stop, self.watch, deadline)


def lane_copy(config: FlowGroupConfig, mirror: Mirror, *args, **kwargs) -> LaneCopy:
    """The lane of the path `mirror` takes (`copy_path_of`)."""
    path = copy_path_of(config, mirror).path
    cls = BatchLaneCopy if path == CopyPath.BATCHES else LaneCopy
    return cls(config, mirror, *args, **kwargs)
