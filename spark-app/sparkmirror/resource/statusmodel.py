"""The status of a resource as the operator writes it: conditions, flow groups, handoffs, rollbacks, failovers."""
from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import Field

from .autoscaling import AutoscalingStatus  # the field's own file (issue 38)
from .schemabase import StrictModel


class ConditionStatus(str, Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(StrictModel):
    type: str = Field(description="Condition type: Ready, Progressing, Degraded, Upgrading, FailedOver, and for GitOps tools "
                                  "(Flux's kstatus, Argo CD) Reconciling and Stalled.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(None, description="Machine-readable reason, CamelCase.")
    message: str | None = Field(None, description="Human-readable detail, naming the field or object concerned.")
    lastTransitionTime: str | None = Field(None, description="When the status last changed (RFC 3339).")
    observedGeneration: int | None = Field(None, description="Generation of the spec this condition is about.")


class ConsumerGroupLagStatus(StrictModel):
    """One consumer group a mirror checkpoints (sparkmirror.consumerlag)."""

    group: str = Field(description="Consumer group on the source.")
    lag: int = Field(description="Records it has not read on the source, over the mirrored partitions it "
                                 "committed (end offset minus committed offset).")
    partitions: int = Field(description="Mirrored partitions it has committed offsets for.")


class FlowGroupStatus(StrictModel):
    name: str = Field(description="Flow-group name.")
    application: str | None = Field(None, description="Name of the SparkApplication running the group.")
    sparkState: str | None = Field(None, description="State of the application as the Spark operator reports "
                                                     "it (SUBMITTED, RUNNING, FAILED, ...).")
    mirrors: list[str] = Field(default_factory=list, description="Mirrors (source aliases) of the group.")
    workerGeneration: int | None = Field(None, description="Worker generation currently mirroring.")
    version: str | None = Field(None, description="Version of that worker generation.")
    partitions: int | None = Field(None, description="Source partitions owned by the group.")
    lag: int | None = Field(None, description="Records on the sources not yet committed on the target.")
    recordsPerSecond: float | None = Field(None, description="Recent copy rate.")
    lastCommitTime: str | None = Field(None, description="Time of the last committed transaction.")
    consumerGroupLag: int | None = Field(None, description="Records the consumer groups the group's mirrors "
                                                           "checkpoint have not read on the sources, summed.")
    consumerGroups: list[ConsumerGroupLagStatus] = Field(default_factory=list, description="The most lagging "
                                                         "checkpointed consumer groups (at most 20).")
    message: str | None = Field(None, description="Why the group is not running, if it is not.")


class HandoffRecord(StrictModel):
    """One completed worker-generation handoff."""

    fromGeneration: int = Field(description="The generation that copied before.")
    toGeneration: int = Field(description="The generation that copies now.")
    fromFlowGroups: list[str] = Field(default_factory=list, description="Flow groups handed over.")
    toFlowGroups: list[str] = Field(default_factory=list, description="Flow groups that took over.")
    version: str | None = Field(None, description="Version of the new generation.")
    time: str | None = Field(None, description="When the new generation took over (RFC 3339).")
    takeoverMs: int | None = Field(None, description="Time the new generation took to mark its flow groups "
                                                     "and fence the old lanes.")
    leaseToTakeoverMs: int | None = Field(None, description="From the Lease moving to the takeover done.")
    fencedTransactionalIds: int | None = Field(None, description="Transactional ids of the old lanes fenced.")
    pauseMs: int | None = Field(None, description="The pause a reader of the target sees: from the last records "
                                                  "the old generation committed to the first the new one "
                                                  "committed, per flow group (the longest of its groups), from "
                                                  "the commit times on the progress topic.")
    firstEpochLatencyMaxMs: int | None = Field(None, description="The longest a record of the new generation's "
                                                                 "first epoch waited from its source timestamp to "
                                                                 "its commit on the target: the pause, the "
                                                                 "backlog worked off after it and the commit "
                                                                 "cadence together.")
    firstEpochRecords: int | None = Field(None, description="Records the new generation's first epoch copied: "
                                                            "what built up during the handoff, and after.")


class RollbackRecord(StrictModel):
    """A worker generation that did not become ready, or failed after the Lease moved to it and before its first
    commit, and was removed; the one before keeps copying, or copies again."""

    generation: int = Field(description="The generation rolled back.")
    flowGroups: list[str] = Field(default_factory=list, description="Its flow groups.")
    specHash: str = Field(description="The desired spec rolled back (all flow groups); it is not tried again.")
    reason: str = Field(description="Why it was rolled back.")
    leaseMovedBack: bool = Field(False, description="The Lease had moved to it: it was moved back, and the "
                                                    "generation before took its flow groups back.")


class FailoverShareGroup(StrictModel):
    """One share group (KIP-932) carried by a failover the operator ran: its start offsets set on the target."""

    group: str = Field(description="The share group.")
    moved: bool = Field(description="Every partition with a start offset on the source was set or kept on the "
                                    "target, and its configs carried, or the target serves no share groups "
                                    "(nothing to carry there).")
    partitionsMoved: int = Field(0, description="Its partitions whose start offset was set or kept on the target.")
    notMoved: list[str] = Field(default_factory=list, description="Its partitions not moved, why (at most 5): "
                                "active (members on the target), missing (Kafka 4.1: the group must exist there), "
                                "untranslated, failed; or unsupported, said, when the target has no share groups.")
    configs: list[str] = Field(default_factory=list, description="Its group configs set on the source group "
                               "(share.auto.offset.reset, share.isolation.level, ...) as they now are on the target "
                               "group: name=value.")
    configsNotCarried: list[str] = Field(default_factory=list, description="Its group configs not carried, why: "
                                         "one the target does not know (an older Kafka), one it refused, or none "
                                         "read or set (then the group has not moved).")


class FailoverRecord(StrictModel):
    """One mirror failed over by the operator (spec.failover)."""

    mirror: str = Field(description="The mirror (source alias).")
    state: Literal["FailedOver", "Retrying", "Waiting"] = Field(
        "FailedOver", description="FailedOver: done. Retrying: it did not complete and may have stopped the flow "
                                  "groups (they get no application), tried again every status interval. Waiting: "
                                  "the mirror had not caught up within waitCaughtUpSeconds; nothing was changed, it "
                                  "copies on and the failover is tried again.")
    message: str | None = Field(None, description="Why it is Retrying or Waiting.")
    time: str = Field(description="When it was failed over, or last tried (RFC 3339).")
    flowGroups: list[str] = Field(default_factory=list, description="Flow groups stopped with it.")
    offsetsFrom: str = Field("", description="source (translated now) or checkpoints (the source was "
                                             "unreachable: the last checkpoints on the target).")
    groupsMoved: int = Field(0, description="Consumer groups whose offsets were committed or kept on the target.")
    partitionsMoved: int = Field(0, description="Their partitions committed or kept.")
    notMoved: list[str] = Field(default_factory=list, description="Partitions not moved, why (at most 20): "
                                                                  "active consumers on the target, untranslated.")
    groupsNotMoved: list[str] = Field(default_factory=list, description="Selected consumer groups that could not "
                                      "all move (at most 20), by name.")
    checkpointAgeMs: dict[str, int] = Field(default_factory=dict, description="With the source unreachable: per "
                                            "group (the 20 oldest), how old the checkpoint it moved to was, ms; its "
                                            "consumers repeat what they read on the source since.")
    shareGroupsMoved: int = Field(0, description="Share groups (KIP-932) whose start offsets were set or kept on "
                                                 "the target.")
    shareGroups: list[FailoverShareGroup] = Field(default_factory=list, description="Per selected share group "
                                                  "with a start offset on the source (at most 20, those not moved "
                                                  "first): moved or not, and why.")
    shareGroupsNote: str = Field("", description="Why share groups were not carried at all, when they were not "
                                                 "(the source or target serves none; the source did not answer).")
    notCopied: int | None = Field(None, description="Records the source held that were not copied when the mirror "
                                                    "stopped (unknown when the source did not answer).")
    ok: bool = Field(False, description="Every checkpointed group, and every share group, can move to the "
                                        "target.")


class KafkaMirrorMaker2Status(StrictModel):
    observedGeneration: int | None = Field(None, description="The generation the operator last reconciled.")
    # a map keyed by type: server-side apply and kubectl merge one condition per type, as for built-in kinds
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Progressing, Degraded, "
                                        "Upgrading, FailedOver, Reconciling, Stalled: at most one of each type.",
                                        json_schema_extra={"x-kubernetes-list-type": "map",
                                                           "x-kubernetes-list-map-keys": ["type"]})
    flowGroups: list[FlowGroupStatus] = Field(default_factory=list, description="Per flow group.")
    flowGroupsReady: str | None = Field(None, description="Running flow groups / all flow groups, e.g. 2/3.")
    lag: int | None = Field(None, description="Total lag in records over all flow groups.")
    version: str | None = Field(None, description="Version running (of the generation that copies).")
    handoffs: list[HandoffRecord] = Field(default_factory=list, description="The latest worker-generation "
                                                                            "handoffs, oldest first.")
    rollback: RollbackRecord | None = Field(None, description="The last generation rolled back, if any.")
    autoscaling: list[AutoscalingStatus] = Field(default_factory=list, description="Per flow group: its scale "
                                                 "and the last autoscaling decision (spec.autoscaling).")
    failover: list[FailoverRecord] = Field(default_factory=list, description="Mirrors failed over (spec.failover), "
                                                                             "one record each.")
    notApplicable: list[str] = Field(default_factory=list, description="Fields and keys set on the resource "
                                                                       "that only apply to Kafka Connect.")
    unsupported: list[str] = Field(default_factory=list, description="MirrorMaker 2 config keys or values set "
                                                                     "on the resource that sparkmirror does "
                                                                     "not support.")
