"""The batch path's target writer (issue 36): a transactional (or idempotent) producer on the wire for one lane,
producing fetched batches as bytes under the lane's producer id, epoch and per-partition sequence.

InitProducerId with the lane's transactional id bumps its epoch at the coordinator, so an older copy of the lane
(a librdkafka producer with the same transactional.id included) is fenced exactly as `init_transactions` fences
it today. Per transaction: AddPartitionsToTxn for partitions new to it, Produce (acks=all) with the rewritten
batches, EndTxn. The produce result gives each batch's target base offset, so the offset map stays exact.
Produce requests are `protocol`'s, on `Wire.connection`s: each carries one batch of every partition the leader
has one for, and up to 5 are in flight per leader connection (a window: a request goes out as an answer comes
in). A batch's bytes are copied once, from the Fetch response into the Produce request, rewritten there. Not yet:
retries of a produce whose answer was lost or refused retriably (they need the broker's 5-batch sequence window
tracked; today such an error is raised, and the connections it was in flight on are dropped), the progress
records in the same transaction.
"""
from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import kafka.errors as kerrors
from kafka.protocol.producer import AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest

from . import protocol
from .batches import Batch, rewrite
from .connection import BrokerConnection
from .errors import LaneFenced
from .wire import TXN_MAX_VERSION, Leader, Wire, WireError, check

PartitionKey = tuple[str, int]
IN_FLIGHT = 5
"""Produce requests sent at once per leader: the broker dedupes the last 5 batches per producer and partition."""
WAKE_FOR = 3
"""Answers waited for at once when the window is full: the leader keeps the rest of the window to work on while
the copy thread sends the next requests."""
_FENCED = {"ProducerFencedError", "InvalidProducerEpochError", "TransactionCoordinatorFencedError"}


@dataclass(slots=True)
class Written:
    """Where a source batch landed: its target partition's offsets first..last (as the offset map records)."""
    source_base_offset: int
    target_base_offset: int
    record_count: int

    @property
    def target_last_offset(self) -> int:
        return self.target_base_offset + self.record_count - 1


@dataclass(slots=True)
class _Leader:
    """One leader's share of a `produce`: its partitions, the next round to send, the rounds in flight."""
    conn: BrokerConnection
    keys: list[PartitionKey]
    rounds: int
    next_round: int = 0
    in_flight: deque[list[PartitionKey]] = field(default_factory=deque)


def _fenced(e: WireError) -> bool:
    return e.error.__name__ in _FENCED


class BatchWriter:
    """One lane's producer on the target: `begin`, `produce`, `commit`/`abort`."""

    def __init__(self, wire: Wire, transactional_id: str | None, transaction_timeout_ms: int = 60_000,
                 timeout_ms: int = 30_000) -> None:
        self.wire, self.tid, self.timeout_ms = wire, transactional_id, timeout_ms
        self.txn_timeout_ms = transaction_timeout_ms
        self.producer_id, self.epoch = -1, -1
        self.sequences: dict[PartitionKey, int] = {}
        self._in_txn: set[PartitionKey] = set()
        self._coordinator: int | None = None
        self._leaders: dict[PartitionKey, Leader] = {}

    @property
    def transactional(self) -> bool:
        return self.tid is not None

    def init(self, retry_for: float = 30.0) -> None:
        """Take the lane's producer id (fencing older copies of the lane when transactional)."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                self._coordinator = self.wire.transaction_coordinator(self.tid) if self.tid else None
                resp = self.wire.call(InitProducerIdRequest(
                    transactional_id=self.tid, transaction_timeout_ms=self.txn_timeout_ms, producer_id=-1,
                    producer_epoch=-1, max_version=4), self._coordinator)
                check(resp.error_code, f"InitProducerId for {self.tid}")
                break
            except WireError as e:  # CONCURRENT_TRANSACTIONS while the older copy's transaction is aborted
                if not e.retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.producer_id, self.epoch = resp.producer_id, resp.producer_epoch
        self.sequences.clear()
        self._in_txn.clear()

    def _raise(self, e: WireError) -> None:
        if _fenced(e):
            raise LaneFenced(f"transactional id {self.tid} was taken over: {e}") from e
        raise e

    def _add_partitions(self, keys: Sequence[PartitionKey]) -> None:
        new = sorted(set(keys) - self._in_txn)
        if not self.transactional or not new:
            return
        topics: dict[str, list[int]] = {}
        for t, p in new:
            topics.setdefault(t, []).append(p)
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in topics.items()], max_version=TXN_MAX_VERSION)
        deadline = time.monotonic() + self.timeout_ms / 1000
        backoff = 0.002
        while True:
            resp = self.wire.call(req, self._coordinator)
            try:
                check(resp.error_code, "AddPartitionsToTxn")
                for t in resp.results_by_topic_v3_and_below:
                    for p in t.results_by_partition:
                        check(p.partition_error_code, f"AddPartitionsToTxn {t.name}[{p.partition_index}]")
                break
            except WireError as e:
                if not e.retriable or time.monotonic() > deadline:
                    self._raise(e)
                # CONCURRENT_TRANSACTIONS: the previous EndTxn's markers are still being written, for a few ms
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.05)
        self._in_txn.update(new)

    def produce(self, batches: dict[PartitionKey, list[Batch]]) -> dict[PartitionKey, list[Written]]:
        """Produce each partition's batches in order, sequences continuing; the target offsets each batch got.
        The topics on the target bear the source's names and partitions.

        Produce v3+ takes exactly one batch per partition per request (the broker refuses more with
        INVALID_RECORD), so the i-th batch of every partition on a leader goes in that leader's i-th request,
        and up to `IN_FLIGHT` of those requests are sent at once on the connection (the broker handles a
        connection's requests in order and keeps sequence state for 5 batches per producer and partition)."""
        batches = {k: bs for k, bs in batches.items() if bs}
        for key, bs in batches.items():
            for b in bs:
                if (why := b.unforwardable()) is not None:  # the rebuild path is a later step
                    raise ValueError(f"{key[0]}[{key[1]}] batch at {b.base_offset} cannot forward: {why.value}")
        self._add_partitions(list(batches))
        if not set(batches) <= set(self._leaders):
            self._leaders = self.wire.leaders({t for t, _ in batches} | {t for t, _ in self._leaders})
        per_node: dict[int, list[PartitionKey]] = {}
        for key in sorted(batches):  # a topic's partitions together, as a request lists them
            per_node.setdefault(self._leaders[key].node_id, []).append(key)
        out: dict[PartitionKey, list[Written]] = {k: [] for k in batches}
        leaders: dict[int, _Leader] = {}
        try:
            for node, keys in per_node.items():
                leaders[node] = _Leader(self.wire.connection(node), keys, max(len(batches[k]) for k in keys))
            while True:
                for st in leaders.values():
                    while len(st.in_flight) < IN_FLIGHT and st.next_round < st.rounds:
                        self._send_round(st, batches)
                busy = [st for st in leaders.values() if st.in_flight]
                if not busy:
                    break
                for st in busy:
                    # woken once for the first answers of the window, not once an answer: every wake-up costs
                    # the copy thread more than reading an answer does
                    st.conn.wait(sum(protocol.produce_answer_floor(len(keys))
                                     for keys in list(st.in_flight)[:WAKE_FOR]))
                    self._receive_round(st, batches, out)
                    while st.in_flight and st.conn.ready():
                        self._receive_round(st, batches, out)
        except WireError as e:
            for node, st in leaders.items():
                if st.in_flight or st.next_round < st.rounds:
                    self.wire.drop(node)  # answers left unread: the connection is out of step
            self._leaders = {}  # a leader moved, perhaps: asked again before the next produce
            self._raise(e)
        return out

    def _send_round(self, st: _Leader, batches: dict[PartitionKey, list[Batch]]) -> None:
        """The leader's next request: batch number `st.next_round` of each of its partitions that has one."""
        i = st.next_round
        keys = [k for k in st.keys if i < len(batches[k])]
        conn = st.conn
        version, correlation = conn.produce_version, conn.next_id()
        req = protocol.ProduceBuilder(version, correlation, conn.client_id, self.tid, -1, self.timeout_ms,
                                      Counter(t for t, _ in keys))
        for key in keys:
            b = batches[key][i]
            seq = self.sequences.get(key, 0)
            rewrite(b, self.producer_id, self.epoch, seq, self.transactional,
                    into=req.partition(key[0], key[1], len(b.raw)))
            self.sequences[key] = (seq + b.record_count) & 0x7FFFFFFF
        conn.send(req.done(), correlation, version >= protocol.PRODUCE_FLEXIBLE)
        st.in_flight.append(keys)
        st.next_round += 1

    def _receive_round(self, st: _Leader, batches: dict[PartitionKey, list[Batch]],
                       out: dict[PartitionKey, list[Written]]) -> None:
        keys = st.in_flight.popleft()
        answered = protocol.parse_produce(st.conn.receive(small=True), st.conn.produce_version)
        if len(answered) != len(keys):
            raise WireError(kerrors.CorrelationIdError, f"Produce of {len(keys)} partitions: {len(answered)} answers")
        for p in answered:
            key = (p.topic, p.partition)
            check(p.error_code, f"Produce {p.topic}[{p.partition}]: {p.error_message}")
            b = batches[key][len(out[key])]
            out[key].append(Written(b.base_offset, p.base_offset, b.record_count))

    def end(self, commit: bool) -> None:
        """Commit or abort the open transaction (nothing to do when no partition joined it)."""
        if not self.transactional or not self._in_txn:
            return
        resp = self.wire.call(EndTxnRequest(transactional_id=self.tid, producer_id=self.producer_id,
                                            producer_epoch=self.epoch, committed=commit,
                                            max_version=TXN_MAX_VERSION), self._coordinator)
        try:
            check(resp.error_code, "EndTxn")
        except WireError as e:
            self._raise(e)
        self._in_txn.clear()

    def commit(self) -> None:
        self.end(True)

    def abort(self) -> None:
        self.end(False)
