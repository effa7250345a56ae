"""`spec.autoscaling` and `status.autoscaling`: lag-driven lanes and executors per flow group (issue 38).

The operator decides (sparkmirror/autoscale.py, which `sparkmirror run` follows too) and changes a flow group's
lanes through the worker-generation handoff, the path a `parallelism` change takes, so scaling never stops
copying. These models are the one definition of the field: the CRD's schema and CEL rules come from them. Pure
pydantic.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_TARGET_LAG_SECONDS = 60.0


def _rule(rule: str, message: str, field_path: str) -> dict[str, str]:
    return {"rule": rule, "message": message, "fieldPath": field_path}


# The same checks as the validator below, for `kubectl apply` (the API server defaults only present fields).
_LANES = "!has(self.minLanes) || !has(self.maxLanes) || self.minLanes <= self.maxLanes"
_EXECUTORS = "!has(self.minExecutors) || !has(self.maxExecutors) || self.minExecutors <= self.maxExecutors"
_ONE_TARGET = "!(has(self.targetLagSeconds) && has(self.targetRecordsPerSecondPerLane))"


class AutoscalingSpec(BaseModel):
    """Lanes (per mirror) and executors of each flow group follow the lag between the bounds."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={
        "x-kubernetes-validations": [
            _rule(_LANES, "autoscaling.minLanes must be at most autoscaling.maxLanes", ".minLanes"),
            _rule(_EXECUTORS, "autoscaling.minExecutors must be at most autoscaling.maxExecutors",
                  ".minExecutors"),
            _rule(_ONE_TARGET, "set one of autoscaling.targetLagSeconds or "
                  "autoscaling.targetRecordsPerSecondPerLane, not both", ".targetLagSeconds")]})

    enabled: bool = Field(True, description="Scale; false keeps the lanes and executors the spec says (what "
                          "autoscaling had changed goes back with the next handoff).")
    minLanes: int = Field(1, ge=1, le=1024, description="Fewest lanes per mirror of a flow group.")
    maxLanes: int = Field(8, ge=1, le=1024, description="Most lanes per mirror of a flow group.")
    minExecutors: int = Field(1, ge=1, le=1000, description="Fewest executors of a flow group's application.")
    maxExecutors: int = Field(8, ge=1, le=1000, description="Most executors of a flow group's application; "
                              "executors follow the lanes (one lane per executor core).")
    targetLagSeconds: float | None = Field(None, gt=0, le=86400, description="Scale so the backlog drains "
                                           "within this many seconds at the measured per-lane rate (default 60 "
                                           "when no target is set).")
    targetRecordsPerSecondPerLane: float | None = Field(None, gt=0, le=1e9, description="Instead of a lag "
                                                        "target: as many lanes as the incoming records/s need "
                                                        "at this rate each.")
    cooldownSeconds: int = Field(120, ge=0, le=86400, description="No further change for this long after one "
                                 "(a handoff must finish and the new rate show before the next decision).")
    scaleDownDelaySeconds: int = Field(300, ge=0, le=86400, description="Scale down only after the lag has stayed "
                                       "below target for this long, so a dip in load does not flap the lanes.")

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.minLanes > self.maxLanes:
            raise ValueError(f"minLanes ({self.minLanes}) must be at most maxLanes ({self.maxLanes})")
        if self.minExecutors > self.maxExecutors:
            raise ValueError(f"minExecutors ({self.minExecutors}) must be at most maxExecutors "
                             f"({self.maxExecutors})")
        if self.targetLagSeconds is not None and self.targetRecordsPerSecondPerLane is not None:
            raise ValueError("set one of targetLagSeconds or targetRecordsPerSecondPerLane, not both")
        return self

    @property
    def lag_target_seconds(self) -> float | None:
        """The lag target in force: the one set, the default when neither is, none under a rate target."""
        if self.targetRecordsPerSecondPerLane is not None:
            return None
        return self.targetLagSeconds or DEFAULT_TARGET_LAG_SECONDS


class AutoscalingStatus(BaseModel):
    """A flow group's scale and the last decision about it, with the figures that drove it."""

    model_config = ConfigDict(extra="forbid")

    flowGroup: str = Field(description="Flow-group name.")
    lanes: int = Field(description="Lanes per mirror the operator runs the group with.")
    executors: int = Field(description="Executors of the group's application.")
    decision: Literal["up", "down", "hold"] = Field(description="The last decision.")
    reason: str = Field(description="Why, in words.")
    figures: dict[str, float] = Field(default_factory=dict, description="What drove it: lag (records), "
                                      "lagSeconds, ratePerSecond, incomingPerSecond, perLanePerSecond, wantLanes.")
    time: str = Field(description="Since when this decision stands (RFC 3339): kept while the decision and its "
                      "reason are the same, so a refresh that changes nothing writes nothing.")
    lastChangeTime: str | None = Field(None, description="When the lanes or executors last changed (RFC 3339): "
                                       "the cooldown counts from here.")
    withinTargetSince: str | None = Field(None, description="Since when the lag has been within target without a "
                                          "break (RFC 3339): the scale-down delay counts from here, also across "
                                          "operator restarts.")
    withinTargetLanes: int | None = Field(None, description="The most lanes per mirror the load needed over the "
                                          "last scale-down delay: what a scale-down goes to.")
    withinTargetSeen: str | None = Field(None, description="The last refresh that saw the lag within target (RFC "
                                         "3339): a restarted operator counts the time since as within target "
                                         "only when it is no longer than a few refreshes.")
    capacityProbeTime: str | None = Field(None, description="When the lanes were halved with no per-lane "
                                          "capacity measured (RFC 3339): done once, further scale-down waits for "
                                          "a backlog to measure the capacity.")

    def as_status(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
