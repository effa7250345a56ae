"""Rolling upgrades by worker-group handoff (DESIGN.md section 5), decided from what is observed: pure.

Every change that needs a new application (version, image, resources, parallelism, flow-group split, the
`sparkmirror.io/restart` annotation) makes a new worker generation of the flow groups it touches (a handoff
unit, see `sparkmirror.resource.rollout`), beside the one running:

1. standby: the new generation's applications are created; their drivers warm up and report `ready.g<N>` on
   the flow groups' Leases, not copying;
2. move: once every new group reported ready, the Leases name the new generation (the old groups' Leases too,
   so their drivers see it and drain);
3. took over: every new group of the generation reported `took-over.g<N>` on its own Lease (it marked the
   groups, fenced the old lanes and committed its first epoch; per group, so a split is done only when every
   successor is): the old applications are removed and the handoff is recorded on the status. Until then the
   old generation is a hot spare: when a new application fails or goes, or `spec.upgrade.handoffTimeoutSeconds`
   passes first, the Leases move back, the old generation takes the groups back and the new one is removed
   (handback.py), recorded like a rollback (`leaseMovedBack`).

A standby generation not ready within `spec.upgrade.readyTimeoutSeconds` is removed and the old one keeps
copying; the resource says why, and nothing of the same spec (the whole desired set of flow groups) is tried
again until it changes; the record rides on the Leases as well as the status. What the operator
knows lives in the cluster (application labels, the ConfigMap of each generation, the Leases), so an operator
restarted mid-handoff continues where it was.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.model import UpgradeSpec
from sparkmirror.resource.names import (LEASE_FAILURE, LEASE_HOLDER, LEASE_REVOKED, PERMANENT_EXIT_CODES, lease_ready_key,
                                        lease_took_over_key)
from sparkmirror.resource.rollout import HandoffUnit, handoff_units, next_generation, predecessors
from .handback import GONE_STATES, move_back_why, revoked_generation, revoked_record, successor_failures
from .readiness import counts
from .renewal import failure_current, held_since_ms, silence
from .restarts import (ANNOTATION_REFUSED, RESTART_SUFFIX, RESUBMIT_AFTER_SECONDS,  # noqa: F401 (the operator's
                       restart_of, restart_request, restart_token)  # names in one place)

ANNOTATION_RESTART = "sparkmirror.io/restart"
ANNOTATION_MOVED_AT = "sparkmirror.io/moved-at"  # on a Lease: when the operator moved it (epoch ms)
ANNOTATION_ROLLED_BACK = "sparkmirror.io/rolled-back"
"""On every Lease of a resource: the last rollback record (JSON). Written in the same apply that removes the
standby, so a reconcile that read the resource before its status said so does not start the generation again."""
ANNOTATION_LAST_GENERATION = "sparkmirror.io/last-generation"
"""On every Lease of a resource: the highest worker generation number ever given out. A rolled-back standby's
number is never given out again, so a leftover `ready.g<N>` of it can never move a Lease to a later, cold one."""
_EXIT_CODE = re.compile(r"ExitCode: (\d+)")  # the Kubeflow Spark operator's errorMessage of a failed driver


def exit_code(error_message: str | None) -> int | None:
    """The driver's exit code in the Kubeflow Spark operator's errorMessage of a failed driver, if it says one."""
    match = _EXIT_CODE.search(error_message or "")
    return int(match.group(1)) if match else None


MARK_PREFIXES = ("sparkmirror.io/ready.g", "sparkmirror.io/took-over.g")  # the drivers' reports on a Lease
MAX_HANDOFFS = 10


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


@dataclass
class Plan:
    """What to run: every worker generation to keep or create (with an application unless `stopped`), the
    generation each Lease names, and what the status says about it."""

    workers: list[FlowGroupConfig] = field(default_factory=list)
    holders: dict[str, int | None] = field(default_factory=dict)
    moved: set[str] = field(default_factory=set)      # Leases moved by this plan (stamp moved-at)
    handoffs: list[dict[str, Any]] = field(default_factory=list)  # completed now
    upgrading: list[str] = field(default_factory=list)  # what is in progress, for the Upgrading condition
    rollback: dict[str, Any] | None = None
    held_back: bool = False  # a unit stays on its old generation because its spec was rolled back
    running: dict[str, FlowGroupConfig] = field(default_factory=dict)  # group -> the generation that copies
    last_generation: int = 0  # the high-water mark of generation numbers (ANNOTATION_LAST_GENERATION)
    stale_marks: dict[str, list[str]] = field(default_factory=dict)  # group -> reports of gone generations
    revoked: dict[str, str] = field(default_factory=dict)  # group -> names.LEASE_REVOKED (handback.py)
    refused: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> ANNOTATION_REFUSED record
    no_application: set[tuple[str, int]] = field(default_factory=set)  # (group, generation) not to run
    resubmit: list[tuple[str, int]] = field(default_factory=list)  # applications to remove and submit again
    app_problems: list[tuple[str, str]] = field(default_factory=list)  # (condition reason, message)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> its copying generation's
    #                                                                     names.LEASE_FAILURE record


def _finish(out: Plan, observed: Observed, now_ms: int = 0) -> Plan:
    """The exit contract (`rollout.exit_contract`), the high-water mark, and the drivers' reports of generations this
    plan no longer runs (a rolled-back standby, a handed-over predecessor): dropped, so the Leases do not pile
    them up."""
    if now_ms:
        exit_contract(out, observed, now_ms)
        silent_holders(out, observed, now_ms)
    kept = {c.worker.generation for c in out.workers}
    out.last_generation = max([observed.max_generation(), *kept])
    for group, holder in out.holders.items():  # what a moved-back Lease revoked stays until a later one holds it
        record = observed.annotation(group, LEASE_REVOKED)
        if group not in out.revoked and record and revoked_generation(record) > (holder or 0):
            out.revoked[group] = record
    for group in observed.leases:  # (a standby whose driver ended: its warm-up died with it, it reports again)
        stale = sorted(k for k, gen in observed.marks(group).items() if gen not in kept or (
            k == lease_ready_key(gen) and observed.holder(group) != gen and not _ready(observed, group, gen)))
        if stale:
            out.stale_marks[group] = stale
    return out


def spec_hash(configs: list[FlowGroupConfig], restart: str) -> str:
    """What a set of flow groups runs (their generation aside), with the restart annotation's value."""
    body = [c.model_dump(mode="json", exclude={"worker"}) | {"version": c.worker.version} for c in configs]
    return hashlib.sha256(json.dumps([body, restart], sort_keys=True).encode()).hexdigest()[:16]


def plan_rollout(desired: list[FlowGroupConfig], observed: Observed, upgrade: UpgradeSpec, *, now_ms: int,
                 restart: str = "", rolled_back: dict[str, Any] | None = None, state: str = "running",
                 failed_over: frozenset[str] = frozenset()) -> Plan:
    """Decide the worker generations (see the module docstring). `rolled_back`: the previous status' rollback
    record; a unit whose desired spec hash is the one rolled back is not tried again. `failed_over`: mirrors
    whose flow groups run no application (spec.failover): a unit touching them waits, as when stopped."""
    out = Plan(rollback=rolled_back)
    running = _running(observed)
    named, token = restart_request(restart, [c.name for c in desired])
    # a group the annotation does not name keeps the token it runs with: naming another one never rolls it
    want = {c.name: restart_of(c, token if c.name in named else restart_token(running.get(c.name)))
            for c in desired}
    out.handoffs = _completed(observed, running)
    next_gen = observed.max_generation() + 1
    if not running:  # nothing ever ran (or everything was forgotten): the first generation starts at once
        for cfg in want.values():
            out.workers.append(next_generation(cfg, next_gen, []))
            out.holders[cfg.name] = next_gen
        out.running = {c.name: c for c in out.workers}
        return _finish(out, observed, now_ms)
    units = handoff_units(running, want)
    in_unit = {g for u in units for g in (*u.old, *u.new)}
    for g, cfg in running.items():
        if g not in in_unit:  # unchanged: the generation that copies keeps copying
            out.workers.append(cfg)
            out.holders[g] = cfg.worker.generation
            out.running[g] = cfg
    if state != "running":  # paused or stopped: no handoffs, what last ran stays as it is
        for u in units:
            for g in u.old:
                out.workers.append(running[g])
                out.holders[g] = running[g].worker.generation
                out.running[g] = running[g]
        return _finish(out, observed, now_ms)
    active = 0
    wanted_hash = spec_hash([want[g] for g in sorted(want)], "")
    def frozen(unit: HandoffUnit) -> bool:
        cfgs = [running[g] for g in unit.old] + [want[g] for g in unit.new]
        return any(m.name in failed_over for c in cfgs for m in c.mirrors)

    for unit in units:
        if failed_over and frozen(unit):  # its groups stopped by a failover: no standby could ever get ready
            _keep_old(unit, running, observed, out)
            continue
        started = _standby_of(unit, want, observed, running)
        if started is None and out.rollback and out.rollback.get("specHash") == wanted_hash:
            # this spec was rolled back: nothing of it is tried again until it changes (no slot taken)
            _keep_old(unit, running, observed, out)
            out.held_back = True
            continue
        if started is None and active >= upgrade.maxConcurrentGroups:
            _keep_old(unit, running, observed, out)
            out.upgrading.append(f"{', '.join(unit.new)} waits for another flow group's handoff")
            continue
        active += 1
        _advance(unit, want, observed, running, upgrade, now_ms, next_gen, started, out, wanted_hash)
        next_gen = max(next_gen, max((c.worker.generation for c in out.workers), default=0) + 1)
    return _finish(out, observed, now_ms)


def _successors(observed: Observed, gen: int) -> set[str]:
    """The flow groups generation `gen` runs: a ConfigMap of that generation, or a report of it on the group's
    own Lease (so a successor whose ConfigMap went missing still counts as one that must take over)."""
    keys = (lease_ready_key(gen), lease_took_over_key(gen))
    return {g for g, ws in observed.workers.items() if gen in ws} | \
        {g for g in observed.leases if any(observed.annotation(g, k) for k in keys)}


def took_over(observed: Observed, gen: int) -> bool:
    """Generation `gen` took over: EVERY flow group it runs reported `took-over.g<gen>` on its own Lease. Per
    group, not per Lease anywhere: after a split, one successor having taken over says nothing of the other."""
    groups = _successors(observed, gen)
    return bool(groups) and all(observed.annotation(g, lease_took_over_key(gen)) for g in groups)


def _running(observed: Observed) -> dict[str, FlowGroupConfig]:
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


def _up(observed: Observed, group: str, gen: int) -> bool:
    """Whether the driver of a generation may be up: its application is there and not in a state where its driver
    ended (handback.GONE_STATES). A `ready.g<N>` report counts only while it is: a standby restarted after a
    failure is cold again until it reports anew."""
    worker = observed.workers.get(group, {}).get(gen)
    return worker is not None and worker.app is not None and worker.state().get("state") not in GONE_STATES


def _ready(observed: Observed, group: str, gen: int) -> bool:
    """A `ready.g<N>` report that counts now: its driver may be up, and it is from the application's current
    submission (readiness.py: one from before a restart is stale)."""
    worker = observed.workers.get(group, {}).get(gen)
    return _up(observed, group, gen) and worker is not None and \
        counts(observed.annotation(group, lease_ready_key(gen)), worker.app)


def _standby_of(unit: HandoffUnit, want: dict[str, FlowGroupConfig], observed: Observed,
                running: dict[str, FlowGroupConfig]) -> int | None:
    """The newest generation already created for this unit that runs what is wanted, if any."""
    floor = max((running[g].worker.generation for g in unit.old), default=0)
    candidates = {n for g in unit.new for n, w in observed.workers.get(g, {}).items()
                  if n > floor and w.config.runs_like(want[g])}
    return max(candidates) if candidates else None


def _keep_old(unit: HandoffUnit, running: dict[str, FlowGroupConfig], observed: Observed, out: Plan) -> None:
    for g in unit.old:
        out.workers.append(running[g])
        out.holders[g] = running[g].worker.generation
        out.running[g] = running[g]


def _advance(unit: HandoffUnit, want: dict[str, FlowGroupConfig], observed: Observed,
             running: dict[str, FlowGroupConfig], upgrade: UpgradeSpec, now_ms: int, next_gen: int,
             standby: int | None, out: Plan, wanted_hash: str) -> None:
    if not unit.new:  # a flow group removed with its mirrors: nothing takes over, it just goes
        return
    new_names = ", ".join(unit.new)
    old_running = [g for g in unit.old if g in observed.workers and running[g].worker.generation in
                   observed.workers[g] and observed.workers[g][running[g].worker.generation].app is not None]
    if standby is None:
        gen = next_gen
        preds = predecessors(unit, running)
        new = [next_generation(want[g], gen, preds) for g in unit.new]
        out.workers += new
        if not old_running:  # nothing copies now (e.g. it was stopped): the new generation starts at once
            for g in (*unit.new, *unit.old):
                out.holders[g] = gen
            out.running.update({c.name: c for c in new})
            return
        _keep_old(unit, running, observed, out)
        for g in unit.new:
            out.holders.setdefault(g, observed.holder(g))
        out.upgrading.append(f"generation {gen} of {new_names} created in standby")
        return
    gen = standby
    preds = predecessors(unit, running)
    # a group of the unit whose standby is not there (yet, or any more) gets it now, with the same generation
    new = [observed.workers[g][gen].config if gen in observed.workers.get(g, {}) else
           next_generation(want[g], gen, preds) for g in unit.new]
    out.workers += new
    moved = all(observed.holder(g) == gen for g in unit.new)
    if moved:
        took = [g for g in unit.new if observed.annotation(g, lease_took_over_key(gen))]
        if len(took) == len(unit.new):  # (recorded by _completed on the next look)
            for g in unit.new:
                out.holders[g] = gen
            for g in unit.old:
                if g in want:
                    out.holders[g] = gen
            out.running.update({c.name: c for c in new})
            return
        moved_at = min(int(observed.annotation(g, ANNOTATION_MOVED_AT) or now_ms) for g in unit.new)
        # (a successor whose ConfigMap went missing is rendered again: nothing known of its application)
        states = {g: w.state() if w.app is not None else None for g in unit.new
                  if g not in took and (w := observed.workers.get(g, {}).get(gen)) is not None}
        silent = [f"{g}: {quiet}" for g in unit.new if g not in took and (quiet := silence(
            observed.leases.get(g), held_since_ms(observed.leases.get(g), observed.annotation(g, ANNOTATION_MOVED_AT)),
            now_ms, observed.renewal_ages_ms.get(g)))]
        why = move_back_why(gen, list(unit.new), successor_failures(states), (now_ms - moved_at) / 1000,
                            upgrade.handoffTimeoutSeconds, took, silent)
        if why is not None:  # the old generation, a hot spare, copies again (handback.py)
            _move_back(unit, gen, new, running, observed, out, why, wanted_hash)
            return
        # handing over: the old generation is a hot spare; its applications stay until the new one took over
        for g in unit.old:
            out.workers.append(running[g])
        for g in (*unit.new, *unit.old):
            out.holders[g] = gen
        out.running.update({g: running[g] for g in unit.old})
        out.upgrading.append(f"handing {', '.join(unit.old) or '-'} over to generation {gen} ({new_names}): "
                             f"{len(took)}/{len(unit.new)} took over")
        return
    ready = [g for g in unit.new if _ready(observed, g, gen)]
    if len(ready) == len(unit.new):  # every new group is warm now: the Leases move
        for g in (*unit.new, *unit.old):
            out.holders[g] = gen
            out.moved.add(g)
        for g in unit.old:
            out.workers.append(running[g])
        out.running.update({g: running[g] for g in unit.old})
        out.upgrading.append(f"Leases of {', '.join(sorted({*unit.new, *unit.old}))} moved to generation {gen}")
        return
    standbys = [w for g in unit.new if (w := observed.workers.get(g, {}).get(gen)) is not None]
    created = [c for w in standbys if (c := w.created_ms()) is not None]
    waited = (now_ms - min(created)) / 1000 if created else 0.0
    errors = [f"{w.config.name}: {e}" for w in standbys if (e := w.error())]
    refused = [w for w in standbys if w.refused()]
    if waited > upgrade.readyTimeoutSeconds or refused:  # a refusal would be the same on every restart
        out.workers = [c for c in out.workers if not (c.name in unit.new and c.worker.generation == gen)]
        why = (f"its job refused to run (exit code {refused[0].exit_code()}, a permanent refusal)" if refused
               else f"was not ready within spec.upgrade.readyTimeoutSeconds ({upgrade.readyTimeoutSeconds} s)")
        out.rollback = {"generation": gen, "flowGroups": list(unit.new), "specHash": wanted_hash,
                        "reason": (f"generation {gen} of {new_names} {why}"
                                   + (f": {'; '.join(errors)}" if errors else "")
                                   + f"; generation {', '.join(str(running[g].worker.generation) for g in unit.old)}"
                                     " keeps copying")}
        out.held_back = True
        _keep_old(unit, running, observed, out)
        for g in unit.new:
            out.holders.setdefault(g, observed.holder(g))
        return
    _keep_old(unit, running, observed, out)
    for g in unit.new:
        out.holders.setdefault(g, observed.holder(g))
    out.upgrading.append(f"generation {gen} of {new_names} in standby: {len(ready)}/{len(unit.new)} ready"
                         + (f" ({'; '.join(errors)})" if errors else ""))


def _move_back(unit: HandoffUnit, gen: int, new: list[FlowGroupConfig], running: dict[str, FlowGroupConfig],
               observed: Observed, out: Plan, why: str, wanted_hash: str) -> None:
    """The Leases back to the generation that handed over (it takes the groups back, fencing what `out.revoked`
    names), the successor removed and not tried again for this spec; the rollback says why."""
    out.workers = [c for c in out.workers if not (c.name in unit.new and c.worker.generation == gen)]
    _keep_old(unit, running, observed, out)
    for g in unit.new:
        out.holders.setdefault(g, None)
    record = revoked_record(gen, new)
    out.revoked.update({g: record for g in (*unit.old, *unit.new)})
    out.moved.update(unit.old)
    back = ", ".join(str(running[g].worker.generation) for g in unit.old)
    out.rollback = {"generation": gen, "flowGroups": list(unit.new), "specHash": wanted_hash,
                    "reason": f"{why}; the Lease moved back, generation {back} copies again", "leaseMovedBack": True}
    out.held_back = True


def _completed(observed: Observed, running: dict[str, FlowGroupConfig]) -> list[dict[str, Any]]:
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
