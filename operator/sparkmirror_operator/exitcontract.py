"""The job's exit contract (names.EXIT_*) applied to the generations that copy, after the plan: pure.

The Kubeflow Spark operator restarts by state only (`OnFailure` resubmits any failure, never an exit 0); the
operator reads the exit code back from the failed application's state (restarts.exit_code): a permanent
refusal is removed and recorded on the Lease (restarts.ANNOTATION_REFUSED), an exit 0 nothing took over is
submitted again, and a job's own words on why it ended (names.LEASE_FAILURE) are kept for the status.
"""
from __future__ import annotations

import json

from sparkmirror.resource.names import LEASE_FAILURE
from .observed import Observed
from .renewal import failure_current
from .restarts import ANNOTATION_REFUSED, RESUBMIT_AFTER_SECONDS
from .rolloutplan import Plan


def exit_contract(out: Plan, observed: Observed, now_ms: int) -> None:
    """The job's exit contract for the generations that copy (names.EXIT_*): a permanent refusal is not run
    again (recorded on the Lease, the application removed); an exit 0 while the Lease still names the
    generation (a deleted or evicted driver drained: nothing took over) is submitted again."""
    for group, cfg in out.running.items():
        gen = cfg.worker.generation
        worker = observed.workers.get(group, {}).get(gen)
        try:  # the job's own words on why it ended, for the status (names.LEASE_FAILURE)
            failure = json.loads(observed.annotation(group, LEASE_FAILURE) or "null")
        except ValueError:
            failure = None
        if isinstance(failure, dict) and failure.get("generation") == gen and \
                failure_current(failure, observed.leases.get(group)):
            out.failures[group] = failure
        record = worker.refused() if worker is not None else None
        said = out.failures.get(group) or {}
        if record is not None and said.get("exitCode") == record["exitCode"] and said.get("message"):
            record["reason"] = str(said["message"])[:900]  # the job's words, not the Spark operator's code
        if record is None:
            try:
                kept = json.loads(observed.annotation(group, ANNOTATION_REFUSED) or "null")
            except ValueError:
                kept = None
            record = kept if isinstance(kept, dict) and kept.get("generation") == gen else None
        if record is not None:
            out.refused[group] = record
            out.no_application.add((group, gen))
            out.app_problems.append(("ApplicationRefused", (
                f"flow group {group}: generation {gen} exited with code {record.get('exitCode')} (a permanent "
                f"refusal: {record.get('reason') or 'see its driver log'}); not restarted until a change of the "
                f"resource or `sparkmirror.io/restart: {group}@<token>`")))
            continue
        if worker is None or not worker.completed() or observed.holder(group) != gen:
            continue
        age = (now_ms - created) / 1000 if (created := worker.created_ms()) is not None else RESUBMIT_AFTER_SECONDS
        if age >= RESUBMIT_AFTER_SECONDS:
            out.resubmit.append((group, gen))
        else:
            out.app_problems.append(("ApplicationStopped", (
                f"flow group {group}: generation {gen} exited 0 while its Lease names it (nothing took it over): "
                f"submitted again {RESUBMIT_AFTER_SECONDS - age:.0f} s from now")))
