"""The failover itself, for the command and for tests: stop, translate, commit, report (see cli.py)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ..checkpoints import CheckpointEmitter
from ..resource.flowgroup import FlowGroupConfig, Mirror
from .offsets import commit, last_checkpoints, on_target, source_error, translate_now
from .report import decide, document, to_commit
from .stop import mirror_lag, mirror_progress, stop, undo, wait_caught_up

log = logging.getLogger("sparkmirror.failover")


class NotCaughtUp(RuntimeError):
    """--wait-caught-up ran out: nothing was changed."""


def failover(configs: list[FlowGroupConfig], mirror: Mirror, select: Callable[[str], object], timeout: float = 30.0,
             wait_seconds: float = 0.0, say: Callable[[str], None] = log.warning,
             leave: Callable[[str, str, int], bool] | None = None) -> dict:
    """Fail `mirror` (carried by the flow groups `configs`) over to its target; the report document. `leave(group,
    topic, partition)`: positions another step moves (failback under the identity policy), left untouched."""
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
    emitter = CheckpointEmitter(configs[0], mirror, timeout)
    not_moved: list[str] = []
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
            checkpoints = last_checkpoints(configs[0], mirror, select, emitter.topic, timeout)
            untranslated = {}
            if not checkpoints:
                not_moved.append(f"no selected group has a checkpoint on target {mirror.target!r} (the mirror had not "
                                 "emitted one for them yet): their consumers would start at auto.offset.reset there")
        groups = sorted({*checkpoints, *untranslated})
        members, have = on_target(emitter, groups)
        upstream = {cp.topic: emitter.policy.upstream_topic(cp.topic) or cp.topic
                    for cps in checkpoints.values() for cp in cps}
        rows = [r for g in groups for r in decide(g, checkpoints.get(g, []), have.get(g, {}), members.get(g, 0),
                                                   upstream, untranslated.get(g, []))]
        failed = commit(emitter, to_commit(rows))
        rows = [replace(r, action="failed", detail=failed[r.group]) if r.group in failed and r.action == "committed"
                else r for r in rows]
    finally:
        emitter.close()
    return document(mirror.name, mirror.source, mirror.target, "source" if unreachable is None else "checkpoints",
                    stopped, rows, not_copied, not_moved)


def undo_all(configs: list[FlowGroupConfig], mirror: Mirror, timeout: float = 30.0) -> dict:
    """Let the mirror's flow groups copy again; the report document."""
    stopped = []
    for cfg in configs:
        s = undo(cfg, timeout)
        stopped.append({"flowGroup": cfg.name, "undone": s is not None})
    return {"mirror": mirror.name, "source": mirror.source, "target": mirror.target, "undo": True,
            "offsetsFrom": "", "stopped": stopped, "groups": [], "ok": True}
