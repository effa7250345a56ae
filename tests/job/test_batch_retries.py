"""The batch writer rides out a target broker killed mid-write (issue 36): the produce requests in flight on it are
lost, connections refused while it is away, its partitions reloaded when it is back; the writer sends the
unacknowledged batches again under their own sequences, and the coordinator requests again. Counted per
partition by sequence number on the target, read_committed: 0 missing, 0 duplicated, in order."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from sparkmirror.copying.batchreader import BatchReader
from sparkmirror.copying.batchwriter import BatchWriter
from sparkmirror.wire.cluster import Wire
from sparkmirror_dev.kafka import KafkaCluster, ReplicatedKafkaCluster
from sparkmirror_dev.testing import create_topic, open_transactions, produce_waiting, read_topic, unique_name

from .conftest import end_offsets

pytestmark = pytest.mark.minutes(1.3)

PARTS = 4
PER_PART = 2500


def _restart(cluster: KafkaCluster, away_s: float) -> None:
    """SIGKILL the cluster's one broker, keep it away, start it again on the same ports and data."""
    assert cluster.pid is not None
    cluster.kill()
    time.sleep(away_s)
    cluster.start()


def _preload(bootstrap: str, topic: str, per_part: int) -> None:
    """`<partition>:<seq>:` and 1,000 bytes, sequences 0..per_part-1 on every partition."""
    p = Producer({"bootstrap.servers": bootstrap, "batch.size": 16384, "linger.ms": 5,
                  "enable.idempotence": True})  # in order even when a first request meets a new topic's leader late
    for seq in range(per_part):
        for part in range(PARTS):
            produce_waiting(p, topic, value=f"{part}:{seq}:".encode() + b"x" * 1000, partition=part)
    assert p.flush(60) == 0


def _copier(source: Wire, sink: Wire, topic: str, partition_max_bytes: int,
            delivery_timeout_ms: int = 120_000) -> tuple[BatchWriter, BatchReader]:
    """A lane's two ends without the lane: a transactional writer, initialized, and a reader of every partition of
    `topic` from offset 0."""
    writer = BatchWriter(sink, unique_name("lane"), delivery_timeout_ms=delivery_timeout_ms)
    writer.init()
    reader = BatchReader(source, partition_max_bytes=partition_max_bytes)
    reader.assign({(topic, q): 0 for q in range(PARTS)})
    return writer, reader


def test_a_target_broker_killed_mid_write_loses_and_duplicates_nothing(kafka_a, tmp_path) -> None:
    target = KafkaCluster(unique_name("restarted"), tmp_path / "target").start()
    try:
        topic = create_topic(kafka_a.bootstrap, unique_name("retries"), PARTS)
        create_topic(target.bootstrap, topic, PARTS)
        _preload(kafka_a.bootstrap, topic, PER_PART)
        ends = end_offsets(kafka_a.bootstrap, topic)

        source, sink = Wire({"bootstrap.servers": kafka_a.bootstrap}), Wire({"bootstrap.servers": target.bootstrap})
        killer: threading.Thread | None = None
        try:
            writer, reader = _copier(source, sink, topic, 128 << 10)  # many rounds: the kill lands mid-copy
            rounds = copied = 0
            mapped: dict[int, list[tuple[int, int, int]]] = {q: [] for q in range(PARTS)}
            deadline = time.monotonic() + 150
            while any(reader.positions[(topic, q)] < ends[q] for q in range(PARTS)):
                assert time.monotonic() < deadline, f"copy stuck at {reader.positions}"
                got = reader.fetch()
                rounds += 1
                if rounds == 3:  # the broker goes while this round's requests are in flight
                    killer = threading.Thread(target=_restart, args=(target, 2.0))
                    killer.start()
                for (t, q), written in writer.produce({k: f.batches for k, f in got.items()}).items():
                    sent = got[(t, q)].batches
                    assert len(written) == len(sent)
                    mapped[q] += [(b.base_offset, base, b.record_count) for b, base in zip(sent, written)]
                    copied += sum(b.record_count for b in sent)
                if rounds % 4 == 0:
                    writer.commit()
            writer.commit()
        finally:
            if killer is not None:
                killer.join(120)
            source.close()
            sink.close()

        assert killer is not None and writer.retries > 0, "the broker restart never reached the writer"
        assert copied == PARTS * PER_PART
        want, got = read_topic(kafka_a.bootstrap, topic), read_topic(target.bootstrap, topic)
        for part in range(PARTS):
            seqs = [int(r.value.split(b":")[1]) for r in got[part]]
            assert all(r.value.startswith(f"{part}:".encode()) for r in got[part])
            missing, duplicated = len(set(range(PER_PART)) - set(seqs)), len(seqs) - len(set(seqs))
            assert (missing, duplicated) == (0, 0), f"partition {part}: {missing} missing, {duplicated} duplicated"
            assert [r.value for r in got[part]] == [r.value for r in want[part]], f"partition {part} out of order"
            # the offset map: source batches in order, target ranges adjacent but for the commit markers
            sources = [s for s, _, _ in mapped[part]]
            assert sources == sorted(sources) and sum(n for *_, n in mapped[part]) == PER_PART
            targets = [(t, n) for _, t, n in mapped[part]]
            assert all(b[0] >= a[0] + a[1] for a, b in zip(targets, targets[1:]))
    finally:
        target.stop()


def test_the_transaction_coordinators_broker_killed_mid_transaction(kafka_a, tmp_path) -> None:
    """Three target brokers; the one coordinating the lane's transactional id is SIGKILLed with a transaction open
    and kept away until it has left the metadata (kafka-python then calls the node unknown): the writer finds the
    coordinator that took over, commits there, and the broker's return changes nothing. Found by `make chaos` on
    the batch path, where EndTxn ended the mirror with UnknownBrokerIdError."""
    target = ReplicatedKafkaCluster(unique_name("coord"), tmp_path / "target").start()
    try:
        topic = create_topic(kafka_a.bootstrap, unique_name("coord"), PARTS)
        create_topic(target.bootstrap, topic, PARTS, replication_factor=3)
        per_part = 1000
        _preload(kafka_a.bootstrap, topic, per_part)
        ends = end_offsets(kafka_a.bootstrap, topic)
        source, sink = Wire({"bootstrap.servers": kafka_a.bootstrap}), Wire({"bootstrap.servers": target.bootstrap})
        try:
            writer, reader = _copier(source, sink, topic, 16 << 10)
            killed, rounds = None, 0
            while any(reader.positions[(topic, q)] < ends[q] for q in range(PARTS)):
                got = reader.fetch()
                writer.produce({k: f.batches for k, f in got.items()})
                rounds += 1
                if rounds == 3:  # a transaction open, its coordinator goes
                    killed = sink.transaction_coordinator(writer.tid or "") - 1  # node.id = index + 1
                    target.kill(killed)
                    time.sleep(12)  # its partitions' leadership moved
                    # as the writer does when a leader moved: fresh metadata, without the broker that is away, so a
                    # request to its node id is refused as an unknown broker, not as a lost connection
                    sink.leaders([topic])
                    writer.commit()  # through the coordinator that took over
                    target.start_node(killed)  # and the broker comes back
                elif rounds % 4 == 0:
                    writer.commit()
            writer.commit()
            coordinator_after = writer.coordinator
        finally:
            source.close()
            sink.close()
        assert killed is not None and coordinator_after != killed + 1, "the coordinator never moved"
        # EndTxn is answered once the coordinator logged the commit; its markers reach the partitions' leaders after
        # (later still while leadership settles after the broker's return). A transaction left open would stay so
        # until the 60 s transaction timeout, longer than this wait.
        deadline = time.monotonic() + 30
        while (still := open_transactions(target.bootstrap, topic, PARTS)) and time.monotonic() < deadline:
            time.sleep(1)
        assert still == {}
        got = read_topic(target.bootstrap, topic)
        for part in range(PARTS):
            seqs = [int(r.value.split(b":")[1]) for r in got[part]]
            assert seqs == list(range(per_part)), f"partition {part}: {len(seqs)} records, not 0..{per_part - 1}"
    finally:
        target.stop()


def test_answers_that_do_not_parse_are_asked_again_on_a_new_connection(kafka_a, kafka_b, monkeypatch) -> None:
    """A Fetch answer and a Produce answer cut short on the way (as a broker with a bug, or a stream out of step,
    would give them): each closes its connection and is asked again on a new one, the Produce under the same
    sequences, so the broker answers the batches it already has as duplicates. Nothing is lost, nothing written
    twice, and the connections that carried the bad answers are not used again."""
    from sparkmirror.copying import batchreader, batchwriter

    topic = create_topic(kafka_a.bootstrap, unique_name("cut"), PARTS)
    create_topic(kafka_b.bootstrap, topic, PARTS)
    per_part = 600
    _preload(kafka_a.bootstrap, topic, per_part)
    ends = end_offsets(kafka_a.bootstrap, topic)

    def cut(parse, calls: list[int], keep: dict[int, Callable[[int], int]]):
        """`parse` with the answers whose number is in `keep` cut to `keep[number](their length)` bytes."""
        def parsed(body, version):
            calls.append(1)
            how = keep.get(len(calls))
            return parse(body if how is None else body[:how(len(body))], version)
        return parsed

    fetches: list[int] = []
    produces: list[int] = []
    commits: list[int] = []
    # a Fetch answer cut inside its records (a field past the end), another inside its header (a fixed-size
    # field cut short), a Produce answer cut in half (the C reader), an EndTxn answer cut to 3 bytes
    half: Callable[[int], int] = lambda n: n // 2  # noqa: E731
    monkeypatch.setattr(batchreader.protocol, "parse_fetch",
                        cut(batchreader.protocol.parse_fetch, fetches, {2: half, 5: lambda n: 6}))
    monkeypatch.setattr(batchwriter.protocol, "parse_produce", cut(batchwriter.protocol.parse_produce, produces, {3: half}))
    monkeypatch.setattr(batchwriter.protocol, "parse_end_txn",
                        cut(batchwriter.protocol.parse_end_txn, commits, {1: lambda n: 3}))
    source, sink = Wire({"bootstrap.servers": kafka_a.bootstrap}), Wire({"bootstrap.servers": kafka_b.bootstrap})
    try:
        writer, reader = _copier(source, sink, topic, 32 << 10, delivery_timeout_ms=60_000)
        closed = []
        while any(reader.positions[(topic, q)] < ends[q] for q in range(PARTS)):
            before = dict(sink._conns), dict(source._conns)
            got = reader.fetch()
            writer.produce({k: f.batches for k, f in got.items()})
            if len(produces) > 6 and not commits:
                writer.commit()  # the first EndTxn's answer is cut: asked again
            closed += [c for conns in before for c in conns.values() if c.closed]
        writer.commit()
    finally:
        source.close()
        sink.close()
    assert len(fetches) > 10 and len(produces) > 3 and len(commits) > 2, "the cut answers were never reached"
    assert writer.retries >= 1
    assert len(closed) >= 4, "a connection that carried an answer that does not parse was kept"
    got = read_topic(kafka_b.bootstrap, topic)
    for part in range(PARTS):
        seqs = [int(r.value.split(b":")[1]) for r in got[part]]
        assert seqs == list(range(per_part)), f"partition {part}: {len(seqs)} records, not 0..{per_part - 1}"


def test_a_broker_whose_fetch_answers_never_parse_ends_the_read_naming_it(kafka_a, monkeypatch) -> None:
    """One answer that does not parse is asked again; `MALFORMED_TRIES` in a row from one broker stop the read
    with a non-retriable error naming the cluster and the broker (the lane's `wire_talk` makes it a `CopyError`),
    not a lane that fetches forever and copies nothing."""
    from sparkmirror.copying import batchreader

    topic = create_topic(kafka_a.bootstrap, unique_name("garbled"), PARTS)
    _preload(kafka_a.bootstrap, topic, 10)
    parse = batchreader.protocol.parse_fetch
    monkeypatch.setattr(batchreader.protocol, "parse_fetch", lambda body, version: parse(body[:9], version))
    source = Wire({"bootstrap.servers": kafka_a.bootstrap})
    try:
        reader = BatchReader(source)
        reader.assign({(topic, q): 0 for q in range(PARTS)})
        for _ in range(batchreader.MALFORMED_TRIES - 1):
            assert reader.fetch() == {}
        with pytest.raises(batchreader.WireError, match="3 Fetch answers in a row that do not parse") as e:
            reader.fetch()
        assert not e.value.retriable and re.search(r"source cluster, broker \d+: ", str(e.value)), str(e.value)
    finally:
        source.close()
