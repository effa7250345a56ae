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
    ends = {("t", 0): 100, ("t", 1): 100}
    cps = {"g": [Checkpoint("g", "a.t", 0, 30, 30), Checkpoint("g", "a.t", 1, 60, 60)]}
    # the mirror copied 80 of partition 0 and all of partition 1 so far
    out = consumer_lags(committed, ends, cps, {("a.t", 0): 80, ("a.t", 1): 100})
    assert out == [ConsumerLag("g", 110, 2, 90), ConsumerLag("behind-retention", 100, 1, None)]


def test_a_group_ahead_of_the_end_or_without_offsets_counts_zero() -> None:
    assert consumer_lags({"g": {("t", 0): 120, ("t", 1): -1001}}, {("t", 0): 100, ("t", 1): 7}) == \
        [ConsumerLag("g", 0, 1, None)]


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
