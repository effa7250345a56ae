"""The batch path's target writer (issue 36): a transactional (or idempotent) producer on the wire for one lane,
producing fetched batches as bytes under the lane's producer id, epoch and per-partition sequence.

InitProducerId with the lane's transactional id bumps its epoch at the coordinator, so an older copy of the lane
(a librdkafka producer with the same transactional.id included) is fenced exactly as `init_transactions` fences
it today. Per transaction: AddPartitionsToTxn for partitions new to it, Produce (acks=all) with the rewritten
batches, EndTxn. The produce result is each batch's target base offset, so the offset map stays exact.
Produce requests are `protocol`'s, on `Wire.connection`s: each carries one batch of every partition the leader
has one for, and up to 5 are in flight per leader connection (a window: a request goes out as an answer comes
in). A batch's bytes are copied once, from the Fetch response into the Produce request, rewritten there.
Leader moves, broker restarts and lost answers are retried under the batches' own sequences (`produce`); the
coordinator's requests are retried as the Java producer does. The progress records go in the same transaction
as batches of their own (batchcommit.py).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import kafka.errors as kerrors
from kafka.protocol.producer import InitProducerIdRequest

from ..wire.cluster import Leader, Wire
from ..wire.connection import BrokerConnection, WireError, check
from . import protocol
from .batches import Batch
from .errors import LaneFenced
from .forwarding import first_not_as_is, sequences
from .txnholder import taken_over

log = logging.getLogger(__name__)
PartitionKey = tuple[str, int]
IN_FLIGHT = 5
"""Produce requests sent at once per leader: the broker dedupes the last 5 batches per producer and partition."""
WAKE_FOR = 3
"""Answers waited for at once when the window is full: the leader keeps the rest of the window to work on while
the copy thread sends the next requests."""
_FENCED = {"ProducerFencedError", "InvalidProducerEpochError", "TransactionCoordinatorFencedError"}


@dataclass(slots=True)
class _Leader:
    """One leader's share of a `produce`: its partitions, the next round to send, the rounds in flight."""
    conn: BrokerConnection
    keys: list[PartitionKey]
    rounds: int
    first: dict[PartitionKey, int]  # each partition's first unacknowledged batch
    upto: dict[PartitionKey, int]  # how many of each partition's batches this delivery sends
    next_round: int = 0
    in_flight: deque[tuple[int, list[PartitionKey]]] = field(default_factory=deque)  # (round, its partitions)
    failed: WireError | None = None  # the attempt on this leader ended: nothing more is sent to it
    refused: set[PartitionKey] = field(default_factory=set)  # partitions with a batch refused this attempt


class PartitionRefused(WireError):
    """A Produce error of one partition's batch: which partition (on the target) and which of the batches
    `produce` was given for it (0-based), so a refusal can name the source record it came from."""

    def __init__(self, error: type[kerrors.KafkaError], what: str, partition: PartitionKey, batch: int) -> None:
        super().__init__(error, what)
        self.partition, self.batch = partition, batch


class CommitOutcomeUnknown(WireError):
    """An EndTxn commit refused while the id is still this lane's (txnholder.py): fenced by the coordinator's own
    abort of a timed-out transaction, or answered with an error that neither fences nor is retriable. Waited out
    as a cluster's moment (the lane starts again from its committed progress), never the mirror's end."""

    def __init__(self, cause: WireError) -> None:
        super().__init__(cause.error, "EndTxn (the commit did not take: copying again from the committed progress)")

    @property
    def retriable(self) -> bool:
        return True


def _fenced(e: WireError) -> bool:
    return e.error.__name__ in _FENCED


class BatchWriter:
    """One lane's producer on the target: `begin`, `produce`, `commit`/`abort`."""

    def __init__(self, wire: Wire, transactional_id: str | None, transaction_timeout_ms: int = 60_000,
                 timeout_ms: int = 30_000, delivery_timeout_ms: int = 120_000) -> None:
        self.wire, self.tid, self.timeout_ms = wire, transactional_id, timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retries = 0  # attempts that ended in a retriable error, counted for metrics and tests
        self.txn_timeout_ms = transaction_timeout_ms
        self.producer_id, self.epoch = -1, -1
        self.sequences: dict[PartitionKey, int] = {}
        self._confirmed: set[PartitionKey] = set()  # partitions that acknowledged a batch of this producer id
        self._in_txn: set[PartitionKey] = set()
        self._coordinator: int | None = None
        self._leaders: dict[PartitionKey, Leader] = {}
        self._stale = False  # an abort left sequences the broker may not have: a new epoch before the next batch

    @property
    def transactional(self) -> bool:
        return self.tid is not None

    @property
    def coordinator(self) -> int | None:
        """The node id of the broker coordinating this writer's transactions (None: none asked yet, or not
        transactional); it changes when the coordinator moves. Read only: the writer finds it itself."""
        return self._coordinator

    def init(self, retry_for: float = 30.0, bump: bool = False) -> None:
        """Take the lane's producer id (fencing older copies of the lane when transactional). `bump`: a new epoch
        of the id this writer holds (after an abort, so sequences start again), refused as fenced when a newer
        copy took the id over meanwhile (the request names the id and epoch it bumps, KIP-360)."""
        deadline = time.monotonic() + retry_for
        pid, epoch = (self.producer_id, self.epoch) if bump and self.producer_id >= 0 else (-1, -1)
        while True:
            try:
                self._coordinator = self.wire.transaction_coordinator(self.tid) if self.tid else None
                resp = self.wire.call(InitProducerIdRequest(
                    transactional_id=self.tid, transaction_timeout_ms=self.txn_timeout_ms, producer_id=pid,
                    producer_epoch=epoch, max_version=4), self._coordinator)
                check(resp.error_code, f"InitProducerId for {self.tid}")
                break
            except WireError as e:  # CONCURRENT_TRANSACTIONS while the older copy's transaction is aborted
                if _fenced(e):
                    self._raise(e)
                if not e.retriable or time.monotonic() > deadline:
                    raise
                if e.error is kerrors.NodeNotReadyError:  # the coordinator's broker is away or just back
                    try:
                        self.wire.refresh_brokers()
                    except WireError:
                        pass
                time.sleep(0.1)
        self._stale = False
        self.producer_id, self.epoch = resp.producer_id, resp.producer_epoch
        self.sequences.clear()
        self._confirmed.clear()
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

        def request(version: int, correlation: int, client_id: str) -> bytearray:
            return protocol.add_partitions_to_txn(version, correlation, client_id, self.tid or "", self.producer_id,
                                                  self.epoch, topics)

        def answer(body: memoryview, version: int) -> None:
            for topic, partition, error in protocol.parse_add_partitions_to_txn(body, version):
                check(error, f"AddPartitionsToTxn {topic}[{partition}]")

        self._coordinated(protocol.API_ADD_PARTITIONS_TO_TXN, request, answer, "AddPartitionsToTxn")
        self._in_txn.update(new)

    def produce(self, batches: dict[PartitionKey, list[Batch]]) -> dict[PartitionKey, list[int]]:
        """Produce each partition's batches in order, sequences continuing; the target base offset each batch got,
        in the order given (its last is that plus its record count - 1: the offset map). The keys are the target's
        partitions.

        Produce v3+ takes exactly one batch per partition per request (the broker refuses more with
        INVALID_RECORD), so the i-th batch of every partition on a leader goes in that leader's i-th request,
        and up to `IN_FLIGHT` of those requests are sent at once on the connection (the broker handles a
        connection's requests in order and keeps sequence state for 5 batches per producer and partition).

        Retries: every batch's sequence is fixed before its first send. A retriable refusal (NOT_LEADER, ...,
        and the OUT_OF_ORDER_SEQUENCE of the batches behind it) or a broken connection ends the attempt on that
        leader; once every answer in flight is read, the leaders are asked again and each partition's
        unacknowledged batches are sent again, in order, under the same sequences: the broker writes a batch
        it lacks and answers a duplicate of one of its last 5 with the offset it gave it, so nothing is lost or
        written twice. Until `delivery_timeout_ms`; then the last error is raised."""
        batches = {k: bs for k, bs in batches.items() if bs}
        if self._stale and batches:
            self.init(bump=True)
        for key, bs in batches.items():
            if (i := first_not_as_is(bs)) >= 0:  # the caller rebuilds these first (batchtarget.py, rebuild.py)
                b = bs[i]
                why = b.unforwardable()
                raise ValueError(f"{key[0]}[{key[1]}] batch at {b.base_offset} cannot forward: "
                                 f"{why.value if why else 'not a v2 batch'}")
        self._add_partitions(list(batches))
        seqs: dict[PartitionKey, list[int]] = {}
        for key, bs in batches.items():
            seqs[key], self.sequences[key] = sequences(bs, self.sequences.get(key, 0))
        out: dict[PartitionKey, list[int]] = {k: [] for k in batches}
        # A broker with no state for this producer on a partition takes a batch of any sequence: if the first
        # batch there were refused (a leader just elected) while the next was taken, the retry of the first would
        # land behind it. So a partition's first batch under this producer id goes alone; after it, the broker
        # refuses what is out of order.
        fresh = {k: 1 for k in batches if k not in self._confirmed}
        if fresh:
            self._deliver(batches, seqs, out, fresh)
        self._deliver(batches, seqs, out, {k: len(bs) for k, bs in batches.items()})
        return out

    def _deliver(self, batches: dict[PartitionKey, list[Batch]], seqs: dict[PartitionKey, list[int]],
                 out: dict[PartitionKey, list[int]], upto: dict[PartitionKey, int]) -> None:
        """Attempts until each partition in `upto` has its first `upto[key]` batches acknowledged."""
        deadline, backoff = time.monotonic() + self.delivery_timeout_ms / 1000, 0.05
        while pending := [k for k, n in upto.items() if len(out[k]) < n]:
            try:
                if not set(pending) <= set(self._leaders):
                    self._leaders = self.wire.leaders({t for t, _ in pending} | {t for t, _ in self._leaders})
                unlisted = sorted(set(pending) - set(self._leaders))
                if unlisted:  # a partition just added (a lane growing): the broker answering has not heard yet
                    raise WireError(kerrors.UnknownTopicOrPartitionError, f"no leader of {unlisted} yet")
                failed = self._attempt(pending, batches, seqs, out, upto)
            except WireError as e:  # the metadata request itself
                if not e.retriable:
                    self._raise(e)
                failed = e
            if failed is None:
                continue
            self.retries += 1
            if time.monotonic() + backoff > deadline:
                self._raise(failed)
            (log.info if backoff == 0.05 else log.debug)(
                "producer %s: %s; sending the unacknowledged batches again", self.tid, failed)
            self._leaders = {}
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _attempt(self, pending: list[PartitionKey], batches: dict[PartitionKey, list[Batch]],
                 seqs: dict[PartitionKey, list[int]], out: dict[PartitionKey, list[int]],
                 upto: dict[PartitionKey, int]) -> WireError | None:
        """Send every pending partition's unacknowledged batches once, through each leader's window; the first
        retriable error, or None when every batch was acknowledged. Other errors raise."""
        per_node: dict[int, list[PartitionKey]] = {}
        for key in sorted(pending):  # a topic's partitions together, as a request lists them
            per_node.setdefault(self._leaders[key].node_id, []).append(key)
        leaders: dict[int, _Leader] = {}
        failed: WireError | None = None
        for node, keys in per_node.items():
            try:
                conn = self.wire.connection(node)
            except WireError as e:
                if not e.retriable:
                    self._raise(e)
                failed = failed or e
                continue
            first = {k: len(out[k]) for k in keys}
            leaders[node] = _Leader(conn, keys, max(upto[k] - first[k] for k in keys), first=first, upto=upto)
        try:
            while True:
                for st in leaders.values():
                    while st.failed is None and len(st.in_flight) < IN_FLIGHT and st.next_round < st.rounds:
                        self._send_round(st, batches, seqs)
                busy = [st for st in leaders.values() if st.in_flight]
                if not busy:
                    break
                for st in busy:
                    # woken once for the first answers of the window, not once an answer: every wake-up costs
                    # the copy thread more than reading an answer does
                    st.conn.wait(sum(protocol.produce_answer_floor(len(keys))
                                     for _, keys in list(st.in_flight)[:WAKE_FOR]))
                    self._receive_round(st, batches, out)
                    while st.in_flight and st.conn.ready():
                        self._receive_round(st, batches, out)
        except WireError as e:  # not retriable: the answers left unread put the connections out of step
            for node, st in leaders.items():
                if st.in_flight:
                    self.wire.drop(node)
            self._leaders = {}
            self._raise(e)
        for st in leaders.values():
            failed = failed or st.failed
        return failed

    def _send_round(self, st: _Leader, batches: dict[PartitionKey, list[Batch]],
                    seqs: dict[PartitionKey, list[int]]) -> None:
        """The leader's next request: the next unsent batch of each of its partitions that has one."""
        r = st.next_round
        keys = [k for k in st.keys if st.first[k] + r < st.upto[k]]
        conn = st.conn
        version = conn.version(protocol.API_PRODUCE, protocol.PRODUCE_VERSIONS, "Produce")
        correlation = conn.next_id()
        first = st.first
        req = protocol.produce_request(version, correlation, conn.client_id, self.tid, -1, self.timeout_ms, keys,
                                       [batches[k][first[k] + r] for k in keys], self.producer_id, self.epoch,
                                       [seqs[k][first[k] + r] for k in keys], self.transactional)
        try:
            conn.send(req, correlation, version >= protocol.PRODUCE_FLEXIBLE)
        except WireError as e:  # the connection broke: what was in flight on it is unanswered
            st.failed = e
            st.in_flight.clear()
            return
        st.in_flight.append((r, keys))
        st.next_round += 1

    def _receive_round(self, st: _Leader, batches: dict[PartitionKey, list[Batch]],
                       out: dict[PartitionKey, list[int]]) -> None:
        r, keys = st.in_flight[0]
        try:
            version = st.conn.version(protocol.API_PRODUCE, protocol.PRODUCE_VERSIONS, "Produce")
            answered = st.conn.answer(protocol.parse_produce, version, small=True)
        except WireError as e:
            if not e.retriable:
                raise
            st.failed = e
            st.in_flight.clear()
            return
        st.in_flight.popleft()
        if len(answered) != len(keys):
            raise WireError(kerrors.CorrelationIdError, f"Produce of {len(keys)} partitions: {len(answered)} answers")
        for topic, partition, error_code, base_offset, error_message in answered:
            key = (topic, partition)
            if error_code:
                e = PartitionRefused(kerrors.for_code(error_code), f"Produce {topic}[{partition}]" +
                                     (f" ({error_message})" if error_message else ""), key, st.first[key] + r)
                behind = key in st.refused and e.error.__name__ == "OutOfOrderSequenceNumberError"
                if not (e.retriable or behind):
                    raise e
                st.refused.add(key)  # its later batches in flight are refused too: all sent again
                st.failed = st.failed or e
                continue
            if key in st.refused:
                continue  # behind a refused batch of its partition: sent again, answered as a duplicate then
            done = out[key]
            if len(done) >= len(batches[key]):  # an answer for a batch never sent: the connection is out of step
                raise WireError(kerrors.CorrelationIdError, f"Produce {topic}[{partition}]: more answers than batches")
            done.append(base_offset)
            self._confirmed.add(key)

    def _coordinated(self, api: int, request: Callable[[int, int, str], bytearray],
                     answer: Callable[[memoryview, int], None], what: str) -> None:
        """A request to the transaction coordinator (`request(version, correlation id, client id)`, its answer
        checked by `answer(body, version)`), on the hot-path connection to it (`protocol`'s encoding: see there
        why), sent again while it answers retriably (loading, moved, CONCURRENT_TRANSACTIONS while markers of the
        last EndTxn are written) or cannot be reached, until `delivery_timeout_ms`; asked for again when it
        moved. Fencing raises `LaneFenced`."""
        deadline, backoff = time.monotonic() + self.delivery_timeout_ms / 1000, 0.002
        while True:
            try:
                if self._coordinator is None:
                    raise WireError(kerrors.CoordinatorNotAvailableError, f"{what}: no coordinator known")
                conn = self.wire.connection(self._coordinator)
                version = protocol.pick(protocol.TXN_VERSIONS, conn.versions.get(api), what)
                correlation = conn.next_id()
                conn.send(request(version, correlation, conn.client_id), correlation,
                          version >= protocol.TXN_FLEXIBLE)
                conn.answer(answer, version, small=True)
                return
            except WireError as e:
                if not e.retriable or time.monotonic() + backoff > deadline:
                    self._raise(e)
                if e.error.__name__ in ("NotCoordinatorError", "CoordinatorNotAvailableError",
                                        "KafkaConnectionError", "NodeNotReadyError", "RequestTimedOutError",
                                        "LeaderNotAvailableError"):
                    try:  # where it is now, and the brokers again: a coordinator back from a restart included
                        self.wire.refresh_brokers()
                        self._coordinator = self.wire.transaction_coordinator(self.tid or "")
                    except WireError:
                        pass
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.5)

    def end(self, commit: bool) -> None:
        """Commit or abort the open transaction (nothing to do when no partition joined it). A retry of an
        EndTxn the coordinator already completed is answered as done."""
        if not commit:
            self._stale = True  # batches of the aborted transaction may never have reached the broker
        if not self.transactional or not self._in_txn:
            return
        try:
            self._coordinated(
                protocol.API_END_TXN,
                lambda version, correlation, client_id: protocol.end_txn(
                    version, correlation, client_id, self.tid or "", self.producer_id, self.epoch, commit),
                lambda body, version: check(protocol.parse_end_txn(body, version), "EndTxn"), "EndTxn")
        except (WireError, LaneFenced) as e:
            cause = e if isinstance(e, WireError) else e.__cause__
            if not commit or not isinstance(cause, WireError) or cause.retriable:
                raise
            # fenced, or neither fenced nor retriable: whether a newer copy took the id over says which
            # (txnholder.py). Stop if it did; else (the coordinator aborted a timed-out transaction, or the
            # outcome is unknown) the lane starts again from its committed progress.
            if self._moved_on():
                raise e if isinstance(e, LaneFenced) else LaneFenced(
                    f"transactional id {self.tid} was taken over: {e}") from e
            raise CommitOutcomeUnknown(cause) from e
        finally:
            self._in_txn.clear()

    def commit(self) -> None:
        self.end(True)

    def _moved_on(self) -> bool:
        """Whether another producer took the lane's id from this one (txnholder.py); False when the coordinator
        cannot say now (the lane asks again before its next start)."""
        try:
            return taken_over(self.wire, self.tid or "", self.producer_id, self.epoch)
        except WireError as e:
            log.info("transactional id %s: who holds it is not known now (%s)", self.tid, e)
            return False

    def flush(self, _timeout: float = 0.0) -> int:
        """Batches still unacknowledged: none, `produce` returns once every batch it sent was (the commit
        protocols' `producer.flush` contract, see committer.py)."""
        return 0

    def abort(self) -> None:
        self.end(False)
