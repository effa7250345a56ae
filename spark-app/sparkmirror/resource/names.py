"""Names of derived objects: Kubernetes objects (stable, within Kubernetes' limits, leaving room for Spark's pod-name
suffixes) and the lanes' Kafka transactional ids."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable


def short_name(*parts: str, limit: int = 52) -> str:
    """`a-b-c`, or when longer than limit a stable truncation with a hash tail."""
    name = "-".join(p for p in parts if p)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:limit - 9].rstrip('-')}-{digest}"


def _gen(generation: int) -> str:
    return "" if generation <= 1 else f"g{generation}"


def config_map_name(resource: str, group: str, generation: int = 1) -> str:
    """The flow-group config a worker generation runs (one per generation: two may run at once)."""
    return short_name(resource, group, _gen(generation), "config")


def application_name(resource: str, group: str, generation: int = 1) -> str:
    """The application of one worker generation of a flow group: `<resource>-<group>` first, then `-g<N>`."""
    return short_name(resource, group, _gen(generation))


def lease_name(resource: str, group: str) -> str:
    return short_name(resource, group)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def transactional_id(resource: str, flow_group: str, mirror: str, lane: int) -> str:
    """The lane's stable `transactional.id`: the same for every worker generation of this flow group.

    Stability is the point: a retried task, a lost executor's zombie or the previous worker generation
    uses the same id, so `init_transactions()` in the new copy aborts their open transaction and fences them.
    The resource (namespace/name) is part of it, so two resources writing to one target never fence each other.
    """
    safe = [_UNSAFE.sub("_", s) for s in (*resource.split("/", 1), flow_group, mirror)]
    return "sparkmirror." + ".".join(safe) + f".lane-{lane}"


def transactional_ids(resource: str, flow_group: str, mirrors: Iterable[tuple[str, str, int]]) -> dict[str, list[str]]:
    """Every transactional id a flow group's lanes hold, per target cluster alias, from (mirror, target, lanes):
    what a later worker generation must fence when its own ids differ (other lane counts or flow groups)."""
    out: dict[str, list[str]] = {}
    for mirror, target, lanes in mirrors:
        out.setdefault(target, []).extend(transactional_id(resource, flow_group, mirror, i) for i in range(lanes))
    return out


# The Lease of a flow group (coordination.k8s.io/v1): the operator names the generation that may copy, each
# generation's driver reports on it. The contract between the operator and the job.
LEASE_HOLDER = "sparkmirror.io/holder-generation"
LEASE_TRANSACTIONAL_IDS = "sparkmirror.io/transactional-ids"
LEASE_REVOKED = "sparkmirror.io/revoked"
"""Set by the operator when it moves a Lease back to the generation that held it (the later one failed or timed
out before its first commit): JSON {"generation": the later one, "flowGroups": its groups, "transactionalIds":
{target alias: [its lanes' ids]}}. The generation taking back fences those ids and revokes those groups' marks."""

LEASE_FAILURE = "sparkmirror.io/failure"
"""Set by a driver that ends with an exit code the status names (EXIT_UNAUTHORIZED, EXIT_TOO_FEW_BROKERS, and
EXIT_REFUSED once Spark is up: an offset history that cannot fit): JSON {"generation", "exitCode", "message"}. The Kubeflow Spark operator's errorMessage carries only the exit code, so
this is how the job's own words (which topic, factor, brokers, key) reach the resource's status."""


SUBMISSION_LABEL = "sparkoperator.k8s.io/submission-id"
"""The Kubeflow Spark operator's label on the pods of one submission of an application (its
`status.submissionID`, new at every (re)submission)."""
SUBMISSION_ENV = "SPARKMIRROR_SUBMISSION_ID"
"""The driver's own submission id (SUBMISSION_LABEL through the downward API), carried by its ready report."""


def lease_ready_key(generation: int) -> str:
    """Annotation a standby generation sets once it is warm and could take over at once: JSON {"atMs": epoch ms,
    "submissionID": its SUBMISSION_ENV}; the operator counts it only for the application's current submission."""
    return f"sparkmirror.io/ready.g{generation}"


def lease_took_over_key(generation: int) -> str:
    """Annotation a generation sets (JSON: atMs, tookMs, fenced) once it took the flow group over."""
    return f"sparkmirror.io/took-over.g{generation}"


# The job's exit contract, which the operator reads back from the application's state (the Kubeflow Spark
# operator restarts by state only: `OnFailure` never resubmits an exit 0 and resubmits any other code).
EXIT_STOPPED = 0   # stopped by design (handed over and drained, superseded, asked to stop): never restarted
EXIT_FAILED = 1    # anything else: restarted with backoff
EXIT_REFUSED = 2   # the job refuses its configuration (sparkmirror.inputs.USAGE_EXIT): restarting cannot help
EXIT_UNAUTHORIZED = 3  # a cluster's ACLs refuse the mirror: restarted with backoff (a grant cures it), and the
#                        resource's status says so by its own reason (`faultkind.Kind.AUTHORIZATION`'s value)
EXIT_TOO_FEW_BROKERS = 4  # a topic the mirror creates needs more replicas than the target has brokers: restarted
#                          with backoff, as for ACLs: adding brokers cures it with no change the operator could
#                          see (setting the key is a spec change, a new generation anyway); the status names it by
#                          its own reason (`replicas.REASON`) with the job's words from the Lease (LEASE_FAILURE)
PERMANENT_EXIT_CODES = frozenset({EXIT_REFUSED})
