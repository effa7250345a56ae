"""Lanes: the stable split of a mirror's source partitions over a fixed number of parallel copy tasks.

Pure planning, no I/O. A partition's lane comes from a hash of its topic plus its partition number, not
from its position in a sorted list of everything mirrored, so adding a topic or a partition never moves an
existing partition to another lane: the lane that owned it keeps owning it, and its transactional producer
(whose id is stable per lane) keeps fencing any older copy of itself. Changing the *number* of lanes does move partitions; see `plan_lanes`.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class LanePartition:
    """One source partition a lane copies, with the remote topic it goes to (same partition number)."""

    source_topic: str
    partition: int
    target_topic: str


@dataclass(frozen=True)
class Lane:
    """One parallel copy task of one mirror: its index and the partitions it owns (sorted)."""

    mirror: str
    index: int
    count: int
    partitions: tuple[LanePartition, ...] = field(default_factory=tuple)


def lane_of(source_topic: str, partition: int, lanes: int) -> int:
    """The lane that owns (topic, partition): independent of which other topics and partitions exist.

    A topic's partitions go round-robin over the lanes from a start lane given by a hash of the topic name:
    a topic's partitions are spread evenly (a hash per partition would leave, say, all 4 partitions of a topic
    on one of 2 lanes about one time in eight), different topics start on different lanes, and a partition's
    lane depends only on its own topic and number, so adding partitions or topics moves nothing.
    SHA-1 rather than Python's `hash()`, which is salted per process: a restarted driver must plan the same.
    """
    if lanes < 1:
        raise ValueError(f"lanes must be >= 1, got {lanes}")
    return (_start_lane(source_topic) + partition) % lanes


def _start_lane(source_topic: str) -> int:
    return int.from_bytes(hashlib.sha1(source_topic.encode()).digest()[:8], "big")


Route = tuple[str, str, int]
"""(source topic, remote topic, partitions)"""


class LanePlanner:
    """`plan_lanes`, keeping each route's split from the last plan: a plan whose routes changed (a new topic at
    10,000 partitions) splits only the new routes. Splitting and sorting all 10,000 partitions again took 15 ms
    alone and 200-360 ms beside the driver's topic sync and the lanes on 2 loaded cores (bench/scale.py)."""

    def __init__(self, mirror: str, lanes: int) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        self.mirror, self.lanes = mirror, lanes
        self._split: dict[Route, list[list[LanePartition]]] = {}

    def plan(self, routes: Iterable[Route]) -> list[Lane]:
        # routes in source-topic order, each one's partitions ascending: every lane's list comes out in the
        # LanePartition order without a sort (one route per source topic)
        owned: list[list[LanePartition]] = [[] for _ in range(self.lanes)]
        split: dict[Route, list[list[LanePartition]]] = {}
        for route in sorted(routes):
            parts = split[route] = self._split.get(route) or self._split_route(route)
            for mine, theirs in zip(owned, parts):
                mine.extend(theirs)
        self._split = split
        return [Lane(self.mirror, i, self.lanes, tuple(ps)) for i, ps in enumerate(owned)]

    def _split_route(self, route: Route) -> list[list[LanePartition]]:
        source_topic, target_topic, partitions = route
        parts: list[list[LanePartition]] = [[] for _ in range(self.lanes)]
        start = _start_lane(source_topic)  # lane_of's, once a topic: a hash per partition was 10,000 at scale
        for p in range(partitions):
            parts[(start + p) % self.lanes].append(LanePartition(source_topic, p, target_topic))
        return parts


def plan_lanes(mirror: str, lanes: int, routes: Iterable[Route]) -> list[Lane]:
    """Split every partition of every (source_topic, target_topic, partitions) route over `lanes` lanes.

    Always returns `lanes` entries (some possibly empty) so lane indexes, and with them transactional ids,
    do not depend on the data. Changing `lanes` re-hashes partitions onto other lanes; that is safe across a
    restart (each lane resumes from the progress topic) but not while an old worker with the other lane
    count still runs, so the operator changes the lane count only through a worker-generation handoff.
    """
    return LanePlanner(mirror, lanes).plan(routes)
