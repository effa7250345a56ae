"""The generations that copy, after the plan: a holder that stopped renewing its Lease outside a handoff. Pure.

Nobody could take its place, so it is a problem on the status (`LeaseNotRenewed`; renewal.py says when a holder
is silent).
"""
from __future__ import annotations

from .observed import ANNOTATION_MOVED_AT, Observed
from .renewal import held_since_ms, silence
from .rolloutplan import Plan


def silent_holders(out: Plan, observed: Observed, now_ms: int) -> None:
    """A generation that copies and holds its Lease but stopped renewing it (renewal.py), outside a handoff:
    nobody could take its place, so it is a problem on the status (a frozen driver copies nothing either)."""
    for group, cfg in sorted(out.running.items()):
        gen = cfg.worker.generation
        lease = observed.leases.get(group)
        worker = observed.workers.get(group, {}).get(gen)
        if lease is None or observed.holder(group) != gen or out.holders.get(group) != gen or worker is None or \
                worker.state().get("state") != "RUNNING":  # (a driver not running: its application says why)
            continue
        quiet = silence(lease, held_since_ms(lease, observed.annotation(group, ANNOTATION_MOVED_AT)), now_ms,
                        observed.renewal_ages_ms.get(group))
        if quiet and group not in out.failures:  # (a driver that said why it ended: the status shows its words)
            out.app_problems.append(("LeaseNotRenewed", f"flow group {group}: generation {gen} holds the Lease but "
                                     f"{quiet}: its driver is not running, cannot reach the API server, or is stalled"))
