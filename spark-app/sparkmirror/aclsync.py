"""ACL sync (`sync.topic.acls.enabled`): who may read a remote topic or a synced group follows the source.

MirrorMaker 2 copies the LITERAL topic ACLs of replicated topics onto the remote topic's name, drops ALLOW
WRITE, turns ALLOW ALL into ALLOW READ, copies every other binding as it is (ALTER, DELETE, ... included) and
never removes one. sparkmirror keeps the key, its interval key and their meaning, and applies this rule:

In scope (read on the source)
- TOPIC bindings on topics this mirror replicates, chosen as the topics themselves are (topic filter, internal
  topics, loop rule: a remote topic of the target is never mapped back). LITERAL on a replicated topic ->
  LITERAL on its remote name. PREFIXED whose prefix covers at least one replicated topic -> PREFIXED on the
  remote prefix (`<alias><sep><prefix>` under the default policy, the prefix itself under identity); when that
  remote prefix would also cover a target topic the mirror does not write (the target's own topics under
  identity, the mirror's checkpoints topic), it becomes LITERAL bindings on the remote topics it covers instead,
  so nobody gets anything on the target that is not a copy of what they had on the source.
- GROUP bindings on the consumer groups the mirror checkpoints (they exist on the source and `groups` /
  `groupsExclude` select them): LITERAL on such a group, or PREFIXED covering one, copied with the same name
  and pattern (groups keep their names across clusters, as in MM2's checkpoints).
- The wildcard `*` is never copied. On the source it grants on every topic (group) of that cluster, most of
  which this mirror does not replicate; on the target it would grant on all of the target's own topics and
  groups too, and no binding means "only the replicated ones" (`<alias><sep>` would also cover the mirror's
  checkpoints topic, and identity has no such prefix). Wildcard grants are the target admin's to make. A
  wildcard DENY still counts, see below.
- Nothing else: cluster, transactional-id and delegation-token ACLs belong to each cluster.

What goes across
- ALLOW READ, DESCRIBE and (topics) DESCRIBE_CONFIGS as they are; ALLOW ALL becomes ALLOW READ + DESCRIBE.
- WRITE, CREATE, DELETE, ALTER, ALTER_CONFIGS, IDEMPOTENT_WRITE, allowed or denied, never: remote topics are
  written by the mirror alone, and write rights on the target are the target's business.
- DENY READ, DESCRIBE, DESCRIBE_CONFIGS and ALL as they are, so a deny on the source does not turn into an
  allow on the target by being left behind. A DENY the mirror cannot carry -- on the wildcard, or for `User:*`
  or the mirror's own user on the target (it would stop the mirror describing and writing its own remote
  topics) -- instead keeps every ALLOW it overrides on the source from being copied (same or wildcard
  principal and host, an operation it denies, a replicated topic or synced group in common).
- Principals and hosts are kept: a principal is taken to be the same user on both clusters, as MM2 does.

Removals: only of bindings this mirror created. The mirror records on the target what it created and still
owns (its ACL record, under a key of its own in its progress topic, see `progress/record.py`). A binding is
deleted when the mirror owns it, it is in scope (a kind the sync copies -- ALLOW READ/DESCRIBE/DESCRIBE_CONFIGS,
DENY of those or ALL, not for `User:*` or itself -- LITERAL on a remote topic or a synced group, PREFIXED mapping
back to a prefix covering a replicated topic (synced group) and covering no target topic the mirror does not
write) and the source no longer implies it. A binding that was on the target before the mirror would have
created it (made by hand: a DR consumer's or an analytics team's READ on a remote topic) is never adopted: the
mirror did not create it, so it stays whatever the source says. A binding the mirror owns that someone deleted
by hand is created again while the source implies it (the source is the truth), and forgotten once it does not.
Write-side bindings, bindings on the target's own topics and groups, and wildcards are never touched. A topic or
group that leaves the scope keeps its bindings on the target as they are (and the mirror keeps owning them).
After a sync: owned' = (owned still on the target - deleted) | created, written back when it changed.

Shape: `plan_acl_sync()` is pure (source bindings, target bindings, `AclScope`, owned bindings) ->
`AclPlan(create, delete, skipped, kept)`; `AclSync` reads both clusters with confluent-kafka's AdminClient and
its ACL record with the progress reader (once, then kept in memory: the mirror is the record's only writer),
applies the plan and writes the record back (`AclRecord`); `sparkmirror plan` reads the record, writes nothing. A cluster
without an authorizer (SECURITY_DISABLED; Kafka 4 brokers list no ACLs then, and say so when one is created)
means nothing to sync, and a target that refuses to create ACLs is a warning; both are logged once per change
of state, never raised: ACLs are not data, the copy goes on.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from .handoff.takeover import write_records
from .progress import read_progress
from .progress.record import PROGRESS_FORMAT_VERSION, acls_key, acls_value
from .replication import IdentityReplicationPolicy, ReplicationPolicy

log = logging.getLogger(__name__)

WILDCARD = "*"
ANY_PRINCIPAL = "User:*"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
READ_SIDE: Mapping[ResourceType, frozenset[AclOperation]] = {
    TOPIC: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS}),
    GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE}),
}
"""The rights that go across, per resource type; everything else is write-side (or the group's own admin)."""
ALLOW_ALL_BECOMES = (AclOperation.READ, AclOperation.DESCRIBE)
IMPLIED: Mapping[AclOperation, frozenset[AclOperation]] = {AclOperation.READ: frozenset({AclOperation.DESCRIBE})}
"""Kafka's authorizer lets an ALLOW READ describe too: a DENY DESCRIBE overrides that part of it."""
EVERY_BINDING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)


# ---------------------------------------------------------------------------------------------- planning

def remote_prefix(policy: ReplicationPolicy, source_alias: str, prefix: str) -> str:
    """The target prefix of a source topic prefix: names under it are the remote names of the names under the
    source prefix (identity keeps names; heartbeats aside, which no prefix binding is worth an exception for)."""
    if isinstance(policy, IdentityReplicationPolicy):
        return prefix
    return f"{source_alias}{policy.separator}{prefix}"


def source_prefix(policy: ReplicationPolicy, source_alias: str, prefix: str) -> str | None:
    """The inverse of `remote_prefix`; None when a target prefix cannot be one of this mirror's."""
    if isinstance(policy, IdentityReplicationPolicy):
        return prefix
    head = f"{source_alias}{policy.separator}"
    return prefix[len(head):] if prefix.startswith(head) and len(prefix) > len(head) else None


@dataclass(frozen=True)
class AclScope:
    """What one mirror governs now: its routes, the groups it checkpoints, the target's topics."""

    source_alias: str
    policy: ReplicationPolicy
    remote: Mapping[str, str]                       # replicated source topic -> remote topic
    groups: frozenset[str] = frozenset()            # source groups the mirror checkpoints (existing, selected)
    target_topics: frozenset[str] = frozenset()     # every topic of the target, to find ones the mirror does not write
    own_principals: frozenset[str] = frozenset({ANY_PRINCIPAL})  # never given a deny: the mirror's own on the target

    def names(self, rtype: ResourceType) -> Iterable[str]:
        return self.remote if rtype == TOPIC else self.groups

    @cached_property
    def remote_names(self) -> frozenset[str]:
        return frozenset(self.remote.values())

    @cached_property
    def foreign(self) -> frozenset[str]:
        """Target topics the mirror does not write: neither a remote topic of a route nor, under a policy whose
        names say where they came from, a non-internal topic named after this source (a remote topic whose
        source topic is gone is still the mirror's)."""
        named = not isinstance(self.policy, IdentityReplicationPolicy)
        return frozenset(t for t in self.target_topics if t not in self.remote_names and not (
            named and self.policy.topic_source(t) == self.source_alias and not self.policy.is_internal_topic(t)))


@dataclass
class AclPlan:
    create: list[AclBinding] = field(default_factory=list)
    delete: list[AclBinding] = field(default_factory=list)
    skipped: list[tuple[AclBinding, str]] = field(default_factory=list)  # source bindings in scope, not copied: why
    kept: frozenset[AclBinding] = frozenset()  # owned, on the target, not deleted: still the mirror's after it

    def owned_after(self, created: Iterable[AclBinding] | None = None,
                    deleted: Iterable[AclBinding] | None = None) -> frozenset[AclBinding]:
        """What the mirror owns once the plan was applied: the bindings kept, those `created`, and those it
        meant to delete but did not (still on the target). Defaults: everything went as planned."""
        created = self.create if created is None else created
        deleted = self.delete if deleted is None else deleted
        return self.kept | frozenset(created) | (frozenset(self.delete) - frozenset(deleted))


def covered(binding: AclBinding, scope: AclScope) -> frozenset[str]:
    """The replicated topics (synced groups) of the source a binding applies to; empty: not in scope."""
    names = scope.names(binding.restype)
    if binding.resource_pattern_type == LITERAL:
        if binding.name == WILDCARD:
            return frozenset(names)
        return frozenset({binding.name}) & frozenset(names)
    if binding.resource_pattern_type == PREFIXED:
        return frozenset(n for n in names if n.startswith(binding.name))
    return frozenset()


def is_read_side(binding: AclBinding) -> bool:
    """Whether a binding is of a kind the sync copies (and so may own on the target)."""
    ops = READ_SIDE.get(binding.restype, frozenset())
    if binding.permission_type == ALLOW:
        return binding.operation in ops
    return binding.permission_type == DENY and (binding.operation in ops or binding.operation == AclOperation.ALL)


def describe(binding: AclBinding) -> str:
    """One binding as people read it: `ALLOW READ User:alice from * on TOPIC PREFIXED orders-`."""
    return (f"{binding.permission_type.name} {binding.operation.name} {binding.principal} from {binding.host} on "
            f"{binding.restype.name} {binding.resource_pattern_type.name} {binding.name}")


def _overlaps(a: str, b: str, wildcard: str) -> bool:
    return a == b or wildcard in (a, b)


def _denies(deny: AclOperation, op: AclOperation) -> bool:
    return deny == AclOperation.ALL or deny == op or deny in IMPLIED.get(op, frozenset())


def _target_patterns(binding: AclBinding, names: frozenset[str],
                     scope: AclScope) -> list[tuple[ResourcePatternType, str]]:
    if binding.restype == GROUP:
        return [(binding.resource_pattern_type, binding.name)]
    if binding.resource_pattern_type == LITERAL:
        return [(LITERAL, scope.remote[binding.name])]
    prefix = remote_prefix(scope.policy, scope.source_alias, binding.name)
    if any(f.startswith(prefix) for f in scope.foreign) or any(not scope.remote[n].startswith(prefix) for n in names):
        return [(LITERAL, scope.remote[n]) for n in sorted(names)]
    return [(PREFIXED, prefix)]


def in_scope(binding: AclBinding, scope: AclScope) -> bool:
    """Whether a target binding is of a kind, and on a resource, the sync governs now: one it may have made.
    Only those the mirror also owns (created) go when the source no longer implies them."""
    if binding.restype not in READ_SIDE or binding.name == WILDCARD or not is_read_side(binding):
        return False
    if binding.permission_type == DENY and binding.principal in scope.own_principals:
        return False
    if binding.restype == GROUP:
        if binding.resource_pattern_type == LITERAL:
            return binding.name in scope.groups
        return binding.resource_pattern_type == PREFIXED and any(g.startswith(binding.name) for g in scope.groups)
    if binding.resource_pattern_type == LITERAL:
        return binding.name in scope.remote_names
    if binding.resource_pattern_type != PREFIXED:
        return False
    prefix = source_prefix(scope.policy, scope.source_alias, binding.name)
    return prefix is not None and any(t.startswith(prefix) for t in scope.remote) \
        and not any(f.startswith(binding.name) for f in scope.foreign)


def plan_acl_sync(source: Iterable[AclBinding], target: Iterable[AclBinding], scope: AclScope,
                  owned: Iterable[AclBinding] = frozenset()) -> AclPlan:
    """What to create and delete on the target so that the read-side ACLs the source implies are there and
    those the mirror created (`owned`) and the source no longer implies are not (see the module's rule);
    `skipped` says which source bindings in scope are not copied. A binding on the target that is not owned is
    never deleted, and not adopted by being implied."""
    plan = AclPlan()
    allows: list[tuple[AclBinding, frozenset[str], tuple[AclOperation, ...]]] = []
    denies: list[tuple[AclBinding, frozenset[str]]] = []
    blockers: list[tuple[AclBinding, frozenset[str]]] = []
    for b in sorted(set(source)):
        if b.restype not in READ_SIDE:
            continue
        names = covered(b, scope)
        if not names:
            continue
        ops = READ_SIDE[b.restype]
        if b.permission_type == ALLOW:
            if b.operation not in ops and b.operation != AclOperation.ALL:
                plan.skipped.append((b, f"{b.operation.name} is a write-side right: never copied (remote topics "
                                        "are written by the mirror alone)" if b.restype == TOPIC else
                                     f"{b.operation.name} on a group is not a read-side right: never copied"))
            elif b.name == WILDCARD:
                plan.skipped.append((b, "a wildcard grant is not copied: on the target it would cover every topic "
                                        "or group, not only the replicated ones"))
            else:
                allows.append((b, names, (b.operation,) if b.operation in ops else ALLOW_ALL_BECOMES))
        elif b.permission_type == DENY:
            if b.operation not in ops and b.operation != AclOperation.ALL:
                plan.skipped.append((b, f"a deny of {b.operation.name} (write-side) is not copied: no write right "
                                        "is copied either"))
            elif b.name == WILDCARD or b.principal in scope.own_principals:
                blockers.append((b, names))
                why = "on the wildcard" if b.name == WILDCARD else \
                    "for every user or the mirror's own, it would stop the mirror on its remote topics"
                plan.skipped.append((b, f"a deny {why} is not copied; the allows it overrides on the source are "
                                        "not copied either"))
            else:
                denies.append((b, names))
    desired: set[AclBinding] = set()
    for b, names, ops in allows:
        kept = []
        for op in ops:
            over = next((d for d, dn in blockers if d.restype == b.restype and names & dn
                         and _overlaps(d.principal, b.principal, ANY_PRINCIPAL) and _overlaps(d.host, b.host, WILDCARD)
                         and _denies(d.operation, op)), None)
            if over is None:
                kept.append(op)
            else:
                plan.skipped.append((b, f"{op.name} not copied: overridden on the source by {describe(over)}"))
        for pattern, name in _target_patterns(b, names, scope):
            desired.update(AclBinding(b.restype, name, pattern, b.principal, b.host, op, ALLOW) for op in kept)
    for b, names in denies:
        for pattern, name in _target_patterns(b, names, scope):
            desired.add(AclBinding(b.restype, name, pattern, b.principal, b.host, b.operation, DENY))
    have = set(target)
    mine = have & set(owned)  # an owned binding deleted by hand is no longer the mirror's, unless created again
    plan.create = sorted(desired - have)
    plan.delete = sorted(b for b in mine - desired if in_scope(b, scope))
    plan.kept = frozenset(mine - set(plan.delete))
    return plan


def binding_row(b: AclBinding) -> list[str]:
    """A binding as the ACL record holds it: enum names, in AclBinding's order."""
    return [b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name]


def binding_of(row: list[str]) -> AclBinding:
    rtype, name, pattern, principal, host, op, perm = row
    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, host, AclOperation[op],
                      AclPermissionType[perm])


# ---------------------------------------------------------------------------------------------- I/O

@dataclass
class AclState:
    """What one look at (or sync of) the ACLs found: `status` is `ok`, `no-authorizer`, `refused`, `off` or
    `unavailable`; `plan` is set when both clusters' ACLs could be read."""

    status: str
    message: str = ""
    plan: AclPlan | None = None


def _exact(b: AclBinding) -> AclBindingFilter:
    """The filter that matches exactly one binding (and hashes like the one the admin client answers for)."""
    return AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                            b.permission_type)


def mirror_principal(cluster) -> str | None:  # cluster: resource.flowgroup.Cluster
    """The mirror's principal on a cluster where it is known from the config: its SASL user."""
    auth = cluster.authentication
    if auth is not None and auth.type != "tls" and auth.username:
        return f"User:{auth.username}"
    return None


class AclRecord:
    """A mirror's ACL record in its progress topic on the target: read with the progress reader (marks only,
    no progress), written as the marks are (`write_records`)."""

    def __init__(self, config, mirror: str, timeout: float = 15.0) -> None:  # config: FlowGroupConfig
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.target = next(m.target for m in config.mirrors if m.name == mirror)

    def where(self) -> str:
        return f"progress topic {self.config.progressTopic!r} on target {self.target!r}"

    def read(self, target_topics: Iterable[str]) -> frozenset[AclBinding]:
        """The bindings the mirror owns (none while its progress topic does not exist: it wrote nothing yet)."""
        if self.config.progressTopic not in set(target_topics):
            return frozenset()
        state = read_progress(self.config.cluster(self.target).client_config(), self.config.progressTopic,
                              source_partitions=[], timeout=self.timeout, resource=self.config.resource)
        value = state.acls.get((self.config.resource, self.mirror))
        if value is None:
            return frozenset()
        if value.get("v") != PROGRESS_FORMAT_VERSION:
            raise ValueError(f"the ACL record of mirror {self.mirror!r} has format version {value.get('v')!r}; "
                             f"this version reads {PROGRESS_FORMAT_VERSION}")
        return frozenset(binding_of(row) for row in value.get("bindings", []))

    def write(self, bindings: Iterable[AclBinding]) -> None:
        rows = [binding_row(b) for b in sorted(bindings)]
        write_records(self.config, self.target, [(acls_key(self.config.resource, self.mirror),
                                                  acls_value(rows, int(time.time() * 1000)))],
                      f"ACL record of mirror {self.mirror!r}", self.timeout)


def _code(e: KafkaException) -> int | None:
    err = e.args[0] if e.args else None
    return err.code() if isinstance(err, KafkaError) else None


def _text(e: KafkaException) -> str:
    err = e.args[0] if e.args else None
    return err.str() if isinstance(err, KafkaError) else str(e)


class AclSync:
    """Reads both clusters' ACLs and the mirror's ACL record, plans with `plan_acl_sync`, applies, records what
    it owns; never raises. Owned by a TopicSync, whose admin clients it uses (`admin("source")`,
    `admin("target")`) and whose routes define its scope. `record`: where the owned bindings are kept (an
    `AclRecord`; any object with its `read`/`write`/`where`)."""

    def __init__(self, name: str, source_alias: str, target_alias: str, policy: ReplicationPolicy,
                 admin: Callable[[str], AdminClient], group_filter: Callable[[str], bool],
                 own_principals: Iterable[str] = (), timeout: float = 15.0, record: AclRecord | None = None) -> None:
        self.name, self.source_alias, self.target_alias = name, source_alias, target_alias
        self.policy, self.admin, self.group_filter, self.timeout = policy, admin, group_filter, timeout
        self.own_principals = frozenset({ANY_PRINCIPAL, *own_principals})
        self.record = record
        self.owned: frozenset[AclBinding] | None = None  # read once, then kept: the mirror is the only writer
        self.unsaved = False            # owned changed but writing the record failed: written at the next sync
        self.state: str | None = None   # the last status logged, so each change is said once
        self.last: AclState | None = None

    def _owned(self, target_topics: Iterable[str]) -> frozenset[AclBinding]:
        if self.owned is None:
            self.owned = self.record.read(target_topics) if self.record is not None else frozenset()
        return self.owned

    def _alias(self, which: str) -> str:
        return self.source_alias if which == "source" else self.target_alias

    def _describe(self, which: str) -> list[AclBinding]:
        fut = self.admin(which).describe_acls(EVERY_BINDING, request_timeout=self.timeout)
        return list(fut.result(timeout=self.timeout))

    def _groups(self) -> frozenset[str]:
        res = self.admin("source").list_consumer_groups(request_timeout=self.timeout).result(timeout=self.timeout)
        return frozenset(g.group_id for g in res.valid if self.group_filter(g.group_id))

    def observe(self, remote: Mapping[str, str], target_topics: Iterable[str]) -> AclState:
        """Read both clusters and the ACL record and plan, writing nothing (what `sparkmirror plan` shows)."""
        bindings = {}
        for which in ("source", "target"):
            try:
                bindings[which] = self._describe(which)
            except KafkaException as e:
                return self._read_failure(which, e)
        groups: frozenset[str] = frozenset()
        if any(b.restype == GROUP for side in bindings.values() for b in side):  # to copy, or to remove
            try:
                groups = self._groups()
            except KafkaException as e:
                return AclState("unavailable", f"listing consumer groups of source {self.source_alias!r} "
                                               f"failed: {_text(e)}")
        try:
            owned = self._owned(target_topics)
        except Exception as e:  # noqa: BLE001 - without it nothing may be removed, nor the record rewritten
            return AclState("unavailable", f"reading the ACLs this mirror created from {self.record.where()} "
                                           f"failed: {type(e).__name__}: {e}")
        scope = AclScope(self.source_alias, self.policy, dict(remote), groups, frozenset(target_topics),
                         self.own_principals)
        return AclState("ok", "", plan_acl_sync(bindings["source"], bindings["target"], scope, owned))

    def _read_failure(self, which: str, e: KafkaException) -> AclState:
        alias, code = self._alias(which), _code(e)
        if code == KafkaError.SECURITY_DISABLED:
            return AclState("no-authorizer", f"{which} cluster {alias!r} has no authorizer: no ACLs to sync")
        if code in (KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED):
            return AclState("refused", f"the mirror may not read the ACLs of {which} cluster {alias!r} (it needs "
                                       f"DESCRIBE on the cluster): {_text(e)}")
        return AclState("unavailable", f"reading the ACLs of {which} cluster {alias!r} failed: {_text(e)}")

    def sync(self, remote: Mapping[str, str], target_topics: Iterable[str]) -> AclState:
        """Observe and apply. Problems are logged once per change of state and returned, never raised."""
        target_topics = list(target_topics)
        try:
            state = self.observe(remote, target_topics)
            if state.plan is not None:
                state = self._apply(state)
        except Exception as e:  # noqa: BLE001 - ACLs are not data: whatever goes wrong, the copy goes on
            state = AclState("unavailable", f"ACL sync failed: {type(e).__name__}: {e}")
        self._report(state)
        self.last = state
        return state

    def _apply(self, state: AclState) -> AclState:
        plan = state.plan
        assert plan is not None
        admin = self.admin("target")
        refused: list[str] = []
        failed: list[str] = []
        disabled: list[str] = []

        def failure(e: KafkaException) -> None:
            code = _code(e)
            (refused if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED else
             disabled if code == KafkaError.SECURITY_DISABLED else failed).append(_text(e))

        created: list[AclBinding] = []
        deleted: list[AclBinding] = []
        if plan.create:
            for binding, fut in admin.create_acls(plan.create, request_timeout=self.timeout).items():
                try:
                    fut.result(timeout=self.timeout)
                    created.append(binding)
                    log.info("mirror %s: ACL created on %s: %s", self.name, self.target_alias, describe(binding))
                except KafkaException as e:
                    failure(e)
        if plan.delete and not (refused or disabled):
            by_filter = {_exact(b): b for b in plan.delete}
            for flt, fut in admin.delete_acls(list(by_filter), request_timeout=self.timeout).items():
                try:
                    for binding in fut.result(timeout=self.timeout):
                        log.info("mirror %s: ACL deleted on %s: %s", self.name, self.target_alias, describe(binding))
                    deleted.append(by_filter[flt])  # answered: it is gone (or was already)
                except KafkaException as e:
                    failure(e)
        unsaved = self._remember(plan.owned_after(created, deleted))
        if disabled:  # a broker without an authorizer lists no ACLs rather than saying so; creating one tells
            return AclState("no-authorizer", f"target cluster {self.target_alias!r} has no authorizer: no ACLs to "
                                             "sync", plan)
        if refused:
            return AclState("refused", f"target cluster {self.target_alias!r} refuses to change ACLs (the mirror "
                                       f"needs ALTER on the cluster): {refused[0]}; the copy goes on", plan)
        if failed:
            return AclState("unavailable", f"changing ACLs on target cluster {self.target_alias!r} failed: "
                                           f"{failed[0]}", plan)
        if unsaved:
            return AclState("unavailable", unsaved, plan)
        return AclState("ok", "", plan)

    def _remember(self, owned: frozenset[AclBinding]) -> str:
        """Keep what the mirror owns now and write its record when that changed (or the last write failed);
        returns why writing failed ('' when it did not). Kept in memory either way: the next sync writes it."""
        if self.record is None or (owned == self.owned and not self.unsaved):
            self.owned = owned
            return ""
        self.owned, self.unsaved = owned, True
        try:
            self.record.write(owned)
        except Exception as e:  # noqa: BLE001 - the bindings stay on the target; the record is written next time
            return (f"cannot record the ACLs this mirror created in {self.record.where()}: {e}; it will try "
                    "again at the next sync")
        self.unsaved = False
        return ""

    def _report(self, state: AclState) -> None:
        key = f"{state.status}: {state.message.split(':')[0]}"  # the kind and the cluster, not the error's details
        if key == self.state:
            return
        if state.status == "ok":
            if self.state is not None:
                log.info("mirror %s: ACL sync %s -> %s works again", self.name, self.source_alias, self.target_alias)
        elif state.status == "no-authorizer":
            log.info("mirror %s: %s", self.name, state.message)
        else:
            log.warning("mirror %s: ACLs not synced: %s", self.name, state.message)
        self.state = key
