"""Failback: consumers move back to the original cluster after a failover, losing and repeating nothing.

After `failover` of mirror a -> b, consumers read on b: the remote topics (`a.orders`, what the forward mirror
copied) and b's own topics, which producers write to now and a reverse mirror b -> a copies to a (`b.orders`).
Failing back:
1. the reverse mirror is failed over (`run.failover`): it stops at a consistent point and each group's offsets
   on b's own topics are translated onto their copies on a, as any failover does;
2. each group's offsets on the forward mirror's remote topics on b are translated *back* through the forward
   mirror's offset map (target offset -> source offset, `OffsetMap.translate_back`) and committed on the
   original topics on a: what MirrorMaker 2 lacks (KIP-1098's reverse checkpoints);
3. the forward failover is undone: a -> b copies again from where it stopped.
Under the identity policy one topic on b holds both: what the forward mirror copied, then (once it stopped) what
producers wrote on b. A group's position up to the end of the forward copy is step 2's, past it step 1's; each
step leaves the other's positions alone.
Commits follow the failover's rules (`report.decide`): only for groups with no active members on a, never moving
a group backwards.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from ..checkpoints import CheckpointEmitter
from ..sourcecounter import SourceCounter
from ..replication import RecordStamper, policy_for
from ..transforms import compiled
from ..mm2formats import Checkpoint
from ..progress.state import OffsetMap
from ..resource.flowgroup import FlowGroupConfig, Mirror
from .offsets import commit, on_target
from .report import PartitionMove, Untranslated, can_move, decide, to_commit
from .run import failover, undo_all
from .stop import mirror_progress

log = logging.getLogger("sparkmirror.failover")


def forward_positions(emitter: CheckpointEmitter, forward: dict[tuple[str, int], OffsetMap],
                      select: Callable[[str], object], shared: bool) -> dict[tuple[str, str, int], tuple[int, str]]:
    """(group, topic, partition) -> (offset on b, metadata) of the selected groups' positions that step 2 moves:
    on the forward mirror's remote topics; when `shared` (identity policy: b's own records follow the copied ones
    in the same topic), only those up to the end of the forward copy. `emitter` is the reverse mirror's (source
    b, target a); `forward` maps (remote topic on b, partition) -> the forward mirror's OffsetMap."""
    out: dict[tuple[str, str, int], tuple[int, str]] = {}
    for group in emitter.source_groups():
        if not select(group):
            continue
        for (topic, part), (offset, metadata) in emitter.committed(emitter.source_admin, group).items():
            m = forward.get((topic, part))
            if m is None or offset < 0:
                continue  # not a remote topic of the forward mirror (b's own topics are the reverse failover's)
            end = m.target_end()
            if shared and end is not None and offset > end:
                continue  # it read records written on b after the failover: the reverse failover moves it
            out[(group, topic, part)] = (offset, metadata)
    return out


def translate_back(positions: dict[tuple[str, str, int], tuple[int, str]], forward: dict[tuple[str, int], OffsetMap],
                   counter: SourceCounter) -> tuple[dict[str, list[Checkpoint]], dict[str, list[Untranslated]]]:
    """group -> positions on the original topics (as checkpoints: upstream = offset on b, downstream = on a),
    from `forward_positions`; `counter` counts on a."""
    back: dict[str, list[Checkpoint]] = {}
    untranslated: dict[str, list[Untranslated]] = {}
    for (group, topic, part), (offset, metadata) in sorted(positions.items()):
        m = forward[(topic, part)]
        source = m.translate_back(offset, counter.nth)
        if source is None:
            untranslated.setdefault(group, []).append(Untranslated(
                group, topic, part, offset, "the offset is older than the forward mirror's history held"))
            continue
        back.setdefault(group, []).append(Checkpoint(group, m.source_topic, part, offset, source, metadata))
    return back, untranslated


def failback(forward_configs: list[FlowGroupConfig], forward: Mirror, reverse_configs: list[FlowGroupConfig],
             reverse: Mirror, select: Callable[[str], object], timeout: float = 30.0, wait_seconds: float = 0.0,
             say: Callable[[str], None] = log.warning) -> dict:
    """Move the groups `select` names from forward.target back to forward.source (see the module docstring);
    the report: the reverse failover's document with the groups moved back on the forward topics added."""
    if reverse.source != forward.target or reverse.target != forward.source:
        raise ValueError(f"mirror {reverse.name} ({reverse.source} -> {reverse.target}) is not the reverse of "
                         f"{forward.name} ({forward.source} -> {forward.target})")
    state = mirror_progress(forward_configs[0], forward, timeout)  # stopped by the failover: final
    maps = {(m.target_topic, p): m for (c, _t, p), m in state.maps.items()
            if c == forward.source and (c, _t, p) in state.latest}
    policy = policy_for(forward)
    shared = "identity" in (forward.replicationPolicy, reverse.replicationPolicy)
    emitter = CheckpointEmitter(reverse_configs[0], reverse, timeout)  # reads b's groups before and after
    counter = SourceCounter(forward_configs[0].cluster(forward.source).client_config(),
                            RecordStamper.of(policy, forward.source, forward.target), timeout,
                            transforms=compiled(forward))
    try:
        positions = forward_positions(emitter, maps, select, shared)
        doc = failover(reverse_configs, reverse, select, timeout, wait_seconds, say,
                       leave=lambda g, t, p: (g, t, p) in positions)
        back, untranslated = translate_back(positions, maps, counter)
        groups = sorted({*back, *untranslated})
        members, have = on_target(emitter, groups)
        upstream = {cp.topic: cp.topic for cps in back.values() for cp in cps}
        rows: list[PartitionMove] = []
        for g in groups:
            for r in decide(g, back.get(g, []), have.get(g, {}), members.get(g, 0), upstream,
                            untranslated.get(g, [])):
                rows.append(r)
        failed = commit(emitter, to_commit(rows))
    finally:
        counter.close()
        emitter.close()
    remote = {(m.source_topic, p): t for (t, p), m in maps.items()}
    rows = [PartitionMove(r.group, remote.get((r.target_topic, r.partition), r.source_topic), r.target_topic,
                          r.partition, r.source_offset, r.target_offset,
                          "failed" if r.group in failed and r.action == "committed" else r.action,
                          failed.get(r.group, r.detail) if r.action == "committed" else r.detail) for r in rows]
    undone = undo_all(forward_configs, forward, timeout)
    by_group = {g["group"]: g["partitions"] for g in doc["groups"]}
    for r in rows:
        by_group.setdefault(r.group, []).append(r.as_dict())
    doc["groups"] = [{"group": g, "partitions": p} for g, p in sorted(by_group.items())]
    doc["ok"] = doc["ok"] and can_move(rows)
    doc["failback"] = {"forwardMirror": forward.name, "undone": undone["stopped"]}
    return doc
