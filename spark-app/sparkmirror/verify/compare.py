"""One range on both clusters (executor side, I/O): count, order-sensitive hash, and the first difference.

Each side is read read_committed from its first offset to its last, so transaction markers and aborted records
are not records. A source record is turned into the record the copier writes (`replication.RecordStamper`: under
the identity policy, records that came from the target are not copied and the provenance header is stamped; the
default policy changes nothing; then the mirror's transforms, `transforms.py`: a dropped record is not expected
on the target, a changed one is compared as changed), so headers are compared exactly, provenance included. Under the identity policy
the target topic is shared with local producers: target records whose last provenance hop is not this mirror's
source are not this mirror's and are left out. Everything else on the target inside the range counts.

A record's digest is SHA-256 over its length-prefixed key, value, headers (in order, duplicates and nulls kept)
and timestamp; a range's hash is SHA-256 over its records' digests in offset order, so a reordered, missing,
extra or altered record changes it. A timestamp is left out when the source record has none (the target then
holds the time it was written) or the target topic stamps log-append time.
"""
from __future__ import annotations

import hashlib
import struct
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import (TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError,
                             KafkaException, TopicPartition)

from ..replication import RecordStamper, provenance
from ..transforms import RecordTransforms

FIELDS = ("key", "value", "headers", "timestamp")


def _blob(b: bytes | str | None) -> bytes:
    if b is None:
        return b"\xff\xff\xff\xff"  # null differs from empty
    if isinstance(b, str):
        b = b.encode("utf-8", "surrogateescape")
    return struct.pack(">I", len(b)) + b


def field_digests(key, value, headers, timestamp: int | None) -> tuple[bytes, bytes, bytes, bytes]:
    """SHA-256 of each compared field, length-prefixed (None timestamp: not compared)."""
    h = hashlib.sha256(struct.pack(">i", -1 if headers is None else len(headers)))
    for k, v in headers or ():
        h.update(_blob(k) + _blob(v))
    ts = b"" if timestamp is None else struct.pack(">q", timestamp)
    return (hashlib.sha256(_blob(key)).digest(), hashlib.sha256(_blob(value)).digest(), h.digest(),
            hashlib.sha256(ts).digest())


def record_digest(fields: tuple[bytes, ...]) -> bytes:
    return hashlib.sha256(b"".join(fields)).digest()


@dataclass
class Side:
    """What one side of a range held: per record its offset and field digests, plus the running hash."""

    offsets: list[int] = field(default_factory=list)
    fields: list[tuple[bytes, ...]] = field(default_factory=list)
    hash: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    timed: list[bool] = field(default_factory=list)  # whether the record carried a timestamp (source side)

    def add(self, offset: int, fields: tuple[bytes, ...], timed: bool = True) -> None:
        self.offsets.append(offset)
        self.fields.append(fields)
        self.timed.append(timed)
        self.hash.update(record_digest(fields))


class RangeUnreadable(RuntimeError):
    """A side cannot be read as planned. `status`: "unavailable" when retention already deleted the range's
    start (nothing left to compare), "differs" when the partition ends before the range does (records the
    progress topic says were committed are not there: a recreated or truncated topic), "error" otherwise."""

    def __init__(self, message: str, status: str = "error") -> None:
        super().__init__(message)
        self.status = status


def read_side(conf: dict[str, str], topic: str, partition: int, first: int, last: int, on_message,
              timeout: float = 120.0) -> None:
    """Call `on_message(msg)` for every committed record at offsets first..last of one partition."""
    if last < first or last < 0:  # nothing (a range whose commits wrote nothing)
        return
    c = Consumer({**conf, "group.id": f"sparkmirror-verify-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "error"})
    try:
        tp = TopicPartition(topic, partition)
        lo, hi = c.get_watermark_offsets(tp, timeout=30)
        if lo > first:
            raise RangeUnreadable(f"{topic}[{partition}] no longer holds offset {first} (earliest {lo})",
                                  "unavailable")
        if hi <= last:
            raise RangeUnreadable(f"{topic}[{partition}] ends at offset {hi - 1}, before the range's last "
                                  f"offset {last}", "differs")
        c.assign([TopicPartition(topic, partition, first)])
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise RangeUnreadable(f"{topic}[{partition}]: offsets {first}..{last} not read in {timeout:.0f}s")
            for msg in c.consume(num_messages=5000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() > last:
                            return
                        continue
                    raise RangeUnreadable(f"{topic}[{partition}]: {err.str()}")
                if msg.offset() > last:
                    return
                on_message(msg)
                if msg.offset() == last:
                    return
            pos = c.position([TopicPartition(topic, partition)])[0].offset
            if pos > last:  # what is left up to `last` are markers or aborted records
                return
    except KafkaException as e:
        raise RangeUnreadable(f"{topic}[{partition}]: {e.args[0].str() if e.args else e}") from None
    finally:
        c.close()


def read_source(conf: dict[str, str], r: dict, stamper: RecordStamper,
                transforms: RecordTransforms | None = None) -> Side:
    """The source records of range `r` as the copier writes them."""
    side = Side()

    def take(m) -> None:
        k, v, h = m.key(), m.value(), m.headers()
        ts_type, ts = m.timestamp()
        if stamper.uses_provenance and not stamper.should_copy(h):
            return
        if transforms is not None:
            out = transforms.apply(m.topic(), m.partition(), m.offset(), ts, k, v, h)
            if out is None:
                return
            k, v, h = out
        if stamper.uses_provenance:
            h = stamper.headers_for(h)
        timed = ts_type != TIMESTAMP_NOT_AVAILABLE
        side.add(m.offset(), field_digests(k, v, h, ts if timed else None), timed)

    read_side(conf, r["source_topic"], r["partition"], r["source_from"], r["source_to"], take)
    return side


def read_target(conf: dict[str, str], r: dict, stamper: RecordStamper, source: Side) -> Side:
    """The target records of range `r` (timestamps compared where the matching source record had one)."""
    side = Side()

    def take(m) -> None:
        h = m.headers()
        if stamper.uses_provenance and (provenance(h) or [None])[-1] != stamper.source_alias:
            return  # under identity: a local producer's record, or another mirror's
        i = len(side.offsets)
        ts_type, ts = m.timestamp()
        fields = field_digests(m.key(), m.value(), h, ts if i >= len(source.timed) or source.timed[i] else None)
        if ts_type == TIMESTAMP_LOG_APPEND_TIME and i < len(source.fields):
            fields = (*fields[:3], source.fields[i][3])  # the broker's time, not the copier's: not compared
        side.add(m.offset(), fields)

    read_side(conf, r["target_topic"], r["partition"], r["target_from"], r["target_to"], take)
    return side


def first_difference(source: Side, target: Side) -> dict | None:
    """The first position where the two sides differ: offsets on both sides (None: that side ran out) and the
    fields that differ."""
    for i in range(max(len(source.offsets), len(target.offsets))):
        s = source.fields[i] if i < len(source.fields) else None
        t = target.fields[i] if i < len(target.fields) else None
        if s is not None and t is not None:
            if s == t:
                continue
            fields = [name for name, a, b in zip(FIELDS, s, t) if a != b]
        else:
            fields = ["missing on the target" if t is None else "extra on the target"]
        return {"sourceOffset": source.offsets[i] if s is not None else None,
                "targetOffset": target.offsets[i] if t is not None else None, "fields": fields}
    return None


def check_range(r: dict, source_conf: dict[str, str], target_conf: dict[str, str], uses_provenance: bool,
                transforms: list | None = None) -> dict:
    """One range compared (a Spark task): `r` plus counts, hashes, status and the first difference. `transforms`:
    the mirror's (resource/transforms.py models), compiled here on the executor."""
    stamper = RecordStamper(uses_provenance, r["source_cluster"], r["target_cluster"])
    chain = RecordTransforms(transforms, f"mirrors[{r['mirror']}].transforms") if transforms else None
    t0 = time.monotonic()
    out = {**r, "sourceCount": None, "targetCount": None, "sourceHash": None, "targetHash": None,
           "status": "equal", "firstDifference": None, "error": None}
    try:
        src = read_source(source_conf, r, stamper, chain)
        tgt = read_target(target_conf, r, stamper, src)
    except RangeUnreadable as e:
        out.update(status=e.status, error=str(e), seconds=round(time.monotonic() - t0, 3))
        return out
    out.update(sourceCount=len(src.offsets), targetCount=len(tgt.offsets), sourceHash=src.hash.hexdigest(),
               targetHash=tgt.hash.hexdigest(), seconds=round(time.monotonic() - t0, 3))
    diff = first_difference(src, tgt)
    if diff is not None or out["sourceHash"] != out["targetHash"]:
        out.update(status="differs", firstDifference=diff)
    return out
