"""Taking a flow group back: the generation that handed it over resumes, because the later one failed or timed out
before its first commit and the operator moved the Lease back (`names.LEASE_REVOKED` says what it revoked).

The handing-over generation stayed a hot spare (its queries up, planning nothing, its last epoch committed), so
taking back is a takeover's two phases with the later generation's marks *revoked* instead of superseded:

1. mark "go": false, revoking up to the later generation, for this group and every group the later generation
   ran: the take-back outranks their marks, also one their driver writes late (`progress.state.mark_rank`), so a
   lane of theirs that starts after it reads it and stops before copying (`lane.check_not_superseded`,
   `start.resume_positions`);
2. fence: `init_transactions` on every id the later generation's lanes held (recorded by the operator, or else
   read from the marks) and on this generation's own: a lane of the later generation copying now cannot commit
   any more, and this generation's kept clients, whose positions the later one may have moved past, are fenced
   too and start afresh from the progress topic;
3. mark "go": true; then the driver plans epochs again, whose lanes read where the flow group stands only after
   their own `init_transactions`.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from ..progress.state import ProgressState
from ..resource.flowgroup import FlowGroupConfig
from ..resource.names import transactional_ids
from .takeover import Takeover, fence_all, marks_by_target, write_mark

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Revoked:
    """What the operator revoked when it moved a Lease back (`names.LEASE_REVOKED`)."""

    generation: int
    flow_groups: tuple[str, ...] = ()
    transactional_ids: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "Revoked | None":
        """None for no record or one this version cannot read (the take-back then reads the marks)."""
        try:
            v = json.loads(text or "null")
            if not isinstance(v, dict):
                return None
            return cls(int(v["generation"]), tuple(str(g) for g in v.get("flowGroups") or []),
                       {str(a): [str(t) for t in ids] for a, ids in (v.get("transactionalIds") or {}).items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def take_back(config: FlowGroupConfig, successor: int, revoked: list[Revoked], timeout: float = 60.0) -> Takeover:
    """Revoke, fence, go (see the module docstring): generation `successor` (and any later one `revoked` names)
    never copies again, and this config's generation copies once the driver plans its next epoch."""
    t0 = time.monotonic()
    at_ms = int(time.time() * 1000)
    of = (config.resource, config.resourceUid, config.name)
    mine = [r for r in revoked if r.generation >= successor]
    upto = max([successor, *(r.generation for r in mine)])
    groups = sorted({config.name, *(g for r in mine for g in r.flow_groups)})
    known = {c.alias for c in config.clusters}
    ids = {(alias, tid) for alias, tids in transactional_ids(config.resource, config.name,
                                                             config.lane_routes()).items() for tid in tids}
    ids |= {(alias, tid) for r in mine for alias, tids in r.transactional_ids.items() if alias in known
            for tid in tids}
    if not mine:  # no record from the operator: the ids the marks hold (what the later generation wrote)
        log.warning("flow group %s: the Lease names generation %d again without saying what it revoked; fencing "
                    "the lanes its marks name", config.name, config.worker.generation)
        for alias, state in marks_by_target(config, timeout).items():
            upto = max(upto, state.ceiling(*of))
            ids |= {(a, tid) for a, tids in state.generation_ids.get(of, {}).items() if a == alias for tid in tids}
    targets = sorted({m.target for m in config.mirrors})
    for alias in targets:
        write_mark(config, alias, groups, at_ms, timeout, go=False, revoked=upto)
    t_mark = time.monotonic()
    fence_all(config, ids, timeout)
    t_fenced = time.monotonic()
    for alias in targets:
        write_mark(config, alias, [config.name], at_ms, timeout, go=True, revoked=upto)
    took = int((time.monotonic() - t0) * 1000)
    log.info("flow group %s: generation %d took %s back from generation %d in %d ms (revoked in %d ms, %d "
             "transactional ids fenced in %d ms)", config.name, config.worker.generation, groups, upto, took,
             (t_mark - t0) * 1000, len(ids), (t_fenced - t_mark) * 1000)
    return Takeover(config.worker.generation, groups, sorted(t for _a, t in ids), at_ms, took)


def taken_back_before(config: FlowGroupConfig, states: dict[str, ProgressState]) -> int:
    """The highest generation this config's generation already took the flow group back from, on every target
    (its go mark written, so the fencing was done; 0: none): a driver restarted after a take-back need not do it
    again."""
    of = (config.resource, config.resourceUid, config.name)
    gen = config.worker.generation
    done = [s.ceiling(*of) if s.generation(*of) == gen and s.generation_go.get(of) else 0 for s in states.values()]
    return min(done, default=0) if all(d > gen for d in done) else 0
