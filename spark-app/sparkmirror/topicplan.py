"""Topic planning (pure): from plain descriptions of a mirror's source and target topics, which source topics it
copies (include/exclude patterns + the replication policy's internal-topic and cycle rules), which remote topics to
create with which replication factor, which partition counts to raise and which configs to change
(`plan_sync`); `replicable_configs` is MM2's DefaultConfigPropertyFilter. `topicsync.TopicSync` reads the
clusters into these descriptions and applies the plan.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from .resource.flowgroup import FlowGroupConfig, Mirror
from .resource.javaregex import JavaPatternError, compile_java
from .replication import ReplicationPolicy, TopicFilter, should_replicate_topic

T = TypeVar("T")


@dataclass(frozen=True)
class TopicRoute:
    source_topic: str
    target_topic: str
    partitions: int


# ---------------------------------------------------------------------------------------------- planning

@dataclass(frozen=True)
class ConfigValue:
    value: str | None
    dynamic: bool = True      # set on the topic itself (ConfigSource.DYNAMIC_TOPIC_CONFIG)
    read_only: bool = False
    sensitive: bool = False


@dataclass(frozen=True)
class SourceTopic:
    name: str
    partitions: int
    configs: Mapping[str, ConfigValue] | None = None  # None: not described this round
    topic_id: str | None = None
    replication_factor: int | None = None  # None: not known (the remote topic then gets the broker's default)


@dataclass(frozen=True)
class TargetTopic:
    name: str
    partitions: int
    configs: Mapping[str, ConfigValue] | None = None


@dataclass(frozen=True)
class CreateTopic:
    name: str
    partitions: int
    configs: Mapping[str, str]
    replication_factor: int = -1  # -1: the target broker's default


@dataclass(frozen=True)
class AddPartitions:
    name: str
    total: int
    current: int


@dataclass(frozen=True)
class AlterConfigs:
    name: str
    set: Mapping[str, str]
    delete: tuple[str, ...]


@dataclass
class SyncPlan:
    routes: list[TopicRoute] = field(default_factory=list)
    create: list[CreateTopic] = field(default_factory=list)
    add_partitions: list[AddPartitions] = field(default_factory=list)
    alter_configs: list[AlterConfigs] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (source topic, why): not mirrored


MAX_RECORDS_PER_REQUEST = 5000
"""Metadata records one admin request may ask the target for: half a KRaft controller's limit of 10,000
(`max.records.per.user.op`), beyond which it refuses the whole request ("excessively large batch operation")."""


def metadata_batches(items: Iterable[T], weight: Callable[[T], int],
                     limit: int | None = None) -> Iterator[list[T]]:
    """`items` in order, split into lists whose metadata records (`weight` each) stay within `limit` (default
    MAX_RECORDS_PER_REQUEST); an item heavier than that goes alone. Mirroring 1,000 new topics of 10 partitions
    asks for 11,000 records."""
    limit = MAX_RECORDS_PER_REQUEST if limit is None else limit
    batch: list[T] = []
    records = 0
    for item in items:
        w = weight(item)
        if batch and records + w > limit:
            yield batch
            batch, records = [], 0
        batch.append(item)
        records += w
    if batch:
        yield batch


def compile_excludes(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    out = []
    for i, p in enumerate(patterns):
        try:
            out.append(compile_java(p))
        except JavaPatternError as e:
            raise ValueError(f"configPropertiesExclude[{i}]: invalid regex {e}") from e
    return out


def replicable_configs(configs: Mapping[str, ConfigValue], exclude: Iterable[re.Pattern[str] | str]) -> dict[str, str]:
    """MM2's DefaultConfigPropertyFilter with `use.defaults.from=target`: explicit, safe, not excluded."""
    rx = [compile_java(p) if isinstance(p, str) else p for p in exclude]
    return {k: v.value for k, v in sorted(configs.items())
            if v.dynamic and not v.read_only and not v.sensitive and v.value is not None
            and not any(r.fullmatch(k) for r in rx)}


def topic_filter(config: FlowGroupConfig, mirror: Mirror) -> TopicFilter:
    return TopicFilter(mirror.topics, mirror.topicsExclude, frozenset({config.progressTopic}))


def select_topics(policy: ReplicationPolicy, tfilter: TopicFilter, topics: Iterable[str], target_alias: str) -> list[str]:
    return sorted(t for t in topics if should_replicate_topic(policy, tfilter, t, target_alias))


def remote_factor(mirror: Mirror, src: SourceTopic) -> int:
    """The replication factor a new remote topic gets: MM2's `replication.factor` when set, else its source
    topic's (MM2 itself defaults to 2 whatever the source; keeping the source's survives as many broker losses on
    the target as the source did), else the target broker's default (-1)."""
    if mirror.replicationFactor is not None:
        return mirror.replicationFactor
    return src.replication_factor or -1


def plan_sync(mirror: Mirror, policy: ReplicationPolicy, tfilter: TopicFilter, sources: Mapping[str, SourceTopic],
              targets: Mapping[str, TargetTopic], exclude: Iterable[re.Pattern[str] | str] = ()) -> SyncPlan:
    """What to do so the target holds a remote topic for every source topic the mirror copies.

    `sources` holds all source topics (selection happens here); `targets` the target's topics. Source topics
    without `configs` get no config changes this round (configs are described less often than topics).
    """
    rx = [compile_java(p) if isinstance(p, str) else p for p in exclude]
    plan = SyncPlan()
    owner: dict[str, str] = {}
    for name in select_topics(policy, tfilter, sources, mirror.target):
        src = sources[name]
        remote = policy.format_remote_topic(mirror.source, name)
        if remote in owner:
            plan.conflicts.append((name, f"mirrors[{mirror.name}]: source topics {owner[remote]!r} and {name!r} both "
                                         f"map to remote topic {remote!r}; {name!r} is not mirrored"))
            continue
        owner[remote] = name
        plan.routes.append(TopicRoute(name, remote, src.partitions))
        # a new remote topic always gets the source's configs (MM2's createNewTopics); only keeping them in
        # sync afterwards depends on sync.topic.configs.enabled
        configs = replicable_configs(src.configs, rx) if src.configs is not None else None
        tgt = targets.get(remote)
        if tgt is None:
            plan.create.append(CreateTopic(remote, src.partitions, configs or {}, remote_factor(mirror, src)))
            continue
        want = configs if mirror.syncTopicConfigs else None
        if tgt.partitions < src.partitions:
            plan.add_partitions.append(AddPartitions(remote, src.partitions, tgt.partitions))
        if want is not None and tgt.configs is not None:
            have = {k: v.value for k, v in tgt.configs.items() if v.dynamic and not v.read_only and not v.sensitive}
            to_set = {k: v for k, v in want.items() if have.get(k) != v}
            to_delete = tuple(sorted(k for k in have if k not in want and not any(r.fullmatch(k) for r in rx)))
            if to_set or to_delete:
                plan.alter_configs.append(AlterConfigs(remote, to_set, to_delete))
    return plan
