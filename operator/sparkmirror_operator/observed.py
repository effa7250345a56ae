"""What the operator observes of a resource's worker generations: pure values, read by the planner.

Each flow group's generations (their ConfigMap's config, their SparkApplication if any) and its Lease, with the
marks the drivers report on it and the records the operator keeps there.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.names import LEASE_HOLDER, PERMANENT_EXIT_CODES
from .restarts import exit_code

ANNOTATION_MOVED_AT = "sparkmirror.io/moved-at"  # on a Lease: when the operator moved it (epoch ms)
ANNOTATION_ROLLED_BACK = "sparkmirror.io/rolled-back"
"""On every Lease of a resource: the last rollback record (JSON). Written in the same apply that removes the
standby, so a reconcile that read the resource before its status said so does not start the generation again."""
ANNOTATION_LAST_GENERATION = "sparkmirror.io/last-generation"
"""On every Lease of a resource: the highest worker generation number ever given out. A rolled-back standby's
number is never given out again, so a leftover `ready.g<N>` of it can never move a Lease to a later, cold one."""
MARK_PREFIXES = ("sparkmirror.io/ready.g", "sparkmirror.io/took-over.g")  # the drivers' reports on a Lease


@dataclass
class Worker:
    """One worker generation of one flow group as observed: its config and its application (if any)."""

    config: FlowGroupConfig
    app: dict[str, Any] | None = None

    @property
    def generation(self) -> int:
        return self.config.worker.generation

    def created_ms(self) -> int | None:
        ts = ((self.app or {}).get("metadata") or {}).get("creationTimestamp")
        return None if not ts else int(dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)

    def state(self) -> dict[str, Any]:
        return ((self.app or {}).get("status") or {}).get("applicationState") or {}

    def error(self) -> str | None:
        state = self.state()
        if state.get("state") in ("FAILED", "SUBMISSION_FAILED", "FAILING"):
            return f"{state.get('state')}: {state.get('errorMessage') or 'no message'}"
        return None

    def exit_code(self) -> int | None:
        """The driver's exit code of a failed run, from the Spark operator's message (it restarts by state only)."""
        return exit_code(self.state().get("errorMessage")) if self.error() else None

    def refused(self) -> dict[str, Any] | None:
        """The refusal record when the job exited with a permanent code (names.PERMANENT_EXIT_CODES)."""
        code = self.exit_code()
        if code not in PERMANENT_EXIT_CODES:
            return None
        return {"generation": self.generation, "exitCode": code, "reason": self.state().get("errorMessage", "")[:300]}

    def completed(self) -> bool:
        return self.state().get("state") == "COMPLETED"


@dataclass
class Observed:
    workers: dict[str, dict[int, Worker]] = field(default_factory=dict)  # group -> generation -> worker
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)      # group -> Lease
    # group -> ms since the operator saw its Lease renewed, on its own clock (renewal.RenewalClock)
    renewal_ages_ms: dict[str, int] = field(default_factory=dict)

    def holder(self, group: str) -> int | None:
        value = ((self.leases.get(group) or {}).get("metadata", {}).get("annotations") or {}).get(LEASE_HOLDER)
        return int(value) if value else None

    def annotation(self, group: str, key: str) -> str | None:
        return ((self.leases.get(group) or {}).get("metadata", {}).get("annotations") or {}).get(key)

    def rollback(self) -> dict[str, Any] | None:
        """The last rollback record the Leases carry (see ANNOTATION_ROLLED_BACK)."""
        for group in sorted(self.leases):
            value = self.annotation(group, ANNOTATION_ROLLED_BACK)
            if value:
                try:
                    return json.loads(value)
                except ValueError:
                    continue
        return None

    def max_generation(self) -> int:
        """The highest generation number given out: running, named or reported on a Lease, or its high-water
        mark (a resource that rolled back before the mark existed still has its standby's reports)."""
        gens = [g for ws in self.workers.values() for g in ws] + \
            [h for g in self.leases if (h := self.holder(g)) is not None] + \
            [n for g in self.leases for n in self.marks(g).values()]
        for g in self.leases:
            try:
                gens.append(int(self.annotation(g, ANNOTATION_LAST_GENERATION) or 0))
            except ValueError:  # not ours: the next apply writes it again
                pass
        return max(gens, default=0)

    def marks(self, group: str) -> dict[str, int]:
        """The drivers' reports on a group's Lease (`ready.g<N>`, `took-over.g<N>`): key -> generation."""
        out = {}
        for key in (self.leases.get(group) or {}).get("metadata", {}).get("annotations") or {}:
            if key.startswith(MARK_PREFIXES) and key.rsplit(".g", 1)[1].isdigit():
                out[key] = int(key.rsplit(".g", 1)[1])
        return out
