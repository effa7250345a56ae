"""A lane taking partitions in place: the ones its kept clients did not copy yet (its plan grew between epochs)
and the ones the source gains mid-epoch (routewatch.py). Each is started as a fresh lane's partitions are
(max.message.bytes, topic ids, resume offsets from the progress topic, read after the kept producer fenced this
lane's older copies), without a new producer or init_transactions. Both copy paths grow alike: the batch path's
`BatchGrowth` (batchlane.py) is this with its own two checks of the kept producer (`fits`, `producer_knows`)."""
from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from typing import Protocol

from ..lanes import LanePartition
from .context import LaneContext
from .errors import talking_to
from .ledger import Ledger
from .shares import PartitionKey
from .start import TopicIds, lane_topic_ids, resume_positions, target_max_message_bytes
from .targetwriter import TargetWriter

log = logging.getLogger(__name__)

_PREPARING = ThreadPoolExecutor(2, thread_name_prefix="lane-grow")
"""Prepares partitions a lane gains mid-epoch while its loop copies on (Growth.grow)."""


class Regrow(Exception):
    """Kept clients cannot take the lane's new partitions: the lane starts afresh."""


@dataclass
class Prepared:
    """What adding partitions to a lane's kept clients asked the clusters (Growth.prepare)."""

    route: dict[PartitionKey, str]
    max_bytes: dict[str, int]
    ids: TopicIds
    positions: dict[PartitionKey, int]
    totals: dict[PartitionKey, tuple[int, int]]
    described_ms: float
    read_ms: float


class Reads(Protocol):
    """What growth asks of a lane's reader (reader.SourceReader, batchsource.BatchSource)."""

    def add(self, positions: dict[PartitionKey, int]) -> None: ...


class Growth:
    """Partitions a lane adds to its running clients."""

    def __init__(self, ctx: LaneContext, reader: Reads, writer: TargetWriter, ledger: Ledger) -> None:
        self.ctx, self.reader, self.writer, self.ledger = ctx, reader, writer, ledger
        self.added: list[PartitionKey] = []  # partitions the kept clients did not copy yet (extend)
        self._gaining: list[tuple[PartitionKey, str]] = []  # gained mid-epoch, to prepare next (grow)
        self._preparing: tuple[Future, float] | None = None  # their preparation running on a thread, since when

    @property
    def preparing(self) -> bool:
        return self._preparing is not None

    def kept(self, kept_route: dict[PartitionKey, str]) -> None:
        """The lane goes on with clients that copied `kept_route`: the rest of its plan is to be added."""
        self.added = [k for k in self.ctx.route if k not in kept_route]

    def extend(self) -> None:
        """Add the partitions the plan gained to the kept clients (between epochs: nothing is in a transaction)."""
        assert self.writer.protocol is not None
        t0 = time.monotonic()
        self._take(self.prepare({k: self.ctx.route[k] for k in self.added}, self.writer.protocol.producer), t0)

    def prepare(self, route: dict[PartitionKey, str], producer) -> Prepared:
        """Everything adding `route`'s partitions asks the clusters, changing nothing of the lane: a lane growing
        mid-epoch runs it on a thread while its loop copies on (`grow`)."""
        ctx, have = self.ctx, self.writer.max_bytes
        t0 = time.monotonic()
        with talking_to("target", ctx.mirror.target, "describing the lane's new remote topics"):
            max_bytes = target_max_message_bytes(ctx.target_conf, set(route.values()) - set(have))
        self.fits(max_bytes, have)
        ids = lane_topic_ids(ctx.config, ctx.mirror, route)
        known = TopicIds({**self.ledger.topic_ids.source, **ids.source}, {**self.ledger.topic_ids.target, **ids.target})
        t1 = time.monotonic()
        positions, totals = resume_positions(ctx.config, ctx.mirror, list(route), known, route)
        t2 = time.monotonic()
        with talking_to("target", ctx.mirror.target, "reading the target's metadata"):
            self.producer_knows(route, producer)
        return Prepared(route, max_bytes, ids, positions, {k: v for k, v in totals.items() if k in route},
                        (t1 - t0) * 1000, (t2 - t1) * 1000)

    def _take(self, prep: Prepared, t0: float) -> None:
        """Assign the prepared partitions (between two commit intervals) and count them in this epoch."""
        ctx, ledger, writer = self.ctx, self.ledger, self.writer
        assert writer.protocol is not None
        t2 = time.monotonic()
        writer.max_bytes.update(prep.max_bytes)
        ledger.topic_ids.source.update(prep.ids.source)
        ledger.topic_ids.target.update(prep.ids.target)
        start_ms = ledger.epoch_start_ms()
        for (t, p), remote in prep.route.items():
            if (t, p) not in ctx.route:  # grown mid-epoch (grow); a planned one is in the route already
                ctx.partitions.append(LanePartition(t, p, remote))
                ctx.route[(t, p)] = remote
                s = ledger.summaries[(t, p)] = ledger.new_summary((t, p))
                s.epoch_start_ms = start_ms
        ledger.resumed(prep.positions, prep.totals)
        writer.protocol.resumed({(ctx.mirror.source, t, p): o for (t, p), o in prep.positions.items()
                                 if (t, p) in prep.totals})
        # only the new ones: the kept partitions go on from where they were
        self.reader.add(prep.positions)
        t3 = time.monotonic()
        log.info("lane %s: %d partitions added to its kept clients in %.0f ms (topics described in %.0f ms, "
                 "progress and offsets read in %.0f ms, assigned in %.0f ms)", ctx.tid, len(prep.route),
                 (t3 - t0) * 1000, prep.described_ms, prep.read_ms, (t3 - t2) * 1000)
        self.added = [k for k in self.added if k not in prep.route]

    def grow(self, gained: list[LanePartition]) -> None:
        """Take partitions the source gained into this epoch: prepared on a thread while the loop copies on (the
        progress read alone took 0.4-0.8 s at 10,000 partitions), then assigned between two commit intervals
        (nothing of them is in a transaction yet). The plan of the lane's next epoch holds them too
        (routewatch.py)."""
        growing = {k for k, _ in self._gaining}
        route = self.ctx.route
        self._gaining += [((p.source_topic, p.partition), p.target_topic) for p in gained
                          if (p.source_topic, p.partition) not in route
                          and (p.source_topic, p.partition) not in growing]
        self.grown(block=False)

    def grown(self, block: bool) -> None:
        """Take the prepared partitions in when ready (`block`: wait for them, at the end of the loop) and start
        preparing the next ones."""
        if self._preparing is not None:
            fut, t0 = self._preparing
            if not fut.done() and not block:
                return
            self._preparing = None
            self._take(fut.result(), t0)  # its errors are the loop's: an outage, a regrow, ...
        if self._gaining and not block and self.writer.protocol is not None:
            route, self._gaining = dict(self._gaining), []
            self._preparing = (_PREPARING.submit(self.prepare, route, self.writer.protocol.producer), time.monotonic())

    def settle(self) -> None:
        """No preparation outlives the loop that asked for it (it uses the lane's producer)."""
        if self._preparing is not None:
            wait_for([self._preparing[0]])
            self._preparing = None
        self._gaining = []

    def fits(self, max_bytes: dict[str, int], have: dict[str, int]) -> None:
        """Can the kept producer write the new remote topics (`max_bytes`: their max.message.bytes)?"""
        if min([1_000_000, *max_bytes.values()]) < min([1_000_000, *have.values()]):
            # the kept producer's batches would be too large for a new topic: only a new producer fits
            raise Regrow(f"a new remote topic takes records up to {min(max_bytes.values())} bytes")

    def producer_knows(self, route: dict[PartitionKey, str], producer) -> None:
        """The kept producer learns the remote partitions it is to write now: it refuses a partition missing from
        the metadata it holds (_UNKNOWN_PARTITION) and looks again only every topic.metadata.refresh.interval.ms,
        so a partition added to a topic it already wrote failed the lane. A remote partition the target's answer
        does not list (topic sync saw it on another broker) starts the lane afresh, as a changed plan does."""
        for topic in sorted(set(route.values())):
            have = producer.list_topics(topic, timeout=30).topics.get(topic)
            missing = sorted(p for (_, p), t in route.items()
                             if t == topic and (have is None or p not in have.partitions))
            if missing:
                raise Regrow(f"the target does not list partitions {missing} of {topic!r} yet")
