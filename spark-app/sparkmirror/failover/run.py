"""The failover itself, for the command and for tests: stop, translate, commit, report (see cli.py)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from ..checkpoints import CheckpointEmitter
from ..replication import GroupFilter
from ..resource.flowgroup import FlowGroupConfig, Mirror
from .offsets import commit, last_checkpoints, on_target, share_groups_now, source_error, translate_now
from .report import decide, document, to_commit
from .stop import mirror_lag, mirror_progress, stop, undo, wait_caught_up

log = logging.getLogger("sparkmirror.failover")


class NotCaughtUp(RuntimeError):
    """--wait-caught-up ran out: nothing was changed."""


def failover(configs: list[FlowGroupConfig], mirror: Mirror, select: Callable[[str], object], timeout: float = 30.0,
             wait_seconds: float = 0.0, say: Callable[[str], None] = log.warning,
             leave: Callable[[str, str, int], bool] | None = None, named: Iterable[str] = ()) -> dict:
    """Fail `mirror` (carried by the flow groups `configs`) over to its target; the report document. `leave(group,
    topic, partition)`: positions another step moves (failback under the identity policy), left untouched.
    `named`: groups the selection names one by one (`report.named_groups`); with the source gone, those without
    a checkpoint are reported not moved by name (the others cannot be known without the source)."""
    if wait_seconds:
        lag = wait_caught_up(configs[0], mirror, wait_seconds, timeout)
        if lag:
            raise NotCaughtUp(f"mirror {mirror.name} still has {lag} records to copy after {wait_seconds:.0f} s; "
                              f"nothing was changed (stop the producers on {mirror.source!r} first)")
    stopped = []
    for cfg in configs:
        s = stop(cfg, [mirror.name], timeout)
        log.info("flow group %s failed over (%d ids fenced) in %d ms", s.flow_group, len(s.fenced), s.took_ms)
        stopped.append(s.as_dict())
    unreachable = source_error(configs[0], mirror, min(timeout, 10.0))
    progress = mirror_progress(configs[0], mirror, timeout) if unreachable is None else None  # read once, final
    not_copied = mirror_lag(configs[0], mirror, timeout, progress) if progress is not None else None
    emitter = CheckpointEmitter(configs[0], mirror, timeout)  # its source clients only once used: not when gone
    not_moved: list[str] = []
    unmoved: list[str] = []  # selected groups without a row that could not be moved
    ages: dict[str, int] | None = None  # group -> age of its last checkpoint (ms), when the source is gone
    shares: list = []  # share groups' rows (sharegroups/sync.ShareMove)
    shares_note = ""  # why share groups were not carried, when they were not
    share_configs: dict = {}  # share group -> what carrying its configs did (sharegroups/moves.ConfigCarry)
    try:
        if progress is not None:
            checkpoints, untranslated = translate_now(emitter, select, progress)
            if leave is not None:
                checkpoints = {g: [cp for cp in cps if not leave(g, cp.topic, cp.partition)]
                               for g, cps in checkpoints.items()}
                untranslated = {g: [u for u in us if not leave(g, u.source_topic, u.partition)]
                                for g, us in untranslated.items()}
            if mirror.emitCheckpoints:
                emitter.emit(checkpoints)
        else:
            say(f"{unreachable}: using the last checkpoints on target {mirror.target!r}")
            checkpoints, written = last_checkpoints(configs[0], mirror, select, emitter.topic, timeout)
            now_ms = int(time.time() * 1000)
            ages = {g: max(0, now_ms - ms) for g, ms in written.items()}
            untranslated = {}
            if not checkpoints:
                not_moved.append(f"no selected group has a checkpoint on target {mirror.target!r} (the mirror had not "
                                 "emitted one for them yet): their consumers would start at auto.offset.reset there")
            for g in sorted(set(named) - set(checkpoints)):
                if GroupFilter.of(mirror).matches(g):
                    not_moved.append(f"group {g}: no checkpoint on target {mirror.target!r} (the mirror had not "
                                     "emitted one for it yet): its consumers would start at auto.offset.reset there")
                    unmoved.append(g)
        groups = sorted({*checkpoints, *untranslated})
        members, have = on_target(emitter, groups)
        upstream = {cp.topic: emitter.policy.upstream_topic(cp.topic) or cp.topic
                    for cps in checkpoints.values() for cp in cps}
        rows = [r for g in groups for r in decide(g, checkpoints.get(g, []), have.get(g, {}), members.get(g, 0),
                                                   upstream, untranslated.get(g, []))]
        failed = commit(emitter, to_commit(rows))
        rows = [replace(r, action="failed", detail=failed[r.group]) if r.group in failed and r.action == "committed"
                else r for r in rows]
        if progress is not None:
            shares, shares_note, share_configs = share_groups_now(emitter, select, progress, leave)
        else:
            shares_note = ("the source does not answer, so share groups' start offsets cannot be read: they stay on "
                           f"target {mirror.target!r} where the last checkpoint round set them (syncGroupOffsets)")
    finally:
        emitter.close()
    return document(mirror.name, mirror.source, mirror.target, "source" if unreachable is None else "checkpoints",
                    stopped, rows, not_copied, not_moved, ages, unmoved, shares, shares_note, share_configs)


def undo_all(configs: list[FlowGroupConfig], mirror: Mirror, timeout: float = 30.0) -> dict:
    """Let the mirror's flow groups copy again; the report document."""
    stopped = []
    for cfg in configs:
        s = undo(cfg, timeout)
        stopped.append({"flowGroup": cfg.name, "undone": s is not None})
    return {"mirror": mirror.name, "source": mirror.source, "target": mirror.target, "undo": True,
            "offsetsFrom": "", "stopped": stopped, "groups": [], "ok": True}
