"""The mirror's position as a consumer group on the source (opt-in: the mirror's `sourceOffsetsGroup`), so the
tools people already watch lag with (`kafka-consumer-groups.sh --describe`, Burrow, Kafka lag exporters) show
the mirror's lag per partition, as they showed the legacy MirrorMaker's.

Only a report: the lane's position stays in the progress topic on the target (exactly-once), and nothing reads
this group back. After an interval is committed there, its next offsets are committed to the group
asynchronously from a consumer of its own that never joins the group (no subscription: a standalone commit,
which the broker refuses while members of a group of that name are active). A group that consumers ever
joined (a user's application, even stopped) is not written at all: the group is described first, without
waiting for the answer, and only a group that is new or only ever committed this way is reported to. At most
one commit a second per lane (the latest offsets); a refusal (authorization, a live group) is logged once per
lane and kept in `refused`. Nothing here blocks or fails the copy; only the lane's close waits (up to
CLOSE_SECONDS) to send its last offsets."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from ..progress import ProgressRecord
from .admins import kept_admin
from .context import LaneContext
from .reader import close_consumer
from .shares import PartitionKey

log = logging.getLogger(__name__)

EVERY_SECONDS = 1.0
"""Lag tools sample every 10-60 s; a commit per interval (10 a second per lane at 100 ms) would only load the
group coordinator."""

CLOSE_SECONDS = 10.0
"""How long a lane's close waits for the group's description and the last commit's answer."""

REFUSALS = (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.INVALID_GROUP_ID,
            KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID, KafkaError.UNSUPPORTED_VERSION)
"""Answers that say the group is not this mirror's to commit (or not allowed): logged once, at WARNING."""

_LOGGED: set[tuple[str, str]] = set()  # (lane tid, group): refusals logged once per lane in this process


class GroupReport:
    """Commits a lane's committed next offsets to the source group named on its mirror."""

    def __init__(self, ctx: LaneContext, group: str) -> None:
        self.ctx, self.group = ctx, group
        self.consumer: Consumer | None = None
        self.ours: Future | bool | None = None  # the group is this mirror's to write: the description asked
        self.pending: dict[PartitionKey, int] = {}
        self.last = 0.0
        self.commits = 0  # acknowledged by the group coordinator
        self.inflight = 0  # commits sent and not answered yet
        self.refused = ""  # the last refusal, for the lane's log and tests

    @classmethod
    def of(cls, ctx: LaneContext) -> GroupReport | None:
        group = ctx.mirror.sourceOffsetsGroup
        return cls(ctx, group) if group else None

    def committed(self, recs: list[ProgressRecord]) -> None:
        """An interval with these progress records is committed on the target."""
        for rec in recs:
            self.pending[(rec.source_topic, rec.partition)] = rec.next_offset
        if time.monotonic() - self.last >= EVERY_SECONDS:
            self.send()

    def send(self) -> None:
        """Queue the commit of the pending offsets (never waits for it) and serve earlier commits' answers."""
        if self.pending and self._ours():
            self.last = time.monotonic()
            offsets = [TopicPartition(t, p, o) for (t, p), o in self.pending.items()]
            self.pending = {}
            try:
                self._client().commit(offsets=offsets, asynchronous=True)
                self.inflight += 1
            except (KafkaException, RuntimeError) as e:
                self._refusal(str(e))
        if self.consumer is not None:
            self.consumer.poll(0)  # answers arrive in on_commit, served here

    def close(self) -> None:
        """The lane's clients go: the last offsets are sent and their answer awaited, for up to CLOSE_SECONDS in
        all (a new cluster's group coordinator takes a moment; a source that is away never answers). The consumer
        is closed in a thread of its own: librdkafka's close waits for commits still unanswered."""
        until = time.monotonic() + CLOSE_SECONDS
        while self.pending and not isinstance(self.ours, bool) and time.monotonic() < until:
            if not self._ours():
                time.sleep(0.05)
        self.send()
        consumer, self.consumer = self.consumer, None
        if consumer is None:
            return
        while self.inflight and time.monotonic() < until:
            consumer.poll(0.05)
        threading.Thread(target=close_consumer, args=(consumer,), name=f"report-close-{self.ctx.tid}", daemon=True).start()

    def _ours(self) -> bool:
        """Whether the group may be written: described once (the answer is awaited by later calls, never here);
        a group consumers joined is a user's and is never written."""
        if isinstance(self.ours, bool):
            return self.ours
        if self.ours is None:
            try:
                self.ours = kept_admin(self.ctx.source_conf).describe_consumer_groups(
                    [self.group], request_timeout=30)[self.group]
            except (KafkaException, RuntimeError, ValueError) as e:
                self._refusal(f"describing it failed: {e}")
                self.ours = None
                return False
        if not self.ours.done():
            return False
        try:
            desc = self.ours.result()
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                self.ours = True
            elif err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                self.ours = True  # may commit without describing: the broker still refuses a live group
            else:  # transient: asked again at the next send
                self.ours = None
            return bool(self.ours)
        if desc.members or not (desc.is_simple_consumer_group or desc.state == ConsumerGroupState.DEAD):
            self._refusal(f"it is a consumer group of applications (state {desc.state.name}, "
                          f"{len(desc.members)} members), not the mirror's own: name another one")
            self.ours = False
            return False
        self.ours = True
        return True

    def _client(self) -> Consumer:
        if self.consumer is None:
            self.consumer = Consumer({
                **self.ctx.source_conf, "group.id": self.group, "client.id": f"{self.ctx.tid}.report",
                "enable.auto.commit": False, "enable.auto.offset.store": False, "on_commit": self._on_commit})
        return self.consumer

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self.inflight = max(0, self.inflight - 1)
        errors = [err] if err is not None else [tp.error for tp in partitions if tp.error is not None]
        if not errors:
            self.commits += 1
            return
        first = errors[0]
        if first.code() in REFUSALS:
            self._refusal(f"{first.name()}: {first.str()}")
        else:  # a coordinator moving, the source away: the next commit carries these offsets again
            for tp in partitions:
                self.pending.setdefault((tp.topic, tp.partition), tp.offset)
            log.debug("lane %s: committing to source group %r failed, retried with the next: %s",
                      self.ctx.tid, self.group, first.str())

    def _refusal(self, why: str) -> None:
        self.refused = why
        key = (self.ctx.tid, self.group)
        if key not in _LOGGED:
            _LOGGED.add(key)
            log.warning("mirror %r lane %d: the source refused its position in consumer group %r (%s); lag "
                        "tools will not show this lane, the copy goes on", self.ctx.mirror.name, self.ctx.lane,
                        self.group, why)
