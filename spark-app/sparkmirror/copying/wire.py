"""One cluster on the wire for the batch path (issue 36), in two parts:

- the rare requests (Metadata, FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn) go through
  kafka-python 3.x's connection manager (connections, ApiVersions negotiation, TLS, SASL) on its own IO thread,
  with its protocol classes generated from Kafka's JSON schemas;
- the hot ones (Fetch, Produce) go through `connection.BrokerConnection`s, one per broker, on the caller's
  thread, encoded and decoded by hand in `protocol` (why: see there).

Versions: the classic transaction protocol (AddPartitionsToTxn <= v3, EndTxn <= v3) is used, which Kafka 4.x
brokers keep serving beside transaction protocol v2; Fetch and Produce versions are `protocol`'s.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kafka.errors as kerrors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from ..faultkind import of_broker_code
from .connection import BrokerConnection, WireError, check, tls_kind
from .errors import CopyError, Unreachable, accepted, refused

__all__ = ["Leader", "Wire", "WireError", "check", "wire_config", "wire_talk"]
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
_CONF_MS = {  # connection settings a cluster's config gives every client (docs/client-settings.md), in ms
    "socket.timeout.ms": "request_timeout_ms", "request.timeout.ms": "request_timeout_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms", "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "socket.connection.setup.timeout.ms": "socket_connection_setup_timeout_ms",
    "connections.max.idle.ms": "connections_max_idle_ms", "metadata.max.age.ms": "metadata_max_age_ms",
}


def wire_config(conf: dict[str, str]) -> dict[str, Any]:
    """kafka-python settings for a lane's librdkafka client settings (the ones both clients know). Several CA
    files reach a lane as PEM text (`ssl.ca.pem`): kafka-python takes no such text, so an SSL context of our own
    carries it (with the client certificate and key files, when given)."""
    out: dict[str, Any] = {_CONF[k]: v for k, v in conf.items() if k in _CONF}
    for k, v in conf.items():
        if k in _CONF_MS:
            try:
                out[_CONF_MS[k]] = int(v)
            except ValueError:
                raise CopyError(f"client setting {k}={v!r}: expected a number of milliseconds") from None
    if "security_protocol" in out:
        out["security_protocol"] = out["security_protocol"].upper()
    if conf.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        out["ssl_check_hostname"] = False
    if conf.get("ssl.ca.pem"):
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = out.get("ssl_check_hostname", True)
        ctx.load_verify_locations(cadata=conf["ssl.ca.pem"])
        if out.get("ssl_certfile"):
            ctx.load_cert_chain(out["ssl_certfile"], out.get("ssl_keyfile"), out.get("ssl_password"))
        out["ssl_context"] = ctx
    return out


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


@contextmanager
def wire_talk(side: str, cluster: str, what: str) -> Iterator[None]:
    """Run the batch path's I/O against one cluster, as `errors.talking_to` does for librdkafka's: a retriable
    error or a broken connection is `Unreachable` (waited out), a refusal (`WireError.kind`) `errors.refused`'s
    (waited on for the credentials' grace, then `Refused` naming the cluster and the kind), another answer a
    `CopyError` naming the cluster and what was done; fencing (`LaneFenced`) passes through."""
    try:
        yield
    except WireError as e:
        if e.kind.refused:  # waited on for the credentials' grace when new ones could cure it
            raise refused(side, cluster, e.kind, f"{what}: {e}") from e
        if e.retriable or issubclass(e.error, kerrors.KafkaConnectionError):
            raise Unreachable(side, cluster, f"{what}: {e}") from e
        raise CopyError(f"{side} cluster {cluster!r}: {what} failed: {e}") from e
    except kerrors.KafkaError as e:  # kafka-python's own client (bootstrap, metadata)
        kind = of_broker_code(getattr(e, "errno", None) or 0)
        if kind.refused:
            raise refused(side, cluster, kind, f"{what}: {type(e).__name__}: {e}") from e
        if getattr(e, "retriable", False) or isinstance(e, kerrors.KafkaConnectionError):
            raise Unreachable(side, cluster, f"{what}: {type(e).__name__}: {e}") from e
        raise CopyError(f"{side} cluster {cluster!r}: {what} failed: {type(e).__name__}: {e}") from e
    except OSError as e:  # a socket refused or reset outside a request
        kind = tls_kind(e)
        if kind.refused:
            raise refused(side, cluster, kind, f"{what}: {e!r}") from e
        raise Unreachable(side, cluster, f"{what}: {e}") from e
    accepted(cluster)
