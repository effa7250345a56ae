"""Kafka's wire format for the batch path's hot requests (issue 36): Fetch (v4-v12) and Produce (v3-v11) encoded
and decoded with `struct` over one buffer, on the shared framing of `wire/protocol.py` (header, strings,
arrays, the response cursor, version picking, and the requests a connection sends first). Pure: bytes in,
values out.

Why by hand: kafka-python encodes and decodes every field through generic Python structs built from Kafka's
JSON schemas (an object per topic, partition and aborted transaction, a method call per field), and its
response reader copies a Fetch response's records out of its frame buffer; measured, that was 85-111 CPU µs a
batch of the batch path, 3 of them the header rewrite. Here a Fetch response is parsed per partition only:
its records stay a `memoryview` of the one receive buffer (sliced into batches by `batches.split_batches`),
and a Produce request is one `bytearray` the rewritten batches are appended to, so each batch byte is copied
once between the two sockets. AddPartitionsToTxn (v0-v3) and EndTxn (v0-v3) are here too: an exactly-once lane sends
two or three of them every commit interval (100 ms), and through kafka-python each cost its I/O thread and the
caller about 1 CPU ms (bench: the I/O thread alone 0.22 CPU s of a lane's 1.8 in a 25-s copy). Rare requests
(Metadata, FindCoordinator, InitProducerId) stay kafka-python's (`wire.cluster.Wire`).

Versions: topic names, not ids (Fetch < 13, Produce < 13); Produce <= 11 because v12 implies transaction
protocol v2, and the writer uses the classic one (AddPartitionsToTxn). Every broker from 3.x to 4.x serves
Fetch 4-12 and Produce 3-11 (Kafka 4.0 removed Fetch 0-3 and Produce 0-2); `pick` takes the highest both
sides know from the broker's ApiVersions answer (`BrokerConnection.version`, once per connection).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from ..wire.protocol import (I32, I64, Cursor, ProtocolError, array_len, bytes_len, finish, pick, request,
                             string_field)
from .batches import Batch, rewrite_by_python

try:  # the whole request, and its answer, in C (_produce.c and _answers.c, in the `_merge` extension)
    from ._merge import parse_produce as _parse_produce_in_c
    from ._merge import produce_request as _produce_in_c
except ImportError:  # built without a compiler: ProduceBuilder, the Python rewrite and Cursor
    _parse_produce_in_c = _produce_in_c = None

__all__ = ["API_ADD_PARTITIONS_TO_TXN", "API_END_TXN", "API_FETCH", "API_PRODUCE", "FETCH_FLEXIBLE", "FETCH_VERSIONS",
           "PRODUCE_FLEXIBLE", "PRODUCE_VERSIONS", "TXN_FLEXIBLE", "TXN_VERSIONS", "Cursor", "FetchPosition",
           "FetchedPartition", "ProduceBuilder", "Produced", "ProtocolError", "add_partitions_to_txn", "end_txn",
           "fetch_body", "finish", "parse_add_partitions_to_txn", "parse_end_txn", "parse_fetch", "parse_produce",
           "parse_produce_by_python", "pick", "produce_answer_floor", "produce_request", "request"]

API_PRODUCE, API_FETCH = 0, 1
API_ADD_PARTITIONS_TO_TXN, API_END_TXN = 24, 26
FETCH_VERSIONS = range(4, 13)
PRODUCE_VERSIONS = range(3, 12)
TXN_VERSIONS = range(0, 4)  # AddPartitionsToTxn v4+ batches transactions (brokers only); EndTxn v0-v3 alike
FETCH_FLEXIBLE, PRODUCE_FLEXIBLE, TXN_FLEXIBLE = 12, 9, 3


@dataclass(frozen=True, slots=True)
class FetchPosition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    max_bytes: int = 1 << 20


def fetch_body(buf: bytearray, version: int, positions: list[FetchPosition], max_wait_ms: int, max_bytes: int,
               isolation_level: int) -> bytearray:
    """A sessionless Fetch (replica -1, session epoch -1: the broker answers every partition asked)."""
    flex = version >= FETCH_FLEXIBLE
    buf += struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, isolation_level)
    if version >= 7:
        buf += struct.pack(">ii", 0, -1)
    topics: dict[str, list[FetchPosition]] = {}
    for p in positions:
        topics.setdefault(p.topic, []).append(p)
    buf += array_len(len(topics), flex)
    for topic, parts in topics.items():
        buf += string_field(topic, flex)
        buf += array_len(len(parts), flex)
        for p in parts:
            buf += I32.pack(p.partition)
            if version >= 9:
                buf += I32.pack(p.leader_epoch)
            buf += I64.pack(p.offset)
            if version >= 12:
                buf += I32.pack(-1)  # last fetched epoch: a consumer does not truncate
            if version >= 5:
                buf += I64.pack(-1)
            buf += I32.pack(p.max_bytes)
            if flex:
                buf.append(0)
        if flex:
            buf.append(0)
    if version >= 7:
        buf += array_len(0, flex)  # forgotten topics
    if version >= 11:
        buf += string_field("", flex)  # rack id
    if flex:
        buf.append(0)
    return buf


class ProduceBuilder:
    """A Produce request built in place: `partition(topic, index, size)` writes a partition's header and the
    records' length, and returns the buffer the caller appends exactly `size` bytes of records to (the batch's
    one copy); `done` fills in the size. One batch per partition: brokers refuse more (INVALID_RECORD)."""

    def __init__(self, version: int, correlation_id: int, client_id: str, transactional_id: str | None,
                 acks: int, timeout_ms: int, counts: dict[str, int]) -> None:
        """`counts`: each topic's partition count in this request; a topic's partitions are added together."""
        self.version, self.flex = version, version >= PRODUCE_FLEXIBLE
        self.buf = request(API_PRODUCE, version, correlation_id, client_id, self.flex)
        self.buf += string_field(transactional_id, self.flex)
        self.buf += struct.pack(">hi", acks, timeout_ms)
        self.buf += array_len(len(counts), self.flex)
        self._counts = dict(counts)
        self._topic: str | None = None
        self._end = -1  # where the open partition's records must end
        self.keys: list[tuple[str, int]] = []

    def _close_partition(self) -> None:
        if self._end >= 0:
            if len(self.buf) != self._end:
                raise ValueError(f"records of {self.keys[-1]} are {len(self.buf) - self._end} bytes off their size")
            if self.flex:
                self.buf.append(0)
            self._end = -1

    def partition(self, topic: str, index: int, size: int) -> bytearray:
        self._close_partition()
        if topic != self._topic:
            if self._topic is not None and self.flex:
                self.buf.append(0)  # the previous topic's tagged fields
            count = self._counts.pop(topic, None)
            if count is None:
                raise ValueError(f"topic {topic} is not announced, or its partitions are not together")
            self._topic = topic
            self.buf += string_field(topic, self.flex)
            self.buf += array_len(count, self.flex)
        self.buf += I32.pack(index)
        self.buf += bytes_len(size, self.flex)
        self._end = len(self.buf) + size
        self.keys.append((topic, index))
        return self.buf

    def done(self) -> bytearray:
        self._close_partition()
        if self._topic is not None and self.flex:
            self.buf.append(0)
        if self.flex:
            self.buf.append(0)
        if self._counts:
            raise ValueError(f"topics announced but not written: {sorted(self._counts)}")
        return finish(self.buf)


def produce_request(version: int, correlation_id: int, client_id: str, transactional_id: str | None, acks: int,
                    timeout_ms: int, keys: list[tuple[str, int]], batches: list[Batch], producer_id: int,
                    producer_epoch: int, sequences: list[int], transactional: bool) -> bytearray:
    """A finished Produce request: `batches[i]` to partition `keys[i]` (a topic's partitions together), rewritten
    as `batches.rewrite` does under `sequences[i]`. `produce_request_by_python`, in C when built (_produce.c):
    framing 4 partitions in Python cost about as much as the rest of a round."""
    if _produce_in_c is None:
        return produce_request_by_python(version, correlation_id, client_id, transactional_id, acks, timeout_ms, keys,
                                         batches, producer_id, producer_epoch, sequences, transactional)
    return _produce_in_c(version, correlation_id, client_id, transactional_id, acks, timeout_ms, keys, batches,
                         producer_id, producer_epoch, sequences, transactional)


def produce_request_by_python(version: int, correlation_id: int, client_id: str, transactional_id: str | None,
                              acks: int, timeout_ms: int, keys: list[tuple[str, int]], batches: list[Batch],
                              producer_id: int, producer_epoch: int, sequences: list[int],
                              transactional: bool) -> bytearray:
    """`produce_request` through `ProduceBuilder`: the reference the C one is tested against."""
    counts: dict[str, int] = {}
    for topic, _ in keys:
        counts[topic] = counts.get(topic, 0) + 1
    req = ProduceBuilder(version, correlation_id, client_id, transactional_id, acks, timeout_ms, counts)
    for (topic, index), b, seq in zip(keys, batches, sequences, strict=True):
        rewrite_by_python(b, producer_id, producer_epoch, seq, transactional,
                          into=req.partition(topic, index, len(b.raw)))
    return req.done()


def add_partitions_to_txn(version: int, correlation_id: int, client_id: str, transactional_id: str, producer_id: int,
                          producer_epoch: int, topics: dict[str, list[int]]) -> bytearray:
    """AddPartitionsToTxn v0-v3: the partitions joining the producer's open transaction."""
    flex = version >= TXN_FLEXIBLE
    buf = request(API_ADD_PARTITIONS_TO_TXN, version, correlation_id, client_id, flex)
    buf += string_field(transactional_id, flex)
    buf += struct.pack(">qh", producer_id, producer_epoch)
    buf += array_len(len(topics), flex)
    for topic, partitions in topics.items():
        buf += string_field(topic, flex)
        buf += array_len(len(partitions), flex)
        for p in partitions:
            buf += I32.pack(p)
        if flex:
            buf.append(0)
    if flex:
        buf.append(0)
    return finish(buf)


def parse_add_partitions_to_txn(body: memoryview, version: int) -> list[tuple[str, int, int]]:
    """(topic, partition, error code) of each partition of an AddPartitionsToTxn v0-v3 response."""
    c = Cursor(body, version >= TXN_FLEXIBLE)
    c.i32()  # throttle time
    out = []
    for _ in range(max(c.length(), 0)):
        topic = c.string() or ""
        for _ in range(max(c.length(), 0)):
            partition, error = c.i32(), c.i16()
            c.tags()
            out.append((topic, partition, error))
        c.tags()
    return out


def end_txn(version: int, correlation_id: int, client_id: str, transactional_id: str, producer_id: int,
            producer_epoch: int, committed: bool) -> bytearray:
    """EndTxn v0-v3: commit or abort the producer's open transaction."""
    flex = version >= TXN_FLEXIBLE
    buf = request(API_END_TXN, version, correlation_id, client_id, flex)
    buf += string_field(transactional_id, flex)
    buf += struct.pack(">qhb", producer_id, producer_epoch, 1 if committed else 0)
    if flex:
        buf.append(0)
    return finish(buf)


def parse_end_txn(body: memoryview, version: int) -> int:
    """The error code of an EndTxn v0-v3 response."""
    c = Cursor(body, version >= TXN_FLEXIBLE)
    c.i32()  # throttle time
    return c.i16()


# -- decoding -------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]]  # (first offset, producer id), sorted
    records: memoryview | None


def parse_fetch(body: memoryview, version: int) -> tuple[int, list[FetchedPartition]]:
    """(top-level error code, every partition) of a Fetch response body (after the response header)."""
    c = Cursor(body, version >= FETCH_FLEXIBLE)
    c.i32()  # throttle time: the broker already delayed the answer by it
    error = c.i16() if version >= 7 else 0
    if version >= 7:
        c.i32()  # session id
    out: list[FetchedPartition] = []
    for _ in range(c.length()):
        topic = c.string() or ""
        for _ in range(c.length()):
            partition, err, hw = struct.unpack_from(">ihq", body, c.pos)
            c.pos += 14
            lso = c.i64() if version >= 4 else -1
            lso_start = c.i64() if version >= 5 else -1
            aborted: list[tuple[int, int]] = []
            for _ in range(max(c.length(), 0)):
                pid, first = struct.unpack_from(">qq", body, c.pos)
                c.pos += 16
                c.tags()
                aborted.append((first, pid))
            if version >= 11:
                c.i32()  # preferred read replica: this reader fetches from leaders
            records = c.bytes()
            c.tags()
            aborted.sort()
            out.append(FetchedPartition(topic, partition, err, hw, lso, lso_start, aborted, records))
        c.tags()
    c.tags()
    return error, out


_PARTITION_ANSWER = struct.Struct(">ihq")


class Produced(NamedTuple):
    """A partition's answer to a Produce request; the C parse's `_merge.Produced` has the same fields."""
    topic: str
    partition: int
    error_code: int
    base_offset: int
    error_message: str | None


def produce_answer_floor(partitions: int) -> int:
    """Fewer bytes than any Produce answer (v3-v11, frame size included) to a request of `partitions`
    partitions: the broker answers every partition asked, each with at least index, error code, base offset,
    log append time (and, from v5, log start offset)."""
    return 8 + 22 * partitions


def parse_produce(body: memoryview, version: int) -> list[Produced]:
    """Every partition's answer, in the answer's order (`_answers.c`'s where the extension was built, equal to
    `parse_produce_by_python`'s)."""
    if _parse_produce_in_c is None:
        return parse_produce_by_python(body, version)
    try:
        return _parse_produce_in_c(body, version)
    except ValueError as e:
        raise ProtocolError(str(e)) from None


def parse_produce_by_python(body: memoryview, version: int) -> list[Produced]:
    c = Cursor(body, version >= PRODUCE_FLEXIBLE)
    out: list[Produced] = []
    for _ in range(c.length()):
        topic = c.string() or ""
        fixed = 30 if version >= 5 else 22  # index, error code, base offset, log append time, log start offset
        for _ in range(c.length()):
            partition, err, base = _PARTITION_ANSWER.unpack_from(body, c.pos)
            c.pos += fixed
            message = None
            if c.flex and body[c.pos:c.pos + 3] == b"\x01\x00\x00":  # no record errors, message or tags
                c.pos += 3
                out.append(Produced(topic, partition, err, base, None))
                continue
            if version >= 8:
                errors = []
                for _ in range(max(c.length(), 0)):
                    index = c.i32()
                    errors.append(f"batch {index}: {c.string()}")
                    c.tags()
                message = c.string()
                if errors:
                    message = f"{message or ''} ({'; '.join(errors)})"
            c.tags()
            out.append(Produced(topic, partition, err, base, message))
        c.tags()
    return out
