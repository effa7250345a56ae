"""Admin requests split so none asks a KRaft controller for more than its limit of metadata records."""
from __future__ import annotations

import pytest

from sparkmirror.topicplan import MAX_RECORDS_PER_REQUEST, metadata_batches


@pytest.mark.parametrize("weights", [[11] * 1000, [1], [], [4999, 2, 4999, 6000, 1], [5000, 5000], [6000]])
def test_order_kept_every_item_once_and_within_the_limit(weights: list[int]) -> None:
    items = list(enumerate(weights))
    batches = list(metadata_batches(items, lambda it: it[1]))
    assert [it for b in batches for it in b] == items
    assert all(b for b in batches)
    assert all(sum(w for _i, w in b) <= MAX_RECORDS_PER_REQUEST for b in batches if len(b) > 1)


def test_a_thousand_topics_of_ten_partitions_go_in_three_requests() -> None:
    batches = list(metadata_batches(range(1000), lambda _t: 10 + 1))
    assert [len(b) for b in batches] == [454, 454, 92]


def test_routes_wait_for_the_target_brokers_to_know_new_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remote topics the controller created but the target's broker does not know yet are routed by a later
    sync (lanes describing them failed on 'Unknown topic or partition' at 1,000 topics of 10 partitions)."""
    import types

    from sparkmirror import topicsync
    from sparkmirror.topicsync import TopicSync
    from sparkmirror.topicplan import SyncPlan, TopicRoute

    monkeypatch.setattr(topicsync.time, "sleep", lambda s: None)
    answers = iter([{"A.old": 2}, {"A.old": 2, "A.grown": 3}, {"A.old": 2, "A.grown": 3, "A.new": 4}])
    fake = types.SimpleNamespace(_list=lambda which: next(answers), mirror=types.SimpleNamespace(name="m"))
    plan = SyncPlan(routes=[TopicRoute("grown", "A.grown", 5), TopicRoute("new", "A.new", 4),
                            TopicRoute("old", "A.old", 2)])
    # the brokers never catch up within the wait: the new topic waits, the grown one keeps what they know
    assert TopicSync._visible(fake, plan, wait=0.0) == [TopicRoute("old", "A.old", 2)]
    assert TopicSync._visible(fake, plan, wait=0.0) == [TopicRoute("grown", "A.grown", 3),
                                                        TopicRoute("old", "A.old", 2)]
    answers = iter([{"A.old": 2}, {"A.old": 2, "A.grown": 5, "A.new": 4}])
    fake._list = lambda which: next(answers)
    assert TopicSync._visible(fake, plan, wait=30.0) == plan.routes  # known within the wait: all routed
