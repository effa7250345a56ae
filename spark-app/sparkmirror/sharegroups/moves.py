"""What carrying a share group does (pure): per partition, translated through the offset map, decided against
the target, the target's answer; per group, its configs (`ConfigCarry`). No Kafka client here, so the failover
report and the operator read it."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ..positionmove import PartitionMove
from ..progress import Between, Inside, OffsetMap

TopicPartition = tuple[str, int]
UNSUPPORTED_VERSION = 35
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MOVED = ("set", "kept")
NOT_KEPT_WHY = ("the target answered without an error but kept no such start offset (Kafka 4.1 does so, seen on 4.1.0 "
                "and 4.1.2 also with its own kafka-share-groups --reset-offsets; 4.2 and later set it)")
SETTLED = (*MOVED, "unsupported")  # what does not hold a failover back: no share group can exist on such a target


@dataclass(frozen=True)
class AlterOutcome:
    """What AlterShareGroupOffsets did for one group: `error` the group-level error's name ("" none), `partitions`
    (target topic, partition) -> the error's name of those it refused."""

    group: str
    error: str = ""
    code: int = 0
    partitions: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.code and not self.partitions


class ShareMove(PartitionMove):
    """One partition of a share group: its start offset on the source, where it translates to, what was done.

    Actions: `set` (set on the target), `kept` (the target group already starts there or later: never moved
    back), `active` (the group has members on the target: its offsets cannot be set), `missing` (the target
    answered GROUP_ID_NOT_FOUND), `failed` (the target refused, see
    detail), `untranslated` (no exact target position: nothing of the partition mirrored yet, or older than the
    history held), `unsupported` (the target serves no share groups: Kafka before 4.1, or 4.1 without
    `share.version=1`; said, and not held against a failover, as its consumers cannot share-consume there)."""


def settled_starts(described: Mapping[TopicPartition, tuple[int, int]], ends: Mapping[TopicPartition, int]
                   ) -> dict[TopicPartition, int]:
    """The start offset to carry per partition, from (start offset, lag) as DescribeShareGroupOffsets answered and
    each partition's end offset read before that answer: the start offset, or, where the broker says nothing
    is left to deliver (lag 0, KIP-1226), that end when further on. Kafka 4.4 can leave the start offset it
    reports where it was once every record after it is acknowledged (seen: start 0, lag 0, after a share consumer
    acknowledged all 100 records of a partition): carried as it is, every record would be delivered again on the
    target. The end read before the answer (the last stable offset: right for read_committed share groups too) is at
    or below the broker's end then, so nothing is skipped."""
    return {tp: max(start, ends.get(tp, start)) if lag == 0 else start for tp, (start, lag) in described.items()}


def translate_starts(group: str, starts: Mapping[TopicPartition, int], maps: Mapping[TopicPartition, OffsetMap],
                     inside: Inside | None = None, between: Between | None = None,
                     copies: Callable[[str], bool] = lambda _t: False) -> list[ShareMove]:
    """One group's partitions with a target position (action `set`, to be decided against the target) or none
    (`untranslated`). Partitions of topics the mirror does not copy (`copies(topic)` false, no offset map) are
    left out."""
    rows = []
    for (topic, part), offset in sorted(starts.items()):
        m = maps.get((topic, part))
        if m is None or not m.records:
            if m is not None or copies(topic):
                rows.append(ShareMove(group, topic, "", part, offset, None, "untranslated",
                                      "nothing of this partition was mirrored yet"))
            continue
        target = m.translate(offset, inside, between)
        if target is None:
            rows.append(ShareMove(group, topic, m.records[-1].target_topic, part, offset, None, "untranslated",
                                  f"start offset {offset} is older than the progress history held (from source "
                                  f"offset {m.records[0].source_first})"))
            continue
        rows.append(ShareMove(group, topic, m.records[-1].target_topic, part, offset, target, "set"))
    return rows


def decide(rows: list[ShareMove], on_target: Mapping[TopicPartition, int]) -> list[ShareMove]:
    """`set` rows whose target group already starts at or past the translated offset become `kept`."""
    out = []
    for r in rows:
        have = on_target.get((r.target_topic, r.partition))
        if r.action == "set" and have is not None and r.target_offset is not None and have >= r.target_offset:
            r = replace(r, action="kept", detail=f"the group already starts at {have} on the target")
        elif r.action == "set" and have is not None:
            r = replace(r, detail=f"was {have}")
        out.append(r)
    return out


def applied(rows: list[ShareMove], outcome: AlterOutcome) -> list[ShareMove]:
    """The `set` rows after AlterShareGroupOffsets answered `outcome`."""
    if outcome.code == NON_EMPTY_GROUP:
        action, detail = "active", "the group has members on the target: stop its consumers there, run again"
    elif outcome.code == GROUP_ID_NOT_FOUND:
        action, detail = "missing", "the target does not know the share group (GROUP_ID_NOT_FOUND)"
    elif outcome.code:
        action, detail = "failed", outcome.error
    else:
        action = detail = ""
    out = []
    for r in rows:
        if r.action == "set":
            bad = outcome.partitions.get((r.target_topic, r.partition))
            if action:
                r = replace(r, action=action, detail=detail)
            elif bad:
                r = replace(r, action="failed", detail=f"the target refused the partition: {bad}")
        out.append(r)
    return out


def kept(rows: list[ShareMove], on_target: Mapping[TopicPartition, int]) -> list[ShareMove]:
    """The `set` rows after reading the group's start offsets back from the target (`on_target`): a row is set
    only where the target now starts at its offset or later (a share consumer there may have read on since).
    Kafka 4.1 answers AlterShareGroupOffsets with no error and changes nothing, for a group it knows or not; 4.2
    and later set the offsets and make the group. A row the target did not keep has `failed`, saying so."""
    out = []
    for r in rows:
        have = on_target.get((r.target_topic, r.partition))
        if r.action == "set" and r.target_offset is not None and (have is None or have < r.target_offset):
            r = replace(r, action="failed", detail=NOT_KEPT_WHY + (f": it starts at {have}" if have is not None
                                                                    else ": it has none"))
        out.append(r)
    return out


CARRIED_CONFIGS = ("share.", "errors.deadletterqueue.")
"""The group configs (ConfigResource GROUP) carried, by prefix: a share group's (KIP-932: share.auto.offset.reset,
share.isolation.level, share.record.lock.duration.ms, share.delivery.count.limit, ...) and its dead-letter queue's
(KIP-1191, Kafka 4.4). Not consumer.* or streams.*: those groups are not share groups."""
UNKNOWN_ON_TARGET = "the target does not know it (an older Kafka)"


def share_config(name: str) -> bool:
    return name.startswith(CARRIED_CONFIGS)


@dataclass(frozen=True)
class ConfigCarry:
    """What carrying one share group's configs did: the configs set on the group on the source (not defaults)
    made the same on the target. `carried`: name -> value now on the target as on the source; `changed`: those
    set this time (the others were already so); `left_out`: name -> why not carried where the target cannot
    have it (it does not know the config); `refused`: name -> the target's error; `error`: why none could be
    (a cluster did not answer). A config removed on the source stays on the target (never removed there)."""

    group: str
    carried: dict[str, str] = field(default_factory=dict)
    changed: tuple[str, ...] = ()
    left_out: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        """The target group gets what the source group has (bar configs the target does not know)."""
        return not self.refused and not self.error

    def as_dict(self) -> dict:
        return {"carried": dict(self.carried), "changed": list(self.changed), "leftOut": dict(self.left_out),
                "refused": dict(self.refused), "error": self.error}


def plan_configs(want: Mapping[str, str], have: Mapping[str, tuple[str, bool]]
                 ) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(to set, already so, left out) from the source group's explicit configs and the target group's (name ->
    (value, set on the group)), every config the target knows listed there. One the target knows but has only
    as its default is set too, even to the same value: the target group then keeps it whatever that cluster's
    defaults become, as the source group does."""
    todo, kept, left = {}, {}, {}
    for name, value in sorted(want.items()):
        if name not in have:
            left[name] = UNKNOWN_ON_TARGET
        elif have[name] == (value, True):
            kept[name] = value
        else:
            todo[name] = value
    return todo, kept, left
