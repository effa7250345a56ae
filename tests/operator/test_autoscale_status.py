"""status.autoscaling across refreshes and operator restarts (scaling.Autoscaler, pure): the status each refresh
writes is handed back as the next one reads it, an operator started again is a new Autoscaler with the status
only. A hold nothing but a backlog ends writes the same status refresh after refresh; the blind halving stays
made across a restart; the within-target streak reaches over a quick restart, not over a long absence."""
from __future__ import annotations

import datetime as dt
from typing import Any

from sparkmirror.resource.plan import plan
from sparkmirror_operator.lag import GroupLag
from sparkmirror_operator.scaling import Autoscaler

REFRESH_S = 10.0
DELAY_S = 60


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _body(lanes: int = 4) -> dict[str, Any]:
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
            "spec": {"target": {"alias": "b", "bootstrapServers": "b:9092"},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": "a:9092"}, "topicsPattern": "t"}],
                     "spark": {"parallelism": lanes, "executor": {"instances": lanes, "cores": 1}},
                     "autoscaling": {"minLanes": 1, "maxLanes": 4, "minExecutors": 1, "maxExecutors": 4,
                                     "targetLagSeconds": 60, "cooldownSeconds": 0,
                                     "scaleDownDelaySeconds": DELAY_S}},
            "status": {}}


def _refresh(scaler: Autoscaler, body: dict[str, Any], lag: int = 0, rate: float = 0.0) -> dict[str, Any]:
    """One status refresh: decide, and write status.autoscaling back as the API server would keep it."""
    p = plan(body)
    assert not p.errors and p.resource is not None, p.errors
    step = scaler.step(body, p.resource, p.groups, {g.name: GroupLag(lag=lag, records_per_second=rate)
                                                    for g in p.groups}, busy=None)
    body["status"] = {"autoscaling": step.status}
    return step.status[0]


def _at(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_blind_halving_is_made_once_and_kept_across_a_restart_without_rewriting_the_status() -> None:
    """Idle at four lanes, no capacity ever measured: after the delay the lanes are halved once (the probe, its
    time on the status); then the hold stands and its status is the same every refresh (nothing to write); an
    operator started again keeps the probe and does not halve again."""
    clock, body = Clock(), _body()
    scaler = Autoscaler(clock=clock, refresh_s=REFRESH_S)
    start = clock.t
    entries = []
    while clock.t <= start + DELAY_S + 6 * REFRESH_S:
        entries.append(_refresh(scaler, body))
        clock.t += REFRESH_S
    downs = [e for e in entries if e["decision"] == "down"]
    assert [(e["lanes"], _at(e["time"]) - start) for e in downs] == [(2, DELAY_S)], downs
    assert "capacity unmeasured: halved, once" in downs[0]["reason"]
    assert _at(downs[0]["capacityProbeTime"]) == start + DELAY_S, downs[0]
    held = entries[-1]
    assert (held["lanes"], held["decision"]) == (2, "hold") and "halved once" in held["reason"], held
    assert entries[-2] == held  # settled: the same status, so a refresh writes nothing

    clock.t += REFRESH_S  # the operator starts again: its samples gone, the status kept
    scaler = Autoscaler(clock=clock, refresh_s=REFRESH_S)
    after = [_refresh(scaler, body)]
    for _ in range(DELAY_S // int(REFRESH_S) + 3):
        clock.t += REFRESH_S
        after.append(_refresh(scaler, body))
    assert {(e["lanes"], e["decision"]) for e in after} == {(2, "hold")}, after
    assert {e["reason"] for e in after} == {held["reason"]}
    assert after[-1]["capacityProbeTime"] == held["capacityProbeTime"] and after[-2] == after[-1], after


def test_the_streak_reaches_over_a_quick_restart_not_over_a_long_absence() -> None:
    """Half-way through the scale-down delay the operator starts again. Back after 15 s (under the away limit of
    3 refreshes, at least 30 s): the delay goes on from withinTargetSince. Back after 300 s: the time nobody looked
    is not within target, the delay starts over at its first sample."""
    for away, goes_on in ((15.0, True), (300.0, False)):
        clock, body = Clock(), _body()
        scaler = Autoscaler(clock=clock, refresh_s=REFRESH_S)
        start = clock.t
        first = _refresh(scaler, body)
        while clock.t < start + DELAY_S / 2:
            clock.t += REFRESH_S
            _refresh(scaler, body)
        assert _at(body["status"]["autoscaling"][0]["withinTargetSeen"]) == clock.t
        clock.t += away
        back = clock.t
        scaler = Autoscaler(clock=clock, refresh_s=REFRESH_S)
        entry = _refresh(scaler, body)
        while entry["decision"] != "down":
            clock.t += REFRESH_S
            entry = _refresh(scaler, body)
        if goes_on:
            assert entry["withinTargetSince"] == first["withinTargetSince"], (first, entry)
            # the first refresh after the delay from the first sample, as without the restart
            assert start + DELAY_S <= _at(entry["time"]) < start + DELAY_S + REFRESH_S, entry
        else:
            assert _at(entry["withinTargetSince"]) == back and _at(entry["time"]) == back + DELAY_S, entry
            assert entry["withinTargetSince"] != first["withinTargetSince"]
