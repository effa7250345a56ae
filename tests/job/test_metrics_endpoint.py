"""Live lag and the Prometheus endpoint: real brokers, the real lane copier, an HTTP scrape on loopback."""
from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from sparkmirror.copying import copy_lane
from sparkmirror.lanes import plan_lanes
from sparkmirror.metrics import DriverServices, prometheus_text
from sparkmirror.mirrormonitor import MirrorMonitor
from sparkmirror.progress import ensure_progress_topic
from sparkmirror.resource.flowgroup import CopyPath
from sparkmirror.topicsync import TopicSync

from .conftest import produce_numbered, wait_for

pytestmark = pytest.mark.minutes(0.9)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@contextmanager
def serving(cfg) -> Iterator[tuple[DriverServices, Callable[[], dict]]]:
    """The flow group's driver services on a loopback port, and a scrape of their /metrics."""
    services = DriverServices(cfg, stats=lambda: {}, poll_interval=0.3, bind="127.0.0.1").start()
    url = f"http://127.0.0.1:{services.metrics_port}/metrics"
    try:
        yield services, lambda: samples(urllib.request.urlopen(url, timeout=5).read().decode())
    finally:
        services.stop()


def find(ss: dict, name: str, **labels) -> list[float]:
    return [v for (n, ls), v in ss.items() if n == name and all(dict(ls).get(k) == str(x) for k, x in labels.items())]


def test_text_from_snapshot() -> None:
    snap = {"m": {"mirror": "m", "source": "a", "target": "b", "topics": 1, "partitions": 1, "lag": 5,
                  "records_per_s": 10.0, "bytes_per_s": 1000.0, "records_total": 42, "heartbeats": 3,
                  "checkpoint_groups": 1, "updated": 0, "errors": {}, "error_counts": {"checkpoints": 2},
                  "latency": {"le": [0, 0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3], "count": 4, "sum_ms": 2040},
                  "partitions_detail": [{"topic": "t", "partition": 0, "remote_topic": "a.t", "lag": 5,
                                         "lag_seconds": 1.5, "stall_seconds": 0.5, "end_offset": 47,
                                         "next_offset": 42,
                                         "records_per_s": 10.0, "bytes_per_s": 1000.0, "records_total": 42,
                                         "records_committed": 42, "bytes_committed": 4200, "transactions": 7,
                                         "latency_ms_avg": 12.5, "latency_ms_max": 40,
                                         "last_commit_ms": 1_700_000_000_000},
                                        {"topic": "t", "partition": 1, "remote_topic": "a.t", "lag": 0,
                                         "lag_seconds": 0.0, "stall_seconds": 0.0, "end_offset": 9,
                                         "next_offset": 9, "records_per_s": 0.0, "bytes_per_s": 0.0,
                                         "records_total": 9, "records_committed": 9, "bytes_committed": 90,
                                         "transactions": 3, "latency_ms_avg": None, "latency_ms_max": None,
                                         "last_commit_ms": 1_600_000_000_000}],
                  "transactions": 8,
                  "copy": {"path": CopyPath.RECORDS, "why": "the identity replication policy ...",
                           "fallback": "identity_policy"}}}
    ss = samples(prometheus_text("fg", snap, generation=3, jvm_memory={"heap_used": 10, "heap_max": 100}))
    lab = dict(flow_group="fg", mirror="m", topic="t", partition=0, remote_topic="a.t")
    assert find(ss, "sparkmirror_partition_lag_records", **lab) == [5]
    assert find(ss, "sparkmirror_partition_lag_seconds", **lab) == [1.5]
    assert find(ss, "sparkmirror_mirror_lag_seconds", mirror="m") == [1.5]
    assert find(ss, "sparkmirror_partition_commit_stall_seconds", **lab) == [0.5]
    assert find(ss, "sparkmirror_mirror_commit_stall_seconds", mirror="m") == [0.5]
    # per mirror: totals summed over the partitions, transactions each once (8, not 7 + 3 by partition)
    assert find(ss, "sparkmirror_mirror_records_total", mirror="m") == [51]
    assert find(ss, "sparkmirror_mirror_bytes_total", mirror="m") == [4290]
    assert find(ss, "sparkmirror_mirror_transactions_total", mirror="m") == [8]
    assert find(ss, "sparkmirror_mirror_last_commit_timestamp_seconds", mirror="m") == [1_700_000_000]
    assert find(ss, "sparkmirror_partition_mirrored_offset", **lab) == [42]
    assert find(ss, "sparkmirror_partition_records_total", **lab) == [42]
    assert find(ss, "sparkmirror_partition_bytes_total", **lab) == [4200]
    assert find(ss, "sparkmirror_partition_transactions_total", **lab) == [7]
    # the latency histogram in seconds: cumulative buckets, +Inf the count, the sum in seconds
    assert find(ss, "sparkmirror_mirror_replication_latency_seconds_bucket", mirror="m", le="0.025") == [1]
    assert find(ss, "sparkmirror_mirror_replication_latency_seconds_bucket", mirror="m", le="1.0") == [3]
    assert find(ss, "sparkmirror_mirror_replication_latency_seconds_bucket", mirror="m", le="+Inf") == [4]
    assert find(ss, "sparkmirror_mirror_replication_latency_seconds_sum", mirror="m") == [2.04]
    assert find(ss, "sparkmirror_mirror_errors_total", mirror="m", service="checkpoints") == [2]
    assert find(ss, "sparkmirror_mirror_up", mirror="m") == [1]
    assert find(ss, "sparkmirror_heartbeats_total", mirror="m") == [3]
    assert find(ss, "sparkmirror_mirror_copy_path", mirror="m", path="records", fallback="identity_policy") == [1]
    assert find(ss, "sparkmirror_flow_group_generation", flow_group="fg") == [3]
    assert find(ss, "sparkmirror_driver_jvm_memory_bytes", area="heap_max") == [100]
    # no per-second gauges and no milliseconds: rates are rate() of the counters
    assert not [n for n, _ in ss if n.endswith(("_per_second", "_ms"))]
    # no label a scrape target owns, and no worker generation as a label (new series at every handoff)
    assert not {k for _, ls in ss for k, _ in ls} & {"namespace", "pod", "job", "instance", "generation",
                                                     "worker_generation"}
    # per-partition families off: not a series of them, the per-mirror ones unchanged
    off = samples(prometheus_text("fg", snap, generation=3, per_partition=False))
    assert not [n for n, _ in off if n.startswith("sparkmirror_partition_")]
    assert {k: v for k, v in ss.items() if k[0].startswith("sparkmirror_mirror_")} == \
        {k: v for k, v in off.items() if k[0].startswith("sparkmirror_mirror_")}


def test_exported_names_are_what_the_endpoint_serves() -> None:
    """`EXPORTED` (which the chart's dashboard and alerts are checked against) is exactly what families() makes."""
    from sparkmirror.metrics import EXPORTED, families

    assert sorted(f.name + ("_total" if f.type == "counter" else "") for f in families("fg", {})) == sorted(EXPORTED)


def test_live_lag_and_endpoint(kafka_a, kafka_b, topic, flowgroup) -> None:
    src = topic(kafka_a, 2)
    cfg = flowgroup(src, metricsPort=0, mirror={"emitHeartbeatsIntervalSeconds": 0.5, "emitCheckpoints": False})
    mirror = cfg.mirrors[0]
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    with serving(cfg) as (services, scrape):
        lag = lambda: find(scrape(), "sparkmirror_partition_lag_records", topic=src)  # noqa: E731
        wait_for(lambda: lag() == [100, 100], 30, "lag of 100 records per partition before copying")
        for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror),
                               [(r.source_topic, r.target_topic, r.partitions) for r in routes]):
            if lane.partitions:
                copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)
        wait_for(lambda: lag() == [0, 0], 30, "lag 0 after copying")
        ss = scrape()
        assert find(ss, "sparkmirror_partition_mirrored_offset", topic=src) == [100, 100]
        assert find(ss, "sparkmirror_partition_records_total", topic=src) == [100, 100]
        assert all(b > 100 * 2 for b in find(ss, "sparkmirror_partition_bytes_total", topic=src))
        assert find(ss, "sparkmirror_partition_lag_seconds", topic=src) == [0, 0]
        # the path its lanes took, as the lanes choose it (batches, the default; no fallback)
        assert find(ss, "sparkmirror_mirror_copy_path", mirror=mirror.name, path="batches", fallback="") == [1]
        assert find(ss, "sparkmirror_partition_commit_stall_seconds", topic=src) == [0, 0]
        assert find(ss, "process_resident_memory_bytes")[0] > 10 * 2**20
        # MM2 mirrors a source `heartbeats` topic whatever the topic pattern; other tests may have made one
        hb = AdminClient({"bootstrap.servers": kafka_a.bootstrap}).list_topics(timeout=10).topics.get("heartbeats")
        assert find(ss, "sparkmirror_mirror_partitions", mirror=mirror.name) == [2 + (len(hb.partitions) if hb else 0)]
        assert find(ss, "sparkmirror_heartbeats_total", mirror=mirror.name)[0] >= 1
        snap = services.snapshot()[mirror.name]
        assert snap["lag"] == 0 and snap["topics"] == 1 + bool(hb) and not snap["errors"], snap["errors"]
    # a lane started afresh (a restarted driver) carries the totals on in the progress records themselves, so
    # they hold when compaction leaves only the latest record of each partition
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 50)
    for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror),
                           [(r.source_topic, r.target_topic, r.partitions) for r in routes]):
        if lane.partitions:
            copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)
    monitor = MirrorMonitor(cfg, mirror)
    try:
        parts = monitor.poll()
        latest = monitor.tail.latest()
        assert [(parts[(src, p)].mirrored, latest[(src, p)].records_total) for p in (0, 1)] == [(150, 150)] * 2
        assert all(latest[(src, p)].bytes_total == parts[(src, p)].mirrored_bytes > 0 for p in (0, 1))
    finally:
        monitor.close()


def test_lag_counts_records_not_transaction_markers(kafka_a, kafka_b, topic, flowgroup) -> None:
    """A source written transactionally (e.g. the target of the opposite mirror) ends with a commit marker."""
    from confluent_kafka import Producer

    from sparkmirror_dev.testing import unique_name

    src = topic(kafka_a, 1)
    cfg = flowgroup(src)
    mirror = cfg.mirrors[0]
    tx = Producer({"bootstrap.servers": kafka_a.bootstrap, "transactional.id": unique_name("lag-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(10):
        tx.produce(src, value=str(i).encode(), partition=0)
    tx.commit_transaction(30)
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    monitor = MirrorMonitor(cfg, mirror)
    try:
        before = monitor.poll()[(src, 0)]
        assert (before.end_offset, before.lag) == (11, 10)   # 10 records + 1 commit marker
        for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror),
                               [(r.source_topic, r.target_topic, r.partitions) for r in routes]):
            if lane.partitions:
                copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)
        deadline = time.monotonic() + 20
        while (after := monitor.poll()[(src, 0)]).next_offset is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert after.end_offset - after.next_offset == 1 and after.lag == 0
    finally:
        monitor.close()


def test_transactional_source_lag_is_zero_in_status_and_metrics(kafka_a, kafka_b, topic, flowgroup) -> None:
    """The second hop of a pipe A->B->C (or identity active/active) reads a transactionally written source:
    every transaction ends with a commit marker, an offset that is no record. Once everything is copied, the
    operator's status lag (`group_lag`) and the driver's metrics (the Prometheus endpoint and the snapshot the
    run display reads) must all say 0, not one per partition forever."""
    from confluent_kafka import Producer

    from sparkmirror_dev.testing import unique_name
    from sparkmirror_operator.lag import group_lag

    def no_secrets(name: str, key: str) -> str:
        raise KeyError(f"{name}/{key}")

    src = topic(kafka_a, 2)
    cfg = flowgroup(src, metricsPort=0, mirror={"emitHeartbeats": False, "emitCheckpoints": False})
    mirror = cfg.mirrors[0]
    tx = Producer({"bootstrap.servers": kafka_a.bootstrap, "transactional.id": unique_name("pipe-hop")})
    tx.init_transactions(30)
    for t in range(2):  # two committed transactions: markers in the middle of the partition and at its end
        tx.begin_transaction()
        for i in range(10):
            for p in range(2):
                tx.produce(src, key=f"{t}-{i}".encode(), value=f"{p}:{t}-{i}".encode(), partition=p)
        tx.commit_transaction(30)
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    with serving(cfg) as (services, scrape):
        lag = lambda: find(scrape(), "sparkmirror_partition_lag_records", topic=src)  # noqa: E731
        wait_for(lambda: lag() == [20, 20], 30, "metrics: 20 records per partition before copying (22 offsets)")
        before = group_lag(cfg, no_secrets, {}, timeout=10)
        assert (before.error, before.lag, before.partitions) == (None, 40, 2)

        for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror),
                               [(r.source_topic, r.target_topic, r.partitions) for r in routes]):
            if lane.partitions:
                copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)
        wait_for(lambda: lag() == [0, 0], 30, "metrics: lag 0 after copying")
        snap = services.snapshot()[mirror.name]
        assert snap["lag"] == 0 and not snap["errors"], snap
        # the offsets alone still differ by the last commit marker: this is the case being tested
        assert [p["end_offset"] - p["next_offset"] for p in snap["partitions_detail"]] == [1, 1]
        after = group_lag(cfg, no_secrets, {}, timeout=10)
        assert (after.error, after.lag, after.partitions) == (None, 0, 2)


def test_consumer_group_lag_in_metrics_and_status(kafka_a, kafka_b, topic, flowgroup) -> None:
    """A group at offsets 30/60 of 100 per partition: 110 records behind on the source, and 110 after its
    checkpoints on the target once everything is copied. 50 more records per partition, not copied yet: 210 on
    the source, still 110 on the target (those records are not there). The operator's status reads the same."""
    from sparkmirror_dev.testing import unique_name
    from sparkmirror_operator.lag import group_lag

    from .test_security import commit_group

    src = topic(kafka_a, 2)
    group = unique_name("lagging")
    cfg = flowgroup(src, metricsPort=0, mirror={"groups": "lagging-.*", "emitCheckpointsIntervalSeconds": 0.5,
                                                 "emitHeartbeats": False})
    mirror = cfg.mirrors[0]
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    commit_group(kafka_a.bootstrap, group, {(src, 0): 30, (src, 1): 60})
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)

    def copy() -> None:
        for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror),
                               [(r.source_topic, r.target_topic, r.partitions) for r in routes]):
            if lane.partitions:
                copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)

    copy()
    with serving(cfg) as (services, scrape):

        def lags() -> tuple[list[float], list[float]]:
            ss = scrape()
            return (find(ss, "sparkmirror_consumer_group_lag_records", group=group),
                    find(ss, "sparkmirror_consumer_group_target_lag_records", group=group))

        wait_for(lambda: lags() == ([110], [110]), 60, "the group's lag: 110 on the source and on the target")
        produce_numbered(kafka_a.bootstrap, src, 2, 100, 50)
        wait_for(lambda: lags() == ([210], [110]), 60, "210 behind on the source, still 110 on the target")
        status = group_lag(cfg, lambda name, key: "", {}, timeout=10)
        assert status.error is None and status.lag == 100
        assert [(c.group, c.lag, c.partitions) for c in status.consumer_groups or []] == [(group, 210, 2)]
        copy()
        wait_for(lambda: lags() == ([210], [210]), 60, "210 on both once the mirror caught up")


def test_time_lag_and_transactions_counted_once(kafka_a, kafka_b, topic, flowgroup) -> None:
    """Records written with timestamps two minutes old: the time lag is their age (not the time since the last
    commit, which there never was), per partition and per mirror, and 0 once they are copied. One lane carrying
    both partitions commits them together: the mirror counts each transaction once, while the per-partition
    counters count it in both. The time-lag reads stay bounded: one per behind partition, not one per poll."""
    from confluent_kafka import Producer

    src = topic(kafka_a, 2)
    cfg = flowgroup(src, lanes=1, metricsPort=0, mirror={"emitHeartbeats": False, "emitCheckpoints": False})
    mirror = cfg.mirrors[0]
    written_ms = int(time.time() * 1000) - 120_000
    p = Producer({"bootstrap.servers": kafka_a.bootstrap})
    for i in range(100):
        p.produce(src, value=str(i).encode(), partition=i % 2, timestamp=written_ms + i)
    assert p.flush(30) == 0
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    with serving(cfg) as (services, scrape):
        def aged() -> bool:
            ages = find(scrape(), "sparkmirror_partition_lag_seconds", topic=src)
            return len(ages) == 2 and all(119 < a < 180 for a in ages)

        wait_for(aged, 30, "a time lag of about two minutes on both partitions before copying")
        ss = scrape()
        assert 119 < find(ss, "sparkmirror_mirror_lag_seconds", mirror=mirror.name)[0] < 180
        # nothing committed yet: the stall counts from when this driver saw the partitions behind
        assert find(ss, "sparkmirror_mirror_commit_stall_seconds", mirror=mirror.name)[0] < 60
        time.sleep(1.5)  # several polls with the positions unchanged: no new reads
        oldest = services.mirrors[mirror.name].monitor._oldest
        assert oldest is not None and oldest.fetches == 2
        (lane,) = [ln for ln in plan_lanes(mirror.name, cfg.lanes_of(mirror),
                                           [(r.source_topic, r.target_topic, r.partitions) for r in routes])
                   if ln.partitions]
        rows = copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)
        per_partition = [r.transactions for r in rows if r.source_topic == src]
        wait_for(lambda: find(scrape(), "sparkmirror_partition_lag_seconds", topic=src) == [0, 0], 30,
                 "no time lag once copied")
        wait_for(lambda: find(scrape(), "sparkmirror_mirror_transactions_total", mirror=mirror.name)[0] > 0, 30,
                 "the transactions read from the progress topic")
        ss = scrape()
        assert find(ss, "sparkmirror_mirror_lag_seconds", mirror=mirror.name) == [0]
        assert find(ss, "sparkmirror_mirror_records_total", mirror=mirror.name) == [100]
        (tx,) = find(ss, "sparkmirror_mirror_transactions_total", mirror=mirror.name)
        assert len(per_partition) == 2 and max(per_partition) <= tx < sum(per_partition), (tx, per_partition)
