"""The batch path's broker connection (wire/connection.py) against a real broker: a Fetch answer is never read
into a buffer that a batch of an earlier answer still views (buffers are kept and reused), and a broker that
stops answering ends the call within the connection's timeout, kept by the kernel, as a retriable error; a window of
answers that arrive apart wakes `wait` once the last is here."""
from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Producer

from sparkmirror.wire import protocol
from sparkmirror.copying import protocol as copying_protocol
from sparkmirror.copying.batchreader import BatchReader
from sparkmirror.wire.cluster import Wire
from sparkmirror.wire.connection import KEPT_BUFFERS, BrokerConnection, WireError


def _batches_of_their_own(bootstrap: str, topic: str, n: int) -> list[bytes]:
    """`n` records, each flushed alone: each its own batch, each value its own."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    values = [f"record {i} ".encode() * 40 for i in range(n)]
    for v in values:
        p.produce(topic, value=v, partition=0)
        p.flush(10)
    return values


def test_a_fetch_answer_is_never_read_into_a_buffer_a_batch_still_views(kafka_a, topic):
    t = topic(kafka_a, partitions=1)
    values = _batches_of_their_own(kafka_a.bootstrap, t, 30)
    wire = Wire({"bootstrap.servers": kafka_a.bootstrap})
    try:
        reader = BatchReader(wire, partition_max_bytes=1)  # a batch an answer: the first is always whole
        reader.assign({(t, 0): 0})
        held = reader.fetch()[(t, 0)].batches
        held_bytes = [bytes(b.raw) for b in held]
        held_buffer = held[0].raw.obj
        buffers, seen = [], 0
        while seen < len(values) - len(held):
            got = reader.fetch().get((t, 0))
            if got is None or not got.batches:
                continue
            buffers.append(id(got.batches[0].raw.obj))  # not the buffer: a reference would keep it busy
            seen += len(got.batches)
            del got
        assert id(held_buffer) not in buffers, "an answer was read over batches still held"
        assert [bytes(b.raw) for b in held] == held_bytes
        # once an answer's batches are dropped its buffer takes the next one: no answer after the first allocates
        assert len(set(buffers)) == 1
        assert len(wire.connection(reader._leaders[(t, 0)].node_id)._kept) <= KEPT_BUFFERS
    finally:
        wire.close()


def test_a_broker_that_stops_answering_ends_the_call_within_the_timeout(kafka_a):
    host, port = kafka_a.bootstrap.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), {}, timeout_s=2.0)
    assert conn.sock is not None and conn.sock.gettimeout() is None  # blocking: the kernel keeps the timeout
    assert kafka_a.pid is not None
    os.kill(kafka_a.pid, signal.SIGSTOP)
    try:
        correlation = conn.next_id()
        conn.send(protocol.api_versions(correlation, conn.client_id), correlation, False)
        t0 = time.monotonic()
        with pytest.raises(WireError) as e:
            conn.receive()
        waited = time.monotonic() - t0
    finally:
        os.kill(kafka_a.pid, signal.SIGCONT)
    assert e.value.retriable and e.value.error.__name__ == "KafkaConnectionError", e.value
    assert 1.5 <= waited < 10, waited
    assert conn.closed


def test_answers_arriving_apart_wake_the_wait_when_the_last_is_here_not_at_the_timeout(kafka_a, topic):
    """The first answer of a window arrives before `wait` is called, the others later. A blocking recv under
    SO_RCVLOWAT would copy the first and then sleep until a whole low mark MORE arrived: here, the timeout."""
    t = topic(kafka_a, partitions=1)
    _batches_of_their_own(kafka_a.bootstrap, t, 1)
    host, port = kafka_a.bootstrap.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), {}, timeout_s=5.0)
    P = copying_protocol
    version = conn.version(P.API_FETCH, P.FETCH_VERSIONS, "Fetch")
    flexible = version >= P.FETCH_FLEXIBLE

    def fetch(offset: int, wait_ms: int) -> None:  # at offset 1 nothing is there: the broker holds it `wait_ms`
        correlation = conn.next_id()
        buf = P.request(P.API_FETCH, version, correlation, conn.client_id, flexible)
        P.fetch_body(buf, version, [P.FetchPosition(t, 0, offset)], wait_ms, 1 << 20, 1)
        conn.send(P.finish(buf), correlation, flexible)

    try:
        fetch(0, 0)
        fetch(1, 0)
        # each frame is its body, a size and a correlation id at least: `n` is a lower bound of the three answers
        # below and more than the first two hold
        n = len(conn.receive()) + 8 + 2 * (len(conn.receive()) + 8) - 8
        t0 = time.monotonic()
        fetch(0, 0)
        fetch(1, 600)
        fetch(1, 600)
        time.sleep(0.3)  # the first answer is here, alone
        conn.wait(n)
        waited = time.monotonic() - t0
        assert conn.ready()
        assert len([conn.receive() for _ in range(3)]) == 3
    finally:
        conn.close()
    assert 1.0 <= waited < 3.5, waited  # the broker answers a connection's requests in order: 2 x 600 ms
