"""Consumer-group offset translation (driver side): MM2 checkpoints and, optionally, group offset sync.

For every consumer group of the source that the mirror's `groups`/`groupsExclude` select, the committed
source offsets of mirrored partitions are translated into target offsets with the progress topic's dense
offset map (`progress.OffsetMap.translate`): a group committed at source offset `o` continues at the target offset of
the record that was `o`, or just past the end of the mapped range when `o` is past what has been mirrored
so far. This is exact, not MM2's approximate offset-syncs: a consumer that fails over to the target repeats
nothing and skips nothing. Inside a range whose source side has gaps (aborted records, transaction markers,
records filtered as loops) the position is found by counting that range's records on the source
(`sourcecounter.SourceCounter`); a range is one transaction, so this reads at most ~100 ms of data.

Each translation is written as an MM2 `Checkpoint` record (`mm2formats`) to `<source>.checkpoints.internal`
on the target (compacted, one partition, created if missing), so Java's `RemoteClusterUtils.translateOffsets`
works against our mirror. With `syncGroupOffsets`, translated offsets are also committed to the same group
on the target, like MM2's `sync.group.offsets.enabled`: only for groups with no active members on the
target, and never moving a group's committed offset backwards.

Share groups (KIP-932) the same patterns select have their start offsets carried alongside, with the same
translation (`sharegroups/`): set on the target with `syncGroupOffsets`, for groups with no members there; their
group configs with them (`share_configs_last`: what became of them, per group).

Pure parts: `translate()`, `offsets_to_sync()`. I/O: `CheckpointEmitter`, with `sourcecounter.SourceCounter` (reads
the progress topic through `progress.ProgressTail`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property

from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, IsolationLevel, KafkaError,
                             KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from .consumerlag import ConsumerLag, committed_offsets, consumer_lags, matching_groups
from .resource.flowgroup import FlowGroupConfig, Mirror
from .mm2formats import Checkpoint
from .replicas import refused
from .replication import GroupFilter, RecordStamper, policy_for
from .transforms import compiled
from .progress.record import anchor_key
from .progress import Between, CommittedCounter, Inside, OffsetMap, ProgressTail
from .sharegroups.moves import ConfigCarry, ShareMove, translate_starts
from .sourcecounter import SourceCounter
from .topicsync import list_offsets

log = logging.getLogger(__name__)

MM2_INTERNAL_TOPIC_CONFIG = {"cleanup.policy": "compact"}
PRUNE_ANCHORS_SECONDS = 600.0  # how often the emitter looks for anchors the target's retention made useless


# ------------------------------------------------------------------------------------------------- pure

def translate(group: str, committed: Mapping[tuple[str, int], tuple[int, str]],
              maps: Mapping[tuple[str, int], OffsetMap], inside: Inside | None = None,
              between: Between | None = None) -> list[Checkpoint]:
    """Checkpoints for one group: committed[(source topic, partition)] = (offset, metadata).

    Partitions with no progress yet (nothing mirrored) or whose offset is older than the history held are
    left out: no checkpoint is better than a wrong one.
    """
    out = []
    for (topic, partition), (offset, metadata) in sorted(committed.items()):
        if offset < 0:
            continue
        m = maps.get((topic, partition))
        if m is None or not m.records:
            continue
        downstream = m.translate(offset, inside, between)
        if downstream is None:
            continue
        out.append(Checkpoint(group, m.records[-1].target_topic, partition, offset, downstream, metadata or ""))
    return out


def offsets_to_sync(checkpoints: Iterable[Checkpoint], target_committed: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Target (topic, partition) -> offset to commit: new partitions, or offsets ahead of the group's own."""
    out = {}
    for cp in checkpoints:
        have = target_committed.get((cp.topic, cp.partition), -1)
        if cp.downstream_offset > have:
            out[(cp.topic, cp.partition)] = cp.downstream_offset
    return out


# ------------------------------------------------------------------------------------------------- I/O

def ensure_topic(admin: AdminClient, topic: str, config: dict[str, str], replication_factor: int = -1,
                 timeout: float = 15.0, key: str = "its replication factor", cluster: str = "") -> None:
    """Create a one-partition internal topic if missing; too few brokers for `replication_factor` is refused
    naming `key`, the setting to change (replicas.refused)."""
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    fut = admin.create_topics([NewTopic(topic, 1, replication_factor, config=config)],
                              operation_timeout=timeout)[topic]
    try:
        fut.result(timeout=timeout)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise refused(e, admin, topic, replication_factor, key, cluster, timeout) or e


class CheckpointEmitter:
    """One mirror's checkpoints (and group offset sync); call `run_once()` every emitCheckpointsIntervalSeconds."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0,
                 tail: ProgressTail | None = None) -> None:
        """tail: a ProgressTail of this mirror to share (the driver's MirrorMonitor has one); else its own."""
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.policy = policy_for(mirror)
        self.groups = GroupFilter.of(mirror)
        self.topic = self.policy.checkpoints_topic(mirror.source)
        target_conf = config.cluster(mirror.target).client_config()
        self.target_admin = AdminClient(target_conf)
        self.producer = Producer({**target_conf, "enable.idempotence": True, "linger.ms": 5})
        self._own_tail = tail is None
        self.tail = ProgressTail(target_conf, config.progressTopic, mirror.source, resource=config.resource,
                                 max_history=config.offsetHistory) if tail is None else tail
        self._emitted: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.nothing_mirrored = True  # the last round found no offset map: nothing of the mirror copied yet
        self._ask_source_at = 0.0  # while nothing is mirrored: when a round next lists the source's groups
        self._topic_ready = False
        self.last: dict[str, list[Checkpoint]] = {}
        self.share_last: list[ShareMove] = []  # the share groups of the last round (sharegroups/sync.py)
        self.share_configs_last: dict[str, ConfigCarry] = {}  # their configs: what carrying them did, per group
        self.shares_note = ""  # why share groups are not carried here, if so
        self.committed_last: dict[str, dict[tuple[str, int], int]] = {}  # group -> its mirrored source offsets
        self.lags: list[ConsumerLag] = []  # of the last round (consumerlag.py)
        self.lag_counters: tuple[CommittedCounter, CommittedCounter] | None = None  # source, target
        self._prune_at = time.monotonic() + PRUNE_ANCHORS_SECONDS
        self._pruned: dict[tuple[str, int], set[int]] = {}  # anchor blocks tombstoned, per source partition

    # the source's clients are made on first use: a failover with the source gone asks it nothing
    @cached_property
    def source_admin(self) -> AdminClient:
        return AdminClient(self.config.cluster(self.mirror.source).client_config())

    @cached_property
    def counter(self) -> SourceCounter:
        mirror = self.mirror
        stamper = RecordStamper.of(self.policy, mirror.source, mirror.target)
        return SourceCounter(self.config.cluster(mirror.source).client_config(),
                             stamper if stamper.uses_provenance else None, self.timeout,
                             self.config.cluster(mirror.target).client_config(), mirror.source,
                             compiled(mirror))

    @cached_property
    def shares(self):  # -> sharegroups.sync.ShareGroupSync | None
        """The share groups' carrier (kafka-python's wire, `sparkmirror.wire`: the job's and the operator's images
        have it); None where kafka-python is not installed: `shares_note` says so."""
        try:
            from .sharegroups.sync import ShareGroupSync
        except ImportError as e:
            self.shares_note = (f"share groups not carried: {e.name} is not installed here (pyproject's job and "
                                "operator extras install it)")
            log.warning("mirrors[%s]: %s", self.mirror.name, self.shares_note)
            return None
        mirror = self.mirror
        return ShareGroupSync(self.config.cluster(mirror.source).client_config(),
                              self.config.cluster(mirror.target).client_config(), mirror.source, mirror.target,
                              self.groups.matches, self.timeout,
                              lambda tps: list_offsets(self.source_admin, tps, OffsetSpec.latest(), self.timeout,
                                                       isolation_level=IsolationLevel.READ_COMMITTED))

    def share_moves(self, select: Callable[[str], bool] = lambda _g: True,
                    maps: Mapping[tuple[str, int], OffsetMap] | None = None,
                    copies: Callable[[str], bool] = lambda _t: False) -> list[ShareMove]:
        """The selected share groups' start offsets on the source, translated (rows not applied yet); `maps`:
        the offset maps to use (a failover's final ones), else the tail's now."""
        starts = self.shares.source_starts(select) if self.shares is not None else {}
        if not starts:
            return []
        with self.tail.lock:
            if maps is None:
                self.tail.poll(self.timeout)
                maps = self.tail.maps()
            return [r for g, s in sorted(starts.items())
                    for r in translate_starts(g, s, maps, self.counter, self.counter.between, copies)]

    def sync_share_groups(self) -> list[ShareMove]:
        """A checkpoint round's share groups: set on the target where they moved, with their configs
        (`share_configs_last`); never an error of the round (logged; the next round tries again)."""
        try:
            moves = self.share_moves()
            self.share_last = self.shares.apply(moves) if moves else []
            groups = {r.group for r in moves}
            self.share_configs_last = {g: c for g, c in self.shares.carried.items() if g in groups} if moves else {}
        except Exception as e:  # noqa: BLE001 - share groups are a side service of the round
            log.warning("mirrors[%s]: carrying share groups' start offsets failed (tried again next round): %s",
                        self.mirror.name, e)
        return self.share_last

    def source_groups(self) -> list[str]:
        return matching_groups(self.source_admin, self.groups.matches, self.timeout)

    def committed(self, admin: AdminClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        return committed_offsets(admin, group, self.timeout)

    def translate_all(self) -> dict[str, list[Checkpoint]]:
        """group -> checkpoints, from the source's committed offsets and the progress read after them (the map is
        at least as new as the offsets). The tail may be shared with another thread, whose polls change the maps
        in place: it is read and used under its lock, the groups' offsets asked of the source outside it."""
        self.committed_last = {}
        with self.tail.lock:
            self.tail.poll(self.timeout)
            self.nothing_mirrored = not self.tail.maps()
        if self.nothing_mirrored:  # nothing to translate with: rounds come every second until there is; the
            if time.monotonic() >= self._ask_source_at:  # source is asked (does it answer, and allow?) once an interval
                self._ask_source_at = time.monotonic() + self.mirror.emitCheckpointsIntervalSeconds
                self.source_groups()
            return {}
        offsets = {group: self.committed(self.source_admin, group) for group in self.source_groups()}
        out = {}
        with self.tail.lock:
            self.tail.poll(self.timeout)
            maps = self.tail.maps()
            for group, all_committed in offsets.items():
                committed = {k: v for k, v in all_committed.items() if k in maps}
                self.committed_last[group] = {k: off for k, (off, _md) in committed.items()}
                cps = translate(group, committed, maps, self.counter, self.counter.between)
                if cps:
                    out[group] = cps
        return out

    def emit(self, checkpoints: Mapping[str, list[Checkpoint]]) -> int:
        if not self._topic_ready:
            ensure_topic(self.target_admin, self.topic, MM2_INTERNAL_TOPIC_CONFIG,
                         self.mirror.checkpointsTopicReplicationFactor, self.timeout,
                         f"checkpoints.topic.replication.factor in mirrors[{self.mirror.name}]'s connector config",
                         self.mirror.target)
            self._topic_ready = True
        n = 0
        for cps in checkpoints.values():
            for cp in cps:
                k = (cp.group, cp.topic, cp.partition)
                if self._emitted.get(k) == (cp.upstream_offset, cp.downstream_offset):
                    continue  # unchanged since the last emission (MM2 emits only changes too)
                self.producer.produce(self.topic, key=cp.key(), value=cp.value(), partition=0)
                self._emitted[k] = (cp.upstream_offset, cp.downstream_offset)
                n += 1
        left = self.producer.flush(self.timeout)
        if left:
            raise RuntimeError(f"mirrors[{self.mirror.name}]: {left} checkpoints not delivered to {self.topic!r}")
        return n

    def members_on_target(self, groups: list[str]) -> dict[str, int]:
        """group -> its active members on the target (0: idle, empty or unknown there)."""
        if not groups:
            return {}
        out = {}
        for g, fut in self.target_admin.describe_consumer_groups(groups, request_timeout=self.timeout).items():
            try:
                d = fut.result(timeout=self.timeout)
            except KafkaException as e:
                if e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                    out[g] = 0
                    continue
                raise
            idle = d.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)
            out[g] = 0 if idle and not d.members else max(1, len(d.members or []))
        return out

    def _inactive_on_target(self, groups: list[str]) -> set[str]:
        return {g for g, n in self.members_on_target(groups).items() if n == 0}

    def sync_group_offsets(self, checkpoints: Mapping[str, list[Checkpoint]]) -> dict[str, dict[tuple[str, int], int]]:
        """Commit translated offsets to groups idle on the target; returns what was committed per group."""
        done = {}
        for group in sorted(self._inactive_on_target(sorted(checkpoints))):
            have = {k: off for k, (off, _md) in self.committed(self.target_admin, group).items()}
            todo = offsets_to_sync(checkpoints[group], have)
            if not todo:
                continue
            req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(todo.items())])
            res = self.target_admin.alter_consumer_group_offsets([req], request_timeout=self.timeout)[group]
            try:
                res.result(timeout=self.timeout)
            except KafkaException as e:
                # a consumer joined the group meanwhile: MM2 skips the group this round too
                log.warning("mirrors[%s]: syncing offsets of group %s on the target failed: %s",
                            self.mirror.name, group, e)
                continue
            done[group] = todo
        return done

    def run_once(self, sync_offsets: bool | None = None) -> dict[str, list[Checkpoint]]:
        cps = self.translate_all()
        if self.mirror.emitCheckpoints:  # emit.checkpoints.enabled=false: translated for the offset sync only
            self.emit(cps)
        if self.nothing_mirrored:
            self.last, self.lags = cps, []
            return cps
        if self.mirror.syncGroupOffsets if sync_offsets is None else sync_offsets:
            self.sync_group_offsets(cps)
            self.sync_share_groups()
        self.last = cps
        self.lags = self.consumer_lags(cps)
        if time.monotonic() >= self._prune_at:
            self._prune_at = time.monotonic() + PRUNE_ANCHORS_SECONDS
            self.prune_anchors()
        return cps

    def prune_anchors(self) -> int:
        """Tombstones the anchors (`progress/record.py`) of this mirror whose stretch of the target its retention
        has deleted, so anchors live as long as the data they translate to, not as long as the mirror. Returns
        how many it wrote; a failure is logged, never raised (the next round tries again)."""
        try:
            with self.tail.lock:  # rare (every PRUNE_ANCHORS_SECONDS): held throughout
                maps = self.tail.maps()
                lows = list_offsets(self.target_admin, [(m.target_topic, p) for (_t, p), m in maps.items()],
                                    OffsetSpec.earliest(), self.timeout)
                n = 0
                for (topic, part), m in maps.items():
                    low = lows.get((m.target_topic, part))
                    done = self._pruned.setdefault((topic, part), set())
                    for block in (m.dead_blocks(low) if low else []):
                        if block not in done:
                            self.producer.produce(self.config.progressTopic, key=anchor_key(
                                self.mirror.source, topic, part, self.config.resource, block), value=None)
                            done.add(block)
                            n += 1
            if n and self.producer.flush(self.timeout) > 0:
                self._pruned.clear()  # some were not delivered: the next round writes them again
                return 0
            if n:
                log.info("mirror %s: %d anchors of the offset map removed (their target records were deleted by "
                         "retention)", self.mirror.name, n)
            return n
        except KafkaException as e:
            log.warning("mirror %s: removing old anchors of the offset map failed (tried again later): %s",
                        self.mirror.name, e)
            return 0

    def consumer_lags(self, cps: Mapping[str, list[Checkpoint]]) -> list[ConsumerLag]:
        """The groups' lag on the source and after their checkpoints on the target (offset requests; small lags
        counted read_committed, as the mirror's own lag is)."""
        src = sorted({tp for offsets in self.committed_last.values() for tp in offsets})
        tgt = sorted({(cp.topic, cp.partition) for group in cps.values() for cp in group})
        if self.lag_counters is None:
            self.lag_counters = (CommittedCounter(self.config.cluster(self.mirror.source).client_config(),
                                                  self.timeout),
                                 CommittedCounter(self.config.cluster(self.mirror.target).client_config(),
                                                  self.timeout))
        return consumer_lags(self.committed_last, self._marks(self.source_admin, src), cps,
                             self._marks(self.target_admin, tgt), self.lag_counters[0].count,
                             self.lag_counters[1].count)

    def _marks(self, admin: AdminClient, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        low = list_offsets(admin, tps, OffsetSpec.earliest(), self.timeout)
        high = list_offsets(admin, tps, OffsetSpec.latest(), self.timeout)
        return {tp: (low[tp], high[tp]) for tp in tps if tp in low and tp in high}

    def close(self) -> None:
        self.producer.flush(self.timeout)
        if self._own_tail:
            self.tail.close()
        if "counter" in self.__dict__:
            self.counter.close()
        if self.__dict__.get("shares") is not None:
            self.shares.close()
        for counter in self.lag_counters or ():
            counter.close()
