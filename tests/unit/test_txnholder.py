"""Who holds a lane's transactional id (copying/txnholder.py): the coordinator's producer id, epoch and
transaction state against what the lane held. The broker's side is proven in tests/job/test_batch_copy.py."""
from __future__ import annotations

import pytest

from sparkmirror.copying.txnholder import moved_on


@pytest.mark.parametrize("state,pid,epoch,moved", [
    ("Ongoing", 7, 3, False),        # as the lane left it
    ("CompleteCommit", 7, 3, False),
    ("CompleteAbort", 7, 4, False),  # the coordinator aborted a timed-out transaction itself: one bump
    ("PrepareAbort", 7, 4, False),   # ... still writing its markers
    ("Empty", 7, 4, True),           # a newer copy's InitProducerId on an idle id: one bump, no abort
    ("Ongoing", 7, 4, True),         # ... and it began its own transaction
    ("Empty", 7, 5, True),           # a newer copy that fenced an open transaction: two bumps
    ("CompleteAbort", 7, 5, True),
    ("Empty", 8, 0, True),           # another producer id
])
def test_moved_on(state: str, pid: int, epoch: int, moved: bool) -> None:
    assert moved_on(state, pid, epoch, 7, 3) is moved
