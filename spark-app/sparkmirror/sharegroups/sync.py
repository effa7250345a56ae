"""Share groups' start offsets carried to the target: read on the source, translated through the offset map, set
on the target while the group has no members there. Run by the checkpoint rounds (with `syncGroupOffsets`) and
once by `sparkmirror failover`.

Which groups: the mirror's `groups` / `groupsExclude` (MM2's group filter), the same as for consumer groups:
a share group is a group of the same coordinator, and MM2's filter is by name, not type.

What is carried: a share group's start offset (SPSO) per partition, the earliest offset still in flight on the
source. Records after it may have been acknowledged already, so translating it as a committed consumer offset
is translated (`OffsetMap.translate`) is conservative: those are delivered again on the target (at least once),
nothing is skipped. A partition the source group has no state for gets none on the target either: its consumers
start at the target group's `share.auto.offset.reset`, as they would on the source (group configs are not
carried: set them on the target too).

Pure: `translate_starts`, `decide`. I/O: `ShareGroupSync`.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace

from ..progress import Between, Inside, OffsetMap
from .admin import (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, AlterOutcome, ShareAdminError, ShareGroupAdmin,
                    SharesUnsupported, TopicPartition)

log = logging.getLogger(__name__)
MOVED = ("set", "kept")


@dataclass(frozen=True)
class ShareMove:
    """One partition of a share group: its start offset on the source, where it translates to, what was done.

    Actions: `set` (set on the target), `kept` (the target group already starts there or later: never moved
    back), `active` (the group has members on the target: its offsets cannot be set), `missing` (Kafka 4.1: the
    group must exist on the target; a share consumer joining it once makes it), `failed` (the target refused, see
    detail), `untranslated` (no exact target position: nothing of the partition mirrored yet, or older than the
    history held)."""

    group: str
    source_topic: str
    target_topic: str
    partition: int
    source_offset: int
    target_offset: int | None
    action: str
    detail: str = ""

    def as_dict(self) -> dict:
        return {k[0] + k.title().replace("_", "")[1:]: v for k, v in asdict(self).items()}


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
        action, detail = "missing", ("the target (Kafka 4.1) sets offsets only of a share group that exists: let "
                                     "a share consumer join it there once, run again")
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


class ShareGroupSync:
    """One mirror's share groups, source to target. A cluster without share groups is said once (a warning),
    then skipped: never an error of the mirror."""

    def __init__(self, source_conf: dict[str, str], target_conf: dict[str, str], source: str, target: str,
                 matches: Callable[[str], bool], timeout: float = 15.0) -> None:
        self._confs = {source: source_conf, target: target_conf}
        self.source, self.target, self.matches, self.timeout = source, target, matches, timeout
        self._admins: dict[str, ShareGroupAdmin] = {}
        self.unsupported: str | None = None  # why share groups are not carried (said once)
        self._sent: dict[str, dict[TopicPartition, int]] = {}  # group -> what was last set on the target

    def _admin(self, cluster: str) -> ShareGroupAdmin:
        if cluster not in self._admins:
            self._admins[cluster] = ShareGroupAdmin(self._confs[cluster], cluster, self.timeout)
        return self._admins[cluster]

    def _said(self, e: SharesUnsupported) -> None:
        if self.unsupported is None:
            log.warning("%s: share groups are not carried", e)
        self.unsupported = str(e)

    def source_starts(self, select: Callable[[str], bool] = lambda _g: True) -> dict[str, dict[TopicPartition, int]]:
        """Selected share group -> its start offsets on the source ({} when the source has no share groups)."""
        try:
            src = self._admin(self.source)
            groups = sorted(g for g in src.list_groups() if self.matches(g) and select(g))
            return {g: src.start_offsets(g) for g in groups}
        except SharesUnsupported as e:
            self._said(e)
            return {}
        except ShareAdminError as e:
            log.warning("share groups of %s not read (tried again next round): %s", self.source, e)
            return {}

    def apply(self, rows: list[ShareMove], force: bool = False) -> list[ShareMove]:
        """Decide each group's rows against the target and set what moves; `force`: also what was set before
        (a failover asks the target again rather than trusting the last round)."""
        out: list[ShareMove] = []
        by_group: dict[str, list[ShareMove]] = {}
        for r in rows:
            by_group.setdefault(r.group, []).append(r)
        for group, group_rows in sorted(by_group.items()):
            want = {(r.target_topic, r.partition): r.target_offset for r in group_rows if r.action == "set"}
            if not want or (not force and self._sent.get(group) == want):
                out.extend(group_rows)
                continue
            try:
                tgt = self._admin(self.target)
                group_rows = decide(group_rows, tgt.start_offsets(group))
                todo = {(r.target_topic, r.partition): r.target_offset for r in group_rows if r.action == "set"}
                if todo:
                    group_rows = applied(group_rows, tgt.alter(group, todo))
                if all(r.action in MOVED for r in group_rows if r.target_offset is not None):
                    self._sent[group] = want
            except SharesUnsupported as e:
                self._said(e)
                group_rows = [replace(r, action="failed", detail=str(e)) if r.action == "set" else r
                              for r in group_rows]
            except ShareAdminError as e:
                log.warning("share group %s: %s", group, e)
                group_rows = [replace(r, action="failed", detail=str(e)) if r.action == "set" else r
                              for r in group_rows]
            out.extend(group_rows)
        return out

    def close(self) -> None:
        for admin in self._admins.values():
            admin.close()
        self._admins.clear()
