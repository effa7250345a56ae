"""The batch path's hand-written Fetch and Produce encoding (copying/protocol.py), checked against kafka-python's
classes generated from Kafka's own JSON schemas: what we encode, they decode to the same fields; what they
encode (as a broker would answer), we decode to the same fields, in every version a broker may pick."""
from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sparkmirror.copying import protocol
from sparkmirror.copying.protocol import FetchPosition, ProduceBuilder

HEADER_V1 = 4 + 2 + 2 + 4 + 2  # size, api key, version, correlation id, client id length


def _body(buf: bytearray, client_id: str, flexible: bool) -> bytes:
    """A framed request without its size and header (what kafka-python's `decode` reads)."""
    assert int.from_bytes(buf[:4], "big") == len(buf) - 4
    return bytes(buf[HEADER_V1 + len(client_id) + (1 if flexible else 0):])


@pytest.mark.parametrize("version", list(protocol.FETCH_VERSIONS))
def test_fetch_request_decodes_as_kafka_reads_it(version: int) -> None:
    flexible = version >= protocol.FETCH_FLEXIBLE
    buf = protocol.request(protocol.API_FETCH, version, 7, "cid", flexible)
    positions = [FetchPosition("a", 0, 100, 3, 1 << 20), FetchPosition("b", 2, 5, -1, 4096),
                 FetchPosition("a", 1, 200, 4, 1 << 20)]
    protocol.fetch_body(buf, version, positions, 250, 50 << 20, 1)
    req = FetchRequest.decode(_body(protocol.finish(buf), "cid", flexible), version=version)
    assert (req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes, req.isolation_level) == (
        -1, 250, 1, 50 << 20, 1)
    got = {(t.topic, p.partition): (p.fetch_offset, p.partition_max_bytes) for t in req.topics for p in t.partitions}
    assert got == {("a", 0): (100, 1 << 20), ("a", 1): (200, 1 << 20), ("b", 2): (5, 4096)}
    if version >= 9:
        assert {p.partition: p.current_leader_epoch for t in req.topics for p in t.partitions} == {0: 3, 1: 4, 2: -1}
    if version >= 7:
        assert (req.session_id, req.session_epoch, list(req.forgotten_topics_data)) == (0, -1, [])


def _fetch_response(version: int) -> bytes:
    R = FetchResponse
    P = R.FetchableTopicResponse.PartitionData
    parts = [P(partition_index=1, error_code=0, high_watermark=10, last_stable_offset=9, log_start_offset=2,
               aborted_transactions=[P.AbortedTransaction(producer_id=5, first_offset=7),
                                     P.AbortedTransaction(producer_id=4, first_offset=3)],
               preferred_read_replica=-1, records=b"batches..."),
             P(partition_index=0, error_code=1, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
               aborted_transactions=None, preferred_read_replica=-1, records=None)]
    if version >= 12:  # tagged fields a 4.x broker sends: skipped, not misread
        parts[1].current_leader = P.LeaderIdAndEpoch(leader_id=3, leader_epoch=9)
    r = R(throttle_time_ms=5, error_code=0, session_id=0,
          responses=[R.FetchableTopicResponse(topic="t", partitions=parts),
                     R.FetchableTopicResponse(topic="u", partitions=[])])
    return bytes(r.encode(version=version))


@pytest.mark.parametrize("version", list(protocol.FETCH_VERSIONS))
def test_fetch_response_parses_with_records_as_a_view(version: int) -> None:
    error, parts = protocol.parse_fetch(memoryview(_fetch_response(version)), version)
    assert error == 0 and [(p.topic, p.partition) for p in parts] == [("t", 1), ("t", 0)]
    one, other = parts
    assert (one.error_code, one.high_watermark, one.last_stable_offset) == (0, 10, 9)
    assert one.aborted == [(3, 4), (7, 5)]  # (first offset, producer id), sorted
    assert isinstance(one.records, memoryview) and bytes(one.records) == b"batches..."
    assert (other.error_code, other.records, other.aborted) == (1, None, [])
    if version >= 5:
        assert one.log_start_offset == 2


@pytest.mark.parametrize("version", list(protocol.PRODUCE_VERSIONS))
def test_produce_request_decodes_as_kafka_reads_it(version: int) -> None:
    flexible = version >= protocol.PRODUCE_FLEXIBLE
    b = ProduceBuilder(version, 9, "cid", "lane-1", -1, 30_000, {"a": 2, "b": 1})
    for topic, index, records in (("a", 0, b"first"), ("a", 3, b"second batch"), ("b", 1, b"x" * 300)):
        b.partition(topic, index, len(records)).extend(records)
    req = ProduceRequest.decode(_body(b.done(), "cid", flexible), version=version)
    assert (req.transactional_id, req.acks, req.timeout_ms) == ("lane-1", -1, 30_000)
    assert [(t.name, p.index, bytes(p.records)) for t in req.topic_data for p in t.partition_data] == [
        ("a", 0, b"first"), ("a", 3, b"second batch"), ("b", 1, b"x" * 300)]
    assert b.keys == [("a", 0), ("a", 3), ("b", 1)]


def test_produce_builder_refuses_records_of_another_size_and_scattered_topics() -> None:
    b = ProduceBuilder(11, 1, "c", None, -1, 1000, {"a": 1, "b": 1})
    b.partition("a", 0, 5).extend(b"four")
    with pytest.raises(ValueError, match="off their size"):
        b.partition("b", 0, 1)
    b = ProduceBuilder(11, 1, "c", None, -1, 1000, {"a": 2, "b": 1})
    b.partition("a", 0, 0)
    b.partition("b", 0, 0)
    with pytest.raises(ValueError, match="not announced"):
        b.partition("a", 1, 0)


@pytest.mark.parametrize("version", list(protocol.PRODUCE_VERSIONS))
def test_produce_response_parses_offsets_and_errors(version: int) -> None:
    R = ProduceResponse
    P = R.TopicProduceResponse.PartitionProduceResponse
    ok = P(index=0, error_code=0, base_offset=1234, log_append_time_ms=-1, log_start_offset=0, record_errors=[],
           error_message=None)
    bad = P(index=3, error_code=2, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
            record_errors=[P.BatchIndexAndErrorMessage(batch_index=0, batch_index_error_message="crc")],
            error_message="corrupt")
    if version >= 10:
        bad.current_leader = P.LeaderIdAndEpoch(leader_id=2, leader_epoch=8)
    body = R(responses=[R.TopicProduceResponse(name="a", partition_responses=[ok, bad])], throttle_time_ms=0)
    got = protocol.parse_produce(memoryview(bytes(body.encode(version=version))), version)
    assert [(p.topic, p.partition, p.error_code, p.base_offset) for p in got] == [("a", 0, 0, 1234), ("a", 3, 2, -1)]
    if version >= 8:
        assert got[1].error_message == "corrupt (batch 0: crc)"
    frame = 4 + 4 + (1 if version >= protocol.PRODUCE_FLEXIBLE else 0) + len(body.encode(version=version))
    assert protocol.produce_answer_floor(2) <= frame


def test_version_pick_takes_the_highest_both_know_and_names_the_api_otherwise() -> None:
    assert protocol.pick(protocol.FETCH_VERSIONS, (4, 18), "Fetch") == 12
    assert protocol.pick(protocol.PRODUCE_VERSIONS, (3, 13), "Produce") == 11
    assert protocol.pick(protocol.FETCH_VERSIONS, (0, 11), "Fetch") == 11
    with pytest.raises(protocol.ProtocolError, match="Fetch"):
        protocol.pick(protocol.FETCH_VERSIONS, (13, 18), "Fetch")
    with pytest.raises(protocol.ProtocolError, match="Produce"):
        protocol.pick(protocol.PRODUCE_VERSIONS, None, "Produce")


@pytest.mark.parametrize("version", list(protocol.TXN_VERSIONS))
def test_add_partitions_to_txn_decodes_as_kafka_reads_it(version: int) -> None:
    from kafka.protocol.producer import AddPartitionsToTxnRequest

    flexible = version >= protocol.TXN_FLEXIBLE
    buf = protocol.add_partitions_to_txn(version, 9, "cid", "lane-0", 4711, 3, {"a": [0, 2], "b": [1]})
    req = AddPartitionsToTxnRequest.decode(_body(buf, "cid", flexible), version=version)
    assert (req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch) == (
        "lane-0", 4711, 3)
    assert {t.name: list(t.partitions) for t in req.v3_and_below_topics} == {"a": [0, 2], "b": [1]}


@pytest.mark.parametrize("version", list(protocol.TXN_VERSIONS))
def test_add_partitions_to_txn_response_parses(version: int) -> None:
    from kafka.protocol.producer import AddPartitionsToTxnResponse as R

    T = R.AddPartitionsToTxnTopicResult
    P = T.AddPartitionsToTxnPartitionResult
    r = R(throttle_time_ms=3, results_by_topic_v3_and_below=[
        T(name="a", results_by_partition=[P(partition_index=0, partition_error_code=0),
                                          P(partition_index=2, partition_error_code=51)]),
        T(name="b", results_by_partition=[P(partition_index=1, partition_error_code=0)])])
    body = memoryview(bytes(r.encode(version=version)))
    assert protocol.parse_add_partitions_to_txn(body, version) == [("a", 0, 0), ("a", 2, 51), ("b", 1, 0)]


@pytest.mark.parametrize("version", list(protocol.TXN_VERSIONS))
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_round_trip(version: int, committed: bool) -> None:
    from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

    flexible = version >= protocol.TXN_FLEXIBLE
    req = EndTxnRequest.decode(_body(protocol.end_txn(version, 9, "cid", "lane-0", 4711, 3, committed), "cid",
                                     flexible), version=version)
    assert (req.transactional_id, req.producer_id, req.producer_epoch, req.committed) == (
        "lane-0", 4711, 3, committed)
    answer = bytes(EndTxnResponse(throttle_time_ms=1, error_code=47).encode(version=version))
    assert protocol.parse_end_txn(memoryview(answer), version) == 47
