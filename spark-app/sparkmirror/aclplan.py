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

`plan_acl_sync()` is pure (source bindings, target bindings, `AclScope`, owned bindings) ->
`AclPlan(create, delete, skipped, kept)`; the I/O around it (both clusters, the ACL record) is `aclsync.py`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from .replication import IdentityReplicationPolicy, ReplicationPolicy

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
