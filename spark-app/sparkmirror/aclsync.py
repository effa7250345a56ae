"""ACL sync (`sync.topic.acls.enabled`), its I/O; the rule and its pure planning are `aclplan.py`.

`AclSync` reads both clusters with confluent-kafka's AdminClient and its ACL record with the progress reader
(once, then kept in memory: the mirror is the record's only writer), plans with `aclplan.plan_acl_sync`, applies
the plan and writes the record back (`AclRecord`); `sparkmirror plan` reads the record, writes nothing. A cluster
without an authorizer (SECURITY_DISABLED; Kafka 4 brokers list no ACLs then, and say so when one is created)
means nothing to sync, and a target that refuses to create ACLs is a warning; both are logged once per change
of state, never raised: ACLs are not data, the copy goes on.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient

from .aclplan import (ANY_PRINCIPAL, EVERY_BINDING, GROUP, AclPlan, AclScope, binding_of, binding_row, describe,
                      plan_acl_sync)
from .handoff.takeover import write_records
from .kafkaerror import error_code, error_text
from .progress import read_progress
from .progress.record import PROGRESS_FORMAT_VERSION, acls_key, acls_value
from .replication import ReplicationPolicy

log = logging.getLogger(__name__)


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
                                               f"failed: {error_text(e)}")
        try:
            owned = self._owned(target_topics)
        except Exception as e:  # noqa: BLE001 - without it nothing may be removed, nor the record rewritten
            return AclState("unavailable", f"reading the ACLs this mirror created from {self.record.where()} "
                                           f"failed: {type(e).__name__}: {e}")
        scope = AclScope(self.source_alias, self.policy, dict(remote), groups, frozenset(target_topics),
                         self.own_principals)
        return AclState("ok", "", plan_acl_sync(bindings["source"], bindings["target"], scope, owned))

    def _read_failure(self, which: str, e: KafkaException) -> AclState:
        alias, code = self._alias(which), error_code(e)
        if code == KafkaError.SECURITY_DISABLED:
            return AclState("no-authorizer", f"{which} cluster {alias!r} has no authorizer: no ACLs to sync")
        if code in (KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED):
            return AclState("refused", f"the mirror may not read the ACLs of {which} cluster {alias!r} (it needs "
                                       f"DESCRIBE on the cluster): {error_text(e)}")
        return AclState("unavailable", f"reading the ACLs of {which} cluster {alias!r} failed: {error_text(e)}")

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
            code = error_code(e)
            (refused if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED else
             disabled if code == KafkaError.SECURITY_DISABLED else failed).append(error_text(e))

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
