"""The batch path's source reader (issue 36): Fetch at read_committed from the partitions' leaders, batches kept
as bytes. read_committed at batch level, as the Java consumer does it: the broker returns data only up to the
last stable offset, with the aborted transactions in that range (producer id, first offset); a data batch of
a producer whose abort began at or before it is dropped until that producer's abort marker (a control batch)
is passed; control batches themselves are skipped. Positions advance over dropped and skipped batches too.

Every v2 batch's CRC32C is checked before it is taken, as the Java consumer's `check.crcs` does (the writer
computes a new CRC over the bytes it forwards, so a corrupt batch taken would reach the target with a valid one).
A corrupt batch ends the partition's read at it and is fetched again; `CORRUPT_TRIES` fetches in a row of the
same corrupt batch end the mirror with `CorruptBatch`, naming cluster, partition and offset.

Leader moves (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) and broken connections refresh the leaders and
fetch again next call, as does an answer that does not parse (its connection closed), up to `MALFORMED_TRIES` in a
row from one broker; OFFSET_OUT_OF_RANGE is a `SourceGapError` as on the record path; other errors raise
`WireError`. Requests and responses are `protocol`'s, on `Wire.connection`s: a response is received into one
buffer and every batch is a view of it, so nothing is copied until the writer appends a batch to its Produce
request. `send` and `receive` apart let a lane have the next Fetch under way while it produces the last one.
"""
from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

import kafka.errors as kerrors

from ..wire.cluster import Leader, Wire
from ..wire.connection import BrokerConnection, MalformedAnswer, WireError, check
from . import protocol
from .batches import CONTROL, HEADER_SIZE, TRANSACTIONAL, Batch, scan
from .errors import CorruptBatch, SourceGapError

log = logging.getLogger(__name__)

PartitionKey = tuple[str, int]
READ_COMMITTED = 1
_REFRESH = {"NotLeaderForPartitionError", "NotLeaderOrFollowerError", "FencedLeaderEpochError",
            "UnknownLeaderEpochError", "LeaderNotAvailableError", "ReplicaNotAvailableError",
            "KafkaStorageError", "UnknownTopicOrPartitionError", "OffsetNotAvailableError"}
MALFORMED_TRIES = 3
"""Fetch answers in a row from one broker that do not parse before the mirror stops, naming it: one garbled on the
way is gone at the next Fetch, on a new connection; a broker that answers every Fetch so is not going to change."""
CORRUPT_TRIES = 3
"""Fetches of one batch that each find it corrupt before the mirror stops: a corruption on the way is gone at the
next fetch, one in the source's log stays."""


@dataclass(slots=True)
class Fetched:
    """A partition's batches from one fetch, to be forwarded, and how far the read got."""
    batches: list[Batch] = field(default_factory=list)
    first_offset: int = -1  # the first forwarded batch's base offset
    fetch_offset: int = 0  # where this fetch began: a compressed batch may begin before it (see rebuild.py)
    next_offset: int = 0  # where the next fetch starts (past dropped and control batches too)
    high_watermark: int = -1

    @property
    def record_count(self) -> int:
        return sum(b.record_count for b in self.batches)

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


def _control_is_abort(batch: Batch) -> bool:
    """A control batch's one record's key is (version int16, type int16), type 0 = ABORT, 1 = COMMIT. Read
    from the uncompressed record: length varint, attributes, timestamp and offset deltas, key length varint."""
    raw = batch.raw

    def varint(i: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            b = raw[i]
            result |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1), i
            shift += 7

    pos = HEADER_SIZE
    _, pos = varint(pos)
    pos += 1
    _, pos = varint(pos)
    _, pos = varint(pos)
    _, pos = varint(pos)
    _version, kind = struct.unpack_from(">hh", raw, pos)
    return kind == 0


class BatchReader:
    """Reads the lane's source partitions as batches, from positions it keeps."""

    def __init__(self, wire: Wire, cluster: str = "source", max_wait_ms: int = 100, partition_max_bytes: int = 1 << 20,
                 max_bytes: int = 50 << 20) -> None:
        self.wire, self.cluster = wire, cluster
        self.max_wait_ms, self.partition_max_bytes, self.max_bytes = max_wait_ms, partition_max_bytes, max_bytes
        self.positions: dict[PartitionKey, int] = {}
        self._leaders: dict[PartitionKey, Leader] = {}
        # per partition: producer ids inside an aborted transaction at the position, from the responses' lists
        self._aborting: dict[PartitionKey, set[int]] = {}
        self._sent: list[tuple[int, BrokerConnection, int]] = []  # Fetches under way: (node, connection, version)
        self._stale = False  # a connection broke while sending: refresh the leaders at the next receive
        self._corrupt: dict[PartitionKey, tuple[int, int]] = {}  # partition -> (corrupt batch's offset, fetches)
        self._malformed: dict[int, int] = {}  # broker -> answers in a row that did not parse

    def assign(self, positions: dict[PartitionKey, int]) -> None:
        self._drain()
        self.positions = dict(positions)
        self._aborting = {k: set() for k in positions}
        self._leaders = self.wire.leaders({t for t, _ in positions}) if positions else {}

    def add(self, positions: dict[PartitionKey, int]) -> None:
        """Read `positions`' partitions too, from the next Fetch on; the others go on where they are, a Fetch under
        way included (a lane gaining partitions mid-epoch waits for no answer). A partition read already is
        assigned again (`assign`: the answers under way are dropped)."""
        if any(k in self.positions for k in positions):
            self.assign({**self.positions, **positions})
            return
        if positions:
            self._leaders.update(self.wire.leaders({t for t, _ in positions}))
        for key, offset in positions.items():
            self.positions[key] = offset
            self._aborting[key] = set()

    def fetch(self) -> dict[PartitionKey, Fetched]:
        """One Fetch per leader, all at once; each partition's forwardable batches since its position."""
        self.send()
        return self.receive()

    def send(self) -> None:
        """Send one Fetch per leader from the current positions (answered by `receive`)."""
        if self._sent:
            return
        per_node: dict[int, list[protocol.FetchPosition]] = {}
        for key, offset in self.positions.items():
            leader = self._leaders.get(key)
            if leader is None or leader.node_id < 0:
                continue
            per_node.setdefault(leader.node_id, []).append(
                protocol.FetchPosition(key[0], key[1], offset, leader.epoch, self.partition_max_bytes))
        for node, positions in per_node.items():
            try:
                conn = self.wire.connection(node)
                version = conn.version(protocol.API_FETCH, protocol.FETCH_VERSIONS, "Fetch")
                correlation = conn.next_id()
                buf = protocol.request(protocol.API_FETCH, version, correlation, conn.client_id,
                                       version >= protocol.FETCH_FLEXIBLE)
                protocol.fetch_body(buf, version, positions, self.max_wait_ms, self.max_bytes, READ_COMMITTED)
                conn.send(protocol.finish(buf), correlation, version >= protocol.FETCH_FLEXIBLE)
            except WireError as e:
                if not e.retriable:
                    raise
                self.wire.drop(node)
                self._stale = True
                continue
            self._sent.append((node, conn, version))

    def receive(self) -> dict[PartitionKey, Fetched]:
        """The answers to `send`'s Fetches (sent now if they were not)."""
        if not self._sent:
            self.send()
        sent, self._sent = self._sent, []
        out: dict[PartitionKey, Fetched] = {}
        refresh, self._stale = self._stale, False
        for node, conn, version in sent:
            try:
                error, parts = conn.answer(protocol.parse_fetch, version)
                self._malformed.pop(node, None)
                check(error, "Fetch")
            except MalformedAnswer as e:
                times = self._malformed[node] = self._malformed.get(node, 0) + 1
                if times >= MALFORMED_TRIES:
                    raise WireError(kerrors.KafkaProtocolError, f"{self.cluster} cluster, broker {node}: {times} "
                                    f"Fetch answers in a row that do not parse, the last: {e}") from e
                log.warning("%s cluster, broker %d: %s; fetching again on a new connection", self.cluster, node, e)
                self.wire.drop(node)
                refresh = True
                continue
            except WireError as e:
                if not e.retriable:
                    raise
                self.wire.drop(node)
                refresh = True
                continue
            for p in parts:
                key = (p.topic, p.partition)
                if key not in self.positions:
                    continue
                try:
                    check(p.error_code, f"Fetch {p.topic}[{p.partition}]")
                except WireError as e:
                    name = e.error.__name__
                    if name == "OffsetOutOfRangeError":
                        raise SourceGapError(
                            f"source cluster {self.cluster!r}: {p.topic}[{p.partition}] no longer holds "
                            f"offset {self.positions[key]} (log starts at {p.log_start_offset})") from e
                    if name in _REFRESH or e.retriable:
                        refresh = True
                        continue
                    raise
                out[key] = self._take(key, p)
        leaderless = any(self._leaders.get(k, Leader(-1, -1)).node_id < 0 for k in self.positions)
        if refresh or leaderless:
            self._leaders = self.wire.leaders({t for t, _ in self.positions})
        return out

    def _take(self, key: PartitionKey, p: protocol.FetchedPartition) -> Fetched:
        aborted = p.aborted  # (first offset, producer id), sorted
        aborting = self._aborting.setdefault(key, set())
        got = Fetched(next_offset=self.positions[key], high_watermark=p.high_watermark,
                      fetch_offset=self.positions[key])
        i, n_aborted = 0, len(aborted)
        take = got.batches.append
        position = got.next_offset
        corrupt_at = self._corrupt[key][0] if key in self._corrupt else None
        # every CRC checked before anything of a batch's header is believed: a corrupt lastOffsetDelta would
        # otherwise make the batch look taken already and be skipped, its records lost without a word
        batches, bad, found = scan(p.records)
        for b in batches if bad < 0 else batches[:bad]:
            last = b.base_offset + b.last_offset_delta
            if corrupt_at is not None and b.base_offset <= corrupt_at <= last:
                del self._corrupt[key]  # the batch found corrupt before came whole this time
                corrupt_at = None
            if last < position:
                continue  # a compressed batch begins before the fetch offset: already taken
            position = last + 1
            while i < n_aborted and aborted[i][0] <= last:
                aborting.add(aborted[i][1])
                i += 1
            attributes = b.attributes
            if attributes & CONTROL:
                if b.producer_id in aborting and _control_is_abort(b):
                    aborting.discard(b.producer_id)
                continue
            if attributes & TRANSACTIONAL and aborting and b.producer_id in aborting:
                continue
            take(b)
        if bad >= 0:
            self._refetch_corrupt(key, batches[bad], found)  # the next fetch starts at this batch
        got.next_offset = position
        if got.batches:
            got.first_offset = got.batches[0].base_offset
        self.positions[key] = got.next_offset
        return got

    def _refetch_corrupt(self, key: PartitionKey, b: Batch, found: int) -> None:
        """A batch whose CRC32C does not match (its bytes give `found`): fetched again from it, or, found so
        `CORRUPT_TRIES` times, the end of the copy."""
        offset, times = self._corrupt.get(key, (b.base_offset, 0))
        times = times + 1 if offset == b.base_offset else 1
        self._corrupt[key] = (b.base_offset, times)
        if times >= CORRUPT_TRIES:
            raise CorruptBatch(
                f"source cluster {self.cluster!r}: {key[0]}[{key[1]}] the record batch at offset {b.base_offset} "
                f"is corrupt (its CRC32C says {b.crc:#010x}, its bytes give {found:#010x}) in {times} fetches in "
                f"a row; nothing from offset {b.base_offset} on was copied")

    def forget_leaders(self) -> None:
        """After a failed read: the Fetches under way are dropped with their connections (their answers would
        come out of step), and the next `receive` asks who leads first."""
        sent, self._sent = self._sent, []
        for node, _conn, _ in sent:
            self.wire.drop(node)
        self._leaders = {}

    def _drain(self) -> None:
        """Forget Fetches under way (their answers are read and dropped: positions are about to change)."""
        sent, self._sent = self._sent, []
        for node, conn, _ in sent:
            try:
                conn.receive()
            except WireError:
                self.wire.drop(node)

    def partitions(self) -> Iterable[PartitionKey]:
        return self.positions.keys()
