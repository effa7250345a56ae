"""MirrorMaker 2 record formats (heartbeats, checkpoints), byte-compatible with `connect-mirror-client`.

MM2 serializes these with Kafka's protocol `Schema`/`Struct` types (`org.apache.kafka.common.protocol.types`):
fields in schema order, big-endian, `INT16`/`INT32`/`INT64` fixed width, `STRING` = INT16 byte length + UTF-8
bytes (not nullable, at most 32767 bytes). A value starts with a header struct `{version: INT16}` (version 0)
followed by the version's value struct; keys have no header.

- Heartbeat (topic `heartbeats` on the target):
  key `{sourceClusterAlias: STRING, targetClusterAlias: STRING}`, value `{version: INT16}{timestamp: INT64}`.
- Checkpoint (topic `<source>.checkpoints.internal` on the target):
  key `{group: STRING, topic: STRING, partition: INT32}`,
  value `{version: INT16}{upstreamOffset: INT64, offset: INT64, metadata: STRING}`.
  `topic` is the *remote* (target) topic name and `offset` the translated target offset, as MM2 writes them.

Java's `Heartbeat.deserializeRecord` / `Checkpoint.deserializeRecord` (and so `RemoteClusterUtils`) read what
this module writes; tests check that against the real jar.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class FormatError(ValueError):
    """Bytes that are not a record of the expected MM2 format (or of an unknown version)."""


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes is longer than an MM2 STRING may be (32767)")
    return _I16.pack(len(b)) + b


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = memoryview(data), 0, what

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise FormatError(f"{self.what}: truncated at byte {self.pos} (need {n} more of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise FormatError(f"{self.what}: negative string length {n} (STRING is not nullable)")
        return bytes(self._take(n)).decode("utf-8")

    def version(self) -> int:
        v = self.i16()
        if v != VERSION:
            raise FormatError(f"{self.what}: unsupported version {v} (known: {VERSION})")
        return v


@dataclass(frozen=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int  # ms since the epoch

    def key(self) -> bytes:
        return _string(self.source_cluster_alias) + _string(self.target_cluster_alias)

    def value(self) -> bytes:
        return _I16.pack(VERSION) + _I64.pack(self.timestamp)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "Heartbeat":
        k, v = _Reader(key, "heartbeat key"), _Reader(value, "heartbeat value")
        v.version()
        return cls(k.string(), k.string(), v.i64())


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str            # remote topic on the target
    partition: int
    upstream_offset: int  # committed offset of the group on the source
    downstream_offset: int  # the same position on the target
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return (_I16.pack(VERSION) + _I64.pack(self.upstream_offset) + _I64.pack(self.downstream_offset)
                + _string(self.metadata))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "Checkpoint":
        k, v = _Reader(key, "checkpoint key"), _Reader(value, "checkpoint value")
        v.version()
        group, topic, partition = k.string(), k.string(), k.i32()
        return cls(group, topic, partition, v.i64(), v.i64(), v.string())
