"""The Lease's renewals, pure: when a holder counts as silent (the operator), what a renewal writes (the driver),
and that a renewal alone wakes no handoff reconcile."""
from __future__ import annotations

import datetime as dt

from sparkmirror.handoff.renewal import renew_every, renewal_patch
from sparkmirror_operator.handlers import lease_news
from sparkmirror_operator.renewal import (RenewalClock, duration, held_since_ms, observe, renewed_ms, silence,
                                         silent_for)

T0 = dt.datetime(2026, 11, 28, 12, 0, 0, 250_000, tzinfo=dt.timezone.utc)
T0_MS = int(T0.timestamp() * 1000)


def lease(renewed: dt.datetime | None = None, seconds: int | None = 15, created: str | None = None) -> dict:
    spec: dict = {"holderIdentity": "m-a-g2"}
    if seconds is not None:
        spec["leaseDurationSeconds"] = seconds
    if renewed is not None:
        spec["renewTime"] = renewal_patch("1", renewed)["spec"]["renewTime"]
    return {"metadata": {"creationTimestamp": created} if created else {}, "spec": spec}


def test_a_renewal_is_a_microtime_conditional_on_what_was_read():
    patch = renewal_patch("4711", T0)
    assert patch == {"metadata": {"resourceVersion": "4711"}, "spec": {"renewTime": "2026-11-28T12:00:00.250000Z"}}
    assert renewed_ms(lease(T0)) == T0_MS  # read back to the millisecond by the operator
    assert [renew_every(s) for s in (15, 6, 1, 300)] == [5.0, 2.0, 0.5, 5.0]


def test_silence_counts_from_the_last_renewal_or_the_move_whichever_is_later():
    renewed = lease(T0)
    assert silent_for(renewed, T0_MS - 60_000, T0_MS + 7_000) == 7.0
    # a renewal from before the move is the previous holder's: the move is the new holder's last sign of life
    assert silent_for(renewed, T0_MS + 2_000, T0_MS + 7_000) == 5.0
    assert silence(renewed, 0, T0_MS + 15_000) is None  # exactly the duration: not yet
    assert silence(renewed, 0, T0_MS + 15_600) == "it has not renewed its Lease for 16 s (leaseDurationSeconds 15)"
    assert silence(renewed, T0_MS + 1_000, T0_MS + 17_000) == \
        "it has not renewed its Lease since the Lease moved to it 16 s (leaseDurationSeconds 15)"
    assert silence(lease(None), T0_MS, T0_MS + 20_000) is not None  # never renewed since it got the Lease
    assert silence(lease(None), 0, T0_MS) is None  # nothing says since when: no verdict
    assert silence(lease(T0, seconds=60), 0, T0_MS + 30_000) is None  # the Lease's own duration counts
    assert duration(lease(seconds=None)) == 15 and duration({"spec": {"leaseDurationSeconds": "x"}}) == 15


def test_held_since_is_the_move_else_the_lease_s_creation():
    created = lease(created="2026-11-28T12:00:00Z")
    assert held_since_ms(created, str(T0_MS + 5)) == T0_MS + 5
    assert held_since_ms(created, None) == held_since_ms(created, "not a number") == T0_MS - 250
    assert held_since_ms(lease(), None) == 0


def test_a_renewal_alone_is_no_news_for_the_handoff():
    before = {**lease(T0), "metadata": {"annotations": {"sparkmirror.io/holder-generation": "2"}}}
    renewed = {**before, "spec": {**before["spec"], "renewTime": "2026-11-28T12:00:05.000000Z"}}
    reported = {**renewed, "metadata": {"annotations": {**before["metadata"]["annotations"],
                                                        "sparkmirror.io/took-over.g2": "{}"}}}
    moved = {**before, "spec": {**before["spec"], "holderIdentity": "m-a-g3"}}
    assert lease_news(renewed) == lease_news(before)
    assert lease_news(reported) != lease_news(before) and lease_news(moved) != lease_news(before)


def test_an_observation_changes_only_when_the_holder_or_renew_time_does():
    first = observe(None, lease(T0), 1_000)
    assert first.at_ms == 1_000 and first.renew_time == "2026-11-28T12:00:00.250000Z"
    assert observe(first, lease(T0), 9_000) is first  # no renewal since: still seen at 1 s
    renewed = observe(first, lease(T0 + dt.timedelta(seconds=5)), 9_000)
    assert renewed.at_ms == 9_000
    moved = {**lease(T0), "spec": {**lease(T0)["spec"], "holderIdentity": "m-a-g3"}}
    assert observe(renewed, moved, 9_500).at_ms == 9_500


def test_a_driver_clock_far_behind_is_not_a_stall_and_a_frozen_one_is():
    """The driver's clock runs 10 min behind the operator's: its renewTime values look 600 s old, yet it renews
    every 5 s, so it is alive; once it stops, it is silent a duration after the operator last saw a change."""
    mono = [100.0]
    clock = RenewalClock(lambda: mono[0])
    behind = T0 - dt.timedelta(minutes=10)
    now_ms = T0_MS + 30_000  # the operator's wall clock; the Lease moved to the holder at T0_MS
    for step in range(6):  # a renewal every 5 s, on the driver's (skewed) clock
        mono[0] += 5
        ages = clock.ages_ms("ns/m", {"a": lease(behind + dt.timedelta(seconds=5 * step))})
        assert ages == {"a": 0}
    assert silence(lease(behind + dt.timedelta(seconds=25)), T0_MS, now_ms + 30_000, ages["a"]) is None
    # judged by the timestamp's value the same driver would look stalled for ~10 min
    assert silence(lease(behind + dt.timedelta(seconds=25)), 0, now_ms + 30_000) is not None
    mono[0] += 16  # the driver freezes: renewTime stops changing
    stale = lease(behind + dt.timedelta(seconds=25))
    age = clock.ages_ms("ns/m", {"a": stale})["a"]
    assert age == 16_000
    assert silence(stale, T0_MS, now_ms + 46_000, age) == \
        "it has not renewed its Lease for 16 s (leaseDurationSeconds 15)"
    # a clock ahead of the operator's does not hide a freeze either
    ahead = lease(T0 + dt.timedelta(hours=1))
    clock.ages_ms("ns/m", {"b": ahead})
    mono[0] += 20
    assert silence(ahead, T0_MS, now_ms + 66_000, clock.ages_ms("ns/m", {"b": ahead})["b"]) is not None
    assert silence(ahead, T0_MS, now_ms + 66_000) is None  # by value it would renew for another hour


def test_an_operator_that_just_started_waits_a_duration_and_never_renewed_counts_from_the_move():
    clock = RenewalClock(lambda: 500.0)
    assert clock.ages_ms("ns/m", {"a": lease(T0 - dt.timedelta(hours=2)), "b": lease(None)}) == {"a": 0}
    assert silence(lease(T0 - dt.timedelta(hours=2)), T0_MS - 3_600_000, T0_MS, 0) is None
    assert silence(lease(None), T0_MS - 20_000, T0_MS, None) is not None  # never renewed since the move
    assert clock.ages_ms("other/m", {"a": lease(T0)}) == {"a": 0}  # another resource's group "a" is its own


def test_a_failure_record_is_current_until_the_generation_renews_after_it():
    from sparkmirror_operator.renewal import failure_current

    record = {"generation": 1, "exitCode": 4, "message": "m", "atMs": T0_MS}
    assert failure_current(record, lease())  # never renewed: the retries die before renewing
    assert failure_current(record, lease(renewed=T0 - dt.timedelta(seconds=30)))  # renewed before it failed
    assert not failure_current(record, lease(renewed=T0 + dt.timedelta(seconds=1)))  # a retry runs and renews
    assert failure_current({"generation": 1, "exitCode": 4}, lease(renewed=T0))  # no time: kept as before
