"""Which generation copies each flow group, from what the drivers reported on the Leases: pure.

A generation took over only when every flow group it runs reported `took-over.g<N>` on its own Lease; until
then the one before it copies (or drains). A `ready.g<N>` report counts only while its driver may be up and it
is from the application's current submission. The handoffs that brought the copying generations in are derived
again on every look.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.names import lease_ready_key, lease_took_over_key
from .handback import GONE_STATES
from .observed import ANNOTATION_MOVED_AT, Observed
from .readiness import counts
from .restarts import RESTART_SUFFIX


def successors(observed: Observed, gen: int) -> set[str]:
    """The flow groups generation `gen` runs: a ConfigMap of that generation, or a report of it on the group's
    own Lease (so a successor whose ConfigMap went missing still counts as one that must take over)."""
    keys = (lease_ready_key(gen), lease_took_over_key(gen))
    return {g for g, ws in observed.workers.items() if gen in ws} | \
        {g for g in observed.leases if any(observed.annotation(g, k) for k in keys)}


def took_over(observed: Observed, gen: int) -> bool:
    """Generation `gen` took over: EVERY flow group it runs reported `took-over.g<gen>` on its own Lease. Per
    group, not per Lease anywhere: after a split, one successor having taken over says nothing of the other."""
    groups = successors(observed, gen)
    return bool(groups) and all(observed.annotation(g, lease_took_over_key(gen)) for g in groups)


def copying_generations(observed: Observed) -> dict[str, FlowGroupConfig]:
    """The generation that copies each flow group: the one its Lease names once that generation took over as a
    whole (`took_over`; a first generation has nobody to take over from); until then the one before it, which
    is draining (an old group a split or merge superseded keeps its own generation until every successor did)."""
    out: dict[str, FlowGroupConfig] = {}
    done: dict[int, bool] = {}
    for group, gens in observed.workers.items():
        holder = observed.holder(group)
        if holder is None:
            continue
        if holder not in done:  # a generation with no predecessors (started at once) had nobody to take over from
            cfgs = [ws[holder].config for ws in observed.workers.values() if holder in ws]
            done[holder] = bool(cfgs) and not any(c.worker.predecessors for c in cfgs) or took_over(observed, holder)
        if holder in gens and done[holder]:
            out[group] = gens[holder].config
        elif not done[holder] and (before := [n for n in gens if n < holder]):
            out[group] = gens[max(before)].config
    return out


def may_be_up(observed: Observed, group: str, gen: int) -> bool:
    """Whether the driver of a generation may be up: its application is there and not in a state where its driver
    ended (handback.GONE_STATES). A `ready.g<N>` report counts only while it is: a standby restarted after a
    failure is cold again until it reports anew."""
    worker = observed.workers.get(group, {}).get(gen)
    return worker is not None and worker.app is not None and worker.state().get("state") not in GONE_STATES


def ready_now(observed: Observed, group: str, gen: int) -> bool:
    """A `ready.g<N>` report that counts now: its driver may be up, and it is from the application's current
    submission (readiness.py: one from before a restart is stale)."""
    worker = observed.workers.get(group, {}).get(gen)
    return may_be_up(observed, group, gen) and worker is not None and \
        counts(observed.annotation(group, lease_ready_key(gen)), worker.app)


def completed_handoffs(observed: Observed, running: dict[str, FlowGroupConfig]) -> list[dict[str, Any]]:
    """The handoff that brought each copying generation in (it took over from predecessors), derived again on
    every look from what the Leases say, so a status write that lost a race loses no record (the status keeps
    each once). Its record: from, to, when, how long the takeover took."""
    by_gen: dict[int, list[FlowGroupConfig]] = {}
    for cfg in running.values():
        by_gen.setdefault(cfg.worker.generation, []).append(cfg)
    out = []
    for gen, cfgs in sorted(by_gen.items()):
        preds = {(p.flowGroup, p.generation) for c in cfgs for p in c.worker.predecessors}
        if not preds or not all(observed.annotation(c.name, lease_took_over_key(gen)) for c in cfgs):
            continue
        took = [json.loads(observed.annotation(c.name, lease_took_over_key(gen)) or "{}") for c in cfgs]
        moved = [int(v) for c in cfgs if (v := observed.annotation(c.name, ANNOTATION_MOVED_AT))]
        at = max((t.get("atMs", 0) for t in took), default=0)
        rec: dict[str, Any] = {
            "fromGeneration": max(g for _f, g in preds), "toGeneration": gen,
            "fromFlowGroups": sorted({f for f, _g in preds}), "toFlowGroups": sorted(c.name for c in cfgs),
            "version": cfgs[0].worker.version.split(RESTART_SUFFIX, 1)[0],
            "takeoverMs": max((t.get("tookMs", 0) for t in took), default=0),
            "fencedTransactionalIds": sum(t.get("fenced", 0) for t in took),
        }
        if moved and at:
            rec["leaseToTakeoverMs"] = max(0, at - min(moved))
        if all("latencyMaxMs" in t for t in took):  # measured by the new generation (its drivers report it)
            rec["firstEpochLatencyMaxMs"] = max(int(t["latencyMaxMs"]) for t in took)
            rec["firstEpochRecords"] = sum(int(t.get("firstEpochRecords") or 0) for t in took)
        if all("pauseMs" in t for t in took):  # each group's gap between commits (handoff/pause.py): the longest
            rec["pauseMs"] = max(int(t["pauseMs"]) for t in took)
        if at:
            rec["time"] = dt.datetime.fromtimestamp(at / 1000, dt.timezone.utc).replace(microsecond=0) \
                .isoformat().replace("+00:00", "Z")
        out.append(rec)
    return out
