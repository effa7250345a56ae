"""Deletion propagation (`deleteRemoteTopics`, opt-in per mirror): a remote topic follows its source topic's
deletion, after a grace period, and only when this mirror created it.

Ownership: when topic sync creates a remote topic it writes a topic record to its progress topic (key
`topicOf`, see `progress/record.py`): the remote name, the source topic and both topic ids (KIP-516), when.
A remote topic without such a record -- there before the mirror, made by hand, made by another mirror -- is
never deleted; nor is one whose topic id on the target is no longer the recorded one (someone deleted the
mirror's topic and made their own under the name: the record is then forgotten).

The rule, per recorded remote topic (`plan_deletions`, pure):
- its source topic exists with the recorded id: nothing (a `goneMs` recorded before is cleared: it came back);
- the source topic is absent, or present under another id (deleted and created again): the first time this
  is seen, `goneMs` is recorded (durably: the grace clock survives a driver restart and a handoff); once
  `graceSeconds` have passed since, the remote topic is deleted and the record marked `deletedMs`.
- A source topic created again under the same name starts a new remote history: its route is *held* (not
  copied) while the old history's remote topic is there, the old remote topic is deleted after the grace like
  any other, its partitions' progress is reset (tombstones), and the next sync creates the remote topic afresh,
  copied from the new source topic's beginning. Why not append the new topic to the old remote one: its
  offsets start again at 0, so one remote topic would hold two histories, the offset map and consumer
  translation would mix them, and consumers on the target could not tell them apart. Why wait for the grace
  rather than replace at once: a topic deleted and recreated by mistake keeps its old data readable on the
  target for the grace period, which is the point of a DR copy. The cost: the new topic reaches the target
  only after the grace (its lag says so; the source must keep its records that long).
When the setting is off nothing is planned (records are still written, so turning it on later covers every
topic created since this version).

Apply (`TopicDeletion`, I/O, run by `TopicSync.sync()`): progress tombstones first, then DeleteTopics, then the
record marked; a crash in between is finished by the next round (the remote topic gone with its source still
gone: the record is forgotten, its progress already reset).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from .handoff.takeover import write_records
from .progress import progress_key, read_progress
from .progress.record import PROGRESS_FORMAT_VERSION, topic_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OwnedTopic:
    """A remote topic this mirror created, as its topic record says."""

    remote: str
    source: str
    source_id: str = ""        # empty: not known when it was created (then any id of the source counts as its)
    remote_id: str = ""
    created_ms: int = 0
    gone_ms: int | None = None     # when its source was first seen gone or recreated
    deleted_ms: int | None = None  # when the mirror deleted it

    def value(self) -> bytes:
        return json.dumps({"v": PROGRESS_FORMAT_VERSION, "src": self.source, "srcId": self.source_id,
                           "tgtId": self.remote_id, "createdMs": self.created_ms, "goneMs": self.gone_ms,
                           "deletedMs": self.deleted_ms}, separators=(",", ":")).encode()

    @classmethod
    def of(cls, remote: str, v: Mapping) -> "OwnedTopic":
        if v.get("v") != PROGRESS_FORMAT_VERSION:
            raise ValueError(f"the topic record of remote topic {remote!r} has format version {v.get('v')!r}; "
                             f"this version reads {PROGRESS_FORMAT_VERSION}")
        return cls(remote, str(v["src"]), str(v.get("srcId") or ""), str(v.get("tgtId") or ""),
                   int(v.get("createdMs") or 0), v.get("goneMs"), v.get("deletedMs"))


@dataclass(frozen=True)
class Pending:
    """A remote topic whose source is gone: deleted at `due_ms` (already due when in `DeletionPlan.delete`)."""

    topic: OwnedTopic
    due_ms: int
    why: str


@dataclass
class DeletionPlan:
    delete: list[Pending] = field(default_factory=list)     # due now
    waiting: list[Pending] = field(default_factory=list)    # source gone, grace not over yet
    held: set[str] = field(default_factory=set)             # source topics recreated: not copied while their old remote is there
    record: list[OwnedTopic] = field(default_factory=list)  # records to write (gone seen, or back)
    forget: list[str] = field(default_factory=list)         # remote topics whose records go: deleted or replaced by others


def plan_deletions(owned: Iterable[OwnedTopic], source_ids: Mapping[str, str], target_ids: Mapping[str, str],
                   now_ms: int, grace_s: float, enabled: bool = True) -> DeletionPlan:
    """What deletion propagation does now. `source_ids`: the source topics that exist -> their ids (a topic
    whose id is not known maps to ""); `target_ids`: the same for the target."""
    plan = DeletionPlan()
    if not enabled:
        return plan
    for t in sorted(owned, key=lambda o: o.remote):
        if t.deleted_ms is not None:  # the target may list a deleted topic for a moment: nothing copied into it
            if t.remote in target_ids and not (t.remote_id and target_ids[t.remote] and
                                               target_ids[t.remote] != t.remote_id):
                plan.held.add(t.source)
            continue
        have = target_ids.get(t.remote)
        if have is None or (t.remote_id and have and have != t.remote_id):
            plan.forget.append(t.remote)  # gone, or someone else's now: never deleted by the mirror
            continue
        src = source_ids.get(t.source)
        recreated = src is not None and bool(t.source_id) and bool(src) and src != t.source_id
        if src is not None and not recreated:
            if t.gone_ms is not None:
                plan.record.append(replace(t, gone_ms=None))
            continue
        if recreated:
            plan.held.add(t.source)
        since = t.gone_ms if t.gone_ms is not None else now_ms
        if t.gone_ms is None:
            t = replace(t, gone_ms=now_ms)
            plan.record.append(t)
        why = (f"source topic {t.source!r} was deleted and created again (topic id {t.source_id} -> {src}): a new "
               "remote history starts after this one is deleted" if recreated else
               f"source topic {t.source!r} is gone")
        pending = Pending(t, since + int(grace_s * 1000), why)
        (plan.delete if pending.due_ms <= now_ms else plan.waiting).append(pending)
    return plan


class TopicRecords:
    """A mirror's topic records in its progress topic on the target: read with the progress reader (marks only),
    written as marks are (`write_records`)."""

    def __init__(self, config, mirror: str, timeout: float = 15.0) -> None:  # config: FlowGroupConfig
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.target = next(m.target for m in config.mirrors if m.name == mirror)

    def read(self, target_topics: Iterable[str]) -> dict[str, OwnedTopic]:
        if self.config.progressTopic not in set(target_topics):
            return {}
        state = read_progress(self.config.cluster(self.target).client_config(), self.config.progressTopic,
                              source_partitions=[], timeout=self.timeout, resource=self.config.resource)
        return {remote: OwnedTopic.of(remote, v) for (_res, mirror, remote), v in state.topics.items()
                if mirror == self.mirror}

    def write(self, records: list[tuple[bytes, bytes | None]], what: str) -> None:
        write_records(self.config, self.target, records, what, self.timeout)  # type: ignore[arg-type]

    def key(self, remote: str) -> bytes:
        return topic_key(self.config.resource, self.mirror, remote)


class TopicDeletion:
    """Owned by a TopicSync (whose admin clients it uses): records created remote topics, plans and applies
    deletions. The records are read once, then kept in memory (the mirror writes them); writes that fail are
    kept and tried again at the next round."""

    def __init__(self, mirror, admin: Callable[[str], AdminClient], ids: Callable[[str, set[str]], dict[str, str]],
                 records: TopicRecords, timeout: float = 15.0) -> None:  # mirror: resource.flowgroup.Mirror
        self.mirror, self.admin, self.ids, self.records, self.timeout = mirror, admin, ids, records, timeout
        self.last: DeletionPlan | None = None  # what the last round planned
        self.owned: dict[str, OwnedTopic] | None = None
        self.unsaved: dict[str, OwnedTopic | None] = {}  # remote -> record (None: forget) not written yet
        self.deleted: list[OwnedTopic] = []  # deleted by this process, for the metrics and the log

    def load(self, target_topics: Iterable[str]) -> dict[str, OwnedTopic]:
        if self.owned is None:
            self.owned = self.records.read(target_topics)
        return self.owned

    def _save(self, changes: Mapping[str, OwnedTopic | None], what: str) -> None:
        for remote, t in changes.items():  # (not read yet: read with these when first needed)
            if self.owned is None:
                break
            if t is None:
                self.owned.pop(remote, None)
            else:
                self.owned[remote] = t
        self.unsaved.update(changes)
        if not self.unsaved:
            return
        try:
            self.records.write([(self.records.key(r), None if t is None else t.value())
                                for r, t in self.unsaved.items()], what)
            self.unsaved = {}
        except Exception as e:  # noqa: BLE001 - kept in memory, written at the next round
            log.warning("mirror %s: cannot write the %s to the progress topic: %s; tried again at the next sync",
                        self.mirror.name, what, e)

    def created(self, created: Iterable[tuple[str, str, str, str]]) -> None:
        """Record remote topics just created: (remote, source topic, source id, remote id)."""
        now = int(time.time() * 1000)
        rows = {r: OwnedTopic(r, s, sid, rid, now) for r, s, sid, rid in created}
        if rows:
            self._save(rows, f"records of {len(rows)} created remote topic(s)")

    def observe(self, source_topics: Iterable[str], target_topics: Iterable[str],
                now_ms: int | None = None) -> DeletionPlan:
        """The plan now, writing nothing (what `sparkmirror plan` shows). `source_topics`, `target_topics`: what the
        clusters list; a listed topic whose id cannot be described counts as its recorded one (never as gone)."""
        source_topics, target_topics = set(source_topics), set(target_topics)
        owned = list(self.load(target_topics).values())
        sources = {t.source for t in owned if t.source in source_topics and t.deleted_ms is None}
        remotes = {t.remote for t in owned if t.remote in target_topics}
        sids, tids = self.ids("source", sources), self.ids("target", remotes)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return plan_deletions(owned, {s: sids.get(s, "") for s in sources}, {r: tids.get(r, "") for r in remotes},
                              now, self.mirror.deletion.graceSeconds, self.mirror.deletion.enabled)

    def round(self, plan, source_topics: Iterable[str], target_partitions: Mapping[str, int]) -> set[str]:
        """One round beside a sync: record what was seen, delete what is due, and take the routes of recreated
        source topics out of `plan` (a `topicplan.SyncPlan`) while their old remote topic is there. Returns the
        source topics starting a new history. A failure is logged and leaves the plan as it is (a recreated
        topic is then met by the recreated-topic check)."""
        try:
            dplan = self.observe(source_topics, target_partitions)
            deleted = self.apply(dplan, target_partitions)
        except Exception as e:  # noqa: BLE001 - deletion propagation never stops the copy
            log.warning("mirror %s: deletion propagation skipped this round: %s: %s", self.mirror.name,
                        type(e).__name__, e)
            return set()
        self.last = dplan
        held = dplan.held | {t.source for t in deleted}
        busy = {p.topic.remote for p in dplan.delete + dplan.waiting} | {t.remote for t in deleted}
        plan.routes = [r for r in plan.routes if r.source_topic not in held]
        plan.create = [c for c in plan.create if c.name not in busy]
        plan.add_partitions = [a for a in plan.add_partitions if a.name not in busy]
        plan.alter_configs = [a for a in plan.alter_configs if a.name not in busy]
        return held

    def record_created(self, created, routes) -> None:
        """Ownership: the remote topics a sync created (`topicplan.CreateTopic`s; `routes` say their sources), with
        both topic ids, into the progress topic. Unrecorded, a topic is never deleted: safe, and said."""
        source_of = {r.target_topic: r.source_topic for r in routes}
        created = [c for c in created if c.name in source_of]
        if not created:
            return
        try:
            sids = self.ids("source", {source_of[c.name] for c in created})
            tids = self.ids("target", {c.name for c in created})
            self.created([(c.name, source_of[c.name], sids.get(source_of[c.name], ""), tids.get(c.name, ""))
                          for c in created])
        except Exception as e:  # noqa: BLE001
            log.warning("mirror %s: the remote topics it created could not be recorded as its own (%s: %s); they "
                        "will never be deleted by deletion propagation", self.mirror.name, type(e).__name__, e)

    def apply(self, plan: DeletionPlan, target_partitions: Mapping[str, int]) -> list[OwnedTopic]:
        """Record what was seen, delete what is due; returns the topics deleted."""
        changes: dict[str, OwnedTopic | None] = {t.remote: t for t in plan.record}
        changes.update({r: None for r in plan.forget})
        seen_now = {t.remote for t in plan.record if t.gone_ms is not None}
        for p in plan.waiting:
            if p.topic.remote in seen_now:
                log.warning("mirror %s: %s; its remote topic %s is deleted in %.0f s unless it comes back",
                            self.mirror.name, p.why, p.topic.remote, (p.due_ms - (p.topic.gone_ms or 0)) / 1000)
        for t in plan.record:
            if t.gone_ms is None:
                log.info("mirror %s: source topic %r is back: remote topic %s is kept", self.mirror.name, t.source,
                         t.remote)
        for r in plan.forget:
            log.info("mirror %s: remote topic %s is no longer the one it created (deleted or replaced by someone "
                     "else): forgotten, never deleted by the mirror", self.mirror.name, r)
        if changes:
            self._save(changes, "topic records")
        deleted: list[OwnedTopic] = []
        for p in plan.delete:
            t = p.topic
            parts = target_partitions.get(t.remote, 0)
            try:  # the progress of the old history first: a crash after the deletion leaves nothing to resume
                self.records.write([(progress_key(self.mirror.source, t.source, i, self.records.config.resource), None)
                                    for i in range(parts)], f"progress reset of source topic {t.source!r}")
            except Exception as e:  # noqa: BLE001 - not deleted this round; tried again at the next
                log.warning("mirror %s: remote topic %s not deleted: resetting its progress failed: %s",
                            self.mirror.name, t.remote, e)
                continue
            fut = self.admin("target").delete_topics([t.remote], operation_timeout=self.timeout,
                                                     request_timeout=self.timeout)[t.remote]
            try:
                fut.result(timeout=self.timeout)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    log.warning("mirror %s: deleting remote topic %s failed: %s; tried again at the next sync",
                                self.mirror.name, t.remote, e.args[0].str())
                    continue
            done = replace(t, deleted_ms=int(time.time() * 1000))
            deleted.append(done)
            log.warning("mirror %s: deleted remote topic %s (%d partitions): %s for %.0f s (grace %d s)",
                        self.mirror.name, t.remote, parts, p.why, (done.deleted_ms - (t.gone_ms or 0)) / 1000,
                        self.mirror.deletion.graceSeconds)
        if deleted:
            self._save({t.remote: t for t in deleted}, "records of deleted remote topics")
            self.deleted += deleted
        return deleted
