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
Commits follow the failover's rules (`report.decide`): only for groups with no active members on a, never moving
a group backwards.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from ..checkpoints import CheckpointEmitter, SourceCounter
from ..replication import RecordStamper, policy_for
from ..mm2formats import Checkpoint
from ..resource.flowgroup import FlowGroupConfig, Mirror
from .offsets import commit, on_target
from .report import PartitionMove, Untranslated, can_move, decide, to_commit
from .run import failover, undo_all
from .stop import mirror_progress

log = logging.getLogger("sparkmirror.failover")


def translate_back(emitter: CheckpointEmitter, forward: dict[tuple[str, int], object], select: Callable[[str], object],
                   counter: SourceCounter) -> tuple[dict[str, list[Checkpoint]], dict[str, list[Untranslated]]]:
    """group -> positions on the original topics (as checkpoints: upstream = offset on b, downstream = on a),
    from the groups' offsets on b's remote topics. `emitter` is the reverse mirror's (source b, target a);
    `forward` maps (remote topic on b, partition) -> the forward mirror's OffsetMap; `counter` counts on a."""
    back: dict[str, list[Checkpoint]] = {}
    untranslated: dict[str, list[Untranslated]] = {}
    for group in emitter.source_groups():
        if not select(group):
            continue
        for (topic, part), (offset, metadata) in sorted(emitter.committed(emitter.source_admin, group).items()):
            m = forward.get((topic, part))
            if m is None or offset < 0:
                continue  # not a remote topic of the forward mirror (b's own topics are the reverse failover's)
            source = m.translate_back(offset, counter.nth)  # type: ignore[attr-defined]
            if source is None:
                untranslated.setdefault(group, []).append(Untranslated(
                    group, topic, part, offset, "the offset is older than the forward mirror's history held"))
                continue
            back.setdefault(group, []).append(Checkpoint(group, m.source_topic, part, offset, source,  # type: ignore[attr-defined]
                                                         metadata))
    return back, untranslated


def identity_refused(forward, reverse) -> str | None:
    """Failback is built and proven for the default policy (remote topics `<alias>.<topic>`). Under the identity
    policy the two directions share topic names, and a group's offsets would need both maps at once: refused
    rather than risk a skipped record."""
    if "identity" in (forward.replicationPolicy, reverse.replicationPolicy):
        return (f"--mirror: {forward.name} or its reverse {reverse.name} uses the identity replication policy; "
                "failback supports the default policy only (move groups back with `failover` of the reverse "
                "mirror and reset the rest by hand)")
    return None


def failback(forward_configs: list[FlowGroupConfig], forward: Mirror, reverse_configs: list[FlowGroupConfig],
             reverse: Mirror, select: Callable[[str], object], timeout: float = 30.0, wait_seconds: float = 0.0,
             say: Callable[[str], None] = log.warning) -> dict:
    """Move the groups `select` names from forward.target back to forward.source (see the module docstring);
    the report: the reverse failover's document with the groups moved back on the forward topics added."""
    if reverse.source != forward.target or reverse.target != forward.source:
        raise ValueError(f"mirror {reverse.name} ({reverse.source} -> {reverse.target}) is not the reverse of "
                         f"{forward.name} ({forward.source} -> {forward.target})")
    refused = identity_refused(forward, reverse)
    if refused:
        raise ValueError(refused)
    doc = failover(reverse_configs, reverse, select, timeout, wait_seconds, say)
    state = mirror_progress(forward_configs[0], forward, timeout)
    maps = {(m.target_topic, p): m for (c, _t, p), m in state.maps.items()
            if c == forward.source and (c, _t, p) in state.latest}
    emitter = CheckpointEmitter(reverse_configs[0], reverse, timeout)
    policy = policy_for(forward)
    counter = SourceCounter(forward_configs[0].cluster(forward.source).client_config(),
                            RecordStamper.of(policy, forward.source, forward.target), timeout)
    try:
        back, untranslated = translate_back(emitter, maps, select, counter)
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
