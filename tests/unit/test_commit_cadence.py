"""When a lane commits: every commitIntervalMs from the last commit's start, sooner after a commit that ran long."""
import pytest

from sparkmirror.copying.ledger import commit_times as _commit_times
from sparkmirror.copying.loop import next_commit_at


def test_commits_begin_one_interval_apart_when_commits_are_quick() -> None:
    # the last commit began at 10.0 and took 8 ms: the next one begins 100 ms after it began, not after it ended
    assert next_commit_at(10.0, 10.008, 0.1, 40.0) == pytest.approx(10.1)


def test_a_commit_that_ran_long_shortens_the_next_interval_to_a_tenth() -> None:
    # 250 ms of held-up acks: the records that arrived meanwhile are committed 10 ms later, not 100 ms later
    assert next_commit_at(10.0, 10.25, 0.1, 40.0) == pytest.approx(10.26)


def test_never_past_the_epoch() -> None:
    assert next_commit_at(39.95, 39.96, 0.1, 40.0) == 40.0


def test_epoch_line_splits_the_commits_wait_for_acks_from_the_rest() -> None:
    """Exactly-once commits wait for their records' acks before the transaction ends: the epoch's line says how
    much of the commit time that was, the first thing to know about a latency tail."""
    line = _commit_times([5.0, 6.0, 40.0], acks_ms=[2.0, 3.0, 30.0])
    assert line == (", commits 6 ms median, 40 ms p99, 40 ms max "
                    "(of which waiting for acks 3 ms median, 30 ms p99, 30 ms max)")
    assert _commit_times([5.0], pipelined=True) == ", progress committed 5 ms median, 5 ms p99, 5 ms max"
    assert _commit_times([]) == ""
