"""The driver's Prometheus metric families, made from a `DriverServices.snapshot()` (pure: the endpoint and the
tests use it alike). `metrics.py` gathers the figures; this module names and shapes them.

Names follow Prometheus' conventions: base units (seconds, bytes), `_total` counters, a histogram for latency;
rates are PromQL's `rate()` of the counters. Labels `flow_group`, `mirror`, `source`, `target`; per partition
also `topic`, `partition`, `remote_topic`. No label is called `namespace`, `pod`, `job` or `instance` (the
target's own), nor carries the worker generation (a label that changes at every handoff starts new series).

Per mirror (always served, so alerts and the dashboard work with per-partition families off):
  sparkmirror_mirror_records_total, sparkmirror_mirror_bytes_total (the partitions' progress-topic running
    totals), sparkmirror_mirror_transactions_total (transactions that committed the mirror's records, each once
    however many partitions it carried, as read from the progress topic since this driver started),
  sparkmirror_mirror_lag_records (sum), sparkmirror_mirror_lag_seconds (time lag: the largest age of a source
    record not mirrored yet), sparkmirror_mirror_commit_stall_seconds (the longest any partition has been
    behind without a commit advancing it; 0: none), sparkmirror_mirror_last_commit_timestamp_seconds,
  sparkmirror_mirror_replication_latency_seconds (histogram: commit on the target minus the record's timestamp),
  sparkmirror_mirror_topics, sparkmirror_mirror_partitions, sparkmirror_mirror_up, sparkmirror_mirror_stalled,
  sparkmirror_mirror_stalled_seconds (waiting for a cluster), sparkmirror_mirror_errors_total (label
  `service`), sparkmirror_mirror_batches_total and sparkmirror_mirror_batches_rebuilt_total (label `reason`; the
  batch path's batches forwarded and rebuilt), sparkmirror_mirror_copy_path (1, labels `path`: batches or records,
  and `fallback`: why a mirror copies records where batches were asked for or the default, identity_policy or
  client_settings, empty otherwise), sparkmirror_mirror_records_transformed_total (label `outcome`:
  dropped, not_json; the mirror's record transforms), sparkmirror_heartbeats_total, sparkmirror_checkpoints_groups,
  sparkmirror_mirror_remote_topics_deleted and _pending_deletion (deletion propagation, from the topic records),
  sparkmirror_consumer_group_lag_records, sparkmirror_consumer_group_target_lag_records (label `group`);
per flow group: sparkmirror_flow_group_generation (the worker generation as a value),
  sparkmirror_driver_jvm_memory_bytes;
per partition, only with `per_partition` (the flow group's `metricsPerPartition`; `PER_PARTITION` lists them):
  the lag in records and seconds, the commit stall, source end and mirrored offsets, records, bytes and
  transactions totals, last commit time.
"""
from __future__ import annotations

import time

from .copying.summary import LATENCY_BUCKETS_MS

PER_PARTITION = (
    "sparkmirror_partition_lag_records", "sparkmirror_partition_lag_seconds",
    "sparkmirror_partition_commit_stall_seconds", "sparkmirror_partition_source_end_offset",
    "sparkmirror_partition_mirrored_offset", "sparkmirror_partition_records_total",
    "sparkmirror_partition_bytes_total", "sparkmirror_partition_transactions_total",
    "sparkmirror_partition_last_commit_timestamp_seconds",
)
"""The families with a series per source partition: `metricsPerPartition: false` leaves them out."""

EXPORTED = (
    *PER_PARTITION,
    "sparkmirror_mirror_records_total", "sparkmirror_mirror_bytes_total", "sparkmirror_mirror_transactions_total",
    "sparkmirror_mirror_lag_records", "sparkmirror_mirror_lag_seconds", "sparkmirror_mirror_commit_stall_seconds",
    "sparkmirror_mirror_last_commit_timestamp_seconds", "sparkmirror_mirror_replication_latency_seconds",
    "sparkmirror_mirror_topics", "sparkmirror_mirror_partitions", "sparkmirror_mirror_up", "sparkmirror_mirror_stalled",
    "sparkmirror_mirror_stalled_seconds", "sparkmirror_mirror_errors_total", "sparkmirror_mirror_batches_total",
    "sparkmirror_mirror_batches_rebuilt_total", "sparkmirror_mirror_copy_path",
    "sparkmirror_mirror_records_transformed_total", "sparkmirror_heartbeats_total", "sparkmirror_checkpoints_groups",
    "sparkmirror_mirror_remote_topics_deleted", "sparkmirror_mirror_remote_topics_pending_deletion",
    "sparkmirror_consumer_group_lag_records", "sparkmirror_consumer_group_target_lag_records",
    "sparkmirror_flow_group_generation",
    "sparkmirror_driver_jvm_memory_bytes",
)
"""Every metric family the endpoint serves besides prometheus_client's `process_*` (as scraped: counters with
`_total`; a histogram's series add `_bucket`, `_sum`, `_count`)."""


def families(flow_group: str, snapshot: dict[str, dict], generation: int | None = None,
             jvm_memory: dict[str, int] | None = None, per_partition: bool = True) -> list:
    """Prometheus metric families of a snapshot (pure: used by the endpoint and by tests)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    ml = ["flow_group", "mirror", "source", "target"]
    pl = [*ml, "topic", "partition", "remote_topic"]

    def g(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=labels)

    def c(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        return CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)

    p_lag = g("sparkmirror_partition_lag_records", "Records not mirrored yet (source end offset minus next offset "
              "to mirror, counted when small).", pl)
    p_lag_s = g("sparkmirror_partition_lag_seconds", "Time lag: age of the oldest source record not mirrored yet "
                "(from its timestamp; 0: caught up).", pl)
    p_stall = g("sparkmirror_partition_commit_stall_seconds", "How long the partition has been behind without a "
                "commit advancing it (0: caught up or advancing).", pl)
    p_end = g("sparkmirror_partition_source_end_offset", "End offset of the source partition.", pl)
    p_pos = g("sparkmirror_partition_mirrored_offset", "Next source offset to mirror (committed on the target).", pl)
    p_tot = c("sparkmirror_partition_records_total", "Records mirrored, from the progress topic's running totals.", pl)
    p_bytes = c("sparkmirror_partition_bytes_total", "Bytes mirrored (key and value bytes on copy: records, record batch "
                "bytes as written on copy: batches), from the progress topic's running "
                "totals.", pl)
    p_tx = c("sparkmirror_partition_transactions_total", "Transactions that committed records of the partition "
             "(since this driver started; one transaction counts in every partition it carried).", pl)
    p_last = g("sparkmirror_partition_last_commit_timestamp_seconds", "Time of the last commit.", pl)
    m_tot = c("sparkmirror_mirror_records_total", "Records mirrored: the partitions' progress-topic running totals.",
              ml)
    m_bytes = c("sparkmirror_mirror_bytes_total", "Bytes mirrored: key and value bytes on copy: records, the record "
              "batches' bytes as written (framing included, compressed as the source wrote them) on copy: batches "
              "(progress-topic running totals).", ml)
    m_tx = c("sparkmirror_mirror_transactions_total", "Transactions that committed the mirror's records, each once "
             "(read from the progress topic since this driver started).", ml)
    m_lag = g("sparkmirror_mirror_lag_records", "Sum of the partitions' lag in records.", ml)
    m_lag_s = g("sparkmirror_mirror_lag_seconds", "Time lag: the largest age of a source record not mirrored yet.",
                ml)
    m_stall = g("sparkmirror_mirror_commit_stall_seconds", "The longest any partition has been behind without a "
                "commit advancing it (0: none).", ml)
    m_last = g("sparkmirror_mirror_last_commit_timestamp_seconds", "Time of the mirror's newest commit.", ml)
    m_lat = HistogramMetricFamily("sparkmirror_mirror_replication_latency_seconds", "Commit time on the target minus "
                                  "the source record's timestamp, every record mirrored by this driver.", labels=ml)
    m_top = g("sparkmirror_mirror_topics", "Source topics mirrored.", ml)
    m_par = g("sparkmirror_mirror_partitions", "Source partitions mirrored.", ml)
    m_up = g("sparkmirror_mirror_up", "1 when the mirror and its services report no error and wait for nothing.",
             ml)
    m_wait = g("sparkmirror_mirror_stalled", "1 while the mirror waits for a cluster that does not answer.", ml)
    m_wait_s = g("sparkmirror_mirror_stalled_seconds", "How long the mirror has been waiting (0: not waiting).", ml)
    m_err = c("sparkmirror_mirror_errors_total", "Failures of the mirror's driver services, by service.",
              [*ml, "service"])
    m_bat = c("sparkmirror_mirror_batches_total", "Record batches the batch path (copy: batches) forwarded as they "
              "were fetched.", ml)
    m_reb = c("sparkmirror_mirror_batches_rebuilt_total", "Record batches the batch path rebuilt before the target "
              "took them, by reason (old_magic, log_append_time, offset_gaps, starts_before).", [*ml, "reason"])
    m_path = g("sparkmirror_mirror_copy_path", "1 for the path the mirror's lanes take (path: batches or records); "
               "fallback: why they copy records where batches were asked for or the default (identity_policy, "
               "client_settings; empty: none).", [*ml, "path", "fallback"])
    m_xf = c("sparkmirror_mirror_records_transformed_total", "Records the mirror's transforms dropped (outcome "
             "dropped) or copied unchanged as their value was not a JSON object for dropJsonFields (not_json).",
             [*ml, "outcome"])
    m_hb = c("sparkmirror_heartbeats_total", "MM2 heartbeats emitted.", ml)
    m_ck = g("sparkmirror_checkpoints_groups", "Consumer groups checkpointed in the last round.", ml)
    m_del = g("sparkmirror_mirror_remote_topics_deleted", "Remote topics deletion propagation (deleteRemoteTopics) "
              "deleted, as the mirror's topic records in the progress topic say.", ml)
    m_gone = g("sparkmirror_mirror_remote_topics_pending_deletion", "Remote topics the mirror created whose source "
               "topic is gone or recreated: deleted once the grace has passed (deleteRemoteTopics).", ml)
    gl = [*ml, "group"]
    g_lag = g("sparkmirror_consumer_group_lag_records", "Records a checkpointed consumer group has not read on the "
              "source (end offset minus committed offset, over the mirrored partitions).", gl)
    g_tlag = g("sparkmirror_consumer_group_target_lag_records", "Records after the group's translated offsets on "
               "the target: what it would read there if it failed over now.", gl)
    f_gen = g("sparkmirror_flow_group_generation", "Worker generation this driver runs.", ["flow_group"])
    f_mem = g("sparkmirror_driver_jvm_memory_bytes", "The driver JVM's heap, by area.", ["flow_group", "area"])
    now = time.time()
    for name, s in sorted(snapshot.items()):
        mv = [flow_group, name, s["source"], s["target"]]
        ages, stalls, lasts, totals, nbytes = [], [], [], [], []
        for p in s["partitions_detail"]:
            pv = [*mv, p["topic"], str(p["partition"]), p["remote_topic"] or ""]
            if p.get("lag_seconds") is not None:
                ages.append(p["lag_seconds"])
            if p.get("stall_seconds") is not None:
                stalls.append(p["stall_seconds"])
            if p["last_commit_ms"]:
                lasts.append(p["last_commit_ms"] / 1000.0)
            if p.get("records_committed") is not None:
                totals.append(p["records_committed"])
                nbytes.append(p["bytes_committed"] or 0)
            if not per_partition:
                continue
            if p["lag"] is not None:
                p_lag.add_metric(pv, p["lag"])
            if p.get("lag_seconds") is not None:
                p_lag_s.add_metric(pv, p["lag_seconds"])
            if p.get("stall_seconds") is not None:
                p_stall.add_metric(pv, p["stall_seconds"])
            if p["end_offset"] is not None:
                p_end.add_metric(pv, p["end_offset"])
            if p["next_offset"] is not None:
                p_pos.add_metric(pv, p["next_offset"])
            if p.get("records_committed") is not None:
                p_tot.add_metric(pv, p["records_committed"])
                p_bytes.add_metric(pv, p["bytes_committed"] or 0)
            p_tx.add_metric(pv, p.get("transactions") or 0)
            if p["last_commit_ms"]:
                p_last.add_metric(pv, p["last_commit_ms"] / 1000.0)
        if totals:
            m_tot.add_metric(mv, sum(totals))
            m_bytes.add_metric(mv, sum(nbytes))
        m_tx.add_metric(mv, s.get("transactions") or 0)
        if s["lag"] is not None:
            m_lag.add_metric(mv, s["lag"])
        if ages:
            m_lag_s.add_metric(mv, max(ages))
        m_stall.add_metric(mv, max(stalls, default=0.0))  # always a series: a mirror that never committed too
        if lasts:
            m_last.add_metric(mv, max(lasts))
        lat = s.get("latency")
        if lat:
            buckets = [(repr(b / 1000), n) for b, n in zip(LATENCY_BUCKETS_MS, lat["le"])]
            m_lat.add_metric(mv, [*buckets, ("+Inf", lat["count"])], lat["sum_ms"] / 1000.0)
        m_top.add_metric(mv, s["topics"])
        m_par.add_metric(mv, s["partitions"])
        m_up.add_metric(mv, 0 if s["errors"] or s.get("waiting") else 1)
        m_wait.add_metric(mv, 1 if s.get("waiting") else 0)
        since = s.get("waiting_since")
        m_wait_s.add_metric(mv, max(now - since, 0.0) if s.get("waiting") and since else 0.0)
        for service in ("monitor", "heartbeats", "checkpoints"):
            m_err.add_metric([*mv, service], (s.get("error_counts") or {}).get(service, 0))
        m_bat.add_metric(mv, s.get("batches") or 0)
        for why, n in sorted((s.get("rebuilt") or {}).items()):
            m_reb.add_metric([*mv, why], n)
        if s.get("copy") is not None:
            m_path.add_metric([*mv, str(s["copy"]["path"].value), s["copy"]["fallback"]], 1)
        for what, n in sorted((s.get("transformed") or {}).items()):
            m_xf.add_metric([*mv, what], n)
        m_hb.add_metric(mv, s["heartbeats"])
        m_ck.add_metric(mv, s["checkpoint_groups"])
        m_del.add_metric(mv, s.get("remote_topics_deleted", 0))
        m_gone.add_metric(mv, s.get("remote_topics_pending_deletion", 0))
        for cg in s.get("consumer_groups") or []:
            g_lag.add_metric([*mv, cg["group"]], cg["lag"])
            if cg["target_lag"] is not None:
                g_tlag.add_metric([*mv, cg["group"]], cg["target_lag"])
    if generation is not None:
        f_gen.add_metric([flow_group], generation)
    for area, n in sorted((jvm_memory or {}).items()):
        f_mem.add_metric([flow_group, area], n)
    partition = [p_lag, p_lag_s, p_stall, p_end, p_pos, p_tot, p_bytes, p_tx, p_last] if per_partition else []
    return [*partition, m_tot, m_bytes, m_tx, m_lag, m_lag_s, m_stall, m_last, m_lat, m_top, m_par, m_up, m_wait,
            m_wait_s, m_err, m_bat, m_reb, m_path, m_xf, m_hb, m_ck, m_del, m_gone, g_lag, g_tlag, f_gen, f_mem]


def prometheus_text(flow_group: str, snapshot: dict[str, dict], generation: int | None = None,
                    jvm_memory: dict[str, int] | None = None, per_partition: bool = True) -> str:
    """The exposition text of a snapshot (what /metrics serves)."""
    from prometheus_client import CollectorRegistry, generate_latest

    class _Static:
        def collect(self):
            return families(flow_group, snapshot, generation, jvm_memory, per_partition)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Static())
    return generate_latest(registry).decode()
