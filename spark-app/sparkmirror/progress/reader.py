"""The progress topic on the target: created compacted, and read back read_committed by ONE reader.

`ProgressReader` fills a `ProgressState` (tombstones and resets as `state.py` says) in two ways:
- `read_to_end()`: bounded, up to the end offsets seen when it starts (`read_progress`: a lane's resume map,
  the operator's lag);
- `poll()`: incremental, what was committed since the last call, up to the end offsets seen when it starts
  (`ProgressTail`: the driver's live lag and checkpoints). Not "until the topic goes quiet": lanes commit every
  ~100 ms, so it never does while they copy, and a poll ran to its timeout every time (10-15 s), which spaced
  the driver's checkpoints ~26 s apart whatever their interval.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

import json

from ..replicas import refused
from .record import PROGRESS_TOPIC_CONFIG, ProgressRecord, decode_key, decode_mark_key, progress_key
from .state import MAX_HISTORY, OffsetMap, ProgressState

_NO_LEADER_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}
"""What asking a just-created topic's partition for its offsets answers until a leader is elected; and, from
the consumer's own metadata, `_UNKNOWN_PARTITION` until it learnt the partitions `list_topics` just listed (seen
with the broker's controller 11 s behind on a loaded machine: it ended a mirror at its first progress read)."""
METADATA_EVERY = 5.0     # ProgressReader.poll: seconds between lookups of the topic's partitions
METADATA_TIMEOUT = 10.0  # and the least time one may take
READ_SLICE_S = 0.02      # read_to_end: the longest one consume() waits before the positions are looked at again


def ensure_progress_topic(target_conf: dict[str, str], topic: str, partitions: int = 1,
                          replication_factor: int = -1, timeout: float = 30.0) -> None:
    """Create the compacted progress topic if missing; refuse one that exists but is not compacted, and a
    replication factor the target has too few brokers for (naming the resource's key)."""
    admin = AdminClient(target_conf)
    md = admin.list_topics(timeout=timeout)
    if topic not in md.topics:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                                            config=PROGRESS_TOPIC_CONFIG)], operation_timeout=timeout)[topic]
        try:
            fut.result(timeout=timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise refused(e, admin, topic, replication_factor, "spec.progressTopicReplicationFactor",
                              target_conf.get("bootstrap.servers", "the target"), timeout) or e
        return
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = admin.describe_configs([res])[res].result(timeout=timeout)
    problem = progress_topic_problem(topic, cfg["cleanup.policy"].value)
    if problem:
        raise RuntimeError(problem)


def progress_topic_problem(topic: str, cleanup_policy: str | None) -> str | None:
    """Why an existing progress topic cannot be used (None: it can); `sparkmirror plan` asks the same."""
    if "compact" not in (cleanup_policy or ""):
        return (f"progress topic {topic!r} exists with cleanup.policy={cleanup_policy or ''}; it must be compacted "
                "(cleanup.policy=compact) or progress would be deleted by retention")
    return None


class ProgressReader:
    """Reads the progress topic read_committed into `self.state`, for one source cluster (or all) and, if given,
    only some (topic, partition)s of it; with `resource`, only that resource's progress (and keys written before
    resources were named). Generation marks are read whatever the selection."""

    def __init__(self, target_conf: dict[str, str], topic: str, source_cluster: str | None = None,
                 source_partitions: Iterable[tuple[str, int]] | None = None, purpose: str = "reader",
                 resource: str | None = None) -> None:
        self.topic, self.source_cluster, self.resource = topic, source_cluster, resource
        self.wanted = set(source_partitions) if source_partitions is not None else None
        self.state = ProgressState()
        self.consumer = Consumer({**target_conf, "group.id": f"sparkmirror-progress-{purpose}-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": True, "auto.offset.reset": "earliest",
                                  "fetch.max.bytes": 16 * 1024 * 1024})
        self._target_conf = target_conf
        self._log_ends: Consumer | None = None  # read_uncommitted: see _watermarks
        self._assigned: set[int] = set()
        self._missing = ""
        self._anchors = False
        self._next_metadata = 0.0  # poll(): when to look the partitions up again

    # -- the one core: assignment, consuming, and what a message does to the state
    def _partitions(self, timeout: float) -> list[int] | None:
        """The topic's partitions, None while it does not exist (the first lane creates it)."""
        t = self.consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        if t is None or t.error is not None:
            self._missing = str(t.error) if t is not None else "missing"
            return None
        self._anchors = len(t.partitions) == 1  # anchors need commit order: one partition's log order
        return sorted(t.partitions)

    def _assign(self, partitions: Iterable[int]) -> bool:
        new = [TopicPartition(self.topic, p, -2) for p in partitions if p not in self._assigned]  # -2: beginning
        if new:
            self.consumer.incremental_assign(new)
            self._assigned.update(tp.partition for tp in new)
        return bool(new)

    def _apply(self, msg: Message) -> bool:
        """One committed message into the state; True when it concerns a selected partition."""
        mark = decode_mark_key(msg.key())
        if mark is not None and mark[0] == "anchorOf":  # an older range kept for the offset map
            cluster, topic, partition, resource, _block = mark[1]
            if not self._anchors or msg.value() is None or \
                    not self._selected((cluster, topic, partition), resource or None):
                return False  # (a progress topic of several partitions is not read in commit order)
            self.state.add_anchor(ProgressRecord.decode(progress_key(cluster, topic, partition, resource or None),
                                                        msg.value()))
            return True
        if mark is not None:  # a mark or an ACL record: never progress
            self._mark(*mark, msg.value())
            return False
        k, resource = decode_key(msg.key())
        if not self._selected(k, resource):  # selected by its key: a lane that gains one partition of 10,000
            return False                     # parsed every value of the topic to keep one
        if msg.value() is None:  # a tombstone: progress deliberately reset for this key
            self.state.reset(k)
            return True
        self.state.add(ProgressRecord.decode(msg.key(), msg.value()))
        return True

    def _mark(self, kind: str, of: tuple[str, ...], value: bytes | None) -> None:
        """A mark or ACL record of the selected resource into the state; kinds this version does not know are
        skipped (a later version's)."""
        if not of or (self.resource is not None and of[0] != self.resource):
            return
        if kind == "aclsOf":
            self.state.mark_acls((of[0], of[1]), json.loads(value) if value is not None else None)
        elif kind == "topicOf":
            self.state.mark_topic((of[0], of[1], of[2]), json.loads(value) if value is not None else None)
        elif value is not None and kind == "failoverOf":
            self.state.mark_failover((of[0], of[1], of[2]), json.loads(value))
        elif value is not None and kind == "generationOf":
            v = json.loads(value)
            self.state.mark_generation((of[0], of[1], of[2]), int(v["gen"]), v.get("ids"), bool(v.get("go", True)),
                                       int(v.get("revoked") or 0))

    def _selected(self, k: tuple[str, str, int], resource: str | None) -> bool:
        cluster, topic, partition = k
        return (self.source_cluster is None or cluster == self.source_cluster) and \
            (self.wanted is None or (topic, partition) in self.wanted) and \
            (self.resource is None or resource is None or resource == self.resource)

    def _consume(self, ends: dict[int, int] | None, timeout: float, first_wait: float,
                 until: dict[int, int] | None = None) -> int:
        """Apply committed messages; returns how many concerned selected partitions.

        Bounded (`ends`): until every partition's position reached its end offset; messages at or past it are
        left for the next read; TimeoutError after `timeout`. Following (no `ends`): until every partition
        reached `until` (its end offset when the poll began; a message at or past it is applied too), the topic
        goes quiet (a consume brings nothing, or every partition is at its end) or `timeout` passes.
        """
        bounded = ends is not None
        todo = set(ends) if bounded else set(self._assigned)  # partitions not known to be at their end
        n, wait, deadline = 0, first_wait, time.monotonic() + timeout
        later: dict[int, int] = {}  # partition -> first offset fetched past its end: where the next read starts
        stop_at = ends if bounded else until
        if until is not None:
            todo = {p for p in todo if until.get(p, 0) > 0}  # an empty partition has nothing to wait for
        quiet_since: float | None = None  # following: since when consumes have brought nothing
        while todo:
            if time.monotonic() > deadline:
                if not bounded:
                    break
                raise TimeoutError(f"reading progress topic {self.topic!r} did not reach its end in {timeout:.0f}s "
                                   "(a transaction still open below it, or the cluster slow to answer)")
            if stop_at is not None:
                for tp in self.consumer.position([TopicPartition(self.topic, p) for p in todo]):
                    if tp.offset >= stop_at.get(tp.partition, 0):
                        todo.discard(tp.partition)
                if not todo:
                    break
            # with an end to reach: short waits, the position says when it is done (librdkafka's batch consume
            # returns early only for a full batch, so one 0.5-s wait made every lane start and grow take 0.5 s more)
            asked = time.monotonic()
            msgs = self.consumer.consume(num_messages=10000, timeout=READ_SLICE_S if stop_at is not None else wait)
            if not msgs and not bounded:
                quiet_since = asked if quiet_since is None else quiet_since
                if time.monotonic() - quiet_since >= wait * 0.99:
                    break  # caught up: nothing more committed right now
                continue
            quiet_since, wait = None, 0.3
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # read_committed: the EOF comes at the last stable offset. Below the end offsets it is
                        # another transaction still open (a lane cut off by an outage, a frozen one), and this
                        # lane's own later commits sit past it: wait for it to resolve, as the position says
                        if not bounded or msg.offset() >= ends.get(msg.partition(), 0):
                            todo.discard(msg.partition())
                        continue
                    raise KafkaException(err)
                if bounded:
                    if msg.offset() >= ends.get(msg.partition(), 0):
                        later.setdefault(msg.partition(), msg.offset())
                        todo.discard(msg.partition())
                        continue  # committed after this read began: the next read sees it
                elif until is None or msg.offset() < until.get(msg.partition(), 0) - 1:
                    todo.add(msg.partition())
                else:
                    todo.discard(msg.partition())  # reached the end it began from: what came later waits
                n += self._apply(msg)
        for p, offset in later.items():  # fetched but not applied: a following poll() reads them again
            self.consumer.seek(TopicPartition(self.topic, p, offset))
        return n

    # -- the two ways to read
    def read_to_end(self, timeout: float = 60.0, log_end: bool = False) -> ProgressState:
        """Everything committed up to the end offsets seen now. Not "until EOF": while other lanes keep
        committing small transactions, a read_committed consumer never gets PARTITION_EOF (the open transaction
        always sits at the end); everything below the end offsets is decided once those transactions resolve.

        The end is the last stable offset: what is decided now (a driver starting after a crash reads its marks
        before anything fenced the dead lanes, whose transactions stay open until their timeout). `log_end`:
        the log's end (high watermark) instead, for a lane resuming after its own init_transactions. Another
        lane's transaction may be open below its own later commits (a lane cut off by an outage keeps one until
        it is fenced or times out); stopping at the stable offset, a lane resumed an interval early and copied
        it twice (CI: 20 duplicates after a 70-s target outage). It waits for that transaction to resolve.

        RuntimeError when the topic does not exist (after waiting up to 15 s for a just-created one to appear).
        """
        deadline = time.monotonic() + min(timeout, 15.0)
        while (parts := self._partitions(timeout)) is None and time.monotonic() <= deadline:
            time.sleep(0.2)  # a just-created topic takes a moment to appear in metadata
        if parts is None:
            raise RuntimeError(f"progress topic {self.topic!r} not found on the target: {self._missing}")
        ends = {}
        for p in parts:
            lo, hi = self._watermarks(p, timeout, log_end)
            if hi > lo:
                ends[p] = hi
        if ends:
            self._assign(ends)
            self._consume(ends, timeout, 0.5)
        return self.state

    def _watermarks(self, partition: int, timeout: float, log_end: bool = False) -> tuple[int, int]:
        """A partition's offsets. Its end as this read_committed consumer is told it: the last stable offset;
        `log_end`: the high watermark, which only a read_uncommitted consumer is told.

        A just-created topic's partition has no leader for a moment (NOT_LEADER..., LEADER_NOT_AVAILABLE): asked
        again until `timeout`, like the client does for fetches."""
        asker = self.consumer
        if log_end:
            if self._log_ends is None:
                self._log_ends = Consumer({**self._target_conf, "group.id": f"sparkmirror-progress-ends-"
                                           f"{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                                           "isolation.level": "read_uncommitted"})
            asker = self._log_ends
        deadline = time.monotonic() + timeout
        while True:
            try:
                return asker.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=timeout)
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if err is None or err.code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def poll(self, timeout: float = 10.0) -> int:
        """Read what was committed since the last call, up to the end offsets seen now (or until the topic goes
        quiet, or `timeout`); returns records read.

        The topic's partitions are looked up again at most every METADATA_EVERY seconds once some are assigned,
        with at least METADATA_TIMEOUT: a caller polling every 200 ms (a lane in standby) must neither send a
        metadata request each time nor fail when a loaded broker takes longer than that to answer one."""
        now = time.monotonic()
        if not self._assigned or now >= self._next_metadata:
            self._next_metadata = now + METADATA_EVERY
            parts = self._partitions(max(timeout, METADATA_TIMEOUT))
        else:
            parts = []
        fresh = self._assign(parts or [])
        if not self._assigned:
            return 0
        return self._consume(None, timeout, 2.0 if fresh else 0.3, self._ends_now(timeout))

    def _ends_now(self, timeout: float) -> dict[int, int] | None:
        """The assigned partitions' end offsets now: where a following poll stops. None when a partition does
        not answer in time (the poll then follows until the topic goes quiet or its timeout, as before)."""
        try:
            return {p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout)[1]
                    for p in sorted(self._assigned)}
        except KafkaException:
            return None

    def close(self) -> None:
        self.consumer.close()
        if self._log_ends is not None:
            self._log_ends.close()


def read_progress(target_conf: dict[str, str], topic: str, source_cluster: str | None = None,
                  source_partitions: Iterable[tuple[str, int]] | None = None,
                  timeout: float = 60.0, resource: str | None = None, log_end: bool = False) -> ProgressState:
    """Read the progress topic read_committed up to its end into a ProgressState (`log_end`: see
    `ProgressReader.read_to_end`).

    Call it only after `init_transactions()` of the lane that will use the result: that aborts the lane's own
    open transaction, so what is read here cannot change under the lane any more. Filters by source cluster
    and, if given, by (topic, partition).
    """
    reader = ProgressReader(target_conf, topic, source_cluster, source_partitions, resource=resource)
    try:
        return reader.read_to_end(timeout, log_end)
    finally:
        reader.close()


class ProgressTail(ProgressReader):
    """Follows the progress topic on the target and keeps the offset maps of one source (driver side).

    Shared by the driver's threads (live lag, checkpoints): each holds `lock` while it polls and while it uses
    the maps, which a poll changes in place."""

    def __init__(self, target_conf: dict[str, str], topic: str, source_cluster: str,
                 resource: str | None = None, max_history: int | None = MAX_HISTORY) -> None:
        super().__init__(target_conf, topic, source_cluster, purpose="tail", resource=resource)
        self.state.max_history = max_history or MAX_HISTORY  # None: not sized yet (Driver sizes it)
        self.lock = threading.RLock()

    def maps(self) -> dict[tuple[str, int], OffsetMap]:
        """Offset maps of the partitions whose progress is held (not anchors left of a reset progress)."""
        return {(t, p): m for (c, t, p), m in self.state.maps.items() if (c, t, p) in self.state.latest}

    def latest(self) -> dict[tuple[str, int], ProgressRecord]:
        return {(t, p): r for (_c, t, p), r in self.state.latest.items()}

    def totals(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(records, bytes) mirrored per source partition, as read so far (since the partition's last reset)."""
        return self.state.resume_totals(self.source_cluster)
