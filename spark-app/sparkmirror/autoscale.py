"""Whether a flow group scales up, down or holds, from the lag and rate the operator reads for its status. Pure.

The step rule: a lane's capacity is what one lane copied while there was a backlog (a lane with nothing to read
shows only the incoming rate); the group needs the incoming rate plus the backlog spread over the lag target,
so lanes = ceil(needed / capacity). Up at once (after the cooldown); down only when every sample of the last
`scaleDownDelaySeconds` said fewer lanes would do, to the most any of them wanted, so a dip does not flap the
lanes and the next burst does not find too few. Every change is followed by `cooldownSeconds` of holding: the
handoff must finish and the new generation's rate show before it is judged.

Capacity never measured (no lane has copied with a backlog behind it), a scale-down cannot size itself: it
halves the lanes, once. That halving is a probe: its time is kept (`probed_s`, on the status) and further
scale-down waits for a measured capacity, which the next backlog gives; halving again blind would overshoot a
load that needs just under half, the backlog then forms and the lanes climb back (a flap and two handoffs).

What the scale-down needs beyond the samples at hand is a `Streak` (since when the lag has been within target,
the most lanes the delay's samples wanted, when it was last seen): the caller keeps it on the status and hands
it back, so an operator started again goes on counting the delay instead of starting it over. Only time seen
counts: a gap with no samples longer than `away_s(refresh_s)` (AWAY_REFRESHES refreshes, at least AWAY_MIN_S;
an operator restarted, or lag not read) breaks the streak, whether between two samples or between the restored
streak's last sample and the first one after it, so time away never counts as within target. Reasons are worded
without running figures (the cooldown says its length, not what is left), so a decision that stands reads the
same every refresh.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkmirror.resource.autoscaling import AutoscalingSpec

INCOMING_WINDOW_S = 90.0  # the incoming rate: copied + the lag's growth over this window
MIN_GROWTH_SPAN_S = 30.0  # lanes commit in bursts: the lag's growth over a shorter span is mostly noise
HEADROOM = 1.25  # scaling down keeps a quarter more capacity than the incoming rate needs
REFRESH_S = 30.0  # the operator's default status refresh: how often a sample comes
AWAY_REFRESHES = 3  # a gap of more refreshes than this without a sample is time away, not within target ...
AWAY_MIN_S = 30.0  # ... and at least this long: a quick restart (pod start, first refresh) is no absence


def away_s(refresh_s: float) -> float:
    """The longest gap without a sample that still counts as seen within target."""
    return max(AWAY_REFRESHES * refresh_s, AWAY_MIN_S)


@dataclass(frozen=True)
class Sample:
    """One status refresh of a flow group."""

    time_s: float
    lag: int | None  # records behind
    rate: float | None  # records/s committed
    lanes: int  # lanes per mirror running when measured
    executors: int


@dataclass(frozen=True)
class Streak:
    """The lag within target since `since_s` without a break; `want`: the most lanes per mirror a sample of the
    last scale-down delay wanted (what a scale-down goes to); `seen_s`: its last sample (None: unknown, so a
    restored streak does not reach over the gap before the first sample)."""

    since_s: float
    want: int
    seen_s: float | None = None


@dataclass(frozen=True)
class Decision:
    action: Literal["up", "down", "hold"]
    lanes: int
    executors: int
    reason: str
    figures: dict[str, float] = field(default_factory=dict)
    streak: Streak | None = None  # None: the last sample is not within target (or has no figures)
    probed_s: float | None = None  # when lanes were halved with no capacity measured (None once one is)
    settled: bool = False  # a hold no streak can end (the fewest lanes, the probe made): its last sample need
    # not be recorded refresh after refresh (a status that stands is not written again)

    @property
    def changes(self) -> bool:
        return self.action != "hold"


def executors_for(lanes: int, mirrors: int, cores_per_executor: int, spec: AutoscalingSpec) -> int:
    """One lane a core: enough executors for every lane of the group, within the bounds."""
    need = math.ceil(lanes * max(mirrors, 1) / max(cores_per_executor, 1))
    return min(max(need, spec.minExecutors), spec.maxExecutors)


def incoming_rate(history: Sequence[Sample]) -> float | None:
    """Records/s arriving on the sources: the copy rate plus how fast the lag grew over the recent window."""
    last = history[-1]
    if last.rate is None:
        return None
    window = [s for s in history if s.lag is not None and s.time_s >= last.time_s - INCOMING_WINDOW_S]
    if len(window) < 2 or last.lag is None or window[-1].time_s - window[0].time_s < MIN_GROWTH_SPAN_S:
        return last.rate
    growth = (window[-1].lag - window[0].lag) / (window[-1].time_s - window[0].time_s)  # type: ignore[operator]
    return max(last.rate + growth, 0.0)


def lane_capacity(history: Sequence[Sample], mirrors: int, known: float | None = None) -> float | None:
    """Records/s one lane copies when it has a backlog: the best per-lane rate measured with lag behind it, or
    the one measured before (`known`, kept on the status) when the history no longer holds a backlog."""
    rates = [s.rate / (s.lanes * max(mirrors, 1)) for s in history
             if s.rate and s.lag and s.lanes > 0 and s.lag > s.rate]  # over a second behind: lanes busy
    if known:
        rates.append(known)
    return max(rates) if rates else None


def _want(lag: int, incoming: float, capacity: float | None, lanes: int, spec: AutoscalingSpec,
          mirrors: int) -> int:
    """Lanes per mirror this sample asks for, within the bounds; the current lanes when it cannot tell."""
    if spec.targetRecordsPerSecondPerLane is not None:
        total = incoming / spec.targetRecordsPerSecondPerLane
    elif capacity:
        total = (incoming + lag / (spec.lag_target_seconds or 1.0)) / capacity
        if lag <= incoming * (spec.lag_target_seconds or 0) / 2:  # keeping up: only headroom over incoming
            total = incoming * HEADROOM / capacity
    else:
        return lanes
    return min(max(math.ceil(total / max(mirrors, 1)), spec.minLanes), spec.maxLanes)


def _lag_seconds(s: Sample) -> float:
    assert s.lag is not None and s.rate is not None
    return s.lag / s.rate if s.rate > 0 else (0.0 if s.lag == 0 else math.inf)


def streak_of(history: Sequence[Sample], spec: AutoscalingSpec, capacity: float | None, mirrors: int,
              restored: Streak | None = None, refresh_s: float = REFRESH_S) -> Streak | None:
    """The within-target streak at the last sample: back from it while samples are within target (under a rate
    target: while they have figures) and no gap between two is longer than `away_s(refresh_s)`. When every
    sample is, the `restored` streak (the status's) reaches further back if its last sample is no further than
    that before the first one, and its `want` stands for the part of the scale-down delay before the first
    sample."""
    target = spec.lag_target_seconds
    now = history[-1]
    window = now.time_s - spec.scaleDownDelaySeconds
    gap = away_s(refresh_s)
    start: float | None = None
    wants: list[int] = []
    for i in range(len(history) - 1, -1, -1):
        s = history[i]
        if s.lag is None or s.rate is None or (target is not None and _lag_seconds(s) > target):
            break
        if start is not None and start - s.time_s > gap:  # unseen between the two: the streak began after it
            break
        start = s.time_s
        if s.time_s >= window:
            s_in = incoming_rate(history[:i + 1]) or 0.0
            wants.append(_want(s.lag, s_in, capacity, now.lanes, spec, mirrors) if capacity or
                         spec.targetRecordsPerSecondPerLane is not None else max(now.lanes // 2, spec.minLanes))
    else:
        if restored is not None and start is not None and restored.since_s < start and \
                restored.seen_s is not None and start - restored.seen_s <= gap:
            start = restored.since_s
            if history[0].time_s > window:
                wants.append(restored.want)
    if start is None:
        return None
    return Streak(start, max(wants), now.time_s)


def decide(history: Sequence[Sample], spec: AutoscalingSpec, *, last_change_s: float | None = None,
           mirrors: int = 1, cores_per_executor: int = 1, busy: str | None = None,
           known_capacity: float | None = None, restored: Streak | None = None, probed_s: float | None = None,
           refresh_s: float = REFRESH_S) -> Decision:
    """The decision at the last sample of `history` (oldest first). `busy` names what holds every change (a
    handoff under way); `last_change_s` is when the lanes or executors last changed; `known_capacity` the
    per-lane rate a decision measured before (its `perLanePerSecond` figure); `restored` the streak the last
    decision returned (kept on the status: the samples before a restart are gone, it is not); `probed_s` the
    blind halving the last decision returned; `refresh_s` how often samples come (for the away rule)."""
    if not history:
        raise ValueError("decide needs at least one sample")
    now = history[-1]
    lanes, executors = now.lanes, now.executors
    streak: Streak | None = None
    probe = probed_s  # carried through every decision until a capacity is measured

    def outcome(action: Literal["up", "down", "hold"], to: int, reason: str, settled: bool = False,
                **figures: float) -> Decision:
        to_exec = executors_for(to, mirrors, cores_per_executor, spec) if action != "hold" else executors
        return Decision(action, to if action != "hold" else lanes, to_exec, reason,
                        {k: round(v, 3) for k, v in figures.items()}, streak, probe, settled)

    if busy:
        return outcome("hold", lanes, f"{busy}: no change until it is over")
    bounded = min(max(lanes, spec.minLanes), spec.maxLanes)
    fitted = executors_for(bounded, mirrors, cores_per_executor, spec)
    if (bounded, fitted) != (lanes, executors):  # the spec changed under it, or executors never fitted
        up = bounded > lanes or (bounded == lanes and fitted > executors)
        return outcome("up" if up else "down", bounded,
                       f"{lanes} lanes and {executors} executors fitted to the bounds (lanes {spec.minLanes}.."
                       f"{spec.maxLanes}, executors {spec.minExecutors}..{spec.maxExecutors}, one lane a core)")
    if now.lag is None or now.rate is None:
        return outcome("hold", lanes, "no lag or rate measured yet")
    incoming = incoming_rate(history) or 0.0
    capacity = lane_capacity(history, mirrors, known_capacity)
    if capacity:
        probe = None  # measured: the probe has done its work
    target = spec.lag_target_seconds
    lag_s = _lag_seconds(now)
    streak = streak_of(history, spec, capacity, mirrors, restored, refresh_s)
    want = _want(now.lag, incoming, capacity, lanes, spec, mirrors)
    figures = {"lag": float(now.lag), "ratePerSecond": now.rate, "incomingPerSecond": incoming,
               "lanes": float(lanes), "wantLanes": float(want)}
    if math.isfinite(lag_s):
        figures["lagSeconds"] = lag_s
    if capacity:
        figures["perLanePerSecond"] = capacity
    if target is None and now.time_s - history[0].time_s < MIN_GROWTH_SPAN_S:
        # the copy rate alone is not what arrives while a backlog drains: wait for the lag's trend
        return outcome("hold", lanes, f"measuring the incoming rate ({MIN_GROWTH_SPAN_S:g} s of samples first)",
                       **figures)
    if last_change_s is not None and now.time_s - last_change_s < spec.cooldownSeconds:
        return outcome("hold", lanes, f"cooldown: no change for {spec.cooldownSeconds} s after the last one",
                       **figures)
    behind = lag_s > target if target is not None else want > lanes
    if want > lanes and behind:
        why = (f"lag {now.lag} records ({lag_s:.0f} s at {now.rate:.0f}/s) above the {target:g} s target"
               if target is not None else
               f"incoming {incoming:.0f}/s needs {want} lanes at {spec.targetRecordsPerSecondPerLane:g}/s each")
        return outcome("up", want, f"{why}: {want} lanes drain it at {capacity or 0:.0f}/s per lane"
                       if target is not None else why, **figures)
    if behind and lanes >= spec.maxLanes:
        return outcome("hold", lanes, f"behind at the most lanes (maxLanes {spec.maxLanes})", **figures)
    if behind:
        return outcome("hold", lanes, "behind, but the lanes' measured capacity cannot tell that more would help"
                       if not capacity else "behind, and the lanes running can drain it within the target",
                       **figures)
    if lanes <= spec.minLanes:
        return outcome("hold", lanes, "within target at the fewest lanes", settled=True, **figures)
    blind = not capacity and spec.targetRecordsPerSecondPerLane is None
    if blind and probe is not None:
        return outcome("hold", lanes, "within target; the lanes were halved once without a measured capacity: no "
                       "further scale-down until a backlog measures one", settled=True, **figures)
    # down: every sample over the delay within target (the streak began at least the delay ago)
    if streak is None or streak.since_s > now.time_s - spec.scaleDownDelaySeconds:
        return outcome("hold", lanes, f"within target; scaling down only after {spec.scaleDownDelaySeconds} s of "
                       "it", **figures)
    down_to = streak.want
    if down_to >= lanes:
        return outcome("hold", lanes, "within target; the lanes running are what the load needs", **figures)
    figures["wantLanes"] = float(down_to)
    if blind:
        probe = now.time_s
    return outcome("down", down_to, f"within target for {spec.scaleDownDelaySeconds} s: {down_to} lanes carry "
                   f"{incoming:.0f}/s" + (" (capacity unmeasured: halved, once)" if blind else ""), **figures)
