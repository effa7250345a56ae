"""What the planner (rollout.py) decides: the worker generations to run, where each Lease points, and what the
status, the apply and the Leases are to say about it. A value, filled by the planner and its after-steps
(exitcontract.py, holders.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig


@dataclass
class Plan:
    """What to run: every worker generation to keep or create (with an application unless `stopped`), the
    generation each Lease names, and what the status says about it."""

    workers: list[FlowGroupConfig] = field(default_factory=list)
    holders: dict[str, int | None] = field(default_factory=dict)
    moved: set[str] = field(default_factory=set)      # Leases moved by this plan (stamp moved-at)
    handoffs: list[dict[str, Any]] = field(default_factory=list)  # completed now
    upgrading: list[str] = field(default_factory=list)  # what is in progress, for the Upgrading condition
    rollback: dict[str, Any] | None = None
    held_back: bool = False  # a unit stays on its old generation because its spec was rolled back
    running: dict[str, FlowGroupConfig] = field(default_factory=dict)  # group -> the generation that copies
    last_generation: int = 0  # the high-water mark of generation numbers (ANNOTATION_LAST_GENERATION)
    stale_marks: dict[str, list[str]] = field(default_factory=dict)  # group -> reports of gone generations
    revoked: dict[str, str] = field(default_factory=dict)  # group -> names.LEASE_REVOKED (handback.py)
    refused: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> ANNOTATION_REFUSED record
    no_application: set[tuple[str, int]] = field(default_factory=set)  # (group, generation) not to run
    resubmit: list[tuple[str, int]] = field(default_factory=list)  # applications to remove and submit again
    app_problems: list[tuple[str, str]] = field(default_factory=list)  # (condition reason, message)
    silent: dict[str, str] = field(default_factory=dict)  # group -> why its holder is silent (holders.py)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> its copying generation's
    #                                                                     names.LEASE_FAILURE record
