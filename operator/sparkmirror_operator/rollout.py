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

What the planner is made of: observed.py (what it reads), rolloutplan.py (what it decides), takeovers.py (which
generation copies), handback.py (moving a Lease back), exitcontract.py and holders.py (after-steps on the
generations that copy).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.model import UpgradeSpec
from sparkmirror.resource.names import LEASE_REVOKED, lease_ready_key, lease_took_over_key
from sparkmirror.resource.rollout import HandoffUnit, handoff_units, next_generation, predecessors
from .exitcontract import exit_contract
from .handback import move_back_why, revoked_generation, revoked_record, successor_failures
from .holders import silent_holders
from .observed import ANNOTATION_MOVED_AT, Observed
from .renewal import held_since_ms, silence
from .restarts import restart_of, restart_request, restart_token
from .rolloutplan import Plan
from .takeovers import completed_handoffs, copying_generations, ready_now


def _finish(out: Plan, observed: Observed, now_ms: int = 0) -> Plan:
    """The after-steps (exitcontract.py, holders.py), the high-water mark, and the drivers' reports of generations this
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
            k == lease_ready_key(gen) and observed.holder(group) != gen and not ready_now(observed, group, gen)))
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
    running = copying_generations(observed)
    named, token = restart_request(restart, [c.name for c in desired])
    # a group the annotation does not name keeps the token it runs with: naming another one never rolls it
    want = {c.name: restart_of(c, token if c.name in named else restart_token(running.get(c.name)))
            for c in desired}
    out.handoffs = completed_handoffs(observed, running)
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
    ready = [g for g in unit.new if ready_now(observed, g, gen)]
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
