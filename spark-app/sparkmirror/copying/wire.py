"""One cluster on the wire for the batch path (issue 36): kafka-python 3.x's connection manager (connections,
ApiVersions negotiation, TLS, SASL) on its own IO thread, and its protocol classes generated from Kafka's own
JSON schemas (Produce to v13, Fetch to v18, InitProducerId to v6, ...). This module only sends requests and
reads back leaders, coordinators and error codes; what to send is batchreader.py's and batchwriter.py's.

Versions: requests that name topics by id from some version on (Fetch v13+, Produce v13+) are capped below it,
so a lane needs no topic ids; the classic transaction protocol (AddPartitionsToTxn <= v3, EndTxn <= v3) is
used, which Kafka 4.x brokers keep serving beside transaction protocol v2. Every cap is above Kafka 4.0's
removed versions (Produce < 3, Fetch < 4).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import kafka.errors as kerrors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

FETCH_MAX_VERSION = 12
PRODUCE_MAX_VERSION = 12
TXN_MAX_VERSION = 3
RECEIVE_MAX_BYTES = 64 << 20
"""The largest response taken: kafka-python's default (1 MB) is below one Fetch of a few partitions; the
reader asks for at most 50 MiB (`BatchReader.max_bytes`)."""

_CONF = {  # librdkafka's names (the lane's client settings) -> kafka-python's
    "bootstrap.servers": "bootstrap_servers", "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism", "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile", "ssl.key.password": "ssl_password", "client.id": "client_id",
}


def wire_config(conf: dict[str, str]) -> dict[str, Any]:
    """kafka-python settings for a lane's librdkafka client settings (the ones both clients know)."""
    out: dict[str, Any] = {_CONF[k]: v for k, v in conf.items() if k in _CONF}
    if "security_protocol" in out:
        out["security_protocol"] = out["security_protocol"].upper()
    return out


class WireError(RuntimeError):
    """A broker answered a request with an error code; `error` is kafka-python's class for it."""

    def __init__(self, error: type[kerrors.KafkaError], what: str) -> None:
        super().__init__(f"{what}: {error.__name__}")
        self.error = error

    @property
    def retriable(self) -> bool:
        return bool(getattr(self.error, "retriable", False))


def check(code: int, what: str) -> None:
    """Raise `WireError` for a non-zero error code."""
    if code:
        raise WireError(kerrors.for_code(code), what)


@dataclass(frozen=True, slots=True)
class Leader:
    node_id: int
    epoch: int


class Wire:
    """A cluster's connections; `call` and `call_many` block the caller until the answers are in."""

    def __init__(self, conf: dict[str, str], **extra: Any) -> None:
        self._client = KafkaNetClient(**{"receive_message_max_bytes": RECEIVE_MAX_BYTES, **wire_config(conf), **extra})
        self._manager = self._client._manager
        self._net = self._manager._net
        self._net.start()
        self._manager.bootstrap(30_000)

    def close(self) -> None:
        self._manager.close()
        self._net.stop()

    def call(self, request: Any, node_id: int | None = None, timeout_ms: int = 30_000) -> Any:
        return self.call_many([(request, node_id)], timeout_ms)[0]

    def call_many(self, requests: Sequence[tuple[Any, int | None]], timeout_ms: int = 30_000) -> list[Any]:
        """Send all requests at once (each broker's connection pipelines them) and wait for every answer."""
        async def send_all() -> list[Any]:
            futures = [self._manager.send(r, node_id=n, request_timeout_ms=timeout_ms) for r, n in requests]
            return [await f for f in futures]

        return self._manager.run(send_all)

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
        resp = self.call(FindCoordinatorRequest(key=transactional_id, key_type=1, coordinator_keys=[transactional_id]))
        coords = getattr(resp, "coordinators", None)
        if coords:
            check(coords[0].error_code, f"finding the coordinator of {transactional_id}")
            return coords[0].node_id
        check(resp.error_code, f"finding the coordinator of {transactional_id}")
        return resp.node_id
