"""Consumer-group lag from committed and end offsets (pure), and where it shows: metrics and the status."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from sparkmirror.consumerlag import ConsumerLag, consumer_lags
from sparkmirror.metrics import prometheus_text
from sparkmirror.mm2formats import Checkpoint


def test_lag_on_the_source_and_after_the_checkpoints_on_the_target() -> None:
    committed = {"g": {("t", 0): 30, ("t", 1): 60, ("other", 0): 5},  # `other` is not mirrored: left out
                 "behind-retention": {("t", 0): 0},                      # 0..end all unread
                 "elsewhere": {("other", 0): 1}}                         # no mirrored partition: no entry
    ends = {("t", 0): (0, 100), ("t", 1): (0, 100)}
    cps = {"g": [Checkpoint("g", "a.t", 0, 30, 30), Checkpoint("g", "a.t", 1, 60, 60)]}
    # the mirror copied 80 of partition 0 and all of partition 1 so far
    out = consumer_lags(committed, ends, cps, {("a.t", 0): (0, 80), ("a.t", 1): (0, 100)})
    assert out == [ConsumerLag("g", 110, 2, 90), ConsumerLag("behind-retention", 100, 1, None)]


def test_a_group_ahead_of_the_end_or_without_offsets_counts_zero() -> None:
    assert consumer_lags({"g": {("t", 0): 120, ("t", 1): -1001}}, {("t", 0): (0, 100), ("t", 1): (0, 7)}) == \
        [ConsumerLag("g", 0, 1, None)]


def test_small_lags_are_counted_so_transaction_markers_do_not_count() -> None:
    """The target is written in transactions: 2 records and their commit marker after the checkpoint are 2."""
    cps = {"g": [Checkpoint("g", "a.t", 0, 8, 9)]}
    counted = lambda spans: {tp: 2 for tp in spans}  # noqa: E731 - what a read_committed read finds
    out = consumer_lags({"g": {("t", 0): 8}}, {("t", 0): (0, 10)}, cps, {("a.t", 0): (0, 12)},
                        count_target=counted)
    assert out == [ConsumerLag("g", 2, 1, 2)]


def test_a_group_behind_the_retention_counts_from_the_low_watermark() -> None:
    assert consumer_lags({"g": {("t", 0): 3}}, {("t", 0): (50, 80)}) == [ConsumerLag("g", 30, 1, None)]


def test_metrics_per_group() -> None:
    snap = {"m": {"mirror": "m", "source": "a", "target": "b", "topics": 1, "partitions": 1, "lag": 0,
                  "heartbeats": 0, "checkpoint_groups": 2, "errors": {}, "partitions_detail": [],
                  "consumer_groups": [{"group": "g1", "lag": 110, "target_lag": 90, "partitions": 2},
                                      {"group": "g2", "lag": 4, "target_lag": None, "partitions": 1}]}}
    got = {(s.name, s.labels["group"]): s.value for f in text_string_to_metric_families(prometheus_text("fg", snap))
           for s in f.samples if "group" in s.labels}
    assert got == {("sparkmirror_consumer_group_lag_records", "g1"): 110,
                   ("sparkmirror_consumer_group_lag_records", "g2"): 4,
                   ("sparkmirror_consumer_group_target_lag_records", "g1"): 90}
