"""MirrorMaker 2's client settings, taken as librdkafka settings of the clients that use them: pure, no I/O.

MM2 users tune clients with Java names under several prefixes (a cluster's `consumer.*`, a connector's
`source.consumer.*`, `producer.override.*`, ...). `client_setting(client, key, value)` says what one such key
becomes here: a librdkafka setting (the name mapped where Java's and librdkafka's differ, the value converted),
or a refusal naming the key and why: the mirror owns it (exactly-once, positions, partitions depend on it),
librdkafka has no equivalent, or it means nothing without Connect or consumer groups (`not_applicable`).
Unknown names are librdkafka's own and pass unchanged. The table for users is docs/client-settings.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Client = Literal["consumer", "producer", "admin", "any"]
"""Which client a key is for: a lane's source consumer, its target producer, the admin clients, or every client
of a cluster (a key in the cluster's `config` without a client prefix)."""

# Java name -> librdkafka name, where they differ (the same name in both needs no entry)
JAVA_TO_LIBRDKAFKA: dict[str, str] = {
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "buffer.memory": "queue.buffering.max.kbytes",  # bytes -> kbytes (see _convert)
    "compression.gzip.level": "compression.level",
    "compression.lz4.level": "compression.level",
    "compression.zstd.level": "compression.level",
}

_POSITIONS = ("positions are the mirror's own: committed with the copied records in the target transaction "
              "(progress topic); set sourceOffsetsGroup to also commit them to a source group for lag tools")
_BYTES = "records are copied as bytes, keys and values untouched"
_GAP = "a position the source no longer holds is a gap, decided by sourceGapPolicy (fail or skip), never reset"
_TXN = "bounded by the lane's transaction timeout, which the mirror sets (transactionTimeoutMs)"

# (client, key) -> why the mirror owns it; client "any" matches every client
OWNED: dict[tuple[str, str], str] = {
    ("consumer", "group.id"): "a lane's consumer is assigned its partitions, it joins no group; " + _POSITIONS,
    ("consumer", "enable.auto.commit"): _POSITIONS,
    ("consumer", "auto.commit.interval.ms"): _POSITIONS,
    ("consumer", "enable.auto.offset.store"): _POSITIONS,
    ("consumer", "isolation.level"): "read_committed: records of aborted or open source transactions must never "
                                     "be copied",
    ("consumer", "auto.offset.reset"): _GAP,
    ("consumer", "key.deserializer"): _BYTES,
    ("consumer", "value.deserializer"): _BYTES,
    ("consumer", "enable.partition.eof"): "the lane's reader relies on its setting",
    ("consumer", "check.crcs"): "on: each record is written to the target under a CRC of its own, so a batch "
                                "corrupted in the source's log must be caught as it is read",
    ("consumer", "allow.auto.create.topics"): "the mirror reads only topics that exist and creates remote topics "
                                              "itself (topic sync)",
    ("producer", "transactional.id"): "one per lane, derived from the resource, flow group, mirror and lane: "
                                      "fencing of older copies relies on it",
    ("producer", "acks"): "all: a record counts as mirrored only once every in-sync replica holds it (required by "
                          "idempotence and transactions)",
    ("producer", "transaction.timeout.ms"): _TXN,
    ("producer", "delivery.timeout.ms"): _TXN,
    ("producer", "message.timeout.ms"): _TXN,
    ("producer", "partitioner"): "a record keeps its source partition number; no partitioner chooses",
    ("producer", "partitioner.class"): "a record keeps its source partition number; no partitioner chooses",
    ("producer", "key.serializer"): _BYTES,
    ("producer", "value.serializer"): _BYTES,
    ("producer", "max.request.size"): "sized from the remote topics' max.message.bytes, so a record the source "
                                      "held is never refused for its size",
    ("producer", "message.max.bytes"): "sized from the remote topics' max.message.bytes, so a record the source "
                                       "held is never refused for its size",
    ("producer", "linger.ms"): "set spec.spark.lingerMs (the lanes' producers' linger.ms)",
    ("producer", "queue.buffering.max.ms"): "set spec.spark.lingerMs (the lanes' producers' linger.ms)",
}
# owned only under exactly-once delivery
OWNED_EXACTLY_ONCE: dict[tuple[str, str], str] = {
    ("producer", "enable.idempotence"): "transactions need an idempotent producer (delivery: exactly-once)",
}
# Java keys librdkafka has no equivalent of: refused, never dropped
NO_EQUIVALENT: dict[str, str] = {
    "max.poll.records": "the lane takes what a fetch returned; bound it with fetch.max.bytes or "
                        "max.partition.fetch.bytes",
    "max.block.ms": "librdkafka's calls do not block on metadata or a full buffer that way",
    "default.api.timeout.ms": "the mirror sets a timeout per call",
    "interceptor.classes": "Java classes cannot run in librdkafka",
    "security.providers": "Java security providers cannot run in librdkafka",
    "sasl.login.callback.handler.class": "Java classes cannot run in librdkafka",
    "sasl.client.callback.handler.class": "Java classes cannot run in librdkafka",
}
# Java keys that mean nothing for a client that joins no group and runs without Connect: listed, not passed
NOT_APPLICABLE: dict[str, str] = {
    "session.timeout.ms": "lanes join no consumer group",
    "heartbeat.interval.ms": "lanes join no consumer group",
    "max.poll.interval.ms": "lanes join no consumer group",
    "partition.assignment.strategy": "lanes join no consumer group",
    "group.instance.id": "lanes join no consumer group",
    "group.protocol": "lanes join no consumer group",
    "group.remote.assignor": "lanes join no consumer group",
    "exclude.internal.topics": "lanes read only the topics the mirror's patterns select",
    "metric.reporters": "Java metrics; the mirror exports its own (/metrics)",
    "auto.include.jmx.reporter": "Java metrics; the mirror exports its own (/metrics)",
    "metrics.num.samples": "Java metrics; the mirror exports its own (/metrics)",
    "metrics.sample.window.ms": "Java metrics; the mirror exports its own (/metrics)",
    "metrics.recording.level": "Java metrics; the mirror exports its own (/metrics)",
}
# per-client keys that do nothing on `copy: batches`: batches are read and written by the mirror's own Fetch and
# Produce requests and keep the source's bytes (codec included); connection settings in the cluster's `config`
# (request.timeout.ms, socket buffers, reconnect backoff, ...) do reach them, see wire/settings.py
BATCHES_WHY = ("copy: batches forwards the source's record batches as bytes with the mirror's own Fetch and "
               "Produce requests (compression kept as the source wrote it); per-client consumer and producer "
               "settings apply to copy: records only, but for the Fetch keys fetch.max.wait.ms, "
               "max.partition.fetch.bytes and fetch.max.bytes; connection settings go in the cluster's config")

BATCH_FETCH_KEYS = {"fetch.wait.max.ms": "max_wait_ms", "max.partition.fetch.bytes": "partition_max_bytes",
                    "fetch.max.bytes": "max_bytes"}
"""The consumer keys (librdkafka's names) the batch path honours: they size and time its Fetch requests
(copying/batchsource.py); every other per-client key is refused there (BATCHES_WHY)."""

MAX_IN_FLIGHT_IDEMPOTENT = 5


def batch_honours(field: str) -> bool:
    """A refused-on-batches candidate (`...config[consumer.fetch.max.bytes]`) that the batch path's Fetch takes."""
    key = field.rsplit("[", 1)[-1].rstrip("]")
    if "consumer." not in key:
        return False
    name = key.rsplit("consumer.", 1)[1].removeprefix("override.")
    return JAVA_TO_LIBRDKAFKA.get(name, name) in BATCH_FETCH_KEYS


def recompresses(key: str) -> bool:
    """A target cluster's key asking for a codec: meaningless where batches keep the source's compression."""
    return JAVA_TO_LIBRDKAFKA.get(key, key).startswith("compression.")

# client keys sparkmirror sets itself from tls/authentication (Strimzi forbids them too): a password or key
# (ssl.key.password, sasl.jaas.config, ...) must never travel as a config value into the rendered ConfigMap
CLUSTER_KEYS_FORBIDDEN_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.")
CLUSTER_KEYS_ALLOWED_SSL = ("ssl.endpoint.identification.algorithm", "ssl.cipher.suites")


@dataclass(frozen=True)
class Setting:
    """What one MM2 client key becomes: a librdkafka `name`=`value`, or `refused`/`not_applicable` with why."""

    key: str
    name: str = ""
    value: str = ""
    refused: str = ""
    not_applicable: str = ""


def owned_why(client: str, key: str, exactly_once: bool) -> str | None:
    """Why the mirror owns `key` of `client` ("any": owned by any client), or None."""
    clients = ("consumer", "producer", "admin", "any") if client == "any" else (client, "any")
    tables = (OWNED, OWNED_EXACTLY_ONCE) if exactly_once else (OWNED,)
    for table in tables:
        for c in clients:
            if (c, key) in table:
                return table[(c, key)]
    return None


def _convert(java: str, value: str) -> str:
    if java == "buffer.memory":
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"expected a number of bytes, got {value!r}") from None
        return str(max(1, -(-n // 1024)))
    return value


def client_setting(client: Client, key: str, value: object, *, exactly_once: bool = True) -> Setting:
    """One MM2 client key of `client` as librdkafka takes it, or refused / not applicable with the reason."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    name = JAVA_TO_LIBRDKAFKA.get(key, key)
    for k in (key, name):
        why = owned_why(client, k, exactly_once)
        if why is not None:
            return Setting(key, refused=f"the mirror owns {k}: {why}")
    if key in NO_EQUIVALENT:
        return Setting(key, refused=f"librdkafka has no equivalent of Java's {key}: {NO_EQUIVALENT[key]}")
    if key in NOT_APPLICABLE:
        return Setting(key, not_applicable=NOT_APPLICABLE[key])
    if name == "max.in.flight.requests.per.connection" and client in ("producer", "any"):
        try:
            too_many = int(text) > MAX_IN_FLIGHT_IDEMPOTENT
        except ValueError:
            return Setting(key, refused=f"expected an integer, got {text!r}")
        if too_many:
            return Setting(key, refused=f"at most {MAX_IN_FLIGHT_IDEMPOTENT}: the lanes' producers are idempotent")
    try:
        return Setting(key, name=name, value=_convert(key, text))
    except ValueError as e:
        return Setting(key, refused=str(e))


# MM2 prefixes of per-client keys. In a cluster's `config` (mm2.properties' `<alias>.consumer.*`, a Strimzi
# cluster's Connect worker config): `consumer.` reaches that cluster's consumers, and so on. In a connector's
# config: MM2's `source.consumer.`/`source.cluster.consumer.`/`consumer.` (MirrorSourceConfig), Connect's
# `producer.override.` (the producer writing the mirrored records), MM2's `target.producer.`.
CLUSTER_PREFIXES: dict[str, Client] = {"consumer.": "consumer", "producer.": "producer", "admin.": "admin"}
CONNECTOR_PREFIXES: dict[str, tuple[str, Client]] = {
    "source.cluster.consumer.": ("source", "consumer"), "source.consumer.": ("source", "consumer"),
    "consumer.override.": ("source", "consumer"), "consumer.": ("source", "consumer"),
    "target.cluster.producer.": ("target", "producer"), "target.producer.": ("target", "producer"),
    "producer.override.": ("target", "producer"), "producer.": ("target", "producer"),
    "source.cluster.admin.": ("source", "admin"), "source.admin.": ("source", "admin"),
    "target.cluster.admin.": ("target", "admin"), "target.admin.": ("target", "admin"),
    "admin.override.": ("target", "admin"),
}


def cluster_prefix(key: str) -> tuple[Client, str] | None:
    """(client, key without the prefix) for a per-client key in a cluster's config."""
    for prefix, client in CLUSTER_PREFIXES.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            return client, key[len(prefix):]
    return None


def connector_prefix(key: str) -> tuple[str, Client, str] | None:
    """(side, client, key without the prefix) for a per-client key in a connector's config (longest first)."""
    for prefix in sorted(CONNECTOR_PREFIXES, key=len, reverse=True):
        if key.startswith(prefix) and len(key) > len(prefix):
            side, client = CONNECTOR_PREFIXES[prefix]
            return side, client, key[len(prefix):]
    return None


Said = tuple[Literal["error", "not_applicable"], str]


@dataclass(frozen=True)
class ClientKey:
    """A client setting the plan took: where it was written, for which client, as librdkafka names it."""

    field: str
    client: Client
    name: str
    value: str


@dataclass
class ClientKeys:
    """Per-client settings met while planning: librdkafka name -> (value, the resource field it came from)."""

    consumer: dict[str, tuple[str, str]] = field(default_factory=dict)
    producer: dict[str, tuple[str, str]] = field(default_factory=dict)
    admin: dict[str, tuple[str, str]] = field(default_factory=dict)

    def values(self, client: str) -> dict[str, str]:
        return {k: v for k, (v, _) in getattr(self, client).items()}

    def fields(self, *clients: str) -> list[str]:
        return [w for c in clients for _, w in getattr(self, c).values()]

    @staticmethod
    def take(client: Client, key: str, raw: object, where: str, exactly_once: bool,
             into: dict[str, tuple[str, str]]) -> Said | None:
        """One key of `client` taken into `into` by its librdkafka name (None), or why not."""
        if key.startswith(CLUSTER_KEYS_FORBIDDEN_PREFIXES) and key not in CLUSTER_KEYS_ALLOWED_SSL:
            return "error", "set through tls/authentication, not config"
        s = client_setting(client, key, raw, exactly_once=exactly_once)
        if s.refused:
            return "error", s.refused
        if s.not_applicable:
            return "not_applicable", s.not_applicable
        if s.name in into and into[s.name][0] != s.value:
            return "error", f"conflicts with {into[s.name][1]} ({s.name})"
        into[s.name] = (s.value, where)
        return None

    def merge_admin(self, config: dict[str, str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """`config` with the admin keys added (librdkafka has no admin-only settings), and the conflicts."""
        merged = dict(config)
        conflicts = []
        for name, (value, where) in self.admin.items():
            if merged.get(name, value) != value:
                conflicts.append((where, f"conflicts with the cluster's {name}={merged[name]}"))
            else:
                merged[name] = value
        return merged, conflicts
