"""Deletion propagation's pure rule (`topicdeletion.plan_deletions`): only recorded remote topics go, after the
grace counted from when the source was first seen gone; a recreated source topic is held until its old remote
topic is deleted; a remote topic replaced by someone else is forgotten, never deleted; the topic record and its
key round-trip through the progress reader's decoding."""
from __future__ import annotations

import json

from sparkmirror.progress.record import decode_mark_key, topic_key
from sparkmirror.progress.state import ProgressState
from sparkmirror.topicdeletion import OwnedTopic, plan_deletions

GRACE = 60.0
T0 = 1_000_000
OWNED = OwnedTopic("a.orders", "orders", "src-1", "tgt-1", created_ms=T0 - 5000)


def test_present_source_keeps_its_remote_topic() -> None:
    p = plan_deletions([OWNED], {"orders": "src-1"}, {"a.orders": "tgt-1"}, T0, GRACE)
    assert (p.delete, p.waiting, p.held, p.record, p.forget) == ([], [], set(), [], [])


def test_gone_source_is_recorded_then_deleted_after_the_grace_only() -> None:
    first = plan_deletions([OWNED], {}, {"a.orders": "tgt-1"}, T0, GRACE)
    assert first.delete == [] and [w.due_ms for w in first.waiting] == [T0 + 60_000]
    assert first.record == [OwnedTopic("a.orders", "orders", "src-1", "tgt-1", T0 - 5000, gone_ms=T0)]
    seen = first.record[0]  # the clock is the record's: a later round (or a restarted driver) counts from it
    before = plan_deletions([seen], {}, {"a.orders": "tgt-1"}, T0 + 59_999, GRACE)
    assert before.delete == [] and before.record == [] and len(before.waiting) == 1
    due = plan_deletions([seen], {}, {"a.orders": "tgt-1"}, T0 + 60_000, GRACE)
    assert [d.topic.remote for d in due.delete] == ["a.orders"] and due.held == set()


def test_a_source_back_with_its_id_clears_the_clock() -> None:
    seen = OwnedTopic("a.orders", "orders", "src-1", "tgt-1", T0, gone_ms=T0)
    p = plan_deletions([seen], {"orders": "src-1"}, {"a.orders": "tgt-1"}, T0 + 10**9, GRACE)
    assert p.delete == [] and p.record == [OwnedTopic("a.orders", "orders", "src-1", "tgt-1", T0)]


def test_recreated_source_is_held_until_its_old_remote_topic_is_deleted() -> None:
    first = plan_deletions([OWNED], {"orders": "src-2"}, {"a.orders": "tgt-1"}, T0, GRACE)
    assert first.held == {"orders"} and first.delete == [] and "created again" in first.waiting[0].why
    seen = first.record[0]
    due = plan_deletions([seen], {"orders": "src-2"}, {"a.orders": "tgt-1"}, T0 + 60_000, GRACE)
    assert due.held == {"orders"} and [d.topic.remote for d in due.delete] == ["a.orders"]
    gone = OwnedTopic(**{**seen.__dict__, "deleted_ms": T0 + 60_000})
    listed = plan_deletions([gone], {"orders": "src-2"}, {"a.orders": "tgt-1"}, T0 + 61_000, GRACE)
    assert listed.held == {"orders"} and listed.delete == []  # the target still lists it: nothing copied in
    after = plan_deletions([gone], {"orders": "src-2"}, {}, T0 + 62_000, GRACE)
    assert (after.held, after.delete, after.forget) == (set(), [], [])  # created afresh by the next sync


def test_topics_not_created_by_the_mirror_are_never_touched() -> None:
    replaced = plan_deletions([OWNED], {}, {"a.orders": "tgt-someone-elses"}, T0 + 10**9, GRACE)
    assert replaced.delete == [] and replaced.waiting == [] and replaced.forget == ["a.orders"]
    vanished = plan_deletions([OWNED], {}, {}, T0, GRACE)
    assert vanished.delete == [] and vanished.forget == ["a.orders"]
    unowned = plan_deletions([], {}, {"a.orders": "tgt-1", "a.other": "tgt-9"}, T0 + 10**9, GRACE)
    assert (unowned.delete, unowned.waiting, unowned.forget) == ([], [], [])


def test_off_plans_nothing() -> None:
    p = plan_deletions([OWNED], {}, {"a.orders": "tgt-1"}, T0 + 10**9, GRACE, enabled=False)
    assert (p.delete, p.waiting, p.held, p.record, p.forget) == ([], [], set(), [], [])


def test_the_record_round_trips_through_the_progress_state() -> None:
    key = topic_key("ns/m", "a", "a.orders")
    assert decode_mark_key(key) == ("topicOf", ("ns/m", "a", "a.orders"))
    state = ProgressState()
    seen = OwnedTopic("a.orders", "orders", "src-1", "tgt-1", T0, gone_ms=T0 + 1)
    state.mark_topic(("ns/m", "a", "a.orders"), json.loads(seen.value()))
    assert OwnedTopic.of("a.orders", state.topics[("ns/m", "a", "a.orders")]) == seen
    state.mark_topic(("ns/m", "a", "a.orders"), None)
    assert state.topics == {}


def _resource(**mirror) -> dict:
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"target": {"alias": "b", "bootstrapServers": "b:9092"},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": "a:9092"}, **mirror}]}}


def test_the_setting_reaches_the_job_and_is_off_by_default() -> None:
    from sparkmirror.resource.plan import plan

    (on,) = [m for g in plan(_resource(deleteRemoteTopics={"enabled": True, "graceSeconds": 5})).groups
             for m in g.mirrors]
    assert (on.deletion.enabled, on.deletion.graceSeconds) == (True, 5)
    (off,) = [m for g in plan(_resource()).groups for m in g.mirrors]
    assert off.deleteRemoteTopics is None and (off.deletion.enabled, off.deletion.graceSeconds) == (False, 86400)


def test_bad_settings_are_named() -> None:
    from sparkmirror.resource.plan import plan

    cases = {"graceSeconds": {"enabled": True, "graceSeconds": 0}, "enabled": {"enabled": "sometimes"},
             "grace": {"grace": 60}}
    for name, value in cases.items():
        errors = [str(e) for e in plan(_resource(deleteRemoteTopics=value)).errors]
        assert len(errors) == 1 and errors[0].startswith(f"spec.mirrors[0].deleteRemoteTopics.{name}:"), errors
