"""One cluster on the wire, in two parts:

- the rare requests (Metadata, FindCoordinator, InitProducerId, the share-group admin's, ...) go through
  kafka-python 3.x's connection manager (connections, ApiVersions negotiation, TLS, SASL) on its own IO thread,
  with its protocol classes generated from Kafka's JSON schemas (`call`, `call_many`);
- requests encoded by hand (the batch path's Fetch, Produce and transaction requests, `copying/protocol.py`)
  go through `connection.BrokerConnection`s, one per broker, on the caller's thread (`connection`).

Used by the batch path (`copying/`, issue 36) and the share-group admin (`sharegroups/`): kafka-python only, no
other client, so either imports it without the other's dependencies.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import kafka.errors as kerrors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from .connection import BrokerConnection, WireError, check
from .settings import wire_config

__all__ = ["RECEIVE_MAX_BYTES", "Leader", "Wire", "WireError", "bootstrap_refusal", "check", "wire_config"]
RECEIVE_MAX_BYTES = 64 << 20
"""The largest response taken: kafka-python's default (1 MB) is below one Fetch of a few partitions; the
reader asks for at most 50 MiB (`BatchReader.max_bytes`)."""


@dataclass(frozen=True, slots=True)
class Leader:
    node_id: int
    epoch: int


class Wire:
    """A cluster's connections; `call` and `call_many` block the caller until the answers are in."""

    def __init__(self, conf: dict[str, str], bootstrap_ms: int = 30_000, **extra: Any) -> None:
        self.config: dict[str, Any] = {"receive_message_max_bytes": RECEIVE_MAX_BYTES, **wire_config(conf), **extra}
        self._client = KafkaNetClient(**self.config)
        self._conns: dict[int, BrokerConnection] = {}
        self._manager = self._client._manager
        self._net = self._manager._net
        self._net.start()
        try:
            self._manager.bootstrap(bootstrap_ms)
        except BaseException as e:
            self.close()  # no IO thread outlives a cluster that did not answer
            refusal = bootstrap_refusal(self.config) if isinstance(e, kerrors.KafkaError) else None
            if refusal is not None:
                raise refusal from e
            raise

    def connection(self, node_id: int, timeout_s: float = 40.0) -> BrokerConnection:
        """The hot-path connection to broker `node_id` (opened on first use, again after it broke)."""
        conn = self._conns.get(node_id)
        if conn is None or conn.closed:
            broker = self._manager.cluster.broker_metadata(node_id)
            if broker is None:
                raise WireError(kerrors.LeaderNotAvailableError, f"broker {node_id} is not in the metadata")
            conn = self._conns[node_id] = BrokerConnection(broker.host, broker.port, self.config, timeout_s)
        return conn

    def drop(self, node_id: int) -> None:
        """Close `node_id`'s hot-path connection (its unanswered requests are dropped with it)."""
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node in list(self._conns):
            self.drop(node)
        self._manager.close()
        self._net.stop()

    def call(self, request: Any, node_id: int | None = None, timeout_ms: int = 30_000) -> Any:
        return self.call_many([(request, node_id)], timeout_ms)[0]

    def call_many(self, requests: Sequence[tuple[Any, int | None]], timeout_ms: int = 30_000) -> list[Any]:
        """Send all requests at once (each broker's connection pipelines them) and wait for every answer."""
        async def send_all() -> list[Any]:
            futures = [self._manager.send(r, node_id=n, request_timeout_ms=timeout_ms) for r, n in requests]
            return [await f for f in futures]

        try:
            return self._manager.run(send_all)
        except kerrors.UnknownBrokerIdError as e:
            # the node left the metadata while it is down (a broker killed or restarting): kafka-python calls that
            # permanent, but it is the cluster's moment, as a node not ready is; the caller asks again
            raise WireError(kerrors.NodeNotReadyError, f"{type(requests[0][0]).__name__}: {e}") from e
        except kerrors.KafkaError as e:  # a connection refused or lost, a timeout: one error type for callers
            raise WireError(type(e), f"{type(requests[0][0]).__name__}: {e}") from e

    def refresh_brokers(self) -> None:
        """Learn the cluster's brokers again (a restarted broker back in the metadata, so requests reach it)."""
        self._manager.cluster.update_metadata(self.call(MetadataRequest(topics=[], allow_auto_topic_creation=False)))

    def leaders(self, topics: Iterable[str]) -> dict[tuple[str, int], Leader]:
        """Each partition's leader and leader epoch, from a fresh Metadata request."""
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(set(topics))],
                              allow_auto_topic_creation=False)
        resp = self.call(req)
        self._manager.cluster.update_metadata(resp)  # so connections reach brokers the bootstrap did not list
        out: dict[tuple[str, int], Leader] = {}
        for t in resp.topics:
            check(t.error_code, f"metadata of topic {t.name}")
            for p in t.partitions:
                out[(t.name, p.partition_index)] = Leader(p.leader_id, p.leader_epoch)
        return out

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node id of `transactional_id`'s transaction coordinator."""
        return self.coordinator(transactional_id, 1)

    def coordinator(self, key: str, key_type: int = 0) -> int:
        """The node id of `key`'s coordinator: key_type 0 a group's (consumer and share groups alike), 1 a
        transactional id's."""
        resp = self.call(FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key]))
        coords = getattr(resp, "coordinators", None)
        if coords:
            check(coords[0].error_code, f"finding the coordinator of {key}")
            return coords[0].node_id
        check(resp.error_code, f"finding the coordinator of {key}")
        return resp.node_id

    def broker_ids(self) -> list[int]:
        """The node ids of the cluster's brokers, as the last metadata knew them."""
        return sorted(b.node_id for b in self._manager.cluster.brokers())


def bootstrap_refusal(config: dict[str, Any], timeout_s: float = 5.0) -> WireError | None:
    """Why kafka-python could not bootstrap, when a bootstrap server refuses the mirror: its connection manager
    retries a refused login or handshake until its time-out, so one connection of our own asks, once."""
    servers = config.get("bootstrap_servers") or ""
    for server in (servers.split(",") if isinstance(servers, str) else servers):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            continue
        try:
            BrokerConnection(host.strip("[]"), int(port), config, timeout_s).close()
        except WireError as e:
            if e.kind.refused:
                return e
    return None
