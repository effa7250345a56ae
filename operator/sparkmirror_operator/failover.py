"""spec.failover acted on: the failover command's steps (`sparkmirror.failover`) run by the operator, once for
each mirror listed, and `--undo` for a mirror taken off the list.

What says a mirror is failed over is its record on `status.failover` (the lanes learn it from the failover mark
on the target's progress topic). A flow group carrying a failed-over mirror gets no application; its other
mirrors stop with it, as with the command. A failover that could not run (a cluster unreachable, the mirror not
caught up in time) leaves no record and is tried again on the next reconcile; both steps are idempotent, so a
record lost with a status write only repeats them.

The operator's own clients get the Secrets' values in memory (`Cluster.resolved`), never in a file or a log.
"""
from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from sparkmirror.failover.report import MOVED
from sparkmirror.resource.flowgroup import FlowGroupConfig, SecretResolver, SecretUnreadable
from sparkmirror.resource.plan import Plan
from .status import Problem

log = logging.getLogger(__name__)
NOT_MOVED_SHOWN = 20
TIMEOUT = 30.0


@dataclass
class Outcome:
    records: list[dict[str, Any]]  # status.failover after this reconcile
    problems: list[Problem] = field(default_factory=list)
    done: list[tuple[str, str]] = field(default_factory=list)  # (reason, message) of what happened now: Events
    warnings: list[str] = field(default_factory=list)


def listed(p: Plan) -> list[str]:
    spec = p.resource.spec if p.resource is not None else None
    return list(spec.failover.mirrors) if spec is not None and spec.failover is not None else []


def pending(p: Plan, records: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(mirrors to fail over, mirrors to let copy again): the spec's list against the records."""
    want, have = listed(p), [r.get("mirror") for r in records]
    return [m for m in want if m not in have], [m for m in have if m not in want]


def failed_over_groups(p: Plan, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Flow group -> the record of a failed-over mirror it carries: these groups get no application."""
    by_mirror = {r.get("mirror"): r for r in records}
    return {g: by_mirror[m] for g, mirrors in p.group_mirrors.items() for m in mirrors if m in by_mirror}


def record_of(mirror: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The status record of one failover report (`sparkmirror.failover.report.document`)."""
    rows = [r for g in doc["groups"] for r in g["partitions"]]
    moved = [r for r in rows if r["action"] in MOVED]
    groups_moved = {g["group"] for g in doc["groups"] if all(r["action"] in MOVED for r in g["partitions"])}
    not_moved = [f"{r['group']} {r['sourceTopic']}[{r['partition']}]: {r['action']}"
                 + (f" ({r['detail']})" if r["detail"] else "") for r in rows if r["action"] not in MOVED]
    at_ms = min((s["atMs"] for s in doc["stopped"] if s.get("atMs")), default=None)
    at = dt.datetime.fromtimestamp(at_ms / 1000, dt.timezone.utc) if at_ms else dt.datetime.now(dt.timezone.utc)
    return {"mirror": mirror, "time": at.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "flowGroups": [s["flowGroup"] for s in doc["stopped"]], "offsetsFrom": doc["offsetsFrom"],
            "groupsMoved": len(groups_moved), "partitionsMoved": len(moved), "notMoved": not_moved[:NOT_MOVED_SHOWN],
            "notCopied": doc.get("notCopied"), "ok": bool(doc["ok"])}


def summary(record: dict[str, Any]) -> str:
    """One line for a condition or an Event."""
    text = (f"mirror {record['mirror']} failed over at {record['time']} (flow groups "
            f"{', '.join(record['flowGroups']) or '-'} stopped; {record['groupsMoved']} consumer groups, "
            f"{record['partitionsMoved']} partitions moved, offsets from the {record['offsetsFrom']})")
    if record.get("notMoved"):
        text += "; not moved: " + "; ".join(record["notMoved"][:3])
    if record.get("notCopied"):
        text += f"; {record['notCopied']} records on the source were not copied"
    return text


def _carrying(p: Plan, mirror: str, resolve: SecretResolver) -> tuple[list[FlowGroupConfig], Any]:
    """The flow groups carrying `mirror`, their clusters' secrets resolved, and the mirror itself."""
    configs = [c.model_copy(update={"clusters": [k.resolved(resolve) for k in c.clusters]})
               for c in p.groups if mirror in p.group_mirrors.get(c.name, [])]
    return configs, next(m for m in configs[0].mirrors if m.name == mirror)


def act(p: Plan, records: list[dict[str, Any]], resolve: SecretResolver,
        timeout: float = TIMEOUT, run: Callable[..., dict] | None = None,
        undo: Callable[..., dict] | None = None) -> Outcome:
    """Run what spec.failover asks for that the records do not say is done; never raises for a cluster."""
    from sparkmirror.failover.run import NotCaughtUp, failover, undo_all

    run, undo = run or failover, undo or undo_all
    spec = p.resource.spec.failover if p.resource is not None else None
    out = Outcome(records=list(records))
    to_fail, to_undo = pending(p, records)
    for mirror in to_undo:
        try:
            configs, m = _carrying(p, mirror, resolve)
            undo(configs, m, timeout)
        except StopIteration:  # the mirror left the spec: nothing of it runs any more
            pass
        except (KafkaException, RuntimeError, TimeoutError, KeyError, SecretUnreadable) as e:
            out.problems.append(Problem("FailoverUndoFailed", f"spec.failover.mirrors: mirror {mirror} taken off "
                                                              f"the list, but it cannot copy again yet: {_text(e)}"))
            continue
        out.records = [r for r in out.records if r.get("mirror") != mirror]
        out.done.append(("FailoverUndone", f"mirror {mirror} copies again (taken off spec.failover.mirrors)"))
    for mirror in to_fail:
        assert spec is not None
        select = re.compile(spec.groupsPattern).fullmatch if spec.groupsPattern else (lambda _g: True)
        try:
            configs, m = _carrying(p, mirror, resolve)
            doc = run(configs, m, select, timeout, float(spec.waitCaughtUpSeconds), log.warning)
        except NotCaughtUp as e:
            out.problems.append(Problem("FailoverWaiting", f"spec.failover.waitCaughtUpSeconds: {_text(e)}"))
            continue
        except (KafkaException, RuntimeError, TimeoutError, KeyError, SecretUnreadable) as e:
            out.problems.append(Problem("FailoverFailed", f"spec.failover.mirrors: mirror {mirror} not failed over "
                                                          f"(tried again): {_text(e)}"))
            continue
        record = record_of(mirror, doc)
        out.records.append(record)
        if record["ok"]:
            out.done.append(("FailedOver", summary(record)))
        else:
            out.warnings.append(summary(record))
    return out


def condition(p: Plan, records: list[dict[str, Any]], problems: list[Problem]) -> tuple[bool, str, str] | None:
    """(status, reason, message) of the FailedOver condition; None when the resource never asked for one."""
    trouble = [x for x in problems if x.reason.startswith("Failover")]
    if not records and not listed(p) and not trouble:
        return None
    if trouble and not records:
        return False, trouble[0].reason, "; ".join(x.message for x in trouble)
    if not records:
        return False, "NotFailedOver", "no mirror is failed over"
    text = "; ".join(summary(r) for r in records) + "".join(f"; {x.message}" for x in trouble)
    return True, "FailedOver" if all(r.get("ok") for r in records) else "FailedOverPartly", text


def _text(e: BaseException) -> str:
    return " ".join(str(e.args[0] if isinstance(e, KeyError) and e.args else e).split())
