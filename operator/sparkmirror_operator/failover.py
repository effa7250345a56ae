"""spec.failover acted on: the failover command's steps (`sparkmirror.failover`) run by the operator, once for
each mirror listed, and `--undo` for a mirror taken off the list.

`status.failover` holds a record per mirror the operator acted on; it is what the operator knows (the lanes
learn it from the failover mark on the target's progress topic):
- FailedOver: done. The flow groups carrying the mirror get no application (their other mirrors stop with them,
  as with the command).
- Retrying: the failover raised part-way. It may have stopped the flow groups already, so they get no
  application either; it is run again every status interval (both steps are idempotent), and undone like a
  completed one when the mirror leaves the list.
- Waiting: the mirror had not caught up within waitCaughtUpSeconds. Nothing was changed: it copies on, and the
  failover is tried again.
Records are written to the status before the applications are pruned (see reconcile.py), so a concurrent
reconcile that reads the resource afterwards does not run the failover again.

Share groups (KIP-932) of the mirror are carried as `sparkmirror failover` carries them (`sharegroups/`, over
kafka-python's `sparkmirror.wire`, which the operator's image installs): the record says per group whether its
start offsets moved and why not.

The operator's own clients get the Secrets' values in memory (`Cluster.resolved`), never in a file or a log.
"""
from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkmirror.failover.report import MOVED, named_groups
from sparkmirror.sharegroups.moves import MOVED as SHARE_MOVED
from sparkmirror.resource.flowgroup import FlowGroupConfig, SecretResolver
from sparkmirror.resource.javaregex import compile_java
from sparkmirror.resource.plan import Plan
from .status import Problem

log = logging.getLogger(__name__)
NOT_MOVED_SHOWN = 20
SHARE_NOT_MOVED_SHOWN = 5  # a share group's partitions not moved, named on the status
TIMEOUT = 30.0
STOPPING = ("FailedOver", "Retrying")  # record states whose flow groups get no application


@dataclass
class Outcome:
    records: list[dict[str, Any]]  # status.failover after this reconcile
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def listed(p: Plan) -> list[str]:
    spec = p.resource.spec if p.resource is not None else None
    mirrors = spec.failover.mirrors if spec is not None and spec.failover is not None else []
    return list(dict.fromkeys(mirrors))


def pending(p: Plan, records: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(mirrors to fail over, records to undo): what the spec lists without a completed record, and the records
    of mirrors it no longer lists."""
    want = listed(p)
    done = {r.get("mirror") for r in records if r.get("state", "FailedOver") == "FailedOver"}
    return [m for m in want if m not in done], [r for r in records if r.get("mirror") not in want]


def stopping(records: list[dict[str, Any]]) -> frozenset[str]:
    """Mirrors whose flow groups get no application."""
    return frozenset(r.get("mirror") for r in records if r.get("state", "FailedOver") in STOPPING)


def failed_over_groups(p: Plan, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Flow group -> the record of a stopped mirror it carries: these groups get no application."""
    by_mirror = {r.get("mirror"): r for r in records if r.get("mirror") in stopping(records)}
    return {g: by_mirror[m] for g, mirrors in p.group_mirrors.items() for m in mirrors if m in by_mirror}


def problems(records: list[dict[str, Any]]) -> list[Problem]:
    """What the records say is wrong (the same on every reconcile, acting or not: no flapping)."""
    reason = {"Retrying": "FailoverFailed", "Waiting": "FailoverWaiting"}
    return [Problem(reason[r["state"]], r.get("message") or "") for r in records if r.get("state") in reason]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def record_of(mirror: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The status record of one failover report (`sparkmirror.failover.report.document`)."""
    rows = [r for g in doc["groups"] for r in g["partitions"]]
    moved = [r for r in rows if r["action"] in MOVED]
    groups_moved = {g["group"] for g in doc["groups"] if all(r["action"] in MOVED for r in g["partitions"])}
    not_moved = [f"{r['group']} {r['sourceTopic']}[{r['partition']}]: {r['action']}"
                 + (f" ({r['detail']})" if r["detail"] else "") for r in rows if r["action"] not in MOVED]
    at_ms = min((s["atMs"] for s in doc["stopped"] if s.get("atMs")), default=None)
    at = dt.datetime.fromtimestamp(at_ms / 1000, dt.timezone.utc).replace(microsecond=0).isoformat() \
        .replace("+00:00", "Z") if at_ms else _now()
    not_moved += doc.get("notMoved") or []  # why groups without rows did not move (no checkpoint, ...)
    groups_not_moved = sorted({g["group"] for g in doc["groups"]} - groups_moved | set(doc.get("groupsNotMoved", [])))
    ages = {g["group"]: g["checkpointAgeMs"] for g in doc["groups"] if g.get("checkpointAgeMs") is not None}
    oldest = sorted(ages, key=lambda g: -ages[g])[:NOT_MOVED_SHOWN]
    return {"mirror": mirror, "state": "FailedOver", "time": at,
            "flowGroups": [s["flowGroup"] for s in doc["stopped"]], "offsetsFrom": doc["offsetsFrom"],
            "groupsMoved": len(groups_moved), "partitionsMoved": len(moved), "notMoved": not_moved[:NOT_MOVED_SHOWN],
            "groupsNotMoved": groups_not_moved[:NOT_MOVED_SHOWN],
            **({"checkpointAgeMs": {g: ages[g] for g in sorted(oldest)}} if ages else {}),
            **share_groups_of(doc), "notCopied": doc.get("notCopied"), "ok": bool(doc["ok"])}


def ok_configs(configs: dict[str, Any] | None) -> bool:
    """A share group's configs (`ConfigCarry.as_dict`, None: not tried) did not hold it back."""
    return not configs or (not configs["refused"] and not configs["error"])


def share_groups_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The share groups (KIP-932) of a failover report, per group as the status holds them: moved or not and why,
    those not moved first; `shareGroupsNote` why none were carried (the source or target serves none, ...). Nothing
    when the mirror has no share group with a start offset and nothing to say of them."""
    note = doc.get("shareGroupsNote") or ""
    if not doc.get("shareGroups") and not note:
        return {}
    entries = []
    for g in doc.get("shareGroups", []):
        rows = g["partitions"]
        why = [f"{r['sourceTopic']}[{r['partition']}]: {r['action']}"
               + (f" ({r['detail']})" if r["detail"] and not (note and r["action"] == "unsupported") else "")
               for r in rows if r["action"] not in SHARE_MOVED]
        configs = g.get("configs") or {}
        refused = [f"{n}: {w}" for n, w in sorted(configs.get("refused", {}).items())] + (
            [configs["error"]] if configs.get("error") else [])
        why += [f"configs: {w}" for w in refused]
        entries.append({"group": g["group"], "moved": bool(g["moved"]),
                        "partitionsMoved": sum(r["action"] in SHARE_MOVED for r in rows),
                        "notMoved": why[:SHARE_NOT_MOVED_SHOWN],
                        **({"configs": [f"{n}={v}" for n, v in sorted(configs["carried"].items())],
                            "configsNotCarried": [f"{n}: {w}" for n, w in sorted(configs["leftOut"].items())]
                            + refused} if configs else {})})
    entries.sort(key=lambda e: (e["moved"], e["group"]))
    moved = sum(all(r["action"] in SHARE_MOVED for r in g["partitions"]) and ok_configs(g.get("configs"))
                for g in doc.get("shareGroups", []))
    return {"shareGroupsMoved": moved, "shareGroups": entries[:NOT_MOVED_SHOWN], "shareGroupsNote": note}


def summary(record: dict[str, Any]) -> str:
    """One line for a condition or an Event."""
    if record.get("state", "FailedOver") != "FailedOver":
        return record.get("message") or f"mirror {record['mirror']}: {record.get('state')}"
    text = (f"mirror {record['mirror']} failed over at {record['time']} (flow groups "
            f"{', '.join(record['flowGroups']) or '-'} stopped; {record['groupsMoved']} consumer groups, "
            f"{record['partitionsMoved']} partitions moved, offsets from the {record['offsetsFrom']})")
    if record.get("groupsNotMoved"):
        text += "; groups not moved: " + ", ".join(record["groupsNotMoved"][:5])
    if record.get("notMoved"):
        text += "; not moved: " + "; ".join(record["notMoved"][:3])
    shares = record.get("shareGroups") or []
    if shares:
        stuck = [f"{e['group']} ({e['notMoved'][0]})" if e["notMoved"] else e["group"] for e in shares
                 if not e["moved"]]
        text += f"; share groups: {record.get('shareGroupsMoved', 0)} moved" + (
            "; share groups not moved: " + ", ".join(stuck[:3]) if stuck else "")
    if record.get("shareGroupsNote"):
        text += f"; share groups: {record['shareGroupsNote']}"
    if record.get("checkpointAgeMs"):
        text += f"; checkpoints used up to {max(record['checkpointAgeMs'].values()) / 1000:.0f} s old"
    if record.get("notCopied"):
        text += f"; {record['notCopied']} records on the source were not copied"
    return text


def _carrying(p: Plan, mirror: str, resolve: SecretResolver) -> tuple[list[FlowGroupConfig], Any]:
    """The flow groups carrying `mirror`, their clusters' secrets resolved, and the mirror itself."""
    configs = [c.model_copy(update={"clusters": [k.resolved(resolve) for k in c.clusters]})
               for c in p.groups if mirror in p.group_mirrors.get(c.name, [])]
    return configs, next(m for m in configs[0].mirrors if m.name == mirror)


def _undo_configs(p: Plan, record: dict[str, Any], resolve: SecretResolver) -> list[FlowGroupConfig]:
    """The flow groups the record stopped, as they are named now: a group the spec no longer has (renamed, its
    mirror removed) is undone as its name under this resource, so its mark is cleared should it come back."""
    if not p.groups:
        return []
    by_name = {c.name: c for c in p.groups}
    names = record.get("flowGroups") or [g for g, ms in p.group_mirrors.items() if record.get("mirror") in ms]
    out = []
    for name in names:
        cfg = by_name.get(name) or p.groups[0].model_copy(update={"name": name})
        out.append(cfg.model_copy(update={"clusters": [k.resolved(resolve) for k in cfg.clusters]}))
    return out


def _why(e: BaseException) -> str:
    """An exception as one line for the status: Kafka and lookup errors as they say, anything else by its type
    only (a validation error would quote its input, which may hold a resolved secret)."""
    from confluent_kafka import KafkaException

    from sparkmirror.resource.flowgroup import SecretUnreadable

    if isinstance(e, KeyError):
        return f"secret {e.args[0] if e.args else e}"
    if isinstance(e, (KafkaException, RuntimeError, TimeoutError, SecretUnreadable)):
        return " ".join(str(e).split())
    return f"{type(e).__name__} (see the operator's log)"


def act(p: Plan, records: list[dict[str, Any]], resolve: SecretResolver, timeout: float = TIMEOUT,
        run: Callable[..., dict] | None = None) -> Outcome:
    """Run what spec.failover asks for that the records do not say is done; never raises."""
    from sparkmirror.failover.run import NotCaughtUp, failover
    from sparkmirror.failover.stop import undo

    run = run or failover
    spec = p.resource.spec.failover if p.resource is not None else None
    out = Outcome(records=list(records))
    to_fail, to_undo = pending(p, records)
    for record in to_undo:
        mirror = record.get("mirror")
        try:
            for cfg in _undo_configs(p, record, resolve) if record.get("state") in STOPPING else []:
                undo(cfg, timeout)
        except Exception as e:  # noqa: BLE001 - reported on the status, tried again; the operator serves on
            log.warning("mirror %s: failover not undone yet: %s", mirror, _why(e), exc_info=not _known(e))
            out.records = [{**r, "state": "Retrying", "message": f"spec.failover.mirrors: mirror {mirror} taken "
                            f"off the list, but it cannot copy again yet: {_why(e)}"} if r is record else r
                           for r in out.records]
            continue
        out.records = [r for r in out.records if r is not record]
        out.events.append(("Normal", "FailoverUndone", f"mirror {mirror} copies again (taken off "
                                                       "spec.failover.mirrors)"))
    for mirror in to_fail:
        assert spec is not None
        select = compile_java(spec.groupsPattern).fullmatch if spec.groupsPattern else (lambda _g: True)
        before = next((r for r in out.records if r.get("mirror") == mirror), None)
        try:
            configs, m = _carrying(p, mirror, resolve)
            record = record_of(mirror, run(configs, m, select, timeout, float(spec.waitCaughtUpSeconds),
                                           log.warning, named=named_groups(spec.groupsPattern)))
        except NotCaughtUp as e:
            record = {"mirror": mirror, "state": "Waiting", "time": _now(),
                      "message": f"spec.failover.waitCaughtUpSeconds: {_why(e)}"}
        except Exception as e:  # noqa: BLE001 - reported on the status, tried again; the operator serves on
            log.warning("mirror %s: failover did not complete: %s", mirror, _why(e), exc_info=not _known(e))
            record = {"mirror": mirror, "state": "Retrying", "time": _now(),
                      "flowGroups": [g for g, ms in p.group_mirrors.items() if mirror in ms],
                      "message": f"spec.failover.mirrors: mirror {mirror} not failed over yet (its flow groups "
                                 f"may be stopped; tried again): {_why(e)}"}
        out.records = [r for r in out.records if r.get("mirror") != mirror] + [record]
        if record["state"] == "FailedOver":
            out.events.append(("Normal" if record["ok"] else "Warning",
                               "FailedOver" if record["ok"] else "FailedOverPartly", summary(record)))
        elif before is None or before.get("message") != record.get("message"):
            out.events.append(("Warning", problems([record])[0].reason, record["message"]))
    return out


def _known(e: BaseException) -> bool:
    from confluent_kafka import KafkaException

    from sparkmirror.resource.flowgroup import SecretUnreadable

    return isinstance(e, (KafkaException, RuntimeError, TimeoutError, KeyError, SecretUnreadable))


def condition(p: Plan, records: list[dict[str, Any]]) -> tuple[bool, str, str] | None:
    """(status, reason, message) of the FailedOver condition; None when the resource never asked for one."""
    if not records and not listed(p):
        return None
    done = [r for r in records if r.get("state", "FailedOver") == "FailedOver"]
    trouble = problems(records)
    if not done:
        if trouble:
            return False, trouble[0].reason, "; ".join(x.message for x in trouble)
        return False, "NotFailedOver", "no mirror is failed over"
    text = "; ".join(summary(r) for r in done) + "".join(f"; {x.message}" for x in trouble)
    return True, "FailedOver" if all(r.get("ok") for r in done) else "FailedOverPartly", text
