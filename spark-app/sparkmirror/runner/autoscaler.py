"""`sparkmirror run` under `spec.autoscaling`: the operator's rule (`sparkmirror.autoscale.decide`), applied to the
lag and rate this driver's own monitors measure, and a change made as a new worker generation in this process
(`Driver.handoff`), the path a changed resource file takes, so copying never stops.

Locally the executors are the master's task threads (`local.default_master`), sized for `maxLanes` at start: only
the lanes change. What the operator keeps on the status (the last change, the measured per-lane capacity, the
blind halving made, the within-target streak) lives here for the life of the run; a look that comes late (the
driver busy) is a gap in the samples like the operator's, judged against `interval` (`autoscale.away_s`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..autoscale import Decision, Sample, Streak, decide, executors_for
from ..resource.autoscaling import AutoscalingSpec
from ..resource.flowgroup import FlowGroupConfig

log = logging.getLogger(__name__)
HISTORY_MARGIN_S = 120.0  # samples kept beyond the scale-down delay (the incoming rate's window fits in it)
LOCAL_CORES = 1024  # executors are not scaled locally: every lane fits the one "executor"


@dataclass
class _Group:
    history: list[Sample] = field(default_factory=list)
    last_change_s: float | None = None
    capacity: float | None = None
    streak: Streak | None = None
    probed_s: float | None = None
    last: Decision | None = None


def scaled(cfg: FlowGroupConfig, lanes: int) -> FlowGroupConfig:
    """Every mirror of the group with `lanes` (a mirror's own `lanes` would win over the group's)."""
    return cfg.model_copy(update={"lanes": lanes, "mirrors": [m.model_copy(update={"lanes": lanes})
                                                              for m in cfg.mirrors]})


def lanes_of(cfg: FlowGroupConfig) -> int:
    return max((cfg.lanes_of(m) for m in cfg.mirrors), default=cfg.lanes)


class LocalAutoscaler:
    """Decides every `interval` seconds for each flow group with an `AutoscalingSpec` (by flow-group name)."""

    def __init__(self, specs: dict[str, AutoscalingSpec], interval: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.specs, self.interval, self.clock = specs, interval, clock
        self._groups: dict[str, _Group] = {}
        self._next = 0.0

    def tick(self, run) -> list[str]:
        """One look at `run` (a `LocalRun`): the changes made and their handoffs, in words (none between
        intervals)."""
        now = self.clock()
        if now < self._next or not self.specs:
            return []
        self._next = now + self.interval
        configs = list(run.configs)
        snapshots = {cfg.name: svc.snapshot() for cfg, svc in zip(configs, run.services)}
        changed: dict[str, FlowGroupConfig] = {}
        said = []
        for cfg in configs:
            spec = self.specs.get(cfg.name)
            if spec is None:
                continue
            g = self._groups.setdefault(cfg.name, _Group())
            snap = snapshots.get(cfg.name) or {}
            lags = [(snap.get(m.name) or {}).get("lag") for m in cfg.mirrors]
            rates = [(snap.get(m.name) or {}).get("records_per_s") for m in cfg.mirrors]
            lag = None if any(x is None for x in lags) else int(sum(lags))  # type: ignore[arg-type]
            rate = None if any(x is None for x in rates) else float(sum(rates))  # type: ignore[arg-type]
            lanes = lanes_of(cfg)
            g.history = [s for s in g.history if s.time_s >= now - spec.scaleDownDelaySeconds - HISTORY_MARGIN_S]
            g.history.append(Sample(now, lag, rate, lanes, executors_for(lanes, len(cfg.mirrors), LOCAL_CORES, spec)))
            d = decide(g.history, spec, last_change_s=g.last_change_s, mirrors=len(cfg.mirrors),
                       cores_per_executor=LOCAL_CORES, known_capacity=g.capacity, restored=g.streak,
                       probed_s=g.probed_s, refresh_s=self.interval)
            g.capacity, g.streak, g.probed_s, g.last = (d.figures.get("perLanePerSecond", g.capacity), d.streak,
                                                        d.probed_s, d)
            if d.changes and d.lanes != lanes:
                changed[cfg.name] = scaled(cfg, d.lanes)
                g.last_change_s = now
                figures = ", ".join(f"{k} {v:g}" for k, v in sorted(d.figures.items()))
                said.append(f"flow group {cfg.name}: {lanes} -> {d.lanes} lanes per mirror: {d.reason}"
                            + (f" ({figures})" if figures else ""))
        if changed:
            for record in run.handoff([changed.get(c.name, c) for c in configs]):
                said.append(f"handed {', '.join(record['from']) or '-'} over to {', '.join(record['to']) or '-'} "
                            f"(worker generation {record['generation']}): taken over in {record['tookOverMs']} ms")
        return said

    def decision(self, group: str) -> Decision | None:
        """The last decision about `group`."""
        g = self._groups.get(group)
        return g.last if g is not None else None
