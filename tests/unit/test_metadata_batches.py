"""Admin requests split so none asks a KRaft controller for more than its limit of metadata records."""
from __future__ import annotations

import pytest

from sparkmirror.topicsync import MAX_RECORDS_PER_REQUEST, metadata_batches


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
