"""Which flow groups hand over to a new worker generation when a resource changes, and what the new one fences.

Pure: the operator (one SparkApplication per generation, the Lease says who copies) and `sparkmirror run`
(queries in one Spark session) plan handoffs the same way. A handoff *unit* is what must change hands at the
same moment: a changed flow group together with every running or desired group sharing a mirror with it, so a
flow-group split or merge hands all of its partitions over at once (the new groups' generation marks supersede
every old group of the unit; an old group left running beside them would copy the same partitions).
"""
from __future__ import annotations

from dataclasses import dataclass

from .flowgroup import FlowGroupConfig, Predecessor
from .names import transactional_ids


@dataclass(frozen=True)
class HandoffUnit:
    """Flow groups that stop (`old`, running now) and start (`new`, desired) together."""

    old: tuple[str, ...]
    new: tuple[str, ...]


def handoff_units(running: dict[str, FlowGroupConfig], desired: dict[str, FlowGroupConfig]) -> list[HandoffUnit]:
    """The units that need a new worker generation: a desired group that runs nowhere or runs otherwise
    (`runs_like`), or a running group no longer desired, joined with every group sharing a mirror with it."""
    nodes = [("old", g) for g in sorted(running)] + [("new", g) for g in sorted(desired)]
    mirrors = {("old", g): {m.name for m in c.mirrors} for g, c in running.items()}
    mirrors.update({("new", g): {m.name for m in c.mirrors} for g, c in desired.items()})
    parent = {n: n for n in nodes}

    def find(n: tuple[str, str]) -> tuple[str, str]:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if mirrors[a] & mirrors[b] or (a[1] == b[1] and a[0] != b[0]):
                parent[find(a)] = find(b)
    changed = {("new", g) for g, c in desired.items() if g not in running or not c.runs_like(running[g])}
    changed |= {("old", g) for g in running if g not in desired}
    units: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for n in nodes:
        units.setdefault(find(n), []).append(n)
    out = []
    for members in units.values():
        if changed & set(members):
            out.append(HandoffUnit(tuple(g for side, g in members if side == "old"),
                                   tuple(g for side, g in members if side == "new")))
    return sorted(out, key=lambda u: (u.new, u.old))


def predecessors(unit: HandoffUnit, running: dict[str, FlowGroupConfig]) -> list[Predecessor]:
    """What a new generation of the unit fences: every running group of the unit with all its lanes' ids."""
    return [Predecessor(flowGroup=g, generation=running[g].worker.generation,
                        transactionalIds=transactional_ids(running[g].resource, g, running[g].lane_routes()))
            for g in unit.old]


def next_generation(config: FlowGroupConfig, generation: int, preds: list[Predecessor]) -> FlowGroupConfig:
    """`config` as worker generation `generation`, taking over from `preds`."""
    worker = config.worker.model_copy(update={"generation": generation, "predecessors": preds})
    return config.model_copy(update={"worker": worker})
