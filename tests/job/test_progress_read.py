"""Reading the progress topic while other lanes keep committing: read_committed never sees PARTITION_EOF
then (an open transaction always sits at the end), so the read must stop at the end offsets it started from."""
from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Producer

from sparkmirror_dev.testing import unique_name
from sparkmirror.progress import ensure_progress_topic, read_progress


def _value(i: int) -> bytes:
    return json.dumps({"v": 1, "next": i + 1, "src": [i, i], "tgt": [i, i], "tgtTopic": "a.t", "count": 1,
                       "commitMs": 0, "gen": 1, "fg": "g", "mirror": "m", "lane": 1}).encode()


def test_read_finishes_while_another_lane_commits_continuously(kafka_b) -> None:
    conf = {"bootstrap.servers": kafka_b.bootstrap}
    topic = unique_name("progress-busy")
    ensure_progress_topic(conf, topic)
    stop = threading.Event()
    committed: list[int] = []

    def other_lane() -> None:
        p = Producer({**conf, "transactional.id": unique_name("busy-lane")})
        p.init_transactions(30)
        i = 0
        while not stop.is_set():
            p.begin_transaction()
            p.produce(topic, key=json.dumps(["a", "t", 0]).encode(), value=_value(i))
            time.sleep(0.05)  # the transaction stays open most of the time, as a copying lane's does
            p.commit_transaction(30)
            committed.append(i + 1)
            i += 1

    t = threading.Thread(target=other_lane)
    t.start()
    try:
        while len(committed) < 5:
            time.sleep(0.1)
        t0 = time.monotonic()
        state = read_progress(conf, topic, "a", timeout=20)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join(30)
    nxt = state.latest[("a", "t", 0)].next_offset
    assert 5 <= nxt <= committed[-1], (nxt, committed[-1])
    assert took < 20


def test_the_tail_stops_at_the_end_it_began_from_while_lanes_commit_continuously(kafka_b) -> None:
    """The driver's tail (live lag, checkpoints) once read "until the topic goes quiet": with lanes committing
    every ~100 ms it never does, so every poll ran to its timeout and checkpoints came ~26 s apart whatever their
    interval. Now a poll reads what was committed when it began (and what arrives meanwhile), then returns."""
    from sparkmirror.progress import ProgressTail

    conf = {"bootstrap.servers": kafka_b.bootstrap}
    topic = unique_name("progress-tail")
    ensure_progress_topic(conf, topic)
    stop = threading.Event()
    committed: list[int] = []

    def lane() -> None:
        p = Producer({**conf, "transactional.id": unique_name("tail-lane")})
        p.init_transactions(30)
        i = 0
        while not stop.is_set():
            p.begin_transaction()
            p.produce(topic, key=json.dumps(["a", "t", 0]).encode(), value=_value(i))
            time.sleep(0.05)
            p.commit_transaction(30)
            committed.append(i + 1)
            i += 1

    t = threading.Thread(target=lane)
    t.start()
    tail = ProgressTail(conf, topic, "a")
    try:
        while len(committed) < 5:
            time.sleep(0.1)
        for _ in range(3):
            before = committed[-1]
            t0 = time.monotonic()
            tail.poll(30)
            took = time.monotonic() - t0
            assert tail.latest()[("t", 0)].next_offset >= before  # everything committed before the poll
            assert took < 15, took  # it stopped at its end, not at its 30-s timeout
    finally:
        stop.set()
        t.join(30)
        tail.close()


def test_a_just_created_progress_topic_reads_empty_before_its_leader_is_known(kafka_b) -> None:
    """`make demo` read the progress topic right after creating it and died on NOT_LEADER_FOR_PARTITION: a
    partition without a leader yet is asked again, not reported."""
    conf = {"bootstrap.servers": kafka_b.bootstrap}
    for _ in range(5):
        topic = unique_name("progress-fresh")
        ensure_progress_topic(conf, topic)
        state = read_progress(conf, topic, timeout=30)
        assert state.latest == {} and state.generations == {}


def test_acl_records_and_unknown_marks_are_read_apart_and_never_count_as_progress(kafka_b) -> None:
    """ACL sync's record (`aclsOf`) shares the topic: the bounded read and the tail skip it as progress (no
    latest record, no offset map, not counted) and keep the latest one per mirror of the selected resource; a
    mark kind of a later version is skipped without error."""
    from sparkmirror.progress import ProgressTail
    from sparkmirror.progress.record import acls_key, acls_value

    conf = {"bootstrap.servers": kafka_b.bootstrap}
    topic = unique_name("progress-acls")
    ensure_progress_topic(conf, topic)
    row = ["TOPIC", "a.t", "LITERAL", "User:alice", "*", "READ", "ALLOW"]
    p = Producer(conf)
    p.produce(topic, key=json.dumps(["a", "t", 0, "ns/r"]).encode(), value=_value(0))
    p.produce(topic, key=acls_key("ns/r", "a-to-b"), value=acls_value([], 1))
    p.produce(topic, key=acls_key("ns/r", "a-to-b"), value=acls_value([row], 2))       # the newest wins
    p.produce(topic, key=acls_key("ns/other", "a-to-b"), value=acls_value([row], 3))   # another resource's
    p.produce(topic, key=acls_key("ns/r", "gone"), value=acls_value([row], 4))
    p.produce(topic, key=acls_key("ns/r", "gone"), value=None)                          # forgotten
    p.produce(topic, key=b'{"somethingLaterOf":["ns/r","x"]}', value=b'{"v":2}')
    p.flush(30)
    state = read_progress(conf, topic, timeout=30, resource="ns/r")
    assert list(state.latest) == [("a", "t", 0)] and list(state.maps) == [("a", "t", 0)]
    assert state.totals == {("a", "t", 0): 1} and state.generations == {} and state.failovers == {}
    assert state.acls == {("ns/r", "a-to-b"): {"v": 1, "bindings": [row], "atMs": 2}}
    marks_only = read_progress(conf, topic, source_partitions=[], timeout=30)  # what ACL sync reads
    assert marks_only.latest == {} and set(marks_only.acls) == {("ns/r", "a-to-b"), ("ns/other", "a-to-b")}
    tail = ProgressTail(conf, topic, "a", resource="ns/r")
    try:
        assert tail.poll(10) == 1  # only the progress record counts
        assert list(tail.latest()) == [("t", 0)]
    finally:
        tail.close()


def test_a_lanes_own_commit_behind_another_lanes_open_transaction_is_read(kafka_b) -> None:
    """Another lane's transaction opened before this lane's last commit and is still open (that lane was cut off
    by a target outage): a read_committed consumer reaches PARTITION_EOF at the last stable offset, below this
    lane's commit. A lane's read (`log_end`, after its init_transactions) once stopped there and the lane resumed an
    interval early, copying it twice (CI: 20 duplicates after a 70-s target outage); it waits for the open
    transaction to resolve instead."""
    conf = {"bootstrap.servers": kafka_b.bootstrap}
    topic = unique_name("progress-open")
    ensure_progress_topic(conf, topic)
    cut_off = Producer({**conf, "transactional.id": unique_name("cut-off-lane")})
    cut_off.init_transactions(30)
    cut_off.begin_transaction()
    cut_off.produce(topic, partition=0, key=json.dumps(["a", "t", 1]).encode(), value=_value(3))
    cut_off.flush(30)  # on the log, open: the last stable offset stays here
    mine = Producer({**conf, "transactional.id": unique_name("this-lane")})
    mine.init_transactions(30)
    mine.begin_transaction()
    mine.produce(topic, partition=0, key=json.dumps(["a", "t", 0]).encode(), value=_value(9))
    mine.commit_transaction(30)
    resolve = threading.Timer(4.0, lambda: cut_off.abort_transaction(30))
    resolve.start()
    try:
        t0 = time.monotonic()
        # what is decided now (a driver's start reads its marks so, before anything fenced a dead lane): at once
        stable = read_progress(conf, topic, "a", [("t", 0)], timeout=30)
        state = read_progress(conf, topic, "a", [("t", 0)], timeout=30, log_end=True)
        took = time.monotonic() - t0
    finally:
        resolve.join(30)
    assert ("a", "t", 0) not in stable.latest, "the read of what is decided now waited for the open transaction"
    assert ("a", "t", 0) in state.latest, "this lane's committed progress was not read"
    assert state.latest[("a", "t", 0)].next_offset == 10
    assert took >= 3.0, f"read in {took:.1f} s: it cannot have waited for the open transaction"
