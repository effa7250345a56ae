"""One cluster's share-group configs (I/O): dynamic group configs (ConfigResource GROUP, type 32 on the wire) read
with DescribeConfigs and set with IncrementalAlterConfigs.

confluent-kafka's AdminClient carries them, unlike the share groups' offsets (`admin`, kafka-python): librdkafka
2.16 sends its `ResourceType.GROUP` as the config resource type 32, checked against the brokers (Kafka 4.4 and
4.1.2 answer; 3.9.2 refuses it, INVALID_REQUEST "Unknown resource type 32", so callers ask here only of a cluster
that serves share groups). A config set on the group answers with source GROUP_CONFIG (8); every other one the
broker knows comes back as its default (DEFAULT_CONFIG), which tells what the cluster knows.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from ..kafkaerror import error_code, error_text
from .moves import share_config

GROUP_CONFIG = 8  # DescribeConfigs' ConfigSource of a config set on the group itself
_REFUSED = {KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION}  # the value or name, not the request


class GroupConfigError(RuntimeError):
    """A cluster did not answer a group-config request, or refused it as a whole."""


class GroupConfigAdmin:
    """Group-config requests to one cluster; `cluster` names it in errors."""

    def __init__(self, conf: dict[str, str], cluster: str, timeout_s: float = 15.0) -> None:
        self.cluster, self.timeout = cluster, timeout_s
        self.admin = AdminClient(conf)

    def _described(self, groups: list[str]) -> dict[str, dict[str, tuple[str, bool]] | GroupConfigError]:
        """Group -> name -> (value, set on the group), or why the cluster did not tell (per group: ACLs may
        differ by group)."""
        futures = self.admin.describe_configs([ConfigResource(ResourceType.GROUP, g) for g in groups],
                                              request_timeout=self.timeout)
        out: dict[str, dict[str, tuple[str, bool]] | GroupConfigError] = {}
        for res, fut in futures.items():
            try:
                entries = fut.result(self.timeout)
            except (KafkaException, TimeoutError) as e:
                out[res.name] = GroupConfigError(f"cluster {self.cluster!r}: describing the configs of group "
                                                 f"{res.name}: {error_text(e)}")
                continue
            out[res.name] = {n: (e.value, int(getattr(e.source, "value", e.source)) == GROUP_CONFIG)
                             for n, e in entries.items()}
        return out

    def explicit(self, groups: Iterable[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """(group -> its share configs set on it, not defaults; group -> why they were not read), in one
        request."""
        groups = sorted(set(groups))
        configs: dict[str, dict[str, str]] = {}
        errors: dict[str, str] = {}
        for g, entries in (self._described(groups) if groups else {}).items():
            if isinstance(entries, GroupConfigError):
                errors[g] = str(entries)
            else:
                configs[g] = {n: v for n, (v, own) in entries.items() if own and share_config(n)}
        return configs, errors

    def described(self, group: str) -> dict[str, tuple[str, bool]]:
        """Every config the cluster knows for `group`: name -> (value, set on the group)."""
        entries = self._described([group]).get(group, {})
        if isinstance(entries, GroupConfigError):
            raise entries
        return entries

    def set(self, group: str, configs: Mapping[str, str]) -> dict[str, str]:
        """Set `configs` on the group (others left as they are); name -> the cluster's error of those it refused.
        A refusal names no config, so a refused request is tried again a config at a time to tell which."""
        try:
            self._alter(group, configs)
            return {}
        except (KafkaException, TimeoutError) as e:
            if error_code(e) not in _REFUSED:
                raise GroupConfigError(f"cluster {self.cluster!r}: setting the configs of group {group}: "
                                       f"{error_text(e)}") from e
            if len(configs) == 1:
                return {name: error_text(e) for name in configs}
        refused = {}
        for name, value in sorted(configs.items()):
            refused.update(self.set(group, {name: value}))
        return refused

    def _alter(self, group: str, configs: Mapping[str, str]) -> None:
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in sorted(configs.items())])
        for fut in self.admin.incremental_alter_configs([res], request_timeout=self.timeout).values():
            fut.result(self.timeout)
