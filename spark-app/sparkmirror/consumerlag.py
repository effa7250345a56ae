"""Consumer-group lag of the groups a mirror checkpoints: how far each is behind on the source, and how far it
would be behind on the target if it failed over now.

- `lag`: records the group has not read on the source, over the mirrored partitions it committed: source end
  offset minus its committed offset (what `kafka-consumer-groups --describe` shows, transaction markers
  included).
- `target_lag`: records after its translated offsets on the target: remote end offset minus the checkpoint's
  downstream offset. Below `lag` while the mirror itself lags (those records are not on the target yet); above
  it when the checkpoint is older than the group's last commit.

The driver exports both per group (`sparkmirror_consumer_group_lag_records`, `..._target_lag_records`); the
operator puts the source lag of the most lagging groups on the resource's status. Reading the groups and their
offsets is shared by both and by the checkpoint emitter.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from .progress import partition_lags

TP = tuple[str, int]
Count = Callable[[dict[TP, tuple[int, int]]], Mapping[TP, int]]  # e.g. progress.CommittedCounter.count

STATUS_GROUPS = 20
"""Groups listed on a flow group's status (the most lagging): a status stays small with thousands of groups."""


@dataclass(frozen=True)
class ConsumerLag:
    group: str
    lag: int                        # records not read on the source
    partitions: int                 # mirrored partitions the group has committed offsets for
    target_lag: int | None = None   # records after its translated offsets on the target (None: no checkpoint)


def consumer_lags(committed: Mapping[str, Mapping[TP, int]], source_marks: Mapping[TP, tuple[int, int]],
                  checkpoints: Mapping[str, Iterable] | None = None,
                  target_marks: Mapping[TP, tuple[int, int]] | None = None,
                  count_source: Count | None = None, count_target: Count | None = None) -> list[ConsumerLag]:
    """Lag per group, the most lagging first. `committed`: group -> source (topic, partition) -> offset;
    partitions without source watermarks (low, high) are not the mirror's and are left out, as are groups with
    none. `checkpoints`: group -> `mm2formats.Checkpoint`s (remote topic, downstream offset) for `target_marks`.
    Per partition `progress.partition_lags`: small lags are counted read_committed by `count_*` (the mirror writes
    the target in transactions, so offsets there include a commit marker per transaction)."""
    checkpoints, target_marks = checkpoints or {}, target_marks or {}
    out = []
    for group, offsets in committed.items():
        positions = {tp: off for tp, off in offsets.items() if tp in source_marks and off >= 0}
        if not positions:
            continue
        lag = _lag({tp: source_marks[tp] for tp in positions}, positions, count_source)
        on_target = {(cp.topic, cp.partition): cp.downstream_offset for cp in checkpoints.get(group, ())
                     if (cp.topic, cp.partition) in target_marks}
        target_lag = _lag({tp: target_marks[tp] for tp in on_target}, on_target, count_target) if on_target \
            else None
        out.append(ConsumerLag(group, lag, len(positions), target_lag))
    return sorted(out, key=lambda c: (-c.lag, c.group))


def _lag(marks: Mapping[TP, tuple[int, int]], positions: Mapping[TP, int], count: Count | None) -> int:
    return sum(partition_lags(marks, positions, count).values())


def matching_groups(admin: AdminClient, matches, timeout: float) -> list[str]:
    """The cluster's consumer groups that `matches(group_id)` selects (e.g. `checkpoints.GroupFilter.matches`)."""
    res = admin.list_consumer_groups(request_timeout=timeout).result(timeout=timeout)
    return sorted(g.group_id for g in res.valid if matches(g.group_id))


def committed_offsets(admin: AdminClient, group: str, timeout: float) -> dict[TP, tuple[int, str]]:
    """(topic, partition) -> (committed offset, metadata) of one group; {} when the group is gone."""
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    try:
        res = fut.result(timeout=timeout)
    except KafkaException as e:
        if e.args[0].code() in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.COORDINATOR_NOT_AVAILABLE):
            return {}
        raise
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in res.topic_partitions
            if tp.error is None}
