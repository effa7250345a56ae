"""The `KafkaMirrorMaker2` custom resource (`sparkmirror.io/v1alpha1`): the single definition of its schema.

The spec follows Strimzi's `kafka.strimzi.io/v1` KafkaMirrorMaker2 field for field, so a Strimzi manifest with
only its apiVersion changed validates here. Fields that only mean something to Kafka Connect are accepted
(marked `connect_only`) and reported on the status as not applicable. Spark-specific fields (`spark`,
`flowGroups`, `delivery`, `state`, `upgrade`) are added.

The CRD in `crds/` is generated from these models (`python -m sparkmirror_operator.crdgen`), including the
CEL rules given through `x-kubernetes-validations` in `json_schema_extra`. Pure pydantic: no kopf or kubernetes.
The clusters (`clusters`) and the status (`statusmodel`) have modules of their own, on `schemabase`.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .autoscaling import AutoscalingSpec  # the field's own file (issue 38)
from .clusters import ClusterSpec, TargetClusterSpec
from .flowgroup import CopyPath, DeleteRemoteTopics, Delivery  # one definition for the resource and the job's config
from .schemabase import StrictModel, cel, connect_only, validations
from .statusmodel import KafkaMirrorMaker2Status
from .transforms import Transform

GROUP = "sparkmirror.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KafkaMirrorMaker2"
PLURAL = "kafkamirrormaker2s"
SINGULAR = "kafkamirrormaker2"
SHORT_NAMES = ["smm2"]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MEMORY = r"^[0-9]+([kmgtKMGT][bB]?)?$"


# ---- mirrors --------------------------------------------------------------------------------------------

class ConnectorState(str, Enum):
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class ConnectorSpec(StrictModel):
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="MirrorMaker 2 connector properties. Keys that mean something here keep their MM2 name and "
                    "meaning (replication.policy.class, replication.policy.separator, "
                    "refresh.topics.interval.seconds, sync.topic.configs.enabled, config.properties.exclude, "
                    "emit.checkpoints.interval.seconds, sync.group.offsets.enabled, ...); unknown keys are "
                    "reported on the status.")
    tasksMax: int | None = connect_only("Maximum number of Connect tasks; use spark.parallelism instead.",
                                        ge=1)
    version: str | None = connect_only("Connector version.")
    state: ConnectorState | None = connect_only("Connector state; use spec.state instead.")
    autoRestart: dict[str, Any] | None = connect_only("Connector auto-restart.")
    listOffsets: dict[str, Any] | None = connect_only("Connector offsets listing.")
    alterOffsets: dict[str, Any] | None = connect_only("Connector offsets alteration.")


class MirrorSpec(StrictModel):
    source: ClusterSpec = Field(description="The source cluster; its alias names the mirror and must differ "
                                            "from the target's.")
    sourceConnector: ConnectorSpec | None = Field(None, description="Settings of MM2's source connector: the "
                                                                    "copy of records and topic configs.")
    checkpointConnector: ConnectorSpec | None = Field(None, description="Settings of MM2's checkpoint "
                                                                        "connector: consumer-group offsets.")
    topicsPattern: str | None = Field(None, description="Regular expression of the source topics to mirror "
                                                        "(MM2 `topics`); default all.", max_length=4096)
    topicsExcludePattern: str | None = Field(None, description="Regular expression of the source topics never "
                                                               "mirrored (MM2 `topics.exclude`).",
                                             max_length=4096)
    groupsPattern: str | None = Field(None, description="Regular expression of the consumer groups whose "
                                                        "offsets are translated (MM2 `groups`).",
                                      max_length=4096)
    groupsExcludePattern: str | None = Field(None, description="Regular expression of the consumer groups "
                                                               "excluded (MM2 `groups.exclude`).",
                                             max_length=4096)
    startFrom: str | None = Field(None, description="A consumer group on the source (the legacy MirrorMaker's): "
                                                    "a partition's first run starts at its committed offset "
                                                    "instead of the beginning.", max_length=249)
    sourceOffsetsGroup: str | None = Field(None, description="A consumer group of the mirror's own on the source "
                                           "that it commits its position to (a report; no MM2 key), so "
                                           "kafka-consumer-groups.sh and lag exporters show its lag. A group "
                                           "consumers ever joined is not written.", min_length=1, max_length=249)
    deleteRemoteTopics: DeleteRemoteTopics | None = Field(None, description="Deletion propagation (no MM2 key; "
                                                          "off by default): a remote topic this mirror created is "
                                                          "deleted once its source topic has been gone for "
                                                          "graceSeconds; topics it did not create never are.")
    transforms: list[Transform] | None = Field(None, description="Record transforms applied in order to every "
                                               "record copied (MM2's `transforms` connector keys do not apply): "
                                               "dropRecords, dropJsonFields, renameHeader, addHeader, python. "
                                               "Exactly-once holds and dropped records stay in the offset map, so "
                                               "checkpoints, failover, failback and verify stay exact.", max_length=32)


# ---- Spark-specific -------------------------------------------------------------------------------------

QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|Ki|Mi|Gi)?$"


class DriverSpec(StrictModel):
    cores: int = Field(1, description="CPU cores of the Spark driver.", ge=1, le=64)
    coreRequest: str | None = Field(None, description="CPU request of the driver pod (Kubernetes quantity, e.g. "
                                                      "250m); default: cores.", max_length=32, pattern=QUANTITY)
    coreLimit: str | None = Field(None, description="CPU limit of the driver pod (Kubernetes quantity).",
                                  max_length=32)
    memory: str = Field("1g", description="Spark driver memory (Spark size, e.g. 512m, 2g).", pattern=MEMORY)


class ExecutorSpec(StrictModel):
    instances: int = Field(1, description="Number of Spark executors.", ge=1, le=1000)
    cores: int = Field(1, description="CPU cores per executor; Spark's task slots are raised to one per lane "
                                      "when fewer (the pod's CPU request stays these cores).", ge=1, le=64)
    coreRequest: str | None = Field(None, description="CPU request of executor pods (Kubernetes quantity, e.g. "
                                                      "500m); default: cores.", max_length=32, pattern=QUANTITY)
    coreLimit: str | None = Field(None, description="CPU limit of executor pods (Kubernetes quantity).",
                                  max_length=32)
    memory: str = Field("1g", description="Memory per executor (Spark size, e.g. 512m, 2g).", pattern=MEMORY)


class ImagePullPolicy(str, Enum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class SparkSpec(StrictModel):
    image: str | None = Field(None, description="Spark image carrying the mirror job; default the operator's.",
                              max_length=1024)
    imagePullPolicy: ImagePullPolicy | None = Field(None, description="Pull policy of the Spark image.")
    imagePullSecrets: list[str] = Field(default_factory=list, description="Secrets (names) for pulling the Spark "
                                                                          "image; added to the operator's default.",
                                        max_length=16)
    podSecurityContext: dict[str, Any] | None = Field(
        None, description="Pod securityContext fields of the driver and executors, over the default (non-root "
                          "uid 185, fsGroup 185 so mounted Secrets are readable, RuntimeDefault seccomp).")
    sparkVersion: str = Field("4.1.1", description="Spark version of the image.", max_length=32)
    driver: DriverSpec = Field(default_factory=DriverSpec, description="Spark driver resources.")
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec, description="Spark executor resources.")
    parallelism: int = Field(2, description="Parallel copy tasks (lanes) per mirror, unless a flow group says "
                                            "otherwise.", ge=1, le=1024)
    epochSeconds: float = Field(30.0, description="How long one lane task runs before Spark plans again.",
                                gt=0, le=3600)
    commitIntervalMs: int | None = Field(None, description="Longest time between transactions inside a lane; an "
                                         "exactly-once lane that has read all its source had commits after a "
                                         "quarter of it. Default 100 for exactly-once (records become visible at "
                                         "the commit), 1000 for at-least-once (visible once acknowledged: the "
                                         "interval bounds what a crash copies again).", ge=1, le=600000)
    lingerMs: int | None = Field(None, description="linger.ms of the lanes' producers: how long a record waits "
                                 "for more of its partition's to share a produce request (librdkafka sends one "
                                 "request per partition). Default for exactly-once: the commit interval (its records "
                                 "become visible at the commit, whose flush sends them); for at-least-once: 20 (fewer "
                                 "requests: less load on the target, a steadier tail).", ge=0, le=60000)
    checkpointDir: str | None = Field(None, description="Spark checkpoint root (an optimisation; the target's "
                                                        "progress topic is the truth).", max_length=1024)
    offsetHistory: int | None = Field(None, description="Committed ranges per source partition the driver keeps "
                                      "for offset translation (one per commit interval): a consumer group committed "
                                      "before the oldest kept range gets no checkpoint. When not given, sized at "
                                      "start from a quarter of driver.memory and the source partitions served; a "
                                      "value that cannot fit there is refused.", ge=1000, le=100_000_000)
    sparkConf: dict[str, str] = Field(default_factory=dict, description="Extra Spark configuration.")


class FlowGroupSpec(StrictModel):
    name: str = Field(description="Flow-group name: one Spark application; part of transactional ids, so keep "
                                  "it stable.", min_length=1, max_length=30, pattern=DNS_LABEL)
    mirrors: list[str] = Field(description="Source aliases of the mirrors this group runs.",
                               min_length=1, max_length=64)
    topicsPattern: str | None = Field(None, description="Further restricts the mirrors' topics to those "
                                                        "matching this regular expression.", max_length=4096)
    topicsExcludePattern: str | None = Field(None, description="Further excludes topics matching this regular "
                                                               "expression.", max_length=4096)
    parallelism: int | None = Field(None, description="Lanes per mirror in this group; default "
                                                      "spark.parallelism.", ge=1, le=1024)
    executor: ExecutorSpec | None = Field(None, description="Executor resources of this group; default "
                                                            "spark.executor.")
    metricsPerPartition: bool | None = Field(None, description="Whether this group's driver serves the per-partition "
                                             "metric families (9 series per source partition); default the "
                                             "operator's (the chart's metrics.perPartition).")
    copy_path: CopyPath | None = Field(None, alias="copy", description="How this group's lanes move data "
                                       "(records or batches); default spec.copy.")


class State(str, Enum):
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class UpgradeSpec(StrictModel):
    readyTimeoutSeconds: int = Field(600, description="How long a new worker generation may take to become "
                                                      "ready before it is rolled back.", ge=10, le=86400)
    handoffTimeoutSeconds: int = Field(120, description="How long a new generation may take, once the Lease moved "
                                                        "to it, to commit its first epoch (give it more than "
                                                        "spark.epochSeconds); then the Lease moves back and the "
                                                        "old generation, a hot spare, copies again.", ge=5, le=3600)
    maxConcurrentGroups: int = Field(1, description="Flow groups upgraded at the same time.", ge=1, le=64)
    leaseDurationSeconds: int = Field(15, description="The flow groups' Leases: their holder (the worker "
                                                     "generation that copies) renews its Lease within this; a new "
                                                     "generation that stops renewing after the Lease moved to it is "
                                                     "rolled back then, without waiting for handoffTimeoutSeconds.",
                                      ge=3, le=300)


class FailoverSpec(StrictModel):
    """Consumers move from a source to the target: the operator runs `sparkmirror failover` for each mirror
    listed (once), and `failover --undo` for one taken off the list (sparkmirror/failover)."""

    mirrors: list[str] = Field(description="Mirrors (source aliases) failed over to the target. Their flow "
                                           "groups stop copying (with every other mirror they carry) and get no "
                                           "application; taken off the list, they copy again.", max_length=64,
                               json_schema_extra={"x-kubernetes-list-type": "set"})
    groupsPattern: str | None = Field(None, description="Regular expression of the consumer groups whose "
                                                        "offsets are moved (default: every checkpointed group).",
                                      max_length=1024)
    waitCaughtUpSeconds: int = Field(0, description="Wait up to this long for the mirror to copy everything the "
                                                    "source holds before stopping it; not caught up by then, "
                                                    "nothing is changed and the status says so (stop the "
                                                    "producers first).", ge=0, le=3600)


# ---- the resource ---------------------------------------------------------------------------------------

_MIRROR_ALIAS_UNIQUE = "self.mirrors.all(m, self.mirrors.exists_one(n, n.source.alias == m.source.alias))"
_SOURCE_NOT_TARGET = "self.mirrors.all(m, m.source.alias != self.target.alias)"
_GROUPS_NAME_MIRRORS = ("!has(self.flowGroups) || self.flowGroups.all(g, g.mirrors.all(a, "
                        "self.mirrors.exists(m, m.source.alias == a)))")
_GROUP_NAMES_UNIQUE = ("!has(self.flowGroups) || self.flowGroups.all(g, "
                       "self.flowGroups.exists_one(h, h.name == g.name))")
_HANDOFF_OUTLASTS_EPOCH = (
    "double(has(self.upgrade) && has(self.upgrade.handoffTimeoutSeconds) ? self.upgrade.handoffTimeoutSeconds : 120)"
    " > (has(self.spark) && has(self.spark.epochSeconds) ? double(self.spark.epochSeconds) : 30.0)")
"""A successor's first commit comes at the end of its first epoch: a shorter handoff timeout would move every
Lease back. (The API server defaults only fields of objects that are present, hence the model's defaults here.)"""
_PROGRESS_FACTOR = "!has(self.progressTopicReplicationFactor) || self.progressTopicReplicationFactor != 0"
_FAILOVER_NAMES_MIRRORS = ("!has(self.failover) || self.failover.mirrors.all(a, "
                           "self.mirrors.exists(m, m.source.alias == a))")


class KafkaMirrorMaker2Spec(StrictModel):
    model_config = ConfigDict(json_schema_extra=validations(
        cel(_MIRROR_ALIAS_UNIQUE, "mirrors[].source.alias must be unique", ".mirrors"),
        cel(_SOURCE_NOT_TARGET, "mirrors[].source.alias must differ from target.alias", ".mirrors"),
        cel(_GROUPS_NAME_MIRRORS, "flowGroups[].mirrors must name mirrors by their source alias", ".flowGroups"),
        cel(_GROUP_NAMES_UNIQUE, "flowGroups[].name must be unique", ".flowGroups"),
        cel(_FAILOVER_NAMES_MIRRORS, "failover.mirrors must name mirrors by their source alias", ".failover"),
        cel(_PROGRESS_FACTOR, "progressTopicReplicationFactor must be -1 (the broker's default) or at least 1",
            ".progressTopicReplicationFactor"),
        cel(_HANDOFF_OUTLASTS_EPOCH, "upgrade.handoffTimeoutSeconds must be longer than spark.epochSeconds (a new "
            "generation commits first at the end of its first epoch)", ".upgrade")))

    version: str | None = Field(None, description="Version of the mirror (the Kafka version for Strimzi); a "
                                                  "change rolls the applications over.", max_length=64)
    target: TargetClusterSpec = Field(description="The target cluster every mirror writes to.")
    mirrors: list[MirrorSpec] = Field(description="Source clusters and what to mirror from each.",
                                      min_length=1, max_length=64)
    spark: SparkSpec = Field(default_factory=SparkSpec, description="Spark application settings.")
    flowGroups: list[FlowGroupSpec] | None = Field(
        None, description="How mirrors split into Spark applications. Mirrors no group names run in a group of "
                          "their own named after their source alias (the default: one group per mirror).",
        max_length=64)
    delivery: Delivery = Field(Delivery.EXACTLY_ONCE, description="Delivery guarantee: exactly-once "
                                                                  "(transactions) or at-least-once.")
    copy_path: CopyPath | None = Field(None, alias="copy", description="How lanes move data, under either "
                                       "delivery: batches (Kafka's record batches forwarded as bytes under the "
                                       "lane's producer id; batches that cannot go as they are rebuilt) or records "
                                       "(each record decoded and produced again). Unset: batches, but records for a "
                                       "flow group whose per-client producer or consumer settings (or a target "
                                       "codec) only the record path honours; `plan` says which. A flow group may "
                                       "set its own.")
    state: State = Field(State.RUNNING, description="running; paused (applications suspended); stopped "
                                                    "(applications removed, progress on the target kept).")
    upgrade: UpgradeSpec = Field(default_factory=UpgradeSpec, description="Rolling upgrade settings.")
    autoscaling: AutoscalingSpec | None = Field(None, description="Lanes and executors of each flow group follow "
                                                "the lag, changed through the worker-generation handoff.")
    failover: FailoverSpec | None = Field(None, description="Mirrors failed over to the target (consumer-group "
                                                            "offsets translated, their flow groups stopped).")
    progressTopic: str = Field("sparkmirror.progress.internal", description="Compacted progress topic on the "
                                                                            "target.", max_length=249,
                               pattern=r"^[A-Za-z0-9._-]+$")
    progressTopicReplicationFactor: int = Field(-1, description="Replication factor the progress topic is created "
                                                "with on the target (as MM2's *.topic.replication.factor keys are "
                                                "for its internal topics); -1: the broker's "
                                                "default.replication.factor.", ge=-1, le=32767)

    # Strimzi (Kafka Connect) fields: accepted, not applicable
    replicas: int | None = connect_only("Kafka Connect worker replicas; use spark.executor instead.", ge=0)
    image: str | None = connect_only("Kafka Connect image; use spark.image instead.")
    resources: dict[str, Any] | None = connect_only("Kafka Connect pod resources; use spark.driver/executor.")
    livenessProbe: dict[str, Any] | None = connect_only("Kafka Connect pod liveness probe.")
    readinessProbe: dict[str, Any] | None = connect_only("Kafka Connect pod readiness probe.")
    jvmOptions: dict[str, Any] | None = connect_only("Kafka Connect JVM options; use spark.sparkConf.")
    jmxOptions: dict[str, Any] | None = connect_only("Kafka Connect JMX options.")
    logging: dict[str, Any] | None = connect_only("Kafka Connect logging.")
    clientRackInitImage: str | None = connect_only("Kafka Connect rack init image.")
    rack: dict[str, Any] | None = connect_only("Kafka Connect rack awareness.")
    metricsConfig: dict[str, Any] | None = connect_only("Kafka Connect metrics configuration.")
    tracing: dict[str, Any] | None = connect_only("Kafka Connect tracing.")
    template: dict[str, Any] | None = connect_only("Kafka Connect pod templates.")


class ObjectMeta(BaseModel):
    """Only what the operator reads; everything else in metadata passes through."""

    model_config = ConfigDict(extra="allow")
    name: str = Field("mirror", max_length=40)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class KafkaMirrorMaker2(StrictModel):
    """A mirror of Kafka topics and consumer-group offsets from source clusters into a target cluster, run as
    Spark applications (one per flow group)."""

    apiVersion: Literal["sparkmirror.io/v1alpha1"] = API_VERSION
    kind: Literal["KafkaMirrorMaker2"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: KafkaMirrorMaker2Spec
    status: KafkaMirrorMaker2Status | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"
