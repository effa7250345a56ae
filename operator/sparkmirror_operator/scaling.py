"""spec.autoscaling wired to the operator: the lag and rate the status refresh reads become samples per flow
group, `autoscale.decide` judges them, and the scale it settles on is handed to `render` (lanes per mirror,
executors), so a change reaches the job as a new worker generation taken over by handoff, never a restart.

What must survive an operator restart lives on the status (`status.autoscaling`: the scale, the last change's
time, the measured per-lane capacity, the blind halving made, the within-target streak); the samples are this
operator's memory only. A restarted operator goes on counting the scale-down delay from `withinTargetSince` once
its first sample is within target too and the streak was last seen (`withinTargetSeen`) no more than a few
refreshes before it (`autoscale.away_s`: a quick restart is not an absence, a longer one starts the delay over,
as time nobody looked is not time within target), and until its own samples cover the delay it goes down no
further than `withinTargetLanes`, which errs towards keeping lanes.
"""
from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sparkmirror.resource.autoscaling import AutoscalingSpec, AutoscalingStatus
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.model import KafkaMirrorMaker2
from sparkmirror.autoscale import REFRESH_S, Decision, Sample, Streak, decide
from .lag import GroupLag

HISTORY_MARGIN_S = 120.0  # samples kept beyond the scale-down delay (the incoming rate's window fits in it)

Scale = dict[str, tuple[int, int]]  # flow group -> (lanes per mirror, executors)


@dataclass
class Step:
    """One round of decisions: the scale to render, status.autoscaling, and the Events of the changes."""

    scale: Scale = field(default_factory=dict)
    status: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def spec_of(body: dict[str, Any]) -> AutoscalingSpec | None:
    """spec.autoscaling when enabled; None when absent, off or invalid (the plan names what is wrong)."""
    raw = (body.get("spec") or {}).get("autoscaling")
    if not isinstance(raw, dict):
        return None
    try:
        spec = AutoscalingSpec.model_validate(raw)
    except ValidationError:
        return None
    return spec if spec.enabled else None


def recorded(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list((body.get("status") or {}).get("autoscaling") or [])


def kept(body: dict[str, Any]) -> Step:
    """The scale status.autoscaling records, unchanged: what a reconcile that does not decide renders."""
    if spec_of(body) is None:
        return Step()
    entries = recorded(body)
    return Step(scale={e["flowGroup"]: (int(e["lanes"]), int(e["executors"])) for e in entries
                       if "flowGroup" in e and "lanes" in e and "executors" in e}, status=entries)


def _spec_scale(kmm2: KafkaMirrorMaker2, cfg: FlowGroupConfig) -> tuple[int, int, int]:
    """(lanes per mirror, executors, cores per executor) the spec gives a flow group."""
    group = next((g for g in kmm2.spec.flowGroups or [] if g.name == cfg.name), None)
    executor = group.executor if group is not None and group.executor is not None else kmm2.spec.spark.executor
    lanes = max((cfg.lanes_of(m) for m in cfg.mirrors), default=cfg.lanes)
    return lanes, executor.instances, executor.cores


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Autoscaler:
    """The samples of every flow group this operator watches, and the decisions made from them."""

    def __init__(self, clock: Callable[[], float] | None = None, refresh_s: float = REFRESH_S) -> None:
        import time

        self.clock = clock or time.time
        self.refresh_s = refresh_s  # how often the status refresh samples: the away rule's unit
        self._history: dict[tuple[str, str], list[Sample]] = {}
        self._streaks: dict[tuple[str, str], Streak | None] = {}  # the last decision's, to its last sample
        self._lock = threading.Lock()

    def step(self, body: dict[str, Any], kmm2: KafkaMirrorMaker2, groups: list[FlowGroupConfig],
             lags: dict[str, GroupLag], busy: str | None) -> Step:
        """Record this refresh's figures and decide for every flow group (the caller renders `scale`)."""
        spec = spec_of(body)
        if spec is None:
            return Step()
        meta = body["metadata"]
        before = {e.get("flowGroup"): e for e in recorded(body)}
        now = self.clock()
        out = Step()
        for cfg in groups:
            lanes, executors, cores = _spec_scale(kmm2, cfg)
            old = before.get(cfg.name) or {}
            lanes, executors = int(old.get("lanes", lanes)), int(old.get("executors", executors))
            lag = lags.get(cfg.name) or GroupLag()
            sample = Sample(now, lag.lag, lag.records_per_second, lanes, executors)
            key = (f"{meta['namespace']}/{meta['name']}/{meta.get('uid', '')}", cfg.name)  # not a namesake's
            with self._lock:
                history = [s for s in self._history.get(key, [])
                           if s.time_s >= now - spec.scaleDownDelaySeconds - HISTORY_MARGIN_S] + [sample]
                self._history[key] = history
                restored = self._streaks[key] if key in self._streaks else _streak(old)
            last_change = _seconds(old.get("lastChangeTime"))
            d = decide(history, spec, last_change_s=last_change, mirrors=len(cfg.mirrors),
                       cores_per_executor=cores, busy=busy,
                       known_capacity=(old.get("figures") or {}).get("perLanePerSecond"), restored=restored,
                       probed_s=_seconds_or_none(old.get("capacityProbeTime")), refresh_s=self.refresh_s)
            figures = dict(d.figures)
            if "perLanePerSecond" not in figures and (old.get("figures") or {}).get("perLanePerSecond"):
                figures["perLanePerSecond"] = old["figures"]["perLanePerSecond"]
            changed = d.changes and (d.lanes, d.executors) != (lanes, executors)
            action = d.action if changed else "hold"
            stands = not changed and (old.get("decision"), old.get("reason")) == (action, d.reason)
            entry = AutoscalingStatus(flowGroup=cfg.name, lanes=d.lanes if changed else lanes,
                                      executors=d.executors if changed else executors,
                                      decision=action, reason=d.reason, figures=figures,
                                      time=old["time"] if stands and old.get("time") else _rfc3339(now),
                                      lastChangeTime=_rfc3339(now) if changed else old.get("lastChangeTime"),
                                      withinTargetSince=_rfc3339(d.streak.since_s) if d.streak else None,
                                      withinTargetLanes=d.streak.want if d.streak else None,
                                      withinTargetSeen=_seen(d, old),
                                      capacityProbeTime=_rfc3339(d.probed_s) if d.probed_s is not None else None)
            with self._lock:
                self._streaks[key] = d.streak
            out.status.append(entry.as_status())
            out.scale[cfg.name] = (entry.lanes, entry.executors)
            if changed:
                out.events.append(("Normal", "ScaledUp" if d.action == "up" else "ScaledDown",
                                   _event_message(cfg.name, lanes, executors, d)))
        return out


def _streak(entry: dict[str, Any]) -> Streak | None:
    """The within-target streak the last decision recorded (None when it recorded none or it cannot be read; its
    last sample None when not recorded, as an older operator did not)."""
    try:
        since = _seconds(entry.get("withinTargetSince"))
        want = entry.get("withinTargetLanes")
        return Streak(since, int(want), _seconds_or_none(entry.get("withinTargetSeen"))) \
            if since is not None and want is not None else None
    except (TypeError, ValueError):
        return None


def _seen(d: Decision, old: dict[str, Any]) -> str | None:
    """withinTargetSeen: the streak's last sample; while a settled hold goes on with the streak recorded, the one
    recorded stands (this operator judges from its memory; one started again finds it old and starts over,
    which no settled hold minds)."""
    if d.streak is None or d.streak.seen_s is None:
        return None
    if d.settled and old.get("withinTargetSeen") and old.get("withinTargetSince") == _rfc3339(d.streak.since_s):
        return old["withinTargetSeen"]
    return _rfc3339(d.streak.seen_s)


def _seconds_or_none(text: Any) -> float | None:
    """A recorded time, None when absent or unreadable (edited by hand): the decision then goes without it."""
    try:
        return _seconds(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _event_message(group: str, lanes: int, executors: int, d: Decision) -> str:
    figures = ", ".join(f"{k} {v:g}" for k, v in sorted(d.figures.items()))
    return (f"flow group {group}: {lanes} -> {d.lanes} lanes per mirror, {executors} -> {d.executors} executors, "
            f"through a new worker generation: {d.reason}" + (f" ({figures})" if figures else ""))

