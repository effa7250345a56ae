"""One cluster's share groups (I/O): list them, read their start offsets, set them. kafka-python carries the
requests over `wire.cluster.Wire` (its connection manager: version negotiation, TLS, SASL); confluent-kafka has
no share-group admin API (docs/research/share-groups.md).

A cluster without share groups says so in one of two ways: its ApiVersions lacks the keys (Kafka before 4.0,
negotiation fails), or it answers UNSUPPORTED_VERSION (share groups not enabled: Kafka 4.1 without
`share.version=1`). Both are `SharesUnsupported`, which callers say once and skip.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import kafka.errors as kerrors

from ..wire.cluster import Wire, WireError
from ..wire.settings import WireSettingError
from .messages import AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest, ListGroupsRequest
from .moves import GROUP_ID_NOT_FOUND, UNSUPPORTED_VERSION, AlterOutcome, TopicPartition

UNKNOWN_TOPIC_OR_PARTITION = 3
_COORDINATOR_MOVED = {14, 15, 16}  # load in progress, not available, not coordinator: ask again


class SharesUnsupported(RuntimeError):
    """The cluster serves no share groups (too old a Kafka, or share groups not enabled)."""


class ShareAdminError(RuntimeError):
    """A share-group request the cluster answered with an error that is not the group's state."""


def _name(code: int) -> str:
    return kerrors.for_code(code).__name__ if code else ""


class ShareGroupAdmin:
    """Share-group requests to one cluster; `cluster` names it in errors."""

    def __init__(self, conf: dict[str, str], cluster: str, timeout_s: float = 15.0) -> None:
        self.cluster, self.timeout_ms = cluster, int(timeout_s * 1000)
        try:
            self.wire = Wire(conf, bootstrap_ms=self.timeout_ms)
        except (WireError, WireSettingError, kerrors.KafkaError) as e:
            raise ShareAdminError(f"cluster {cluster!r}: cannot connect for share groups: {e}") from e

    def close(self) -> None:
        self.wire.close()

    def _call(self, request: object, node_id: int | None, what: str) -> object:
        try:
            return self.wire.call(request, node_id, self.timeout_ms)
        except WireError as e:
            if issubclass(e.error, kerrors.IncompatibleBrokerVersion):
                raise SharesUnsupported(f"cluster {self.cluster!r} has no share groups (its brokers do not serve "
                                        f"{type(request).__name__}: Kafka 4.1 or newer needed)") from e
            raise ShareAdminError(f"cluster {self.cluster!r}: {what} failed: {e}") from e

    def _unsupported(self, code: int, what: str) -> None:
        if code == UNSUPPORTED_VERSION:
            raise SharesUnsupported(f"cluster {self.cluster!r} has share groups disabled ({what}: "
                                    "UNSUPPORTED_VERSION; Kafka 4.1 needs the feature share.version=1)")

    def list_groups(self) -> dict[str, str]:
        """Share group -> its state (Empty, Stable, Dead), from every broker (each lists the groups it
        coordinates)."""
        self.wire.refresh_brokers()
        req = ListGroupsRequest(states_filter=[], types_filter=["share"])
        out: dict[str, str] = {}
        for node in self.wire.broker_ids():
            resp = self._call(req, node, "listing share groups")
            self._unsupported(resp.error_code, "listing share groups")
            if resp.error_code:
                raise ShareAdminError(f"cluster {self.cluster!r}: listing share groups on broker {node}: "
                                      f"{_name(resp.error_code)}")
            for g in resp.groups:
                if (getattr(g, "group_type", "") or "share").lower() == "share":
                    out[g.group_id] = g.group_state
        return out

    def _coordinated(self, group: str, send, what: str):
        """`send(coordinator)` -> (response, group-level code); asked again, for up to the time-out, while the
        coordinator moves or loads (a young cluster makes its offsets topic on the first group's lookup)."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                node = self.wire.coordinator(group, 0)
            except WireError as e:
                if not e.retriable or time.monotonic() >= deadline:
                    raise ShareAdminError(f"cluster {self.cluster!r}: {e}") from e
                time.sleep(min(1.0, 0.1 * attempt))
                continue
            resp, code = send(node)
            if code not in _COORDINATOR_MOVED:
                return resp, code
            if time.monotonic() >= deadline:
                raise ShareAdminError(f"cluster {self.cluster!r}: {what} of share group {group}: its coordinator "
                                      f"kept answering {_name(code)}")
            time.sleep(min(1.0, 0.1 * attempt))

    def start_offsets(self, group: str) -> dict[TopicPartition, int]:
        """(topic, partition) -> the group's share-partition start offset, for the partitions that have one; {}
        when the cluster has no such group."""
        return {tp: start for tp, (start, _lag) in self.describe(group).items()}

    def describe(self, group: str) -> dict[TopicPartition, tuple[int, int]]:
        """(topic, partition) -> (start offset, lag) of the partitions that have a start offset; lag -1 where the
        broker does not tell it (Kafka 4.1: DescribeShareGroupOffsets v0, before KIP-1226)."""
        R = DescribeShareGroupOffsetsRequest
        req = R(groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)])

        def send(node: int):
            resp = self._call(req, node, f"describing share group {group}'s offsets")
            g = resp.groups[0]
            return g, g.error_code

        g, code = self._coordinated(group, send, "describing the offsets")
        self._unsupported(code, f"describing share group {group}'s offsets")
        if code == GROUP_ID_NOT_FOUND:
            return {}
        if code:
            raise ShareAdminError(f"cluster {self.cluster!r}: describing share group {group}'s offsets: "
                                  f"{_name(code)} {g.error_message or ''}".rstrip())
        return {(t.topic_name, p.partition_index): (p.start_offset, getattr(p, "lag", -1))
                for t in g.topics for p in t.partitions if p.error_code == 0 and p.start_offset >= 0}

    def alter(self, group: str, offsets: Mapping[TopicPartition, int]) -> AlterOutcome:
        """Set the group's start offsets. The broker takes them only while the group has no members
        (NON_EMPTY_GROUP otherwise) and makes a group it does not know (4.2 and later; Kafka 4.1 answers with no
        error and changes nothing: `moves.kept` reads them back). Those come back in the outcome, as do partitions
        refused (a topic not there yet)."""
        A = AlterShareGroupOffsetsRequest
        T = A.AlterShareGroupOffsetsRequestTopic
        topics: dict[str, list] = {}
        for (t, p), off in sorted(offsets.items()):
            topics.setdefault(t, []).append(T.AlterShareGroupOffsetsRequestPartition(partition_index=p,
                                                                                      start_offset=off))
        req = A(group_id=group, topics=[T(topic_name=t, partitions=ps) for t, ps in topics.items()])

        def send(node: int):
            resp = self._call(req, node, f"setting share group {group}'s offsets")
            return resp, resp.error_code

        resp, code = self._coordinated(group, send, "setting the offsets")
        self._unsupported(code, f"setting share group {group}'s offsets")
        bad = {(t.topic_name, p.partition_index): _name(p.error_code) for t in resp.responses for p in t.partitions
               if p.error_code}
        return AlterOutcome(group, _name(code) + (f": {resp.error_message}" if code and resp.error_message else ""),
                            code, bad)


def selected(groups: Iterable[str], matches) -> list[str]:
    """The share groups a mirror's group patterns select (`replication.GroupFilter.matches`)."""
    return sorted(g for g in groups if matches(g))
