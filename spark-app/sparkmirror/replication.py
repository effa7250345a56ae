"""Remote topic names and loop prevention: MirrorMaker 2's replication policies, pure code.

Two policies, with the semantics of Apache Kafka's `connect-mirror-client` (4.1):

- `DefaultReplicationPolicy`: a topic `t` of cluster `A` becomes `A<sep>t` on the target (`sep` is `.` unless
  configured). The name carries the provenance, so `topic_source("A.t") == "A"`, `upstream_topic("B.A.t") ==
  "A.t"` and `original_topic("B.A.t") == "t"`. A topic whose (recursive) source is the target alias is a
  *cycle* and is never mirrored back, so A->B and B->A run together without loops.
- `IdentityReplicationPolicy`: names are kept (`t` stays `t`), except heartbeats topics, which follow the
  default policy (`A.heartbeats`). A name cannot say where a topic came from, so loops are prevented per
  record with the **provenance header** `PROVENANCE_HEADER` (see below).

Provenance header (identity policy only)
----------------------------------------
Header name `sparkmirror-provenance`; value: the UTF-8 aliases of the clusters the record was mirrored
*from*, in hop order, comma-separated (`"A"` after A->B, `"A,B"` after A->B->C). The copier of a mirror
source->target must, for every record:

1. `if not should_copy_record(headers, target_alias): skip` -- the record was already on the target cluster
   (it came from there, directly or through other hops): copying it back would loop;
2. otherwise produce it with `stamp_provenance(headers, source_alias)` as its headers.

`RecordStamper(policy, source_alias, target_alias)` bundles both for the copier; under the default policy it
copies every record and leaves headers untouched (full fidelity), because names already prevent loops.

Topic selection (MirrorSourceConnector.shouldReplicateTopic):
`(topic filter matches or is_heartbeats_topic) and not is_internal_topic and not is_cycle`.
Internal topics (never mirrored): names starting with `__` or `.`, `mm2*<sep>internal` topics and checkpoints
topics (`<alias><sep>checkpoints<sep>internal`), plus everything the mirror's `topicsExclude` matches.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .resource.javaregex import JavaPatternError, compile_java

log = logging.getLogger(__name__)
_WARNED: set[tuple[str, int]] = set()  # partitions whose undecodable provenance header was logged (per process)

HEARTBEATS_TOPIC = "heartbeats"
PROVENANCE_HEADER = "sparkmirror-provenance"

Header = tuple[str, bytes | None]


def _java_split(s: str, sep: str) -> list[str]:
    """`String.split(Pattern.quote(sep))` in Java: like str.split, but trailing empty strings are dropped."""
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class ReplicationPolicy:
    """What MM2's `ReplicationPolicy` interface defines, with DefaultReplicationPolicy's behaviour."""

    name = "default"
    uses_provenance = False
    routes: tuple = ()  # the mirror's `route` transforms (resource/transforms.Route), applied to remote names

    def __init__(self, separator: str = ".", internal_topic_separator_enabled: bool = True,
                 heartbeats_topic: str = HEARTBEATS_TOPIC) -> None:
        if not separator:
            raise ValueError("replication policy separator must not be empty")
        self.separator = separator
        self.internal_separator = separator if internal_topic_separator_enabled else "."
        self._heartbeats = heartbeats_topic

    # names ---------------------------------------------------------------------------------------------
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """The policy's remote name, then the mirror's routes (MM2's RegexRouter sees the policy's name too)."""
        name = self.policy_remote_topic(source_alias, topic)
        for route in self.routes:
            name = route.rename(name)
        return name

    def policy_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = _java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator):]

    def original_topic(self, topic: str) -> str:
        seen = 0
        while True:
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic or seen > 1000:
                return topic
            topic, seen = upstream, seen + 1

    # MM2's own topics ------------------------------------------------------------------------------------
    def heartbeats_topic(self) -> str:
        return self._heartbeats

    def _internal_suffix(self) -> str:
        return f"{self.internal_separator}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self.internal_separator}checkpoints{self._internal_suffix()}"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs{self.internal_separator}{cluster_alias}{self._internal_suffix()}"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.heartbeats_topic() == self.original_topic(topic)

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self.internal_separator}checkpoints{self._internal_suffix()}")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return (topic.startswith("mm2") and topic.endswith(self._internal_suffix())) or self.is_checkpoints_topic(topic)

    def is_internal_topic(self, topic: str) -> bool:
        return topic.startswith("__") or topic.startswith(".") or self.is_mm2_internal_topic(topic)

    # loops -----------------------------------------------------------------------------------------------
    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """True when `topic` (on the source) came from `target_alias`, directly or through several hops."""
        for _ in range(1000):
            source = self.topic_source(topic)
            if source is None:
                return False
            if source == target_alias:
                return True
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic:  # identity-like policies cannot tell
                return False
            topic = upstream
        return False


class DefaultReplicationPolicy(ReplicationPolicy):
    pass


class IdentityReplicationPolicy(ReplicationPolicy):
    """Names kept; heartbeats still prefixed; `source_alias` (MM2's `source.cluster.alias`) answers topicSource."""

    name = "identity"
    uses_provenance = True

    def __init__(self, separator: str = ".", internal_topic_separator_enabled: bool = True,
                 heartbeats_topic: str = HEARTBEATS_TOPIC, source_alias: str | None = None) -> None:
        super().__init__(separator, internal_topic_separator_enabled, heartbeats_topic)
        self.source_alias = source_alias

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic is not None and topic.endswith(self.heartbeats_topic())

    def policy_remote_topic(self, source_alias: str, topic: str) -> str:
        return super().policy_remote_topic(source_alias, topic) if self._looks_like_heartbeat(topic) else topic

    def topic_source(self, topic: str) -> str | None:
        return super().topic_source(topic) if self._looks_like_heartbeat(topic) else self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        return super().upstream_topic(topic) if self._looks_like_heartbeat(topic) else topic


def policy_for(mirror) -> ReplicationPolicy:  # mirror: sparkmirror.resource.flowgroup.Mirror
    """The policy a flow-group `Mirror` asks for (`replicationPolicy`, `separator`)."""
    kind = getattr(mirror.replicationPolicy, "value", mirror.replicationPolicy)
    if kind == "identity":
        policy: ReplicationPolicy = IdentityReplicationPolicy(mirror.separator)
    elif kind == "default":
        policy = DefaultReplicationPolicy(mirror.separator)
    else:
        raise ValueError(f"replicationPolicy: unknown policy {kind!r} (known: default, identity)")
    policy.routes = tuple(t for t in getattr(mirror, "transforms", None) or () if getattr(t, "type", "") == "route")
    return policy


# topic selection -------------------------------------------------------------------------------------------

def _check_patterns(**patterns: str | None) -> None:
    """Each pattern is one Java reads as sparkmirror does (resource/javaregex.py), or a ValueError names the
    field it came from."""
    for field, rx in patterns.items():
        if rx is not None:
            try:
                compile_java(rx)
            except JavaPatternError as e:
                raise ValueError(f"{field}: invalid regex {e}") from e


@dataclass(frozen=True)
class TopicFilter:
    """MM2's DefaultTopicFilter: whole-name regex match of `include`, minus whole-name matches of `exclude`."""

    include: str = ".*"
    exclude: str | None = None
    never: frozenset[str] = frozenset()  # exact names never mirrored (our own progress topic)

    def __post_init__(self) -> None:
        _check_patterns(topics=self.include, topicsExclude=self.exclude)

    def matches(self, topic: str) -> bool:
        if topic in self.never:
            return False
        if self.exclude and compile_java(self.exclude).fullmatch(topic):
            return False
        return compile_java(self.include).fullmatch(topic) is not None


# group selection -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupFilter:
    """MM2's DefaultGroupFilter: whole-name match of `groups` (default `.*`) minus `groupsExclude`, and never the
    mirror's own `sourceOffsetsGroup` (its lag report, not a consumer's position: checkpointed, a failover would
    move it onto the target)."""

    include: str | None = None
    exclude: str | None = None
    own: str | None = None

    def __post_init__(self) -> None:
        _check_patterns(groups=self.include, groupsExclude=self.exclude)

    @classmethod
    def of(cls, mirror) -> GroupFilter:  # mirror: sparkmirror.resource.flowgroup.Mirror
        return cls(mirror.groups, mirror.groupsExclude, mirror.sourceOffsetsGroup)

    def matches(self, group: str) -> bool:
        if group == self.own:
            return False
        if self.exclude and compile_java(self.exclude).fullmatch(group):
            return False
        return compile_java(self.include or ".*").fullmatch(group) is not None


def should_replicate_topic(policy: ReplicationPolicy, topic_filter: TopicFilter, topic: str,
                           target_alias: str) -> bool:
    """MirrorSourceConnector.shouldReplicateTopic for a source topic of a mirror into `target_alias`."""
    if topic in topic_filter.never:
        return False
    return ((topic_filter.matches(topic) or policy.is_heartbeats_topic(topic))
            and not policy.is_internal_topic(topic)
            and not policy.is_cycle(topic, target_alias))


# provenance header (identity policy) -----------------------------------------------------------------------

def provenance(headers: Iterable[Header] | None) -> list[str]:
    """Aliases a record was mirrored from, oldest hop first (all provenance headers, in order).

    A header some other producer wrote with bytes that are not UTF-8 never stops the copy: its bytes are kept
    as surrogate escapes, so they match no alias (aliases are ASCII) and `stamp_provenance` writes them back
    unchanged; `undecodable_provenance` tells the copier to say so."""
    hops: list[str] = []
    for key, value in headers or ():
        if key == PROVENANCE_HEADER and value:
            raw = value.decode("utf-8", "surrogateescape") if isinstance(value, (bytes, bytearray)) else str(value)
            hops.extend(a for a in raw.split(",") if a)
    return hops


def undecodable_provenance(headers: Iterable[Header] | None) -> bool:
    """True when a provenance header of the record holds bytes that are not UTF-8."""
    for key, value in headers or ():
        if key == PROVENANCE_HEADER and isinstance(value, (bytes, bytearray)):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return True
    return False


def should_copy_record(headers: Iterable[Header] | None, target_alias: str) -> bool:
    """False when the record has already been on `target_alias` (it came from there): copying it would loop."""
    return target_alias not in provenance(headers)


def stamp_provenance(headers: Sequence[Header] | None, source_alias: str) -> list[Header]:
    """The record's headers with `source_alias` appended to the provenance header (one header, kept last)."""
    hops = provenance(headers) + [source_alias]
    kept = [(k, v) for k, v in (headers or ()) if k != PROVENANCE_HEADER]
    return kept + [(PROVENANCE_HEADER, ",".join(hops).encode("utf-8", "surrogateescape"))]


@dataclass(frozen=True)
class RecordStamper:
    """Per-record loop prevention for one mirror, for the copier (executor side, picklable).

    For each record: `if stamper.should_copy(headers): produce(..., headers=stamper.headers_for(headers))`.
    Under the default policy every record is copied with `headers` unchanged (names prevent loops, headers
    stay byte-equal); under identity, records that came from the target are skipped and the rest stamped.
    """

    uses_provenance: bool
    source_alias: str
    target_alias: str

    @classmethod
    def of(cls, policy: ReplicationPolicy, source_alias: str, target_alias: str) -> "RecordStamper":
        return cls(policy.uses_provenance, source_alias, target_alias)

    def should_copy(self, headers: Iterable[Header] | None, record: tuple[str, int, int] | None = None) -> bool:
        """`record` (topic, partition, offset) names the record in the warning about a provenance header that
        is not UTF-8 (logged once per partition; the record is copied, its header bytes kept)."""
        if not self.uses_provenance:
            return True
        if headers and record is not None and undecodable_provenance(headers) and record[:2] not in _WARNED:
            _WARNED.add(record[:2])
            log.warning("mirror %s->%s: %s[%d] offset %d: header %s is not UTF-8; copied with its bytes kept "
                        "(further such records of this partition are not logged)", self.source_alias,
                        self.target_alias, *record, PROVENANCE_HEADER)
        return should_copy_record(headers, self.target_alias)

    def headers_for(self, headers: Sequence[Header] | None) -> Sequence[Header] | None:
        return stamp_provenance(headers, self.source_alias) if self.uses_provenance else headers
