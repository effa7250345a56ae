"""The autoscaling decision (autoscale.py), pure: a simulated flow group whose lanes copy at most CAPACITY
records/s each, fed load steps and flapping load, every decision applied as the operator would (after the
handoff a change takes), checked against the bounds, the cooldown and the scale-down delay."""
from __future__ import annotations

import itertools
import math

import pytest
from pydantic import ValidationError

from sparkmirror.resource.autoscaling import AutoscalingSpec
from sparkmirror.resource.plan import plan
from sparkmirror.autoscale import Decision, Sample, Streak, away_s, decide, executors_for

CAPACITY = 1000.0  # records/s one lane copies
STEP_S = 10.0  # the status refresh
HANDOFF_S = 30.0  # a decision takes effect once the next generation took over


def simulate(spec: AutoscalingSpec, load, seconds: float, lanes: int = 2, mirrors: int = 1,
             cores: int = 1, restarts: tuple[float, ...] = (), away: tuple[float, float] | None = None,
             keep_streak: bool = True, known: float | None = None) -> list[tuple[float, int, int, float, Decision]]:
    """(time, lanes, executors, lag, decision) every refresh; `load(t)` is the incoming records/s. At each of
    `restarts` the operator starts again: its samples are gone, the status (capacity, last change, the blind
    halving and, with `keep_streak`, the within-target streak) is not. `away` (from, to): no operator runs, no
    sample is taken, then it starts again. `known`: the per-lane capacity measured before."""
    t, lag, executors = 0.0, 0.0, executors_for(lanes, mirrors, cores, spec)
    history: list[Sample] = []
    pending: tuple[float, int, int] | None = None
    last_change: float | None = None
    capacity: float | None = known  # what the status keeps between decisions
    streak: Streak | None = None
    probed: float | None = None
    out = []
    while t < seconds:
        if any(t < r <= t + STEP_S for r in restarts):
            history = []
        if pending and t >= pending[0]:
            _, lanes, executors = pending
            pending = None
        incoming = load(t) * STEP_S
        copied = min(lanes * mirrors * CAPACITY * STEP_S, lag + incoming)
        lag += incoming - copied
        t += STEP_S
        if away is not None and away[0] < t < away[1]:
            history = []  # the operator is gone: no sample, its memory with it
            continue
        history.append(Sample(t, int(lag), copied / STEP_S, lanes, executors))
        history = [s for s in history if s.time_s >= t - 900]
        d = decide(history, spec, last_change_s=last_change, mirrors=mirrors, cores_per_executor=cores,
                   busy="handoff under way" if pending else None, known_capacity=capacity,
                   restored=streak if keep_streak else None, probed_s=probed, refresh_s=STEP_S)
        capacity, streak, probed = d.figures.get("perLanePerSecond", capacity), d.streak, d.probed_s
        if d.changes:
            pending, last_change = (t + HANDOFF_S, d.lanes, d.executors), t
        out.append((t, lanes, executors, lag, d))
    return out


def changes(run) -> list[tuple[float, str, int]]:
    return [(t, d.action, d.lanes) for t, _, _, _, d in run if d.changes]


def test_a_load_stepping_up_4x_and_back_scales_up_drains_and_scales_back_down() -> None:
    spec = AutoscalingSpec(minLanes=2, maxLanes=12, maxExecutors=12, targetLagSeconds=60, cooldownSeconds=60,
                           scaleDownDelaySeconds=180)
    run = simulate(spec, lambda t: 1500.0 if t < 600 or t >= 1800 else 6000.0, 3600, lanes=2)
    steps = changes(run)
    ups = [s for s in steps if s[1] == "up" and s[0] > 600]
    downs = [s for s in steps if s[1] == "down"]
    assert ups and ups[0][0] <= 650, steps  # once the lag passed the 60 s target
    peak = max(lanes for _, lanes, _, _, _ in run)
    assert 6 <= peak <= 12, steps  # 6000/s needs 6 lanes at 1000/s, the backlog a few more
    lag_at = {t: lag for t, _, _, lag, _ in run}
    drained = min(t for t, lag in lag_at.items() if t > 700 and lag == 0)
    assert drained < 1000, (drained, steps)  # the backlog gone within minutes
    assert downs and all(t > 1800 + spec.scaleDownDelaySeconds for t, _, _ in downs), steps
    assert run[-1][1] == 2 and run[-1][3] == 0, steps  # back at 1500/s: two lanes, nothing behind
    assert len(steps) <= 6, steps  # a few decided steps, no flapping
    for (t1, _, _), (t2, _, _) in zip(steps, steps[1:]):
        assert t2 - t1 >= spec.cooldownSeconds, steps
    up = next(d for t, _, _, _, d in run if d.action == "up" and t > 600)
    assert up.figures["lag"] > 0 and up.figures["lagSeconds"] > 60 and up.figures["perLanePerSecond"] == 1000.0
    assert "above the 60 s target" in up.reason


def test_a_restarted_operator_goes_on_counting_the_scale_down_delay() -> None:
    """Six lanes for a load two carry; the operator started again in the middle of the scale-down delay: with the
    streak the status keeps, the lanes go down when they would have without the restart; with the samples only,
    the delay starts over."""
    spec = AutoscalingSpec(minLanes=1, maxLanes=8, targetLagSeconds=60, cooldownSeconds=60,
                           scaleDownDelaySeconds=300)

    def load(t: float) -> float:
        return 1500.0

    steady = simulate(spec, load, 900, lanes=6, known=CAPACITY, restarts=(0.0,))  # its history starts empty too
    down = [(t, a, lanes) for t, a, lanes in changes(steady)]
    assert down[0][1:] == ("down", 2) and down[0][0] >= spec.scaleDownDelaySeconds, down
    restart = down[0][0] - 150  # halfway through the delay
    kept = changes(simulate(spec, load, 900, lanes=6, known=CAPACITY, restarts=(restart,)))
    assert kept == down, (kept, down)
    forgot = changes(simulate(spec, load, 900, lanes=6, known=CAPACITY, restarts=(restart,),
                              keep_streak=False))
    assert forgot[0][1:] == ("down", 2) and forgot[0][0] >= restart + spec.scaleDownDelaySeconds, forgot
    run = simulate(spec, load, 900, lanes=6, known=CAPACITY, restarts=(restart,))
    at_restart = next(d for t, _, _, _, d in run if t >= restart)
    assert at_restart.streak is not None and at_restart.streak.since_s == STEP_S, at_restart  # the first sample's


def test_a_lag_above_target_ends_the_streak() -> None:
    """A streak restored from the status is not carried over a sample above target: the delay starts again."""
    spec = AutoscalingSpec(minLanes=1, maxLanes=8, targetLagSeconds=60, scaleDownDelaySeconds=300)
    restored = Streak(since_s=0.0, want=2, seen_s=390.0)
    over = decide([Sample(400, 90_000, 1000.0, 6, 6), Sample(410, 0, 1000.0, 6, 6)], spec, restored=restored,
                  known_capacity=1000.0)
    assert over.action == "hold" and over.streak == Streak(410, 2, 410), over
    within = decide([Sample(400, 0, 1000.0, 6, 6)], spec, restored=restored, known_capacity=1000.0)
    assert (within.action, within.lanes) == ("down", 2) and within.streak == Streak(0.0, 2, 400), within


def test_unmeasured_capacity_halves_once_then_holds_until_a_backlog_measures_it() -> None:
    """Six lanes for a load that needs two to three (1800-2800/s at 1000/s a lane) and no lane ever behind, so no
    capacity measured: one blind halving (a probe), then the lanes hold, across an operator restart too (the
    probe is on the status); halving again would leave one lane, a backlog, and a climb back. A later burst the
    three lanes cannot carry measures the capacity, and from then the scale-down is sized by it."""
    spec = AutoscalingSpec(minLanes=1, maxLanes=8, targetLagSeconds=60, cooldownSeconds=60,
                           scaleDownDelaySeconds=300)

    def load(t: float) -> float:
        return 3600.0 if 2400 <= t < 3000 else 2300.0 + 500.0 * math.sin(t / 200)

    run = simulate(spec, load, 4800, lanes=6, restarts=(1200.0,))
    calm = [r for r in run if r[0] < 2400]
    assert [lanes for lanes, _ in itertools.groupby(lanes for _, lanes, _, _, _ in calm)] == [6, 3], changes(run)
    assert changes(run)[0] == (spec.scaleDownDelaySeconds + STEP_S, "down", 3), changes(run)
    assert "capacity unmeasured: halved, once" in next(d for *_, d in calm if d.changes).reason
    assert all(lag == 0 for _, _, _, lag, _ in calm), "three lanes carry it: never behind"
    held = calm[-1][4]
    assert (held.action, held.probed_s) == ("hold", spec.scaleDownDelaySeconds + STEP_S), held
    assert held.reason == ("within target; the lanes were halved once without a measured capacity: no further "
                           "scale-down until a backlog measures one"), held
    assert {d.reason for t, *_, d in calm if t > 400} == {held.reason}  # stands, across the restart too
    up = next(d for t, *_, d in run if d.changes and t >= 2400)
    assert up.action == "up" and up.figures["perLanePerSecond"] == CAPACITY and up.probed_s is None, up
    assert run[-1][1] in (3, 4) and run[-1][4].probed_s is None and run[-1][3] == 0, changes(run)
    assert min(lanes for t, lanes, *_ in run if t > 2400) >= 3, changes(run)  # measured: never below the load


def test_time_away_does_not_count_as_within_target() -> None:
    """A gap with no samples longer than the away limit (3 refreshes, at least 30 s) breaks the streak: between
    two samples, and between the status's streak and the first sample of an operator started again."""
    spec = AutoscalingSpec(minLanes=1, maxLanes=8, targetLagSeconds=60, scaleDownDelaySeconds=300)
    assert away_s(30.0) == 90.0 and away_s(2.0) == 30.0
    now = [Sample(400, 0, 1000.0, 6, 6)]
    seen_lately = decide(now, spec, restored=Streak(0.0, 2, seen_s=380.0), known_capacity=1000.0)
    assert (seen_lately.action, seen_lately.lanes) == ("down", 2), seen_lately
    for restored in (Streak(0.0, 2, seen_s=100.0), Streak(0.0, 2)):  # away 300 s; when last seen unknown
        d = decide(now, spec, restored=restored, known_capacity=1000.0)
        assert d.action == "hold" and d.streak == Streak(400, 2, 400), d
        assert d.reason == "within target; scaling down only after 300 s of it", d
    gapped = [Sample(t, 0, 1000.0, 6, 6) for t in [*range(0, 110, 10), *range(300, 410, 10)]]
    d = decide(gapped, spec, known_capacity=1000.0)
    assert d.action == "hold" and d.streak is not None and d.streak.since_s == 300, d
    assert decide(gapped, spec, known_capacity=1000.0, refresh_s=100.0).action == "down"  # 200 s: within 3 x 100

    def load(t: float) -> float:
        return 1500.0

    stayed = changes(simulate(spec, load, 1200, lanes=6, known=CAPACITY, restarts=(200.0,)))
    assert stayed[0] == (spec.scaleDownDelaySeconds + STEP_S, "down", 2), stayed  # the restart: no matter
    back = changes(simulate(spec, load, 1200, lanes=6, known=CAPACITY, away=(100.0, 400.0)))
    assert back[0][1:] == ("down", 2) and back[0][0] >= 400 + spec.scaleDownDelaySeconds, back


def test_flapping_load_does_not_flap_the_lanes() -> None:
    """Load alternating every 40 s between 1000/s and 7000/s: up to carry the peaks, then at most trimmed to
    what the peaks need, never down below them and up again."""
    spec = AutoscalingSpec(minLanes=1, maxLanes=16, maxExecutors=16, targetLagSeconds=30, cooldownSeconds=60,
                           scaleDownDelaySeconds=300)
    run = simulate(spec, lambda t: 7000.0 if int(t // 40) % 2 else 1000.0, 3000, lanes=1)
    steps = changes(run)
    assert steps and steps[0][1] == "up"
    actions = [a for _, a, _ in steps]
    assert "up" not in actions[actions.index("down"):] if "down" in actions else True, steps
    assert len(steps) <= 4, steps
    assert min(lanes for t, lanes, _, _, _ in run if t > 600) >= 7, steps  # 7000/s peaks need 7 lanes
    assert max(lag for t, _, _, lag, _ in run if t > 1000) < 30 * 4000, steps  # keeps up on average


def test_bounds_hold_whatever_the_load() -> None:
    spec = AutoscalingSpec(minLanes=2, maxLanes=4, minExecutors=2, maxExecutors=3, targetLagSeconds=10,
                           cooldownSeconds=0, scaleDownDelaySeconds=30)
    run = simulate(spec, lambda t: 8000.0 if t < 300 else 0.0, 2400, lanes=3, cores=2)
    for _, lanes, executors, _, d in run:
        assert 2 <= lanes <= 4 and 2 <= d.lanes <= 4, d
        assert 2 <= executors <= 3 and 2 <= d.executors <= 3, d
    assert max(lanes for _, lanes, _, _, _ in run) == 4 and run[-1][1] == 2 and run[-1][3] == 0
    assert any(d.reason == "behind at the most lanes (maxLanes 4)" for *_, d in run)


def test_lanes_outside_new_bounds_are_fitted_at_once() -> None:
    spec = AutoscalingSpec(minLanes=4, maxLanes=8, maxExecutors=8, cooldownSeconds=600)
    d = decide([Sample(100, 0, 0.0, 2, 2)], spec, last_change_s=90)
    assert (d.action, d.lanes, d.executors) == ("up", 4, 4) and "fitted to the bounds" in d.reason
    d = decide([Sample(100, 0, 0.0, 12, 12)], spec)
    assert (d.action, d.lanes, d.executors) == ("down", 8, 8)
    d = decide([Sample(100, 0, 0.0, 5, 2)], spec, mirrors=2, cores_per_executor=4)  # 10 lanes, 4 cores each
    assert (d.action, d.lanes, d.executors) == ("up", 5, 3)


def test_cooldown_holds_every_change_and_says_how_long() -> None:
    """The reason names the cooldown's length, not what is left: a decision that stands reads the same every
    refresh, so its status is not written again for nothing (status.autoscaling has lastChangeTime)."""
    spec = AutoscalingSpec(minLanes=1, maxLanes=8, targetLagSeconds=10, cooldownSeconds=120)
    behind = [Sample(0, 50_000, 1000.0, 1, 1), Sample(10, 60_000, 1000.0, 1, 1)]
    held = decide(behind, spec, last_change_s=-100)
    assert held.action == "hold" and held.lanes == 1
    assert held.reason == "cooldown: no change for 120 s after the last one"
    assert held.figures["lag"] == 60_000
    went = decide(behind, spec, last_change_s=-200)
    assert went.action == "up" and went.lanes == 7  # 1000/s + 60000 over 10 s at 1000/s a lane (growth over
    # 10 s is not trusted: lanes commit in bursts)
    spread = [Sample(-20, 30_000, 1000.0, 1, 1), *behind]  # over 30 s: the lag grew 1000/s, so 2000/s arrive
    went = decide(spread, spec, last_change_s=-200)
    assert went.lanes == 8 and went.figures["incomingPerSecond"] == 2000.0, went
    assert decide(behind, spec, busy="handoff under way").reason.startswith("handoff under way")


def test_records_per_second_per_lane_target() -> None:
    spec = AutoscalingSpec(minLanes=1, maxLanes=10, targetRecordsPerSecondPerLane=500, cooldownSeconds=0,
                           scaleDownDelaySeconds=20)
    assert decide([Sample(0, 0, 2600.0, 2, 2)], spec).reason.startswith("measuring the incoming rate")
    draining = [Sample(0, 40_000, 4000.0, 2, 2), Sample(40, 0, 4000.0, 2, 2)]  # a backlog copied at 4000/s
    d = decide(draining, spec)
    assert (d.action, d.lanes) == ("up", 6) and d.figures["incomingPerSecond"] == 3000.0, d
    low = [Sample(t, 0, 900.0, 6, 6) for t in (0, 10, 20, 30)]
    d = decide(low, spec)
    assert (d.action, d.lanes) == ("down", 2)


def test_no_figures_no_change() -> None:
    spec = AutoscalingSpec()
    d = decide([Sample(0, None, None, 2, 2)], spec)
    assert d.action == "hold" and d.reason == "no lag or rate measured yet"
    with pytest.raises(ValueError, match="at least one sample"):
        decide([], spec)


@pytest.mark.parametrize("autoscaling, field, message", [
    ({"minLanes": 5, "maxLanes": 2}, "spec.autoscaling", "minLanes (5) must be at most maxLanes (2)"),
    ({"minExecutors": 9, "maxExecutors": 3}, "spec.autoscaling", "minExecutors (9) must be at most maxExecutors"),
    ({"targetLagSeconds": 5, "targetRecordsPerSecondPerLane": 10}, "spec.autoscaling",
     "set one of targetLagSeconds or targetRecordsPerSecondPerLane"),
    ({"minLanes": 0}, "spec.autoscaling.minLanes", "greater than or equal to 1"),
    ({"cooldown": 5}, "spec.autoscaling.cooldown", "Extra inputs are not permitted"),
])
def test_bad_autoscaling_is_named(autoscaling: dict, field: str, message: str) -> None:
    resource = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
                "spec": {"target": {"alias": "t", "bootstrapServers": "t:9092"},
                         "mirrors": [{"source": {"alias": "s", "bootstrapServers": "s:9092"}}],
                         "autoscaling": autoscaling}}
    errors = plan(resource).errors
    assert [e.field for e in errors] == [field] and message in errors[0].message, errors
    with pytest.raises(ValidationError):
        AutoscalingSpec.model_validate(autoscaling)
