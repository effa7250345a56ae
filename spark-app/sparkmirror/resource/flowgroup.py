"""The flow-group config: the one contract between the operator (which renders it) and the job (which reads it).

Keep it small and versioned: the operator writes it into a ConfigMap, the job reads it at start-up, and
`sparkmirror run` builds it from a KafkaMirrorMaker2 resource file. Credentials are never values here, only
paths of files (mounted Secrets) or names of environment variables the job reads at run time.
"""
from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .javaregex import JavaPatternError, compile_java
from .transforms import Transform

FLOWGROUP_API_VERSION = "sparkmirror.io/flowgroup/v1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class Delivery(str, Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


class CopyPath(str, Enum):
    """How a lane moves data: `records` (librdkafka decodes each record and produces it again) or `batches`
    (Kafka's record batches forwarded as bytes under the lane's own producer id: nothing decoded,
    decompressed or compressed; see copying/batchlane.py). Both keep `delivery`'s promise and write the same
    progress records, so checkpoints, failover and `verify` do not tell them apart."""
    RECORDS = "records"
    BATCHES = "batches"


COMMIT_INTERVAL_MS = {Delivery.EXACTLY_ONCE: 100, Delivery.AT_LEAST_ONCE: 1000}
"""commitIntervalMs when none is given. Exactly-once records become visible at the commit, so its interval is
their latency. At-least-once records are visible once acknowledged; its interval only bounds what a crash copies
again, and a progress transaction every 100 ms a lane held up the target's appends (bench, 5,000 records/s of
1 KiB, 65-s windows: append p99 112-192 ms at 100 against 52 at 1,000; MirrorMaker 2 commits its offsets every
offset.flush.interval.ms, 10-60 s)."""


def commit_interval_ms(delivery: Delivery | str | None) -> int:
    return COMMIT_INTERVAL_MS[Delivery(delivery or Delivery.EXACTLY_ONCE)]


LINGER_MS_AT_LEAST_ONCE = 20
"""lingerMs of at-least-once lanes when none is given. librdkafka sends one produce request per partition (the Java
client puts every partition of a broker in one), so at a steady rate a lane's request count grows with its
partitions, and on the target each request costs CPU. At-least-once records are visible once acknowledged, so that
load is where their tail comes from (bench, 5,000 records/s of 1 KiB over 8 partitions and 2 lanes, 95-s windows,
3 runs each: at 5 ms the brokers used 0.76 cores, at 20 ms 0.56-0.61 (MirrorMaker 2's: 0.58); p99 38-133 ms against
35-41, p50 11 against 17). At 20 ms a lane of 4 partitions sends about as many requests as a Java producer at 5 ms."""

MAX_LINGER_MS = 60000


def linger_ms(delivery: Delivery | str | None, commit_interval: int | None = None) -> int:
    """lingerMs when none is given. Exactly-once lanes linger for their commit interval: their records become
    visible only at the commit, whose flush sends whatever lingers, so lingering less only sends more requests. And
    more requests stall: librdkafka's idempotent producer holds a partition's next batch while 5 of its records
    are unacknowledged (it counts records against the broker's 5-request window) yet wakes its broker thread for
    that batch at once, so the thread spins until the ack comes (librdkafka PR #4989). On a 2-core machine that
    spin starved the target broker's GC threads and stretched its 15-ms pauses to 100-230 ms (bench, 5,000
    records/s of 1 KiB, 95-s windows: visible p99 109-128 ms in four runs at 5 ms, 79-105 in three at 100;
    MirrorMaker 2 exactly-once 76-84). Under a backlog batches fill and leave on their own, yet copying
    1,000,000 records at 5 ms was about 5% faster at 7% less CPU per record (medians of two 9-s runs each)."""
    if Delivery(delivery or Delivery.EXACTLY_ONCE) is Delivery.AT_LEAST_ONCE:
        return LINGER_MS_AT_LEAST_ONCE
    interval = commit_interval if isinstance(commit_interval, int) and commit_interval > 0 \
        else commit_interval_ms(delivery)
    return min(interval, MAX_LINGER_MS)


class ReplicationPolicy(str, Enum):
    """MM2's two stock policies: DefaultReplicationPolicy prefixes the source alias, Identity keeps names."""

    DEFAULT = "default"
    IDENTITY = "identity"


class SecretUnreadable(ValueError):
    """A referenced secret that cannot be used as text; the message says where it is, never what it holds."""


def secret_text(data: bytes, where: str) -> str:
    """A secret's bytes as the UTF-8 text Kafka clients take (passwords, PEM), or SecretUnreadable naming
    `where`. UnicodeDecodeError's own text would quote a byte of the secret and its position."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretUnreadable(f"{where} is not UTF-8 text (a password, certificate or key must be)") from None


class SecretValue(_Model):
    """Where the job finds a secret at run time: a mounted file or an environment variable, never a literal."""

    file: str | None = Field(None, description="Path of a file holding the value (a mounted Secret key).")
    env: str | None = Field(None, description="Name of an environment variable holding the value.")

    @model_validator(mode="after")
    def _one_of(self) -> "SecretValue":
        if (self.file is None) == (self.env is None):
            raise ValueError("exactly one of file or env must be set")
        return self

    def read(self) -> str:
        """The value now; KeyError (unset variable), OSError (missing file) or SecretUnreadable (not UTF-8)."""
        import os

        if self.file is not None:
            return secret_text(Path(self.file).read_bytes(), f"secret file {self.file}").strip()
        value = os.environ.get(self.env or "")
        if value is None:
            raise KeyError(f"environment variable {self.env} is not set")
        try:  # Python decodes the environment with surrogateescape: undecodable bytes show up only here
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SecretUnreadable(f"environment variable {self.env} is not UTF-8 text (a password must be)") \
                from None
        return value


SecretResolver = Callable[[SecretValue], str]
"""Reads a referenced secret in memory: SecretValue(file=...) for CA, certificate and key files (and a password
given as a file), SecretValue(env=...) for a password given as an environment variable."""


class Authentication(_Model):
    type: Literal["scram-sha-256", "scram-sha-512", "plain", "tls"]
    username: str | None = None
    password: SecretValue | None = None
    certificateFile: str | None = Field(None, description="Client certificate (PEM) for mTLS.")
    keyFile: str | None = Field(None, description="Client key (PEM) for mTLS.")


class Tls(_Model):
    caFiles: list[str] = Field(default_factory=list, description="PEM files of trusted CA certificates.")


class Cluster(_Model):
    alias: str
    bootstrapServers: str
    tls: Tls | None = None
    authentication: Authentication | None = None
    config: dict[str, str] = Field(default_factory=dict, description="Extra librdkafka client properties.")
    consumer: dict[str, str] = Field(default_factory=dict, description="librdkafka properties of the lanes' "
                                     "consumers reading this cluster (MM2's `<alias>.consumer.*`).")
    producer: dict[str, str] = Field(default_factory=dict, description="librdkafka properties of the lanes' "
                                     "producers writing this cluster (MM2's `<alias>.producer.*`).")

    def client_config(self, resolve: SecretResolver | None = None) -> dict[str, str]:
        """librdkafka properties for this cluster, secrets resolved now.

        Without `resolve` (the job, at run time on the worker): certificate and key files go to librdkafka by
        path (several CA files become one PEM text), the password is read from its file or variable. With
        `resolve` (the operator, which holds Secrets in memory): every reference goes through it and lands in
        the properties as text (ssl.ca.pem, ssl.certificate.pem, ssl.key.pem, sasl.password); nothing is read
        from files or the environment.
        """
        conf: dict[str, str] = {"bootstrap.servers": self.bootstrapServers, **self.config}
        auth = self.authentication
        if self.tls is not None:
            conf["security.protocol"] = "SSL"
            if resolve is None:
                conf.update(_ca_config(self.tls.caFiles))
            elif self.tls.caFiles:
                conf["ssl.ca.pem"] = "\n".join(resolve(SecretValue(file=f)) for f in self.tls.caFiles)
        if auth is not None:
            if auth.type == "tls":
                conf["security.protocol"] = "SSL"
                for what, path in (("certificate", auth.certificateFile), ("key", auth.keyFile)):
                    if not path:
                        continue
                    if resolve is None:
                        conf[f"ssl.{what}.location"] = path
                    else:
                        conf[f"ssl.{what}.pem"] = resolve(SecretValue(file=path))
            else:
                conf["security.protocol"] = "SASL_SSL" if self.tls is not None else "SASL_PLAINTEXT"
                conf["sasl.mechanism"] = {"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256",
                                          "scram-sha-512": "SCRAM-SHA-512"}[auth.type]
                conf["sasl.username"] = auth.username or ""
                if auth.password is not None:
                    conf["sasl.password"] = auth.password.read() if resolve is None else resolve(auth.password)
        return conf

    def resolved(self, resolve: SecretResolver) -> "Cluster":
        """The cluster with its secrets as text in `config` (no file or variable left to read): for code that
        takes a config and calls `client_config()` itself, run by the operator with Secrets in memory."""
        conf = self.client_config(resolve)
        conf.pop("bootstrap.servers")
        return Cluster(alias=self.alias, bootstrapServers=self.bootstrapServers, config=conf,
                       consumer=dict(self.consumer), producer=dict(self.producer))


def _ca_config(ca_files: list[str]) -> dict[str, str]:
    """librdkafka takes one CA file (ssl.ca.location) or PEM text (ssl.ca.pem): several files, or a Strimzi
    certificate glob such as `/etc/.../*.crt`, become one PEM text, read at run time on the worker."""
    import glob

    files = sorted({f for pattern in ca_files for f in (glob.glob(pattern) if glob.has_magic(pattern) else [pattern])})
    if not ca_files:
        return {}
    if not files:
        raise FileNotFoundError(f"tls.caFiles: no certificate file matches {ca_files}")
    if len(files) == 1:
        return {"ssl.ca.location": files[0]}
    return {"ssl.ca.pem": "\n".join(secret_text(Path(f).read_bytes(), f"CA file {f}").strip() for f in files) + "\n"}


# MirrorMaker 2's DefaultConfigPropertyFilter exclusions (config.properties.exclude default).
DEFAULT_CONFIG_PROPERTIES_EXCLUDE = [
    r"follower\.replication\.throttled\.replicas",
    r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms",
    r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable",
    r"min\.insync\.replicas",
]


def replication_factor(v: int | None) -> int | None:
    """A replication factor as Kafka takes it: at least 1, or -1 for the broker's default (0 is refused)."""
    if v == 0:
        raise ValueError("a replication factor must be -1 (the broker's default) or at least 1, got 0")
    return v


class DeleteRemoteTopics(_Model):
    """Deletion propagation (no MM2 key: MM2 leaves remote topics behind for ever). Opt-in: deleting data on
    the target because the source lost a topic must be asked for, and it waits out a grace period so that a
    topic deleted by mistake can still be read back from the target."""

    enabled: bool = Field(False, description="Delete a remote topic this mirror created (recorded in its progress "
                          "topic) once its source topic has been gone, or deleted and created again, for "
                          "graceSeconds. A topic the mirror did not create is never deleted.")
    graceSeconds: int = Field(86400, ge=1, le=365 * 86400, description="How long the source topic must stay gone "
                              "before its remote topic is deleted (default one day); the clock is kept in the "
                              "progress topic, so it survives restarts.")


class Mirror(_Model):
    """One source -> target flow, MM2 semantics, one streaming query."""

    name: str = Field(description="Stable name, used in transactional ids and progress keys.")
    source: str = Field(description="Alias of the source cluster.")
    target: str = Field(description="Alias of the target cluster.")
    topics: str = Field(".*", description="Regex of source topics to mirror (MM2 topics).")
    topicsExclude: str = Field(r".*[\-\.]internal|.*\.replica|__.*", description="Regex of topics never mirrored.")
    groups: str | None = Field(None, description="Regex of consumer groups whose offsets are translated.")
    groupsExclude: str = Field(r"console-consumer-.*|connect-.*|__.*")
    replicationPolicy: ReplicationPolicy = ReplicationPolicy.DEFAULT
    separator: str = "."
    refreshTopicsIntervalSeconds: float = Field(5.0, gt=0)
    syncTopicConfigs: bool = True
    syncTopicConfigsIntervalSeconds: float = Field(60.0, gt=0)
    configPropertiesExclude: list[str] = Field(default_factory=lambda: list(DEFAULT_CONFIG_PROPERTIES_EXCLUDE))
    syncTopicAcls: bool = Field(True, description="Copy read access to replicated topics and checkpointed groups "
                                "onto the target, and remove what the source no longer grants (MM2's "
                                "sync.topic.acls.enabled; the rule is in sparkmirror/aclplan.py).")
    syncTopicAclsIntervalSeconds: float = Field(600.0, gt=0, description="MM2's sync.topic.acls.interval.seconds.")
    replicationFactor: int | None = Field(None, ge=-1, description="Replication factor of created remote topics "
                                          "(MM2's replication.factor); none: the source topic's; -1: the target "
                                          "broker's default.replication.factor.")
    heartbeatsTopicReplicationFactor: int = Field(-1, ge=-1, description="Replication factor of the heartbeats "
                                                  "topic (MM2's heartbeats.topic.replication.factor); -1: the "
                                                  "broker's default.")
    checkpointsTopicReplicationFactor: int = Field(-1, ge=-1, description="Replication factor of the checkpoints "
                                                   "topic (MM2's checkpoints.topic.replication.factor); -1: the "
                                                   "broker's default.")
    startFrom: str | None = Field(None, description="Source consumer group whose committed offsets a partition's "
                                  "first run starts at (see startfrom.py).")
    sourceOffsetsGroup: str | None = Field(None, min_length=1, max_length=249, description=(
        "Consumer group on the source that the mirror commits its position to after each committed interval "
        "(opt-in; a report only, see copying/groupreport.py), so kafka-consumer-groups.sh, Burrow and lag "
        "exporters show its lag per partition. A group of its own: one that consumers ever joined is not "
        "written."))
    deleteRemoteTopics: DeleteRemoteTopics | None = Field(None, description=(
        "Deletion propagation: remote topics the mirror created follow their source topic's deletion after a "
        "grace period (see sparkmirror/topicdeletion.py); none: off (left out, so a config without it keeps its "
        "hash and no worker generation rolls for it)."))
    transforms: list[Transform] | None = Field(None, description=(
        "Record transforms applied in order to every record copied (resource/transforms.py, compiled by "
        "sparkmirror/transforms.py); none: records are copied as they are (left out, so a config without them "
        "keeps its hash)."))
    emitCheckpoints: bool = True
    emitCheckpointsIntervalSeconds: float = Field(60.0, gt=0)
    syncGroupOffsets: bool = False
    syncGroupOffsetsIntervalSeconds: float = Field(60.0, gt=0)
    emitHeartbeats: bool = True
    emitHeartbeatsIntervalSeconds: float = Field(1.0, gt=0)
    emitHeartbeatsUpstream: bool = Field(False, description="Also write heartbeats (target -> source) into the "
                                         "source's heartbeats topic, as MM2's dedicated mode does (Strimzi's "
                                         "Connect-based MM2 does not), so the remote heartbeats topic shows this "
                                         "hop to RemoteClusterUtils on the target; needs write access to the source.")
    lanes: int | None = Field(None, ge=1, le=1024, description="Parallel copy tasks; default the flow group's.")
    sourceConsumer: dict[str, str] = Field(default_factory=dict, description="librdkafka properties of this "
                                           "mirror's lane consumers (MM2's source.consumer.*), over the cluster's.")
    targetProducer: dict[str, str] = Field(default_factory=dict, description="librdkafka properties of this "
                                           "mirror's lane producers (MM2's target.producer.*, "
                                           "producer.override.*), over the cluster's.")

    @property
    def deletion(self) -> DeleteRemoteTopics:
        """The deletion propagation settings in effect (off when not given)."""
        return self.deleteRemoteTopics or DeleteRemoteTopics()

    @field_validator("topics", "topicsExclude", "groups", "groupsExclude")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                compile_java(v)
            except JavaPatternError as e:
                raise ValueError(f"invalid regex {e}") from e
        return v

    @field_validator("replicationFactor", "heartbeatsTopicReplicationFactor", "checkpointsTopicReplicationFactor")
    @classmethod
    def _factor(cls, v: int | None) -> int | None:
        return replication_factor(v)

    @field_validator("configPropertiesExclude")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for r in v:
            try:
                compile_java(r)
            except JavaPatternError as e:
                raise ValueError(f"invalid regex {e}") from e
        return v


class Predecessor(_Model):
    """A flow group's worker generation that this one takes over from (see DESIGN.md section 5)."""

    flowGroup: str
    generation: int = Field(ge=1)
    transactionalIds: dict[str, list[str]] = Field(
        default_factory=dict, description="Target cluster alias -> the transactional ids its lanes held: fenced "
        "before this generation copies, whatever the lane count or flow-group split was.")


class Worker(_Model):
    """Which worker generation this is, for fencing and the upgrade handoff."""

    generation: int = Field(1, ge=1)
    version: str = "dev"
    leaseName: str | None = Field(None, description="coordination.k8s.io Lease that says which generation mirrors; "
                                  "without it the generation copies at once.")
    leaseNamespace: str | None = None
    application: str = Field("", description="Digest of the application settings this generation runs with "
                             "(image, resources, Spark conf): a change needs a new generation too.")
    predecessors: list[Predecessor] = Field(
        default_factory=list, description="Generations whose lanes this one fences, and whose flow groups it marks "
        "as taken over, before it copies.")


class FlowGroupConfig(_Model):
    apiVersion: Literal["sparkmirror.io/flowgroup/v1"] = FLOWGROUP_API_VERSION
    name: str = Field(description="Flow-group name; part of transactional ids, so keep it stable.")
    resource: str = Field("local/mirror", description="namespace/name of the owning KafkaMirrorMaker2.")
    resourceUid: str = Field("", description="uid of the owning resource: a recreated resource starts its "
                             "worker generations afresh.")
    clusters: list[Cluster]
    mirrors: list[Mirror] = Field(min_length=1)
    delivery: Delivery = Delivery.EXACTLY_ONCE
    copy_path: CopyPath = Field(CopyPath.BATCHES, alias="copy", description="How lanes move data: Kafka's record "
                                "batches forwarded as bytes (batches), or records.")
    copyFallback: str | None = Field(None, description="Why the lanes copy records though the resource left `copy` to its "
                              "default (batches): the per-client settings only the record path honours, by field. "
                              "Written by the operator's plan; shown by `plan` and in the metrics.")
    lanes: int = Field(2, ge=1, le=1024, description="Default parallel copy tasks per mirror.")
    epochSeconds: float = Field(30.0, gt=0, description="How long one lane task runs before Spark plans again.")
    commitIntervalMs: int = Field(100, ge=1, description="Longest time between transactions inside a lane (an "
                                  "exactly-once lane that has read all its source had commits after a quarter); "
                                  "when not given 100 for exactly-once, 1000 for at-least-once.")
    lingerMs: int = Field(100, ge=0, le=MAX_LINGER_MS, description="linger.ms of the lanes' producers: how long "
                          "a record waits for more of its partition's to share a request. When not given the commit "
                          "interval for exactly-once (capped at 60000), 20 for at-least-once.")
    offsetHistory: int | None = Field(None, ge=1, description="Committed ranges per source partition the driver "
                                      "keeps for offset translation; None: sized by the driver from its memory "
                                      "and the partitions it serves (historybudget.py).")
    progressTopic: str = Field("sparkmirror.progress.internal", description="Compacted topic on each target.")
    progressTopicReplicationFactor: int = Field(-1, ge=-1, description="Replication factor the progress topic is "
                                                "created with; -1: the target broker's default.")
    checkpointDir: str | None = Field(None, description="Spark checkpoint root; an optimisation, may be lost.")
    metricsPort: int | None = Field(None, ge=0, le=65535, description="Prometheus text on the driver; 0 = any.")
    metricsBind: str | None = Field(None, description="IP address the metrics endpoint binds to; default "
                                                      "$SPARKMIRROR_METRICS_BIND, else 0.0.0.0 (every interface).")
    metricsPerPartition: bool | None = Field(None, description="Serve the per-partition metric families (9 series "
                                             "per source partition; None: yes); false: per mirror only, for mirrors "
                                             "of many partitions.")
    sourceGapPolicy: Literal["fail", "skip"] = Field(
        "fail", description="What a lane does when the source no longer holds the next offset to copy (retention "
        "or truncation deleted it, or the topic was recreated) or its remote topic was recreated: 'fail' stops the "
        "mirror with an error naming the partition and what happened; 'skip' logs it as lost and continues from "
        "the earliest offset still held (after a recreated remote topic: the committed one). Never silent.")
    transactionTimeoutMs: int = Field(
        60000, ge=1000, description="transaction.timeout.ms of lane producers: how long the broker keeps a dead "
        "lane's open transaction (blocking read_committed readers) before aborting it, if no new copy fences it.")
    worker: Worker = Field(default_factory=Worker)

    @model_validator(mode="before")
    @classmethod
    def _delivery_defaults(cls, data: object) -> object:
        """commitIntervalMs or lingerMs not given (or null): the delivery's default (COMMIT_INTERVAL_MS, linger_ms,
        which for exactly-once follows the commit interval)."""
        if not isinstance(data, dict):
            return data
        try:
            if data.get("commitIntervalMs") is None:
                data = {**data, "commitIntervalMs": commit_interval_ms(data.get("delivery"))}
            if data.get("lingerMs") is None:
                data = {**data, "lingerMs": linger_ms(data.get("delivery"), data.get("commitIntervalMs"))}
        except ValueError:
            return data  # an unknown delivery: its own field's error names it
        return data

    @field_validator("progressTopicReplicationFactor")
    @classmethod
    def _progress_factor(cls, v: int) -> int:
        return replication_factor(v)

    @field_validator("metricsBind")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None:
            import ipaddress

            try:
                ipaddress.ip_address(v)
            except ValueError:
                raise ValueError(f"expected an IP address, got {v!r}") from None
        return v

    @model_validator(mode="after")
    def _references(self) -> "FlowGroupConfig":
        aliases = [c.alias for c in self.clusters]
        dupes = {a for a in aliases if aliases.count(a) > 1}
        if dupes:
            raise ValueError(f"clusters: duplicate alias {sorted(dupes)}")
        names = [m.name for m in self.mirrors]
        if len(set(names)) != len(names):
            raise ValueError("mirrors: mirror names must be unique")
        for i, m in enumerate(self.mirrors):
            for side in ("source", "target"):
                if getattr(m, side) not in aliases:
                    raise ValueError(f"mirrors[{i}].{side}: unknown cluster alias {getattr(m, side)!r}; "
                                     f"known: {aliases}")
            if m.source == m.target:
                raise ValueError(f"mirrors[{i}]: source and target are the same cluster {m.source!r}")
        return self

    def cluster(self, alias: str) -> Cluster:
        return next(c for c in self.clusters if c.alias == alias)

    def consumer_config(self, mirror: Mirror) -> dict[str, str]:
        """A lane consumer's settings before the mirror's own: the source cluster's, its consumer keys, the
        mirror's (later wins, as MM2's prefixes do)."""
        c = self.cluster(mirror.source)
        return {**c.client_config(), **c.consumer, **mirror.sourceConsumer}

    def producer_config(self, mirror: Mirror) -> dict[str, str]:
        """A lane producer's settings before the mirror's own: the target cluster's, its producer keys, the
        mirror's."""
        c = self.cluster(mirror.target)
        return {**c.client_config(), **c.producer, **mirror.targetProducer}

    def lanes_of(self, mirror: Mirror) -> int:
        return mirror.lanes or self.lanes

    def lane_routes(self) -> list[tuple[str, str, int]]:
        """(mirror, target alias, lanes) of every mirror: what its transactional ids are made of."""
        return [(m.name, m.target, self.lanes_of(m)) for m in self.mirrors]

    def runs_like(self, other: "FlowGroupConfig") -> bool:
        """Whether a worker of `other` runs exactly this (the worker's own generation set aside)."""
        return self.model_dump(exclude={"worker"}) == other.model_dump(exclude={"worker"}) and \
            self.worker.version == other.worker.version and self.worker.application == other.worker.application

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str) -> "FlowGroupConfig":
        return cls.model_validate(yaml.safe_load(text))


FlowGroupConfigs = Annotated[list[FlowGroupConfig], Field(min_length=1)]
