"""Moving a Lease back: when a handoff whose Lease already moved is undone, and what the old generation is told.

Pure. After the Leases moved to generation N+1, generation N stays a hot spare (copying nothing, planning
nothing) until N+1 reported `took-over` (its first epoch committed) for every flow group it runs. Before that,
N+1 failing is no reason for the flow group to stop copying: when one of its applications failed or is gone, its
driver stopped renewing the Lease (renewal.py: a frozen pod reports no failure), or
`spec.upgrade.handoffTimeoutSeconds` passed since the move, the operator moves the Leases back to N, removes
N+1, and records on the Leases what it revoked (`names.LEASE_REVOKED`: N+1's groups and lanes' ids), which N
fences before it copies again (`sparkmirror.handoff.takeback`).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.names import transactional_ids

GONE_STATES = ("FAILED", "SUBMISSION_FAILED", "FAILING", "PENDING_RERUN", "COMPLETED")
"""Application states in which a successor's driver is not running: it cannot commit a first epoch now (a
restart would warm up again from nothing, while the old generation is warm)."""


def successor_failures(states: dict[str, dict[str, Any] | None]) -> list[str]:
    """What is wrong with the successor's applications that have not taken over: flow group -> its
    `status.applicationState` (None: no application). One line per failed one, naming it."""
    out = []
    for group, state in sorted(states.items()):
        if state is None:
            out.append(f"{group}: its application is gone")
        elif state.get("state") in GONE_STATES:
            message = (state.get("errorMessage") or "").strip()
            out.append(f"{group}: {state['state']}" + (f" ({message[:200]})" if message else ""))
    return out


def move_back_why(generation: int, groups: list[str], failures: list[str], waited: float, timeout: int,
                  took: list[str], silent: Sequence[str] = ()) -> str | None:
    """Why the Leases move back from generation `generation` (None: they stay): a successor failed, stopped
    renewing its Lease (`silent`, renewal.silence), or none took over within the timeout. `took`: the groups that did (a split is undone as a whole: its successors share
    the old groups' partitions)."""
    if failures:
        why = f"its driver stopped before its first commit ({'; '.join(failures)})"
    elif silent:
        why = f"its driver stalled before its first commit ({'; '.join(silent)})"
    elif waited > timeout:
        left = sorted(set(groups) - set(took))
        why = (f"it did not commit its first epoch within spec.upgrade.handoffTimeoutSeconds ({timeout} s; "
               f"waiting for {', '.join(left)})")
    else:
        return None
    return f"generation {generation} of {', '.join(groups)} was rolled back after the Lease moved to it: {why}"


def revoked_record(generation: int, configs: list[FlowGroupConfig]) -> str:
    """The `names.LEASE_REVOKED` annotation: the generation, its flow groups and every id its lanes hold."""
    ids: dict[str, list[str]] = {}
    for c in configs:
        for alias, tids in transactional_ids(c.resource, c.name, c.lane_routes()).items():
            ids.setdefault(alias, []).extend(tids)
    return json.dumps({"generation": generation, "flowGroups": sorted(c.name for c in configs),
                       "transactionalIds": {a: sorted(set(t)) for a, t in sorted(ids.items())}},
                      separators=(",", ":"), sort_keys=True)


def revoked_generation(text: str | None) -> int:
    """The generation a `names.LEASE_REVOKED` annotation names (0: none, or not ours)."""
    try:
        return int(json.loads(text or "{}").get("generation") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0
