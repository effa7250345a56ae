"""Kafka's wire format, the parts every request encoded by hand shares: the request header and its framing,
strings, arrays and varints, a cursor reading a response in place, version picking, and the few requests a
connection of its own sends before any other (ApiVersions v0, SaslHandshake v1, SaslAuthenticate v1). Pure:
bytes in, values out.

The batch path's hot requests (Fetch, Produce, AddPartitionsToTxn, EndTxn) are encoded on top of these in
`copying/protocol.py`; see there why by hand.
"""
from __future__ import annotations

import struct

API_SASL_HANDSHAKE, API_VERSIONS, API_SASL_AUTHENTICATE = 17, 18, 36

I8, I16, I32, I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
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


def string_field(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = s.encode()
    return (uvarint(len(raw) + 1) if flexible else I16.pack(len(raw))) + raw


def array_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else I32.pack(n)


def bytes_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else I32.pack(n)


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
    I32.pack_into(buf, 0, len(buf) - 4)
    return buf


def sasl_handshake(correlation_id: int, client_id: str, mechanism: str) -> bytearray:
    buf = request(API_SASL_HANDSHAKE, 1, correlation_id, client_id, False)
    buf += string_field(mechanism, False)
    return finish(buf)


def sasl_authenticate(correlation_id: int, client_id: str, token: bytes) -> bytearray:
    buf = request(API_SASL_AUTHENTICATE, 1, correlation_id, client_id, False)
    buf += I32.pack(len(token)) + token
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
        return I8.unpack_from(self.buf, self.pos - 1)[0]

    def i16(self) -> int:
        self.pos += 2
        return I16.unpack_from(self.buf, self.pos - 2)[0]

    def i32(self) -> int:
        self.pos += 4
        return I32.unpack_from(self.buf, self.pos - 4)[0]

    def i64(self) -> int:
        self.pos += 8
        return I64.unpack_from(self.buf, self.pos - 8)[0]

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
