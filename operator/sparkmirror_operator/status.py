"""The resource's status from what was observed: pure (plan, applications, lag, problems, old status in).

Conditions: Ready (mirroring as specified), Progressing (applications starting or changing), Degraded
(something is wrong: invalid spec, missing Secret, unreachable cluster, no topics, failed application),
Upgrading (a worker-generation handoff in progress, or the last one rolled back), each with a reason and a
message naming the field or object.

Reconciling and Stalled restate those in the terms GitOps tools read (Flux's kstatus reads only them, then
Ready): Reconciling while the operator is still moving towards the spec, Stalled when it cannot get there
without someone changing something. They are never both True, since kstatus takes whichever it meets first.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sparkmirror.consumerlag import STATUS_GROUPS
from sparkmirror.resource.plan import Plan
from .holders import CLUSTER_REFUSALS, LEASE_NOT_RENEWED, silence_explained
from .lag import GroupLag
from .restarts import exit_code
from .rolloutplan import Plan as Rollout
from sparkmirror.faultkind import Kind
from sparkmirror.resource.statusmodel import KafkaMirrorMaker2Status
from sparkmirror.replicas import REASON as REPLICATION_REFUSED
from sparkmirror.resource.names import EXIT_TOO_FEW_BROKERS, EXIT_UNAUTHORIZED, application_name

RUNNING = {"RUNNING"}
SUSPENDED = {"SUSPENDED", "SUSPENDING"}
FAILED = {"FAILED", "SUBMISSION_FAILED", "FAILING", "UNKNOWN"}
# problems that retrying cannot fix: the spec, a Secret, credentials or an application needs a change. Others
# (an unreachable cluster, no topics yet, lag unknown) leave the resource Degraded but not Stalled.
STALLING = {"InvalidSpec", "SecretMissing", "SecretUnreadable", *CLUSTER_REFUSALS, "ApplyFailed", "ApplicationFailed",
            "ApplicationRefused", REPLICATION_REFUSED}

MAX_HANDOFFS = 10  # the handoff records status.handoffs keeps, newest last


@dataclass(frozen=True)
class Problem:
    reason: str   # CamelCase: SecretMissing, ClusterUnreachable, NoTopics, ...
    message: str  # names the field or object
    group: str | None = None  # the flow group it is about (None: the resource)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def spark_state(app: dict[str, Any] | None) -> str | None:
    if app is None:
        return None
    return ((app.get("status") or {}).get("applicationState") or {}).get("state") or "PENDING"


def _condition(old: dict[str, dict], type_: str, status: bool, reason: str, message: str, generation: int | None,
               now: str) -> dict[str, Any]:
    s = "True" if status else "False"
    prev = old.get(type_)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == s and prev.get("lastTransitionTime") \
        else now
    return {"type": type_, "status": s, "reason": reason, "message": message[:1024], "lastTransitionTime": since,
            "observedGeneration": generation}


SAID_EXITS = frozenset({EXIT_UNAUTHORIZED, EXIT_TOO_FEW_BROKERS})
"""Exits whose job writes its words on its Lease (names.LEASE_FAILURE) and is restarted with backoff."""


def _said_exit(rollout: Rollout | None, group: str) -> int | None:
    """The exit code of the job's current failure record for this group (rollout.failures), if any."""
    record = rollout.failures.get(group) if rollout is not None else None
    code = record.get("exitCode") if record else None
    return code if isinstance(code, int) else None


def _job_said(rollout: Rollout | None, group: str, code: int | None) -> str:
    """What the failed job said on its Lease (names.LEASE_FAILURE) for this exit, or ""."""
    record = rollout.failures.get(group) if rollout is not None else None
    return str(record.get("message") or "") if record and record.get("exitCode") == code else ""


def shown_version(version: str) -> str:
    """The version a user set (a restart token rides behind `+restart.`)."""
    return version.split("+restart.", 1)[0]


def build_status(*, name: str, generation: int | None, plan: Plan, apps: dict[str, dict[str, Any] | None],
                 lags: dict[str, GroupLag] | None, problems: list[Problem], old: dict[str, Any] | None,
                 now: str | None = None, rollout: Rollout | None = None,
                 failover: list[dict[str, Any]] | None = None, failed_over: dict[str, dict[str, Any]] | None = None,
                 failover_condition: tuple[bool, str, str] | None = None) -> dict[str, Any]:
    """The whole status. lags None keeps the lag figures of the old status (a refresh without Kafka).
    `failover`: status.failover; `failed_over`: flow group -> the record of the failed-over mirror it carries
    (not expected to run); `failover_condition`: the FailedOver condition (failover.py)."""
    now = now or now_rfc3339()
    old = old or {}
    old_conds = {c["type"]: c for c in old.get("conditions") or [] if "type" in c}
    old_groups = {g["name"]: g for g in old.get("flowGroups") or [] if "name" in g}
    spec = plan.resource.spec if plan.resource is not None else None
    desired = spec.state if spec is not None else "running"

    failed_over = failed_over or {}
    groups, running, failed, starting = [], [], [], []
    failed_reasons: dict[str, str] = {}  # flow group -> its reason when not ApplicationFailed
    for cfg in plan.groups:
        app = apps.get(cfg.name)
        state = spark_state(app)
        runs = rollout.running.get(cfg.name) if rollout is not None else None
        standby = None
        if runs is None and rollout is not None:  # a new group of a split or merge, not copying yet
            standby = max((c for c in rollout.workers if c.name == cfg.name), key=lambda c: c.worker.generation,
                          default=None)
        worker = (runs or standby or cfg).worker
        g: dict[str, Any] = {"name": cfg.name, "mirrors": plan.group_mirrors.get(cfg.name, []),
                             "workerGeneration": worker.generation, "version": shown_version(worker.version)}
        if desired != "stopped" and cfg.name not in failed_over:
            g["application"] = application_name(name, cfg.name, worker.generation)
        if state:
            g["sparkState"] = state
        lag = lags.get(cfg.name) if lags is not None else None
        if lag is not None:
            if lag.lag is not None:
                g["lag"] = lag.lag
            g["partitions"] = lag.partitions
            if lag.records_per_second is not None:
                g["recordsPerSecond"] = lag.records_per_second
            if lag.last_commit_ms:
                g["lastCommitTime"] = dt.datetime.fromtimestamp(lag.last_commit_ms / 1000, dt.timezone.utc) \
                    .replace(microsecond=0).isoformat().replace("+00:00", "Z")
            if lag.consumer_groups is not None:
                g["consumerGroupLag"] = sum(c.lag for c in lag.consumer_groups)
                g["consumerGroups"] = [{"group": c.group, "lag": c.lag, "partitions": c.partitions}
                                       for c in lag.consumer_groups[:STATUS_GROUPS]]
            if lag.error:
                g["message"] = lag.error
        elif cfg.name in old_groups:
            for k in ("lag", "partitions", "lastCommitTime", "recordsPerSecond", "consumerGroupLag", "consumerGroups"):
                if k in old_groups[cfg.name]:
                    g[k] = old_groups[cfg.name][k]
        if standby is not None and state not in FAILED:
            g["message"] = f"generation {worker.generation} in standby: it copies once it took over"
        if cfg.name in failed_over:
            record = failed_over[cfg.name]
            g["message"] = f"not copying: mirror {record.get('mirror')} failed over at {record.get('time')} " \
                           "(spec.failover)"
        elif rollout is not None and cfg.name in rollout.refused:  # its problem says why (ApplicationRefused)
            g["message"] = f"not copying: generation {worker.generation} refused to run (exit code " \
                           f"{rollout.refused[cfg.name].get('exitCode')}); not restarted"
        elif state in FAILED or _said_exit(rollout, cfg.name) in SAID_EXITS:
            # (between the Spark operator's retries the application is submitted or running again: the job's
            # record on its Lease, current until the generation renews it, keeps saying why it does not copy)
            err = ((app or {}).get("status") or {}).get("applicationState", {}).get("errorMessage")
            g["message"] = f"SparkApplication {g.get('application')} is {state}" + (f": {err}" if err else "")
            code = exit_code(err) if state in FAILED else None
            code = code if code is not None else _said_exit(rollout, cfg.name)
            said = _job_said(rollout, cfg.name, code)
            if code == EXIT_UNAUTHORIZED:  # the job's exit contract: a cluster's ACLs refuse the mirror
                g["message"] = (f"not copying: a cluster's ACLs refuse the mirror ({g['message']}); "
                                f"{said or 'its driver log names the cluster, topic and operation to grant'}; "
                                "restarted with backoff")
                failed_reasons[g["name"]] = Kind.AUTHORIZATION.value
            elif code == EXIT_TOO_FEW_BROKERS:  # restarted with backoff: new brokers need no spec change
                g["message"] = ("not copying: the target has too few brokers for a topic the mirror creates "
                                "(restarted with backoff): "  # first: the condition's message is cut at 1024
                                f"{said or 'its driver log names the topic, factor and key to set'} ({g['message']})")
                failed_reasons[g["name"]] = REPLICATION_REFUSED
            failed.append(g)
        elif state in RUNNING:
            running.append(g)
        elif desired == "running" and cfg.name not in failed_over:
            starting.append(g)
        groups.append(g)

    status: dict[str, Any] = {"observedGeneration": generation, "flowGroups": groups,
                              "flowGroupsReady": f"{len(running)}/{len(plan.groups)}",
                              "notApplicable": plan.not_applicable, "unsupported": plan.unsupported}
    versions = sorted({g["version"] for g in groups if g.get("version")})
    if rollout is not None and versions:
        status["version"] = ", ".join(versions)  # what runs; two while a handoff is under way
    elif spec is not None and spec.version:
        status["version"] = spec.version
    if rollout is not None:
        before = list(old.get("handoffs") or [])
        seen = {(h.get("toGeneration"), tuple(h.get("toFlowGroups") or [])) for h in before}
        fresh = [h for h in rollout.handoffs if (h["toGeneration"], tuple(h["toFlowGroups"])) not in seen]
        status["handoffs"] = [*before, *fresh][-MAX_HANDOFFS:]
        if rollout.rollback:
            status["rollback"] = rollout.rollback
    if failover is not None:
        status["failover"] = failover
    elif old.get("failover"):
        status["failover"] = old["failover"]
    lag_values = [g["lag"] for g in groups if "lag" in g]
    status["lag"] = sum(lag_values) if groups and len(lag_values) == len(groups) else None

    conds = []
    if plan.errors:
        msg = "; ".join(str(p) for p in plan.errors)
        conds += [_condition(old_conds, "Ready", False, "InvalidSpec", msg, generation, now),
                  _condition(old_conds, "Progressing", False, "InvalidSpec", "nothing applied", generation, now),
                  _condition(old_conds, "Degraded", True, "InvalidSpec", msg, generation, now)]
        status["flowGroupsReady"] = None
    else:
        all_problems = list(problems) + [Problem(failed_reasons.get(g["name"], "ApplicationFailed"), g["message"],
                                                 g["name"]) for g in failed]
        if rollout is not None:
            all_problems += [Problem(reason, m) for reason, m in rollout.app_problems]
            others = [(p.reason, p.group) for p in all_problems]
            all_problems += [Problem(LEASE_NOT_RENEWED, m, group) for group, m in sorted(rollout.silent.items())
                             if not silence_explained(group, others, rollout.failures)]
        if all_problems:
            reasons = sorted({p.reason for p in all_problems})
            degraded = _condition(old_conds, "Degraded", True, reasons[0] if len(reasons) == 1 else "Multiple",
                                  "; ".join(p.message for p in all_problems), generation, now)
        else:
            degraded = _condition(old_conds, "Degraded", False, "AsExpected", "no problems", generation, now)
        if desired == "stopped":
            ready = _condition(old_conds, "Ready", False, "Stopped",
                               "spec.state is stopped: applications removed, progress kept", generation, now)
            progressing = _condition(old_conds, "Progressing", False, "Stopped", "stopped", generation, now)
        elif desired == "paused":
            suspended = [g for g in groups if g.get("sparkState") in SUSPENDED]
            ready = _condition(old_conds, "Ready", False, "Paused",
                               f"spec.state is paused: {len(suspended)}/{len(groups)} applications suspended",
                               generation, now)
            progressing = _condition(old_conds, "Progressing", len(suspended) < len(groups), "Pausing",
                                     "suspending applications", generation, now)
        else:
            expected = len(groups) - len(failed_over)
            ok = len(running) >= expected and not all_problems
            ready = _condition(old_conds, "Ready", ok, ("Running" if expected else "FailedOver") if ok else
                               ("Degraded" if all_problems else "Starting"),
                               f"{len(running)}/{len(groups)} flow groups running" +
                               (f", {len(failed_over)} failed over" if failed_over else "") +
                               ("" if ok else "; " + "; ".join(
                                   [p.message for p in all_problems] if all_problems else
                                   [f"waiting for {g['application']} ({g.get('sparkState') or 'not created'})"
                                    for g in starting + failed])), generation, now)
            progressing = _condition(old_conds, "Progressing", bool(starting),
                                     "Starting" if starting else "Stable",
                                     ("starting " + ", ".join(g["name"] for g in starting)) if starting
                                     else "all flow groups applied", generation, now)
        conds += [ready, progressing, degraded]
        if rollout is not None:
            conds.append(_upgrading(old_conds, rollout, generation, now))
        if failover_condition is not None:
            conds.append(_condition(old_conds, "FailedOver", *failover_condition, generation, now))
    reasons = (["InvalidSpec"] if plan.errors else []) + [p.reason for p in problems] + \
        [failed_reasons.get(g["name"], "ApplicationFailed") for g in failed] + [r for r, _m in (rollout.app_problems if rollout else [])]
    status["conditions"] = conds + gitops_conditions(old_conds, conds, reasons, generation, now)
    # the status model is the schema: validate what we write
    KafkaMirrorMaker2Status.model_validate({k: v for k, v in status.items() if v is not None})
    return status


def _upgrading(old_conds: dict[str, dict], rollout: Rollout, generation: int | None, now: str) -> dict[str, Any]:
    if rollout.upgrading:
        return _condition(old_conds, "Upgrading", True, "HandingOver", "; ".join(rollout.upgrading), generation, now)
    if rollout.rollback and rollout.held_back:
        reason = "HandoffRolledBack" if rollout.rollback.get("leaseMovedBack") else "RolledBack"
        return _condition(old_conds, "Upgrading", False, reason, rollout.rollback["reason"], generation, now)
    return _condition(old_conds, "Upgrading", False, "UpToDate", "every flow group runs its latest generation",
                      generation, now)


def gitops_conditions(old: dict[str, dict], conds: list[dict[str, Any]], reasons: list[str], generation: int | None,
                      now: str) -> list[dict[str, Any]]:
    """Reconciling and Stalled (kstatus' abnormal-true pair) from the other conditions and the problems' reasons.

    Stalled wins over Reconciling: an application cannot start while its Secret is missing, and kstatus would
    report whichever True condition comes first.
    """
    by_type = {c["type"]: c for c in conds}
    degraded = by_type.get("Degraded") or {}
    stalling = sorted({r for r in reasons if r in STALLING})
    if stalling:
        stalled = _condition(old, "Stalled", True, stalling[0] if len(stalling) == 1 else "Multiple",
                             degraded.get("message") or ", ".join(stalling), generation, now)
        reconciling = _condition(old, "Reconciling", False, "Stalled", "waiting for a change to the spec or to "
                                 "what it references", generation, now)
        return [reconciling, stalled]
    moving = [c for c in conds if c["type"] in ("Progressing", "Upgrading") and c["status"] == "True"]
    if moving:
        reconciling = _condition(old, "Reconciling", True, moving[0]["reason"], moving[0]["message"], generation, now)
    else:
        reconciling = _condition(old, "Reconciling", False, "Reconciled", "the spec is applied", generation, now)
    stalled = _condition(old, "Stalled", False, "AsExpected", "no problem that needs a change", generation, now)
    return [reconciling, stalled]


def transitions(old: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(event type, reason, message) for condition changes a user should notice: Ready and Degraded flips."""
    before = {c["type"]: c for c in (old or {}).get("conditions") or [] if "type" in c}
    out = []
    for c in new.get("conditions") or []:
        prev = before.get(c["type"])
        if prev is not None and prev.get("status") == c["status"] and prev.get("reason") == c.get("reason"):
            continue
        if c["type"] == "Ready" and c["status"] == "True":
            out.append(("Normal", "Ready", c.get("message") or "ready"))
        elif c["type"] == "Ready" and prev is not None and prev.get("status") == "True":
            out.append(("Warning", "NotReady", f"{c.get('reason')}: {c.get('message')}"))
        elif c["type"] == "Degraded" and c["status"] == "True":
            out.append(("Warning", c.get("reason") or "Degraded", c.get("message") or "degraded"))
        elif c["type"] == "Degraded" and prev is not None and prev.get("status") == "True":
            out.append(("Normal", "Recovered", c.get("message") or "no problems"))
    return out
