"""One broker connection for requests encoded by hand (the batch path's Fetch, Produce and transaction requests):
a blocking socket the caller's thread writes requests to and reads responses from itself, several requests in
flight, answered in order. What it speaks beyond ApiVersions and SASL is the caller's (`version` picks it).

Why not kafka-python's connections: they run on an IO thread behind futures, timers and an event loop, and
copy each response frame through a parser's buffer; a lane needs none of it, since its one thread sends a
round of requests and then waits for their answers. TLS is `ssl` with kafka-python's context builder (the same
files and hostname check as the rare requests' connections); SASL is kafka-python's mechanisms (PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER, ...) over SaslHandshake v1 / SaslAuthenticate v1. A socket error or timeout,
or an answer that does not parse (`answer`), closes the connection and raises a retriable `WireError`
(`KafkaConnectionError`): every request in flight on it is unanswered, and the caller decides what to send
again. A refusal (an error code or TLS handshake failure of a `faultkind` kind) is a `WireError` with that kind,
never retriable.
"""
from __future__ import annotations

import select
import socket
import ssl
import struct
import sys
from collections import deque
from typing import Any, Callable, TypeVar

import kafka.errors as kerrors
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.transport import KafkaSSLTransport

from ..faultkind import Kind, of_broker_code, of_tls_reason
from . import protocol

T = TypeVar("T")

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
MAX_RESPONSE = 256 << 20
"""A frame larger than this is a stream out of step, not a response (a Fetch is capped at `max_bytes`)."""
SMALL = 1 << 16
"""Responses up to this size (Produce answers) are read through a buffer, several per `recv` when they are
there; larger ones (Fetch answers) straight into a buffer of their own, so their records are copied once."""
KEPT_BUFFERS = 3
"""Large answers' buffers a connection keeps to read later answers into: a lane holds one Fetch answer's batches
while the next is received, so two are in use at once. A fresh buffer is zeroed and its pages faulted in by the
kernel as it is written: at 4 MB a Fetch answer that cost as much as scanning and checking every batch in it."""
BUFFER_STEP = 1 << 18
"""A kept buffer's size is rounded up to this, so answers of about the same size fit the same buffer."""


class WireError(RuntimeError):
    """A broker answered a request with an error code, or its connection broke; `error` is kafka-python's
    class for the code, `kind` whether the cluster refuses the mirror (`faultkind`: by the error's protocol
    code, or for a TLS handshake by OpenSSL's reason) or not (`Kind.TRANSIENT`). A refusal is never retriable."""

    def __init__(self, error: type[kerrors.KafkaError], what: str, kind: Kind | None = None) -> None:
        self.kind = kind if kind is not None else of_broker_code(getattr(error, "errno", None) or 0)
        # a broker's error by Kafka's own name (TOPIC_AUTHORIZATION_FAILED, as the record path's librdkafka and the
        # broker's docs say it), a client-side one (a broken connection) by kafka-python's class
        name = getattr(error, "message", None) or error.__name__
        super().__init__(f"{what}: {name}" + (f" ({self.kind.value})" if self.kind.refused else ""))
        self.error = error

    @property
    def retriable(self) -> bool:
        return not self.kind.refused and bool(getattr(self.error, "retriable", False))


MALFORMED = (protocol.ProtocolError, struct.error, IndexError, UnicodeDecodeError)
"""What reading an answer that does not parse raises: `ProtocolError` (a field past the end, the C readers),
`struct.error` (a fixed-size field cut short), `IndexError` (a varint cut short), `UnicodeDecodeError` (a string
that is not UTF-8)."""


class MalformedAnswer(WireError):
    """An answer that does not parse: its connection was closed (retriable, as a reset is). A caller that would
    ask the same broker again at once counts them, so one that keeps answering so ends with its name."""


def tls_kind(e: BaseException) -> Kind:
    """TLS when `e` is a handshake OpenSSL refused (this side's check of the certificate, or an alert the peer
    sent: `faultkind.TLS_REFUSING`), else transient (a reset, a handshake cut short by a restart)."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return Kind.TLS
    return of_tls_reason(getattr(e, "reason", None)) if isinstance(e, ssl.SSLError) else Kind.TRANSIENT


def _kernel_timeouts(sock: socket.socket, seconds: float) -> None:
    """The socket's timeouts kept by the kernel (SO_RCVTIMEO, SO_SNDTIMEO) and the socket blocking: with a
    timeout of Python's own, every `recv` and `send` first polls the socket, one system call more each, and the
    hot path makes tens of thousands a second. A timeout then ends a call with EAGAIN, an `OSError` as a Python
    timeout is. Not for TLS: the ssl module reads a timed-out blocking read as an SSL error of its own."""
    whole = int(seconds)
    tv = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    sock.settimeout(None)


def check(code: int, what: str) -> None:
    """Raise `WireError` for a non-zero error code."""
    if code:
        raise WireError(kerrors.for_code(code), what)


class BrokerConnection:
    """A connected, authenticated socket to one broker, with the API versions it serves."""

    def __init__(self, host: str, port: int, config: dict[str, Any], timeout_s: float = 30.0) -> None:
        self.host, self.port = host, port
        self.client_id: str = config.get("client_id") or "sparkmirror"
        self._ids = 0
        self._in_flight: deque[tuple[int, bool]] = deque()  # (correlation id, flexible response header)
        self._rbuf = bytearray(SMALL)
        self._rview = memoryview(self._rbuf)
        self._rstart = self._rend = 0  # the bytes received and not yet taken: _rbuf[_rstart:_rend]
        self._lowat = 1
        self._poller: select.poll | None = None  # a blocking socket's, for `wait` (the low mark's wake-up)
        self._kept: list[bytearray] = []  # large answers' buffers, reused once nothing views them (`_buffer`)
        self.timeout_s = timeout_s
        self.sock: socket.socket | ssl.SSLSocket | None = None
        try:
            # the plain socket is this connection's until TLS wraps it (a refused handshake closes it too)
            self.sock = sock = socket.create_connection((host, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            protocol_name = str(config.get("security_protocol", "PLAINTEXT")).upper()
            if protocol_name in ("SSL", "SASL_SSL"):
                ctx = KafkaSSLTransport._build_ssl_context(
                    {**KafkaSSLTransport.DEFAULT_CONFIG, **{k: v for k, v in config.items() if k.startswith("ssl_")}})
                sock = ctx.wrap_socket(sock, server_hostname=host.rstrip("."))
            self.sock = sock
            error, self.versions = protocol.parse_api_versions(self._call(protocol.api_versions(self._next(), self.client_id)))
            check(error, f"ApiVersions of {host}:{port}")
            if protocol_name.startswith("SASL_"):
                self._authenticate(config)
            if not isinstance(sock, ssl.SSLSocket):
                _kernel_timeouts(sock, timeout_s)
                self._poller = select.poll()
                self._poller.register(sock, select.POLLIN)
        except OSError as e:
            self.close()
            raise WireError(kerrors.KafkaConnectionError, f"connecting to {host}:{port}: {e}", tls_kind(e)) from e
        except BaseException:
            self.close()
            raise
        self._picked: dict[int, int] = {}

    def version(self, api_key: int, mine: range, api: str) -> int:
        """The highest version of `api` both `mine` and the broker serve (`protocol.pick`: `ProtocolError` when
        none), picked once per connection."""
        v = self._picked.get(api_key)
        if v is None:
            v = self._picked[api_key] = protocol.pick(mine, self.versions.get(api_key), api)
        return v

    def _authenticate(self, config: dict[str, Any]) -> None:
        mechanism_name = config.get("sasl_mechanism", "PLAIN")
        error, offered = protocol.parse_sasl_handshake(
            self._call(protocol.sasl_handshake(self._next(), self.client_id, mechanism_name)))
        check(error, f"SaslHandshake {mechanism_name} with {self.host}:{self.port} (it offers {offered})")
        mechanism = get_sasl_mechanism(mechanism_name)(host=self.host, **config)
        while not mechanism.is_done():
            error, message, token = protocol.parse_sasl_authenticate(
                self._call(protocol.sasl_authenticate(self._next(), self.client_id, mechanism.auth_bytes())))
            if error:
                raise WireError(kerrors.for_code(error),
                                f"SASL {mechanism_name} with {self.host}:{self.port}: {message}")
            mechanism.receive(token)
        if not mechanism.is_authenticated():
            raise WireError(kerrors.SaslAuthenticationFailedError, f"SASL {mechanism_name} with {self.host}:{self.port}")

    @property
    def closed(self) -> bool:
        return self.sock is None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self._in_flight.clear()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _next(self) -> int:
        self._ids = (self._ids + 1) & 0x7FFFFFFF
        return self._ids

    def next_id(self) -> int:
        return self._next()

    def _call(self, buf: bytearray) -> memoryview:
        self.send(buf, correlation_id=self._ids, flexible_response=False)
        return self.receive()

    def answer(self, parse: Callable[[memoryview, int], T], version: int, small: bool = False) -> T:
        """The oldest unanswered request's response (`receive`), read by `parse` for `version`. One that does not
        parse (`MALFORMED`) closes the connection, as a reset would: the answers behind it on the stream are
        not to be believed either, and what was in flight is the caller's to send again (a retriable
        `MalformedAnswer`: the writer's retries end at its delivery deadline, the reader's after `MALFORMED_TRIES`)."""
        body = self.receive(small)
        try:
            return parse(body, version)
        except MALFORMED as e:
            raise self._malformed(e) from e

    def _malformed(self, e: BaseException) -> MalformedAnswer:
        self.close()
        return MalformedAnswer(kerrors.KafkaConnectionError,
                               f"{self.host}:{self.port} sent an answer that does not parse: {e!r}")

    def _broken(self, e: BaseException, doing: str) -> WireError:
        self.close()
        return WireError(kerrors.KafkaConnectionError, f"{doing} {self.host}:{self.port}: {e!r}", tls_kind(e))

    def send(self, buf: bytearray, correlation_id: int, flexible_response: bool) -> None:
        """Write one framed request (its correlation id as `protocol.request` was given it)."""
        if self.sock is None:
            raise WireError(kerrors.KafkaConnectionError, f"connection to {self.host}:{self.port} is closed")
        try:
            self.sock.sendall(buf)
        except OSError as e:
            raise self._broken(e, "sending to") from e
        self._in_flight.append((correlation_id, flexible_response))

    def _fill(self, n: int, greedy: bool) -> None:
        """At least `n` (<= SMALL) bytes buffered; `greedy` takes whatever else has arrived too, otherwise no
        byte past `n` is read (the rest of a large frame goes to its own buffer)."""
        assert self.sock is not None
        if self._rend - self._rstart >= n:
            return
        if self._rstart + n > SMALL:  # compact: move the few unread bytes to the front
            left = self._rend - self._rstart
            self._rbuf[:left] = self._rview[self._rstart:self._rend]
            self._rstart, self._rend = 0, left
        want_end = SMALL if greedy else self._rstart + n
        while self._rend - self._rstart < n:
            k = self.sock.recv_into(self._rview[self._rend:want_end])
            if not k:
                raise ConnectionResetError("the broker closed the connection")
            self._rend += k

    def wait(self, n: int) -> None:
        """Block until `n` bytes of answers are here, woken once (SO_RCVLOWAT) rather than at every answer's
        arrival: the caller knows a lower bound of the next answers' sizes. Reading them is `receive`'s."""
        need = min(n, SMALL - 4096) - (self._rend - self._rstart)
        if need <= 1 or self.sock is None:
            return
        try:
            if isinstance(self.sock, ssl.SSLSocket):  # the kernel counts ciphertext: more, so no wait too long
                self._fill(need + self._rend - self._rstart, True)
                return
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, need)
            self._lowat = need
            # polled first: a blocking recv copies the first answer at once, and then the kernel wakes it only
            # once `need` bytes MORE are here (it holds out the whole low mark again), so the rest of the
            # window's answers would wait for the timeout
            if self._poller is not None and not self._poller.poll(self.timeout_s * 1000):
                raise TimeoutError(f"no {need} bytes of answers in {self.timeout_s} s")
            self._fill(need + self._rend - self._rstart, True)
        except OSError as e:
            raise self._broken(e, "receiving from") from e
        finally:
            if self._lowat != 1 and self.sock is not None:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
                self._lowat = 1

    def ready(self) -> bool:
        """A whole answer is buffered: `receive` returns it without waiting."""
        have = self._rend - self._rstart
        return have >= 4 and have >= 4 + _SIZE.unpack_from(self._rbuf, self._rstart)[0]

    def _read_into(self, view: memoryview) -> None:
        assert self.sock is not None
        got, n = 0, len(view)
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionResetError("the broker closed the connection")
            got += k

    def _buffer(self, size: int) -> bytearray:
        """A buffer of at least `size` bytes for a large answer: a kept one nothing refers to any more (every view of
        an answer, each batch's included, holds a reference to its buffer: so one still read is never written
        over), else a new one, kept in place of a free one too small or beside the others while fewer than
        `KEPT_BUFFERS`."""
        kept, small = self._kept, -1
        for i in range(len(kept)):
            buf = kept[i]
            if sys.getrefcount(buf) > 3:  # the list, `buf` and the call's argument: anything more still reads it
                continue
            if len(buf) >= size:
                return buf
            small = i
        buf = bytearray(-(-size // BUFFER_STEP) * BUFFER_STEP)
        if small >= 0:
            kept[small] = buf
        elif len(kept) < KEPT_BUFFERS:
            kept.append(buf)
        return buf

    def receive(self, small: bool = False) -> memoryview:
        """The body of the oldest unanswered request's response (after its header). `small`: an answer
        expected small (Produce), read through the connection's buffer and copied out of it; otherwise a view of
        a buffer no other answer is read into while anything views it (`_buffer`)."""
        if self.sock is None or not self._in_flight:
            raise WireError(kerrors.KafkaConnectionError, f"nothing to receive from {self.host}:{self.port}")
        correlation_id, flexible = self._in_flight[0]
        try:
            self._fill(4, small)
            size = _SIZE.unpack_from(self._rbuf, self._rstart)[0]
            self._rstart += 4
            if not 4 <= size <= MAX_RESPONSE:
                raise ConnectionResetError(f"a response frame of {size} bytes")
            if small and size <= SMALL - 4:
                self._fill(size, True)
                buf = bytearray(self._rview[self._rstart:self._rstart + size])
                self._rstart += size
                view = memoryview(buf)
            else:
                buf = self._buffer(size)
                view = memoryview(buf)[:size]
                take = min(size, self._rend - self._rstart)  # bytes of it read with an earlier answer
                view[:take] = self._rview[self._rstart:self._rstart + take]
                self._rstart += take
                self._read_into(view[take:])
            if self._rstart == self._rend:
                self._rstart = self._rend = 0
        except OSError as e:
            raise self._broken(e, "receiving from") from e
        self._in_flight.popleft()
        got = _CORRELATION.unpack_from(buf)[0]
        if got != correlation_id:
            self.close()
            raise WireError(kerrors.CorrelationIdError, f"{self.host}:{self.port} answered {got}, not {correlation_id}")
        cursor = protocol.Cursor(view, flexible, 4)
        try:
            cursor.tags()
        except MALFORMED as e:
            raise self._malformed(e) from e
        return view[cursor.pos:]
