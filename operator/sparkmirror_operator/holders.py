"""The generations that copy, after the plan: a holder that stopped renewing its Lease outside a handoff. Pure.

Nobody could take its place, so it is a problem on the status (`LeaseNotRenewed`; renewal.py says when a holder
is silent), unless another problem already says why its driver does not renew (`silence_explained`: the one
rule, applied by status.py where every problem meets).
"""
from __future__ import annotations

from collections.abc import Collection, Iterable

from sparkmirror.faultkind import Kind
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
        if quiet:  # (whether another problem explains it: silence_explained, on the status)
            out.silent[group] = (f"flow group {group}: generation {gen} holds the Lease but {quiet}: its driver is "
                                 "not running, cannot reach the API server, or is stalled")


LEASE_NOT_RENEWED = "LeaseNotRenewed"
CLUSTER_REFUSALS = frozenset(k.value for k in Kind if k.refused)
"""Condition reasons of a cluster refusing the mirror (authentication, authorization, TLS)."""


def silence_explained(group: str, problems: Iterable[tuple[str, str | None]], said: Collection[str] = ()) -> bool:
    """Whether something else says why `group`'s holder does not renew its Lease, so `LeaseNotRenewed` is not a
    problem of its own (the reason stays the cause). `problems`: (reason, flow group or None for the resource);
    `said`: the groups whose job wrote why it ended on its Lease (rolloutplan.Plan.failures, current ones).
    A cluster refusing the mirror explains every group's silence (it keeps every driver from copying; on kind a
    refused driver never renews); a problem of the group itself or its job's own words explain its own (between
    the Spark operator's retries its application is RUNNING again, and silent)."""
    return group in said or any(reason in CLUSTER_REFUSALS or (of == group and reason != LEASE_NOT_RENEWED)
                                for reason, of in problems)
