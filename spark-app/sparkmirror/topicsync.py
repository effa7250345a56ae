"""Topic management beside the copy (driver side): discover, create and keep remote topics in sync.

Split as the design asks:
- *planning* (pure) lives in `topicplan`: `plan_sync()` decides from plain descriptions of the source and target
  topics what to copy, create, grow and change;
- *I/O*, here: `TopicSync` reads both clusters with confluent-kafka's AdminClient (`plan()`, which writes nothing and
  is what `sparkmirror plan` shows), applies the plan and returns the routes to copy (`sync()`). The job calls `sync()` every `refreshTopicsIntervalSeconds`, so new matching topics
  and added partitions are picked up while running.

Configs follow MM2 (`sync.topic.configs.enabled`, `config.properties.exclude`, `use.defaults.from=target`):
a remote topic is always created with the source's configs; `sync.topic.configs.enabled` only decides whether
they are kept in sync afterwards. Only properties set explicitly on the source topic (`DYNAMIC_TOPIC_CONFIG`), neither read-only nor
sensitive nor matched (whole name) by one of `configPropertiesExclude`, are copied; a property set on the
remote topic but no longer on the source goes back to the target's default. Excluded properties on the
remote topic are left alone. Partition counts only grow (Kafka cannot shrink them); a remote topic with
more partitions than its source is accepted and only the source's partitions are copied.

Topic ACLs follow MM2's `sync.topic.acls.enabled` (every `syncTopicAclsIntervalSeconds`, checked at each
`sync()`): `aclsync` holds the rule and the I/O; `sync()` runs it after the topics are in place and it never
stops the copy. What the mirror created is recorded in its progress topic (`aclsync.AclRecord`), so only that
is ever removed.

Deletion propagation (`deleteRemoteTopics`, opt-in) follows `topicdeletion`: every remote topic `sync()` creates
is recorded in the progress topic (so only those are ever deleted); with the setting on, `sync()` deletes the
ones whose source topic has been gone (or recreated) for the grace period, holds the route of a recreated source
topic until its old remote topic is deleted, and `plan()`'s caller sees the same through `deletion_plan()`.

A topic deleted and recreated at the source (new topic id, or its end offsets going backwards) is never
handled silently: with the flow group's `sourceGapPolicy: fail` `sync()` raises `TopicRecreated`; with
`skip` it logs an error, records it in `TopicSync.problems` and goes on (the copier then applies the same
policy to the offsets that no longer exist).
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, OffsetSpec)

from .aclsync import AclRecord, AclState, AclSync, mirror_principal
from .credentials import CredentialWatch, RefusalGrace
from . import replicas
from .replicas import refused, source_factor
from .resource.flowgroup import Cluster, FlowGroupConfig, Mirror
from .replication import GroupFilter, policy_for
from .topicdeletion import DeletionPlan, TopicDeletion, TopicRecords
from .topicplan import (ConfigValue, CreateTopic, SourceTopic, SyncPlan, TargetTopic, TopicRoute, compile_excludes,
                        metadata_batches, plan_sync, select_topics, topic_filter)

log = logging.getLogger(__name__)

TRUNCATION_SECONDS = 30.0
"""Without topic ids: how long a source topic's end offsets must stay below the highest seen before that is
reported as a truncation (a new partition leader's high watermark lags the old one's for a while)."""


VISIBLE_WAIT_SECONDS = 5.0
"""How long a sync waits for remote topics it created or grew to be known to the target's brokers before it
routes the rest without them."""
UNKNOWN_CONFIG = re.compile(r"Unknown topic config name: (\S+)")
"""How a broker names the config it refused (INVALID_CONFIG carries the name only in its message)."""

# ---------------------------------------------------------------------------------------------- I/O

def list_offsets(admin: AdminClient, tps: list[tuple[str, int]], spec: OffsetSpec,
                 timeout: float, **options) -> dict[tuple[str, int], int]:
    """Offsets of (topic, partition) by `spec`; a partition that vanished since it was listed is left out.
    `options`: AdminClient.list_offsets's (isolation_level)."""
    if not tps:
        return {}
    futs = admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, request_timeout=timeout, **options)
    out = {}
    for tp, fut in futs.items():
        try:
            out[(tp.topic, tp.partition)] = fut.result(timeout=timeout).offset
        except KafkaException:
            continue
    return out


def topic_ids(admin: AdminClient, topics: set[str], timeout: float = 30.0) -> dict[str, str]:
    """name -> Kafka topic id (KIP-516) of the topics that exist; a topic deleted and created again under its
    name gets a new id. A topic that cannot be described is left out: deleted since listed (the next look sees
    it gone), or not allowed (what is done with it then fails with its own error)."""
    if not topics:
        return {}
    out = {}
    for name, fut in admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=timeout).items():
        try:
            out[name] = str(fut.result(timeout=timeout).topic_id)
        except KafkaException:
            continue
    return out


class TopicSyncError(RuntimeError):
    """Topic management cannot go on; the message names the config field or topic at fault."""


class TopicRecreated(TopicSyncError):
    pass


class ReplicationFactorRefused(TopicSyncError, replicas.ReplicationFactorRefused):
    """A remote topic the target cannot hold (too few brokers): a topic sync error by its type's name too, as
    that name is how the driver tells it in the query's exception text (replicas.refusal_in)."""


@dataclass(frozen=True)
class Problem:
    kind: str      # "recreated", "conflict", "unknownConfig"
    topic: str
    message: str
    at: float


def _config_values(entries: Mapping[str, ConfigEntry]) -> dict[str, ConfigValue]:
    return {k: ConfigValue(e.value, e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                           or e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG, bool(e.is_read_only),
                           bool(e.is_sensitive)) for k, e in entries.items()}


class TopicSync:
    """Keeps one mirror's remote topics in sync and says what to copy. Not thread-safe; one per mirror."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0) -> None:
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.policy = policy_for(mirror)
        self.filter = topic_filter(config, mirror)
        self.exclude = compile_excludes(mirror.configPropertiesExclude)
        self.source_cluster: Cluster = config.cluster(mirror.source)
        self.target_cluster: Cluster = config.cluster(mirror.target)
        self._source_admin: AdminClient | None = None
        self._target_admin: AdminClient | None = None
        self._credentials = CredentialWatch([self.source_cluster, self.target_cluster])  # before any client
        self._grace = RefusalGrace()
        self._topic_ids: dict[str, str] = {}
        self.end_offsets: dict[tuple[str, int], int] = {}   # source (topic, partition) -> highest end offset seen
        self._behind_since: dict[str, float] = {}  # source topic -> since when its end offsets are below those
        self.routes: list[TopicRoute] = []
        self.problems: list[Problem] = []
        self.unknown_on_target: set[str] = set()  # topic config names the target refused as unknown
        self._configs_synced_at = float("-inf")
        self._acls_synced_at = float("-inf")
        self._acls: AclSync | None = None
        self._deletion: TopicDeletion | None = None
        self.source_topics: dict[str, int] = {}   # every topic -> partitions, as the last plan() listed them
        self.target_topics: dict[str, int] = {}
        self.source_factors: dict[str, int | None] = {}  # every topic -> replication factor, as last listed
        self.target_brokers: int | None = None
        self.last_sync: float | None = None

    # -- clients
    def _admin(self, which: str) -> AdminClient:
        cluster = self.source_cluster if which == "source" else self.target_cluster
        attr = f"_{which}_admin"
        if self._credentials.changed():  # a Secret replaced in place: clients from the new credentials
            log.info("mirrors[%s]: the credentials of cluster %s changed: making the topic sync's clients again",
                     self.mirror.name, self._credentials.names())
            self._source_admin = self._target_admin = None
        if getattr(self, attr) is None:
            conf = {**cluster.client_config(), "socket.connection.setup.timeout.ms": str(int(self.timeout * 1000))}
            setattr(self, attr, AdminClient(conf))
        return getattr(self, attr)

    def _where(self, which: str) -> str:
        c = self.source_cluster if which == "source" else self.target_cluster
        return (f"mirrors[{self.mirror.name}].{which}: cluster {c.alias!r} "
                f"(clusters[{c.alias}].bootstrapServers={c.bootstrapServers})")

    def check_refusals(self) -> None:
        """Raises TopicSyncError naming the cluster when one refuses the mirror's credentials or certificates:
        for librdkafka that is a transport failure, which would otherwise be waited out as an outage for ever.
        Asked after a failure that looked transient, never on the way of a working sync. Credentials being
        rotated are refused for a while (the broker's and the mounted Secret's change apart): a refusal stands
        only once the same credentials were refused for longer than the grace (credentials.RefusalGrace); until
        then the failure is waited out, with clients made again from whatever the files hold by then."""
        from .refusal import refusal

        for which in ("source", "target"):
            cluster = self.source_cluster if which == "source" else self.target_cluster
            refused = refusal(cluster.client_config(), min(self.timeout, 5.0))
            if refused is None:
                self._grace.accepted(cluster.alias)
                continue
            left = self._grace.refused(cluster)
            if left is None:
                raise TopicSyncError(f"{self._where(which)} refuses the mirror: {refused}")
            log.warning("%s refuses the mirror's credentials (%s): waited on for up to %.0f s more, as credentials "
                        "being rotated are", self._where(which), refused, left)
            setattr(self, f"_{which}_admin", None)  # the next try makes its client from the files as they are then

    def _list(self, which: str) -> dict[str, int]:
        try:
            md = self._admin(which).list_topics(timeout=self.timeout)
        except KafkaException as e:
            raise TopicSyncError(f"{self._where(which)} is unreachable: {e.args[0].str() if e.args else e}") from e
        topics = {n: t for n, t in md.topics.items() if t.error is None}
        if which == "source":
            self.source_factors = {n: source_factor(t.partitions) for n, t in topics.items()}
        else:
            self.target_brokers = len(md.brokers)
        return {n: len(t.partitions) for n, t in topics.items()}

    def describe_configs(self, which: str, names: Iterable[str]) -> dict[str, dict[str, ConfigValue]]:
        """Configs of topics of the "source" or "target" cluster (a topic deleted meanwhile is left out)."""
        names = list(names)
        if not names:
            return {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        futs = self._admin(which).describe_configs(resources, request_timeout=self.timeout)
        out = {}
        for res, fut in futs.items():
            try:
                out[res.name] = _config_values(fut.result(timeout=self.timeout))
            except KafkaException as e:
                if e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted since listed
                raise TopicSyncError(f"{self._where(which)}: describing configs of topic {res.name!r} failed: {e}") from e
        return out


    @property
    def acls(self) -> AclSync:
        if self._acls is None:
            # the groups whose offsets are checkpointed are those whose ACLs go
            own = mirror_principal(self.target_cluster)
            self._acls = AclSync(self.mirror.name, self.mirror.source, self.mirror.target, self.policy, self._admin,
                                 GroupFilter.of(self.mirror).matches, [own] if own else [], self.timeout,
                                 AclRecord(self.config, self.mirror.name, self.timeout))
        return self._acls

    @property
    def deletion(self) -> TopicDeletion:
        if self._deletion is None:
            self._deletion = TopicDeletion(self.mirror, self._admin, self._ids_of,
                                           TopicRecords(self.config, self.mirror.name, self.timeout), self.timeout)
        return self._deletion

    def deletion_plan(self, now_ms: int | None = None) -> DeletionPlan:
        """What deletion propagation would do now, writing nothing (after `plan()`, whose listings it uses)."""
        if not self.mirror.deletion.enabled:
            return DeletionPlan()
        return self.deletion.observe(self.source_topics, self.target_topics, now_ms)

    def _ids_of(self, which: str, names: set[str]) -> dict[str, str]:
        return topic_ids(self._admin(which), names, self.timeout)

    def acl_state(self, routes: list[TopicRoute] | None = None) -> AclState:
        """What ACL sync would do now, writing nothing (after `plan()`, whose routes and target topics it uses)."""
        if not self.mirror.syncTopicAcls:
            return AclState("off", "sync.topic.acls.enabled is false")
        remote = {r.source_topic: r.target_topic for r in (self.routes if routes is None else routes)}
        try:
            return self.acls.observe(remote, self.target_topics)
        except Exception as e:  # noqa: BLE001 - a look at ACLs never fails the plan
            return AclState("unavailable", f"reading ACLs failed: {type(e).__name__}: {e}")

    def _sync_acls(self, routes: list[TopicRoute], now: float) -> None:
        """ACL sync at its own interval; a look that could not read both clusters is tried again next time."""
        if not self.mirror.syncTopicAcls or now - self._acls_synced_at < self.mirror.syncTopicAclsIntervalSeconds:
            return
        state = self.acls.sync({r.source_topic: r.target_topic for r in routes}, self.target_topics)
        if state.status != "unavailable":
            self._acls_synced_at = now

    def _end_offsets(self, routes: list[TopicRoute]) -> dict[tuple[str, int], int]:
        tps = [(r.source_topic, p) for r in routes for p in range(r.partitions)]
        return list_offsets(self._admin("source"), tps, OffsetSpec.latest(), self.timeout)

    # -- the sync
    def plan(self, with_configs: bool | None = None) -> SyncPlan:
        """Read both clusters and plan what `sync()` would do now, writing nothing: `sync()` applies exactly
        this, and `sparkmirror plan` shows it. with_configs: compare configs of existing remote topics
        (default: when `syncTopicConfigs` is on, as the first `sync()` does)."""
        if with_configs is None:
            with_configs = self.mirror.syncTopicConfigs
        source_parts = self._list("source")
        target_parts = self._list("target")
        selected = select_topics(self.policy, self.filter, source_parts, self.mirror.target)
        remote_names = {self.policy.format_remote_topic(self.mirror.source, t): t for t in selected}
        new_remotes = [r for r in remote_names if r not in target_parts]
        src_cfg_names = selected if with_configs else [remote_names[r] for r in new_remotes]
        src_cfgs = self.describe_configs("source", src_cfg_names)
        tgt_cfgs = self.describe_configs("target", [r for r in remote_names if r in target_parts]) \
            if with_configs else {}
        sources = {t: SourceTopic(t, source_parts[t], src_cfgs.get(t),
                                  replication_factor=self.source_factors.get(t)) for t in selected}
        targets = {r: TargetTopic(r, target_parts[r], tgt_cfgs.get(r)) for r in remote_names if r in target_parts}
        self.source_topics, self.target_topics = source_parts, target_parts
        return plan_sync(self.mirror, self.policy, self.filter, sources, targets, self.exclude)

    def sync(self, routed: Callable[[list[TopicRoute]], None] | None = None) -> list[TopicRoute]:
        """Discover, create/update remote topics, return the routes to copy (sorted by source topic).

        `routed` gets the routes as soon as they are decided, before ACL sync and the recreated-topic check (at
        10,000 partitions those took 2-3 s after a new remote topic was created, on the loaded benchmark
        machine, and a new topic's first epoch waited for them). The lanes check topic ids and offsets
        themselves when they start (copying/start.py), so a recreated topic is not copied past either way."""
        now = time.monotonic()
        with_configs = self.mirror.syncTopicConfigs and (
            now - self._configs_synced_at >= self.mirror.syncTopicConfigsIntervalSeconds)
        plan = self.plan(with_configs)
        for topic, why in plan.conflicts:
            if not any(p.kind == "conflict" and p.topic == topic for p in self.problems):
                self._problem("conflict", topic, why, fail=False)
        if self.mirror.deletion.enabled:
            for topic in self.deletion.round(plan, self.source_topics, self.target_topics):
                self._topic_ids.pop(topic, None)  # a new history: never compared with the old topic's id or offsets
                for k in [k for k in self.end_offsets if k[0] == topic]:
                    del self.end_offsets[k]
        created = self._apply(plan)
        self.deletion.record_created(created, plan.routes)
        if plan.create or plan.add_partitions:
            plan.routes = self._visible(plan)
        if with_configs:
            self._configs_synced_at = now
        if routed is not None:
            routed(list(plan.routes))
        self._sync_acls(plan.routes, now)
        self._check_recreated(plan.routes)
        self.routes, self.last_sync = plan.routes, time.time()
        self._grace = RefusalGrace()  # both clusters answered: a later refusal gets a grace of its own
        return list(plan.routes)

    def _visible(self, plan: SyncPlan, wait: float = VISIBLE_WAIT_SECONDS) -> list[TopicRoute]:
        """The routes whose remote partitions the target's brokers know: CreateTopics returns once the controller
        committed the topics, and a broker applies thousands of new partitions seconds later (the scale
        benchmark's 1,000 topics of 10 partitions stayed unknown to it for over 30 s). Lanes copy only into
        known partitions; the rest is routed by a later sync."""
        deadline = time.monotonic() + wait
        while True:
            known = self._list("target")
            late = [r for r in plan.routes if known.get(r.target_topic, 0) < r.partitions]
            if not late or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not late:
            return plan.routes
        log.info("mirror %s: %d remote topics created or grown are not known to the target's brokers yet (%s): "
                 "routed once they are", self.mirror.name, len(late), late[0].target_topic)
        out = []
        for r in plan.routes:
            have = min(known.get(r.target_topic, 0), r.partitions)
            if have == r.partitions:
                out.append(r)
            elif have > 0:  # grown: its new partitions wait
                out.append(TopicRoute(r.source_topic, r.target_topic, have))
        return out

    def _apply(self, plan: SyncPlan) -> list[CreateTopic]:
        """Apply the plan; returns the remote topics it created (not those another worker was first to)."""
        admin = self._admin("target")
        created: list[CreateTopic] = []
        pending = list(plan.create)
        while pending:  # again without a config the target refused as unknown (at most once per config name)
            futs: dict = {}
            for batch in metadata_batches(pending, lambda c: c.partitions + 1 + len(c.configs)):
                futs.update(admin.create_topics(
                    [NewTopic(c.name, num_partitions=c.partitions, replication_factor=c.replication_factor,
                              config=self._known(c.configs)) for c in batch],
                    operation_timeout=self.timeout, request_timeout=self.timeout))
            again = set()
            for name, fut in futs.items():
                try:
                    fut.result(timeout=self.timeout)
                    created.append(next(c for c in pending if c.name == name))
                    log.info("mirror %s: created remote topic %s", self.mirror.name, name)
                except KafkaException as e:
                    if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:  # another worker was first
                        continue
                    if self._unknown_on_target(e.args[0], name):
                        again.add(name)
                        continue
                    self._too_few_brokers(e, next(c for c in pending if c.name == name))
                    raise TopicSyncError(f"{self._where('target')}: creating remote topic {name!r} failed: "
                                         f"{e.args[0].str()}") from e
            pending = [c for c in pending if c.name in again]
        if plan.add_partitions:
            futs = {}
            for batch in metadata_batches(plan.add_partitions, lambda a: a.total - a.current):
                futs.update(admin.create_partitions([NewPartitions(a.name, a.total) for a in batch],
                                                    operation_timeout=self.timeout, request_timeout=self.timeout))
            for name, fut in futs.items():
                try:
                    fut.result(timeout=self.timeout)
                    log.info("mirror %s: raised partitions of remote topic %s", self.mirror.name, name)
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.INVALID_PARTITIONS:  # already raised concurrently
                        raise TopicSyncError(f"{self._where('target')}: adding partitions to {name!r} failed: "
                                             f"{e.args[0].str()}") from e
        pending_alters = [a for a in plan.alter_configs if self._known(a.set) or a.delete]
        while pending_alters:  # again without a config the target refused as unknown, as for creation
            altered = {}
            for batch in metadata_batches(pending_alters, lambda a: len(a.set) + len(a.delete)):
                altered.update(admin.incremental_alter_configs([ConfigResource(
                    ConfigResource.Type.TOPIC, a.name, incremental_configs=[
                        *(ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                          for k, v in self._known(a.set).items()),
                        *(ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in a.delete)])
                    for a in batch], request_timeout=self.timeout))
            again = set()
            for res, fut in altered.items():
                try:
                    fut.result(timeout=self.timeout)
                    log.info("mirror %s: synced configs of remote topic %s", self.mirror.name, res.name)
                except KafkaException as e:
                    if self._unknown_on_target(e.args[0], res.name):
                        again.add(res.name)
                        continue
                    raise TopicSyncError(f"{self._where('target')}: altering configs of {res.name!r} failed: "
                                         f"{e.args[0].str()}") from e
            pending_alters = [a for a in pending_alters if a.name in again and (self._known(a.set) or a.delete)]
        return created

    def _too_few_brokers(self, e: KafkaException, c: CreateTopic) -> None:
        """Raises the refusal naming the key to set when the target has fewer brokers than the factor."""
        origin = "the source topic's" if self.mirror.replicationFactor is None else "replication.factor"
        key = f"replication.factor in mirrors[{self.mirror.name}]'s connector config"
        why = refused(e, self._admin("target"), c.name, c.replication_factor, key, self.mirror.target, self.timeout,
                      origin)
        if why is not None:
            raise ReplicationFactorRefused(f"{self._where('target')}: remote topic {c.name!r} not created: {why}") \
                from e

    def _known(self, configs: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in configs.items() if k not in self.unknown_on_target}

    def _unknown_on_target(self, err: KafkaError, topic: str) -> bool:
        """A config the target's release does not know (4.0 removed `message.format.version` and
        `message.downconversion.enable`, KIP-724; an older target lacks a newer name): left out of this mirror's
        remote topics from now on, said once, instead of ending the mirror over a setting the target cannot hold.
        False when the refusal is anything else, or names a config already left out (no second try)."""
        found = UNKNOWN_CONFIG.search(err.str() or "") if err.code() == KafkaError.INVALID_CONFIG else None
        if found is None or found.group(1) in self.unknown_on_target:
            return False
        name = found.group(1)
        self.unknown_on_target.add(name)
        self.problems.append(Problem("unknownConfig", topic, f"mirrors[{self.mirror.name}]: the target does not "
                                     f"know topic config {name!r} (a release that dropped or predates it): remote "
                                     "topics are made and synced without it", time.time()))
        log.warning("%s", self.problems[-1].message)
        return True

    def _check_recreated(self, routes: list[TopicRoute]) -> None:
        """A source topic recreated (a new topic id, KIP-516) fails at once. End offsets below the highest seen
        say nothing where the topic id stayed the same: after a leader change the new leader's high watermark
        lagged the old one's for more than 30 s in the fault campaign (a source broker SIGKILLed on a 3-broker
        cluster), and a log truly truncated under the same id is met by the lanes, whose consumers check their
        position against the leader epoch (KIP-320). Without topic ids (older brokers) they count when they
        stay below for TRUNCATION_SECONDS."""
        ids = topic_ids(self._admin("source"), {r.source_topic for r in routes}, self.timeout)
        ends = self._end_offsets(routes)
        flagged = set()
        for topic, tid in sorted(ids.items()):
            old, self._topic_ids[topic] = self._topic_ids.get(topic), tid
            if old is not None and old != tid:
                flagged.add(topic)
                self._problem("recreated", topic, f"mirrors[{self.mirror.name}]: source topic {topic!r} was deleted "
                              f"and recreated (topic id {old} -> {tid}); its offsets start again, so progress "
                              "recorded for it no longer matches the source", fail=True)
        now = time.monotonic()
        behind = {t for (t, p), o in ends.items() if o < self.end_offsets.get((t, p), -1)} - flagged - set(ids)
        for topic in set(self._behind_since) - behind:
            log.info("mirror %s: end offsets of source topic %r are back where they were", self.mirror.name, topic)
            del self._behind_since[topic]
        confirmed = set()
        for topic in sorted(behind):
            since = self._behind_since.setdefault(topic, now)
            if since == now:
                log.warning("mirror %s: end offsets of source topic %r went back (a leader change?); looking again "
                            "for %.0f s before calling it a truncation", self.mirror.name, topic, TRUNCATION_SECONDS)
            elif now - since >= TRUNCATION_SECONDS:
                confirmed.add(topic)
                del self._behind_since[topic]
        for (topic, part), o in ends.items():  # the baseline: the highest end seen, unless the topic changed
            if topic in flagged or topic in confirmed or topic in ids or o > self.end_offsets.get((topic, part), -1):
                self.end_offsets[(topic, part)] = o
        for topic in sorted(confirmed):
            self._problem("recreated", topic, f"mirrors[{self.mirror.name}]: end offsets of source topic {topic!r} "
                          f"went backwards and stayed there for {TRUNCATION_SECONDS:.0f} s; it was recreated or "
                          "truncated", fail=True)

    def _problem(self, kind: str, topic: str, message: str, fail: bool) -> None:
        self.problems.append(Problem(kind, topic, message, time.time()))
        log.error("%s", message)
        if fail and self.config.sourceGapPolicy == "fail":
            raise TopicRecreated(message + " (sourceGapPolicy=fail; set it to 'skip' to continue past it)")

    def close(self) -> None:
        self._source_admin = self._target_admin = None
