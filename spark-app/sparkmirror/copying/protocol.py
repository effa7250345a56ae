"""Kafka's wire format for the batch path's hot requests (issue 36): Fetch (v4-v12) and Produce (v3-v11) encoded
and decoded with `struct` over one buffer, plus the few requests a connection of its own needs before them
(ApiVersions v0, SaslHandshake v1, SaslAuthenticate v1). Pure: bytes in, values out.

Why by hand: kafka-python encodes and decodes every field through generic Python structs built from Kafka's
JSON schemas (an object per topic, partition and aborted transaction, a method call per field), and its
response reader copies a Fetch response's records out of its frame buffer; measured, that was 85-111 CPU µs a
batch of the batch path, 3 of them the header rewrite. Here a Fetch response is parsed per partition only:
its records stay a `memoryview` of the one receive buffer (sliced into batches by `batches.split_batches`),
and a Produce request is one `bytearray` the rewritten batches are appended to, so each batch byte is copied
once between the two sockets. AddPartitionsToTxn (v0-v3) and EndTxn (v0-v3) are here too: an exactly-once lane sends
two or three of them every commit interval (100 ms), and through kafka-python each cost its I/O thread and the
caller about 1 CPU ms (bench: the I/O thread alone 0.22 CPU s of a lane's 1.8 in a 25-s copy). Rare requests
(Metadata, FindCoordinator, InitProducerId) stay kafka-python's (`wire.Wire`).

Versions: topic names, not ids (Fetch < 13, Produce < 13); Produce <= 11 because v12 implies transaction
protocol v2, and the writer uses the classic one (AddPartitionsToTxn). Every broker from 3.x to 4.x serves
Fetch 4-12 and Produce 3-11 (Kafka 4.0 removed Fetch 0-3 and Produce 0-2); `pick` takes the highest both
sides know from the broker's ApiVersions answer.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

API_PRODUCE, API_FETCH, API_SASL_HANDSHAKE, API_VERSIONS, API_SASL_AUTHENTICATE = 0, 1, 17, 18, 36
API_ADD_PARTITIONS_TO_TXN, API_END_TXN = 24, 26
FETCH_VERSIONS = range(4, 13)
PRODUCE_VERSIONS = range(3, 12)
TXN_VERSIONS = range(0, 4)  # AddPartitionsToTxn v4+ batches transactions (brokers only); EndTxn v0-v3 alike
FETCH_FLEXIBLE, PRODUCE_FLEXIBLE, TXN_FLEXIBLE = 12, 9, 3

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_HEADER = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length


class ProtocolError(ValueError):
    """A response that does not parse as the request's version says it should."""


def pick(mine: range, broker: tuple[int, int] | None, api: str) -> int:
    """The highest version of `api` in `mine` within the broker's [min, max]."""
    if broker is not None:
        lo, hi = max(mine.start, broker[0]), min(mine.stop - 1, broker[1])
        if lo <= hi:
            return hi
    raise ProtocolError(f"the broker serves {api} versions {broker}, this client {mine.start}-{mine.stop - 1}")


# -- encoding -------------------------------------------------------------------------------------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = s.encode()
    return (uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _array_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _I32.pack(n)


def _bytes_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _I32.pack(n)


def request(api_key: int, version: int, correlation_id: int, client_id: str, flexible: bool) -> bytearray:
    """A request's size placeholder and header (v1, or v2 with its empty tagged fields); the body is appended
    and `finish` fills in the size."""
    cid = client_id.encode()
    out = bytearray(_HEADER.pack(0, api_key, version, correlation_id, len(cid)))
    out += cid
    if flexible:
        out.append(0)
    return out


def finish(buf: bytearray) -> bytearray:
    _I32.pack_into(buf, 0, len(buf) - 4)
    return buf


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
    buf += _array_len(len(topics), flex)
    for topic, parts in topics.items():
        buf += _string(topic, flex)
        buf += _array_len(len(parts), flex)
        for p in parts:
            buf += _I32.pack(p.partition)
            if version >= 9:
                buf += _I32.pack(p.leader_epoch)
            buf += _I64.pack(p.offset)
            if version >= 12:
                buf += _I32.pack(-1)  # last fetched epoch: a consumer does not truncate
            if version >= 5:
                buf += _I64.pack(-1)
            buf += _I32.pack(p.max_bytes)
            if flex:
                buf.append(0)
        if flex:
            buf.append(0)
    if version >= 7:
        buf += _array_len(0, flex)  # forgotten topics
    if version >= 11:
        buf += _string("", flex)  # rack id
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
        self.buf += _string(transactional_id, self.flex)
        self.buf += struct.pack(">hi", acks, timeout_ms)
        self.buf += _array_len(len(counts), self.flex)
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
            self.buf += _string(topic, self.flex)
            self.buf += _array_len(count, self.flex)
        self.buf += _I32.pack(index)
        self.buf += _bytes_len(size, self.flex)
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


def add_partitions_to_txn(version: int, correlation_id: int, client_id: str, transactional_id: str, producer_id: int,
                          producer_epoch: int, topics: dict[str, list[int]]) -> bytearray:
    """AddPartitionsToTxn v0-v3: the partitions joining the producer's open transaction."""
    flex = version >= TXN_FLEXIBLE
    buf = request(API_ADD_PARTITIONS_TO_TXN, version, correlation_id, client_id, flex)
    buf += _string(transactional_id, flex)
    buf += struct.pack(">qh", producer_id, producer_epoch)
    buf += _array_len(len(topics), flex)
    for topic, partitions in topics.items():
        buf += _string(topic, flex)
        buf += _array_len(len(partitions), flex)
        for p in partitions:
            buf += _I32.pack(p)
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
    buf += _string(transactional_id, flex)
    buf += struct.pack(">qhb", producer_id, producer_epoch, 1 if committed else 0)
    if flex:
        buf.append(0)
    return finish(buf)


def parse_end_txn(body: memoryview, version: int) -> int:
    """The error code of an EndTxn v0-v3 response."""
    c = Cursor(body, version >= TXN_FLEXIBLE)
    c.i32()  # throttle time
    return c.i16()


def sasl_handshake(correlation_id: int, client_id: str, mechanism: str) -> bytearray:
    buf = request(API_SASL_HANDSHAKE, 1, correlation_id, client_id, False)
    buf += _string(mechanism, False)
    return finish(buf)


def sasl_authenticate(correlation_id: int, client_id: str, token: bytes) -> bytearray:
    buf = request(API_SASL_AUTHENTICATE, 1, correlation_id, client_id, False)
    buf += _I32.pack(len(token)) + token
    return finish(buf)


def api_versions(correlation_id: int, client_id: str) -> bytearray:
    return finish(request(API_VERSIONS, 0, correlation_id, client_id, False))


# -- decoding -------------------------------------------------------------------------------------------------


class Cursor:
    """Reads a response body in place; strings are decoded, records and tokens stay views of the buffer."""
    __slots__ = ("buf", "pos", "flex")

    def __init__(self, buf: memoryview, flex: bool, pos: int = 0) -> None:
        self.buf, self.pos, self.flex = buf, pos, flex

    def i8(self) -> int:
        self.pos += 1
        return _I8.unpack_from(self.buf, self.pos - 1)[0]

    def i16(self) -> int:
        self.pos += 2
        return _I16.unpack_from(self.buf, self.pos - 2)[0]

    def i32(self) -> int:
        self.pos += 4
        return _I32.unpack_from(self.buf, self.pos - 4)[0]

    def i64(self) -> int:
        self.pos += 8
        return _I64.unpack_from(self.buf, self.pos - 8)[0]

    def uvarint(self) -> int:
        shift = result = 0
        buf, pos = self.buf, self.pos
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return result
            shift += 7

    def length(self) -> int:
        """An array's, string's or bytes' length, -1 for null."""
        if self.flex:
            return self.uvarint() - 1
        return self.i32()

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flex else self.i16()
        if n < 0:
            return None
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode()

    def bytes(self) -> memoryview | None:
        n = self.length()
        if n < 0:
            return None
        self.pos += n
        if self.pos > len(self.buf):
            raise ProtocolError("a field runs past the end of the response")
        return self.buf[self.pos - n:self.pos]

    def tags(self) -> None:
        """Skip tagged fields (flexible versions only): none of them is read here."""
        if self.flex:
            for _ in range(self.uvarint()):
                self.uvarint()  # the tag
                size = self.uvarint()  # (not `self.pos += self.uvarint()`: that adds to the position before it)
                self.pos += size


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


@dataclass(slots=True)
class Produced:
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


def parse_api_versions(body: memoryview) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error code, api key -> (min, max)) of an ApiVersions v0 response."""
    c = Cursor(body, False)
    error = c.i16()
    out: dict[int, tuple[int, int]] = {}
    for _ in range(max(c.length(), 0)):
        key, lo, hi = struct.unpack_from(">hhh", body, c.pos)
        c.pos += 6
        out[key] = (lo, hi)
    return error, out


def parse_sasl_handshake(body: memoryview) -> tuple[int, list[str]]:
    c = Cursor(body, False)
    error = c.i16()
    return error, [c.string() or "" for _ in range(max(c.length(), 0))]


def parse_sasl_authenticate(body: memoryview) -> tuple[int, str | None, bytes]:
    c = Cursor(body, False)
    error, message = c.i16(), c.string()
    token = c.bytes()
    return error, message, bytes(token) if token is not None else b""
