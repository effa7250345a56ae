"""Share groups' start offsets carried to the target: read on the source, translated through the offset map, set
on the target while the group has no members there. Run by the checkpoint rounds (with `syncGroupOffsets`) and
once by `sparkmirror failover`.

Which groups: the mirror's `groups` / `groupsExclude` (MM2's group filter), the same as for consumer groups:
a share group is a group of the same coordinator, and MM2's filter is by name, not type.

What is carried: a share group's start offset (SPSO) per partition, the earliest offset still in flight on the
source. Records after it may have been acknowledged already, so translating it as a committed consumer offset
is (`OffsetMap.translate`) is conservative: those are delivered again on the target (at least once),
nothing is skipped. A partition the source group has no state for gets none on the target either: its consumers
start at the target group's `share.auto.offset.reset`, as they would on the source.

With the offsets go the group's configs that change what its consumers get (`moves.CARRIED_CONFIGS`:
share.auto.offset.reset, share.isolation.level, ...), those set on the source group, not its defaults
(`configs`): set on the target where they differ, whether or not the target group has members (as topic configs
are), never removed there. A target that does not know one (an older Kafka) is said per config, not refused.

Pure: `moves` (`translate_starts`, `decide`, `applied`, `plan_configs`). I/O: `ShareGroupSync` (kafka-python and
confluent-kafka: the job's and the operator's images have both).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from .admin import ShareAdminError, ShareGroupAdmin, SharesUnsupported
from .configs import GroupConfigAdmin, GroupConfigError
from .markers import RecordFinder
from .moves import (MOVED, ConfigCarry, ShareMove, TopicPartition, applied, decide, kept, plan_configs,
                    settled_starts)

log = logging.getLogger(__name__)


class ShareGroupSync:
    """One mirror's share groups, source to target. A cluster without share groups is said once (a warning),
    then skipped: never an error of the mirror."""

    def __init__(self, source_conf: dict[str, str], target_conf: dict[str, str], source: str, target: str,
                 matches: Callable[[str], bool], timeout: float = 15.0,
                 latest: Callable[[list[TopicPartition]], Mapping[TopicPartition, int]] | None = None) -> None:
        """latest(partitions): their end offsets on the source (see `moves.settled_starts`)."""
        self.latest = latest
        self.finder = RecordFinder(target_conf, timeout)
        self._confs = {source: source_conf, target: target_conf}
        self.source, self.target, self.matches, self.timeout = source, target, matches, timeout
        self._admins: dict[str, ShareGroupAdmin] = {}
        self.unsupported: str | None = None  # why share groups are not carried (said once)
        self._sent: dict[str, dict[TopicPartition, int]] = {}  # group -> what was last set on the target
        self._configs: dict[str, GroupConfigAdmin] = {}
        self._configs_sent: dict[str, dict[str, str]] = {}  # group -> the source's configs last carried whole
        self.carried: dict[str, ConfigCarry] = {}  # group -> what carrying its configs did last

    def _admin(self, cluster: str) -> ShareGroupAdmin:
        if cluster not in self._admins:
            self._admins[cluster] = ShareGroupAdmin(self._confs[cluster], cluster, self.timeout)
        return self._admins[cluster]

    def _config_admin(self, cluster: str) -> GroupConfigAdmin:
        if cluster not in self._configs:
            self._configs[cluster] = GroupConfigAdmin(self._confs[cluster], cluster, self.timeout)
        return self._configs[cluster]

    def _said(self, e: SharesUnsupported) -> None:
        if self.unsupported is None:
            log.warning("%s: share groups are not carried", e)
        self.unsupported = str(e)

    def source_starts(self, select: Callable[[str], bool] = lambda _g: True) -> dict[str, dict[TopicPartition, int]]:
        """Selected share group -> its start offsets on the source ({} when the source has no share groups)."""
        try:
            src = self._admin(self.source)
            groups = sorted(g for g in src.list_groups() if self.matches(g) and select(g))
            return {g: self._starts(src, g) for g in groups}
        except SharesUnsupported as e:
            self._said(e)
            return {}
        except ShareAdminError as e:
            log.warning("share groups of %s not read (tried again next round): %s", self.source, e)
            return {}

    def _starts(self, src: ShareGroupAdmin, group: str) -> dict[TopicPartition, int]:
        """A group's start offsets to carry: where a partition has nothing left to deliver, its end read between
        two answers of the broker (`moves.settled_starts`)."""
        first = src.describe(group)
        done = sorted(tp for tp, (_start, lag) in first.items() if lag == 0)
        if not done or self.latest is None:
            return {tp: start for tp, (start, _lag) in first.items()}
        ends = dict(self.latest(done))
        return settled_starts(src.describe(group), ends)

    def apply(self, rows: list[ShareMove], force: bool = False) -> list[ShareMove]:
        """Decide each group's rows against the target and set what moves, and the group's configs (`carried`
        says what became of them); `force`: also what was set before (a failover asks the target again rather
        than trusting the last round)."""
        out: list[ShareMove] = []
        by_group: dict[str, list[ShareMove]] = {}
        for r in rows:
            by_group.setdefault(r.group, []).append(r)
        wanted, unread = self._source_configs(list(by_group))
        for group, group_rows in sorted(by_group.items()):
            want = {(r.target_topic, r.partition): r.target_offset for r in group_rows if r.action == "set"}
            configs = wanted.get(group)
            offsets_due = bool(want) and (force or self._sent.get(group) != want)
            configs_due = configs is not None and (force or self._configs_sent.get(group) != configs)
            if configs is None:
                self.carried[group] = ConfigCarry(group, error=f"not read on the source: {unread.get(group, '')}")
            if not offsets_due and not configs_due:
                out.extend(group_rows)
                continue
            try:
                if offsets_due:
                    group_rows = self._offsets(self._admin(self.target), group, group_rows, want)
                elif configs:  # whether the target serves share groups at all (said once if not)
                    self._admin(self.target).start_offsets(group)
                if configs_due:
                    self.carried[group] = self._carry(group, configs)
            except SharesUnsupported as e:
                self._said(e)
                self.carried.pop(group, None)
                group_rows = [replace(r, action="unsupported", detail=str(e)) if r.action == "set" else r
                              for r in group_rows]
            except ShareAdminError as e:
                log.warning("share group %s: %s", group, e)
                if configs_due:
                    self.carried[group] = ConfigCarry(group, error=f"not carried: {e}")
                group_rows = [replace(r, action="failed", detail=str(e)) if r.action == "set" else r
                              for r in group_rows]
            out.extend(group_rows)
        return out

    def _offsets(self, tgt: ShareGroupAdmin, group: str, group_rows: list[ShareMove],
                 want: dict[TopicPartition, int | None]) -> list[ShareMove]:
        group_rows = [replace(r, target_offset=self.finder.first_at(r.target_topic, r.partition, r.target_offset))
                      if r.action == "set" and r.target_offset is not None else r for r in group_rows]
        group_rows = decide(group_rows, tgt.start_offsets(group))
        todo = {(r.target_topic, r.partition): r.target_offset for r in group_rows if r.action == "set"}
        if todo:
            group_rows = applied(group_rows, tgt.alter(group, todo))
            if any(r.action == "set" for r in group_rows):  # read back: Kafka 4.1 answers and changes nothing
                group_rows = kept(group_rows, tgt.start_offsets(group))
        if all(r.action in MOVED for r in group_rows if r.target_offset is not None):
            self._sent[group] = want
        return group_rows

    def _source_configs(self, groups: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """(group -> its share configs set on the source group, group -> why the source did not tell them)."""
        if not groups:
            return {}, {}
        try:
            configs, unread = self._config_admin(self.source).explicit(groups)
        except GroupConfigError as e:
            configs, unread = {}, {g: str(e) for g in groups}
        for group, why in sorted(unread.items()):
            log.warning("share group %s: its configs not read (tried again next round): %s", group, why)
        return configs, unread

    def _carry(self, group: str, want: dict[str, str]) -> ConfigCarry:
        """The source group's configs made the same on the target group (nothing asked when it has none)."""
        if not want:
            self._configs_sent[group] = want
            return ConfigCarry(group)
        try:
            cfg = self._config_admin(self.target)
            todo, kept, left = plan_configs(want, cfg.described(group))
            refused = cfg.set(group, todo) if todo else {}
        except GroupConfigError as e:
            log.warning("share group %s: its configs not carried (tried again next round): %s", group, e)
            return ConfigCarry(group, error=str(e))
        done = {n: v for n, v in todo.items() if n not in refused}
        if refused:
            log.warning("share group %s: cluster %r refused its configs %s", group, self.target, refused)
        else:
            self._configs_sent[group] = want
        if done:
            log.info("share group %s: configs %s set on cluster %r as on %r", group, done, self.target, self.source)
        return ConfigCarry(group, {**kept, **done}, tuple(sorted(done)), left, refused)

    def close(self) -> None:
        self.finder.close()
        for admin in self._admins.values():
            admin.close()
        self._admins.clear()
        self._configs.clear()  # confluent-kafka's AdminClient closes when dropped
