"""Driver-side services beside the streaming queries: live lag, Prometheus metrics, heartbeats, checkpoints.

`DriverServices(config).start()` runs, in one daemon thread per flow group:
- per mirror a `MirrorMonitor`: follows the progress topic on the target (what is committed there is what is
  mirrored) and the source's end offsets, giving per-partition lag in records (`progress.partition_lag`: end
  offset minus next offset to mirror, small ones counted read_committed so transaction markers do not count)
  and records/s live, independent of Spark's epoch length;
- heartbeats every `emitHeartbeatsIntervalSeconds` and checkpoints / group offset sync every
  `emitCheckpointsIntervalSeconds` (`heartbeats.py`, `checkpoints.py`);
- when `metricsPort` is set, Prometheus text on `http://<bind>:<metricsPort>/metrics` (prometheus_client).

Records/s and bytes/s are live too, from the progress records committed in the last RATE_WINDOW_S (an epoch's
summary arrives only when the epoch ends, tens of seconds later). Records totals and replication latency
(commit time minus record timestamp) come from the copy job's epoch summaries, which the driver hands over as
`stats` (`driver.Driver.stats_snapshot`); nothing here reaches for the driver. `snapshot()` merges both views; the runner draws its progress from it.

A cluster that does not answer is no error: the mirror is *waiting* (`waiting`, `waiting_since` in the
snapshot; `sparkmirror_mirror_stalled` and `sparkmirror_mirror_stalled_seconds`), as the services see it live
or the lanes reported it at the end of their last epoch; one log line when it starts, one when it ends.

Metric names follow Prometheus' conventions: base units (seconds, bytes), `_total` counters, a histogram for
latency; rates are PromQL's `rate()` of the counters. Labels `flow_group`, `mirror`, `source`, `target`; per
partition also `topic`, `partition`, `remote_topic`. `EXPORTED` lists them all (the chart's dashboard and alerts
are checked against it).
  sparkmirror_partition_records_total, sparkmirror_partition_bytes_total: counters read from the progress topic
    (every progress record carries the key's running totals, so they survive driver restarts and compaction);
  sparkmirror_partition_transactions_total: transactions that committed the partition's records (this driver);
  sparkmirror_partition_lag_records, sparkmirror_partition_lag_seconds (how long the partition has been behind
    without its mirrored position advancing: 0 when caught up), sparkmirror_partition_source_end_offset,
    sparkmirror_partition_mirrored_offset, sparkmirror_partition_last_commit_timestamp_seconds;
  sparkmirror_mirror_replication_latency_seconds: histogram of commit time on the target minus the source
    record's timestamp, every record mirrored by this driver;
  sparkmirror_mirror_lag_records, sparkmirror_mirror_lag_seconds (the partitions' sum and max),
  sparkmirror_mirror_topics, sparkmirror_mirror_partitions, sparkmirror_mirror_up, sparkmirror_mirror_stalled,
  sparkmirror_mirror_stalled_seconds, sparkmirror_mirror_errors_total (label `service`: failures of the
  monitor, heartbeats or checkpoints), sparkmirror_heartbeats_total, sparkmirror_checkpoints_groups;
  sparkmirror_consumer_group_lag_records, sparkmirror_consumer_group_target_lag_records (label `group`: each
    checkpointed group's lag on the source and after its translated offsets on the target, `consumerlag.py`);
  sparkmirror_flow_group_generation (the worker generation this driver runs), sparkmirror_driver_jvm_memory_bytes
  (label `area`: heap_used, heap_committed, heap_max), and prometheus_client's `process_*` (the driver's Python
  process: process_resident_memory_bytes, process_cpu_seconds_total, ...).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, OffsetSpec

from .copying.errors import talking_to, transient_reason
from .copying.summary import LATENCY_BUCKETS_MS
from .outage import Outage
from .progress import CommittedCounter, ProgressTail, lag_position, partition_lag, should_count
from .resource.flowgroup import FlowGroupConfig, Mirror
from .replication import policy_for
from .topicsync import list_offsets, select_topics, topic_filter

log = logging.getLogger(__name__)

RATE_WINDOW_S = 10.0


@dataclass
class PartitionLive:
    topic: str
    partition: int
    remote_topic: str | None = None
    next_offset: int | None = None   # next source offset to mirror (None: nothing mirrored yet)
    start_offset: int = 0            # earliest source offset (where a new partition starts)
    end_offset: int = 0              # source end offset
    records_per_s: float = 0.0
    bytes_per_s: float = 0.0         # key + value bytes, over the same window as records_per_s
    last_commit_ms: int | None = None
    counted_lag: int | None = None   # records actually left, when counted (offsets include txn markers)
    mirrored: int = 0                # records mirrored, from the progress topic (all workers, all time)
    mirrored_bytes: int = 0          # their key + value bytes
    behind_since: float | None = None  # when the partition last fell behind (lag > 0), epoch seconds

    @property
    def position(self) -> int:
        return lag_position(self.start_offset, self.next_offset)

    @property
    def lag(self) -> int:
        return partition_lag(self.start_offset, self.end_offset, self.next_offset, self.counted_lag)

    def lag_seconds(self, now: float) -> float:
        """How long the partition has been behind without its mirrored position advancing (0: caught up)."""
        if self.lag <= 0 or self.behind_since is None:
            return 0.0
        return max(now - max(self.behind_since, (self.last_commit_ms or 0) / 1000.0), 0.0)


class MirrorMonitor:
    """Live per-partition position of one mirror, from the progress topic and the source's offsets."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 10.0) -> None:
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.policy, self.filter = policy_for(mirror), topic_filter(config, mirror)
        self.source_admin = AdminClient(config.cluster(mirror.source).client_config())
        self.tail = ProgressTail(config.cluster(mirror.target).client_config(), config.progressTopic, mirror.source,
                                 resource=config.resource, max_history=config.offsetHistory)
        self.partitions: dict[tuple[str, int], PartitionLive] = {}
        self.updated: float | None = None
        self._counter: CommittedCounter | None = None

    def _offsets(self, tps: list[tuple[str, int]], spec) -> dict[tuple[str, int], int]:
        return list_offsets(self.source_admin, tps, spec, self.timeout)

    def poll(self) -> dict[tuple[str, int], PartitionLive]:
        """Raises `Unreachable` naming the side when a cluster does not answer."""
        with talking_to("target", self.mirror.target, "reading the progress topic"):
            self.tail.poll(self.timeout)
        with talking_to("source", self.mirror.source, "listing topics"):
            md = self.source_admin.list_topics(timeout=self.timeout)
        counts = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}
        tps = [(t, p) for t in select_topics(self.policy, self.filter, counts, self.mirror.target)
               for p in range(counts[t])]
        ends, starts = self._offsets(tps, OffsetSpec.latest()), self._offsets(tps, OffsetSpec.earliest())
        latest, maps, totals = self.tail.latest(), self.tail.maps(), self.tail.totals()
        now_ms = time.time() * 1000
        out = {}
        for tp in tps:
            pl = PartitionLive(*tp, end_offset=ends.get(tp, 0), start_offset=starts.get(tp, 0))
            rec = latest.get(tp)
            if rec is not None:
                pl.next_offset, pl.remote_topic, pl.last_commit_ms = rec.next_offset, rec.target_topic, rec.commit_ms
                n = nbytes = 0
                for r in reversed(maps[tp].records):
                    if r.commit_ms < now_ms - RATE_WINDOW_S * 1000:
                        break
                    n += r.count
                    nbytes += r.bytes
                pl.records_per_s, pl.bytes_per_s = n / RATE_WINDOW_S, nbytes / RATE_WINDOW_S
                pl.mirrored, pl.mirrored_bytes = totals.get(tp, (0, 0))
            else:
                pl.remote_topic = self.policy.format_remote_topic(self.mirror.source, tp[0])
            out[tp] = pl
        self._count_small_lags(out)
        now = time.time()
        for tp, pl in out.items():
            before = self.partitions.get(tp)
            if pl.lag > 0:
                pl.behind_since = before.behind_since if before and before.behind_since is not None else now
        self.partitions, self.updated = out, now
        return out

    def _count_small_lags(self, parts: dict[tuple[str, int], PartitionLive]) -> None:
        """Small lags are counted record by record (see `progress.lag`): offsets include transaction markers."""
        todo = {tp: (pl.position, pl.end_offset) for tp, pl in parts.items()
                if should_count(pl.start_offset, pl.end_offset, pl.next_offset)}
        if not todo:
            return
        if self._counter is None:
            self._counter = CommittedCounter(self.config.cluster(self.mirror.source).client_config(),
                                             min(self.timeout, 5.0))
        for tp, n in self._counter.count(todo).items():
            parts[tp].counted_lag = n

    def close(self) -> None:
        self.tail.close()
        if self._counter is not None:
            self._counter.close()


def _summary_lag(jp: dict) -> int | None:
    """Lag of a partition the monitor has not seen yet, from the job's epoch summary (by offsets: the summary
    has neither the low watermark nor a count; the monitor's figure replaces it on its next poll)."""
    end, nxt = jp.get("source_end", -1), jp.get("next_offset", -1)
    if end is None or nxt is None or end < 0 or nxt < 0:
        return None
    return partition_lag(nxt, end, nxt)


@dataclass
class _Mirror:
    mirror: Mirror
    monitor: MirrorMonitor | None = None
    heartbeats: object | None = None
    checkpoints: object | None = None
    next_heartbeat: float = 0.0
    next_checkpoint: float = 0.0
    next_poll: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)
    error_counts: dict[str, int] = field(default_factory=dict)  # failures by service, since the driver started
    checkpoint_groups: int = 0
    outage: Outage | None = None  # what the services wait for (a cluster that does not answer), by service

    def __post_init__(self) -> None:
        self.outage = Outage(f"mirror {self.mirror.name!r}")


class DriverServices:
    """Heartbeats, checkpoints, live lag and the metrics endpoint of one flow group (see the module doc)."""

    def __init__(self, config: FlowGroupConfig, stats: Callable[[], dict[str, dict]] | None = None,
                 poll_interval: float = 2.0, bind: str | None = None, heartbeats: bool = True,
                 checkpoints: bool = True, jvm_memory: Callable[[], dict[str, int]] | None = None) -> None:
        """`stats`: the job's epoch figures by mirror (`Driver.stats_snapshot`); `jvm_memory`: the driver JVM's
        heap figures by area (`Driver.jvm_memory`), both read at scrape time."""
        self.config, self.stats = config, stats or dict
        self.jvm_memory = jvm_memory or dict
        self.poll_interval = poll_interval
        self.bind = bind or config.metricsBind or os.environ.get("SPARKMIRROR_METRICS_BIND", "0.0.0.0")
        self._want_heartbeats, self._want_checkpoints = heartbeats, checkpoints
        self.mirrors: dict[str, _Mirror] = {m.name: _Mirror(m) for m in config.mirrors}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._httpd = None
        self.metrics_port: int | None = None

    # -- lifecycle
    def start(self) -> "DriverServices":
        if self.config.metricsPort is not None:
            from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Collector(self))
            ProcessCollector(registry=registry)  # the driver's memory and CPU
            self._httpd, _t = start_http_server(self.config.metricsPort, addr=self.bind, registry=registry)
            self.metrics_port = self._httpd.server_port
            log.info("flow group %s: metrics on http://%s:%d/metrics", self.config.name, self.bind,
                     self.metrics_port)
        self._thread = threading.Thread(target=self._run, name=f"sparkmirror-services-{self.config.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        for m in self.mirrors.values():
            for part in (m.checkpoints, m.heartbeats, m.monitor):  # the monitor last: its tail may be shared
                if part is not None:
                    try:
                        part.close()
                    except Exception:  # noqa: BLE001 - closing on the way out
                        pass

    def superseded_why(self, failover_only: bool = False) -> str | None:
        """Why this flow group's generation must not copy, as the mirrors' progress-topic tails have read the
        marks so far (`ProgressState.superseded_why`; with `failover_only`, only a failover counts)."""
        cfg = self.config
        for m in list(self.mirrors.values()):
            if m.monitor is None:
                continue
            state = m.monitor.tail.state
            of = (cfg.resource, cfg.resourceUid, cfg.name)
            if failover_only and of not in state.failovers:
                continue
            why = state.superseded_why(*of, cfg.worker.generation)
            if why is not None:
                return why
        return None

    def marked_go(self) -> bool:
        """Whether the progress-topic tails have read this generation's go mark: its lanes may have copied, also
        when this driver never took over itself (a restart of a generation that had, whose lanes start on the
        mark while the driver is still in standby)."""
        cfg = self.config
        return any(m.monitor is not None and m.monitor.tail.state.may_copy(
            cfg.resource, cfg.resourceUid, cfg.name, cfg.worker.generation) is True
            for m in list(self.mirrors.values()))

    # -- the loop
    def _guard(self, m: _Mirror, what: str, fn: Callable[[], object]) -> None:
        assert m.outage is not None
        try:
            fn()
            m.errors.pop(what, None)
            line = m.outage.answered(what)
        except Exception as e:  # noqa: BLE001 - one failing service must not stop the others; it is reported
            if transient_reason(e) is None:
                if m.errors.get(what) != str(e):
                    log.warning("mirror %s: %s failed: %s", m.mirror.name, what, e)
                m.errors[what] = str(e)
                m.error_counts[what] = m.error_counts.get(what, 0) + 1
                return
            # not an error: waiting for a cluster (the monitor knows which; heartbeats go to the target)
            side = getattr(e, "what", None) or (f"target cluster {m.mirror.target!r}" if what == "heartbeats"
                                                 else f"{what}: a cluster")
            line = m.outage.failed(what, side, getattr(e, "reason", None) or transient_reason(e) or str(e))
            m.errors.pop(what, None)
        if line:
            log.warning("%s", line)

    def _tick(self, m: _Mirror, now: float) -> None:
        mirror = m.mirror
        if now >= m.next_poll:
            m.next_poll = now + self.poll_interval
            if m.monitor is None:
                self._guard(m, "monitor", lambda: setattr(m, "monitor", MirrorMonitor(self.config, mirror)))
            if m.monitor is not None:
                self._guard(m, "monitor", m.monitor.poll)
        if self._want_heartbeats and mirror.emitHeartbeats and now >= m.next_heartbeat:
            m.next_heartbeat = now + mirror.emitHeartbeatsIntervalSeconds
            from .heartbeats import HeartbeatEmitter

            if m.heartbeats is None:
                self._guard(m, "heartbeats", lambda: setattr(m, "heartbeats", HeartbeatEmitter(self.config, mirror)))
            if m.heartbeats is not None:
                self._guard(m, "heartbeats", m.heartbeats.emit)
        wants_ckpt = mirror.emitCheckpoints or mirror.syncGroupOffsets
        if self._want_checkpoints and wants_ckpt and now >= m.next_checkpoint:
            m.next_checkpoint = now + min(
                [mirror.emitCheckpointsIntervalSeconds] * mirror.emitCheckpoints
                + [mirror.syncGroupOffsetsIntervalSeconds] * mirror.syncGroupOffsets)
            from .checkpoints import CheckpointEmitter

            if m.checkpoints is None:
                # one progress-topic reader per mirror on the driver: the monitor's, when it has one
                tail = m.monitor.tail if m.monitor is not None else None
                self._guard(m, "checkpoints", lambda: setattr(m, "checkpoints",
                                                              CheckpointEmitter(self.config, mirror, tail=tail)))
            if m.checkpoints is not None:
                def run() -> None:
                    cps = m.checkpoints.run_once()
                    m.checkpoint_groups = len(cps)
                self._guard(m, "checkpoints", run)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for m in self.mirrors.values():
                if self._stop.is_set():
                    break
                self._tick(m, now)
            self._stop.wait(0.2)

    # -- views
    def snapshot(self) -> dict[str, dict]:
        """Per mirror: totals and per-partition figures, live lag merged with the job's epoch summaries."""
        job = self.stats() or {}
        out = {}
        for name, m in self.mirrors.items():
            js = job.get(name) or {}
            jparts = {(p["source_topic"], p["partition"]): p for p in js.get("partitions", [])}
            live = dict(m.monitor.partitions) if m.monitor is not None else {}
            parts = []
            for tp in sorted(set(live) | set(jparts)):
                lv, jp = live.get(tp), jparts.get(tp, {})
                parts.append({
                    "topic": tp[0], "partition": tp[1],
                    "remote_topic": (lv.remote_topic if lv else None) or jp.get("target_topic"),
                    "lag": lv.lag if lv else _summary_lag(jp),
                    "end_offset": lv.end_offset if lv else jp.get("source_end"),
                    "next_offset": lv.next_offset if lv else jp.get("next_offset"),
                    "records_per_s": lv.records_per_s if lv else jp.get("records_per_s", 0.0),
                    "bytes_per_s": lv.bytes_per_s if lv else jp.get("bytes_per_s", 0.0),
                    "records_total": max(jp.get("records_total", 0), lv.mirrored if lv else 0),
                    # the exported counters: the progress topic's running totals only (None until it was read)
                    "records_committed": lv.mirrored if lv and lv.next_offset is not None else None,
                    "bytes_committed": lv.mirrored_bytes if lv and lv.next_offset is not None else None,
                    "transactions": jp.get("transactions_total", 0),
                    "lag_seconds": lv.lag_seconds(time.time()) if lv else None,
                    "latency_ms_avg": jp.get("latency_ms_avg"), "latency_ms_max": jp.get("latency_ms_max"),
                    "last_commit_ms": (lv.last_commit_ms if lv else None) or jp.get("last_commit_ms"),
                })
            lags = [p["lag"] for p in parts if p["lag"] is not None]
            errors = dict(m.errors)
            if js.get("error"):
                errors["job"] = js["error"]
            # live (the services) first, else what the lanes reported at the end of their last epoch
            waiting, since = (m.outage.waiting, m.outage.since) if m.outage and m.outage.waiting else \
                (js.get("waiting"), js.get("waiting_since"))
            out[name] = {
                "mirror": name, "source": m.mirror.source, "target": m.mirror.target,
                "topics": len({p["topic"] for p in parts}), "partitions": len(parts),
                "lag": sum(lags) if lags else None,
                "records_per_s": sum(p["records_per_s"] or 0.0 for p in parts),
                "bytes_per_s": sum(p["bytes_per_s"] or 0.0 for p in parts),
                "records_total": sum(p["records_total"] or 0 for p in parts),
                "heartbeats": getattr(m.heartbeats, "sent", 0), "checkpoint_groups": m.checkpoint_groups,
                "consumer_groups": [{"group": c.group, "lag": c.lag, "target_lag": c.target_lag,
                                     "partitions": c.partitions} for c in getattr(m.checkpoints, "lags", [])],
                "updated": m.monitor.updated if m.monitor is not None else None,
                "errors": errors, "partitions_detail": parts, "waiting": waiting, "waiting_since": since,
                "error_counts": dict(m.error_counts), "latency": js.get("latency"),
            }
        return out


class _Collector:
    """prometheus_client collector reading DriverServices.snapshot() at scrape time."""

    def __init__(self, services: DriverServices) -> None:
        self.services = services

    def collect(self) -> Iterable:
        cfg = self.services.config
        return families(cfg.name, self.services.snapshot(), cfg.worker.generation, self.services.jvm_memory())


EXPORTED = (
    "sparkmirror_partition_lag_records", "sparkmirror_partition_lag_seconds", "sparkmirror_partition_source_end_offset",
    "sparkmirror_partition_mirrored_offset", "sparkmirror_partition_records_total", "sparkmirror_partition_bytes_total",
    "sparkmirror_partition_transactions_total", "sparkmirror_partition_last_commit_timestamp_seconds",
    "sparkmirror_mirror_lag_records", "sparkmirror_mirror_lag_seconds", "sparkmirror_mirror_replication_latency_seconds",
    "sparkmirror_mirror_topics", "sparkmirror_mirror_partitions", "sparkmirror_mirror_up", "sparkmirror_mirror_stalled",
    "sparkmirror_mirror_stalled_seconds", "sparkmirror_mirror_errors_total", "sparkmirror_heartbeats_total",
    "sparkmirror_checkpoints_groups", "sparkmirror_consumer_group_lag_records",
    "sparkmirror_consumer_group_target_lag_records", "sparkmirror_flow_group_generation",
    "sparkmirror_driver_jvm_memory_bytes",
)
"""Every metric family the endpoint serves besides prometheus_client's `process_*` (as scraped: counters with
`_total`; a histogram's series add `_bucket`, `_sum`, `_count`)."""


def families(flow_group: str, snapshot: dict[str, dict], generation: int | None = None,
             jvm_memory: dict[str, int] | None = None) -> list:
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
    p_lag_s = g("sparkmirror_partition_lag_seconds", "How long the partition has been behind without its mirrored "
                "position advancing (0: caught up).", pl)
    p_end = g("sparkmirror_partition_source_end_offset", "End offset of the source partition.", pl)
    p_pos = g("sparkmirror_partition_mirrored_offset", "Next source offset to mirror (committed on the target).", pl)
    p_tot = c("sparkmirror_partition_records_total", "Records mirrored, from the progress topic's running totals.", pl)
    p_bytes = c("sparkmirror_partition_bytes_total", "Key and value bytes mirrored, from the progress topic's running "
                "totals.", pl)
    p_tx = c("sparkmirror_partition_transactions_total", "Transactions that committed records of the partition "
             "(since this driver started).", pl)
    p_last = g("sparkmirror_partition_last_commit_timestamp_seconds", "Time of the last commit.", pl)
    m_lag = g("sparkmirror_mirror_lag_records", "Sum of the partitions' lag in records.", ml)
    m_lag_s = g("sparkmirror_mirror_lag_seconds", "Largest lag in seconds of the mirror's partitions.", ml)
    m_lat = HistogramMetricFamily("sparkmirror_mirror_replication_latency_seconds", "Commit time on the target minus "
                                  "the source record's timestamp, every record mirrored by this driver.", labels=ml)
    m_top = g("sparkmirror_mirror_topics", "Source topics mirrored.", ml)
    m_par = g("sparkmirror_mirror_partitions", "Source partitions mirrored.", ml)
    m_up = g("sparkmirror_mirror_up", "1 when the mirror and its services report no error and wait for nothing.",
             ml)
    m_stall = g("sparkmirror_mirror_stalled", "1 while the mirror waits for a cluster that does not answer.", ml)
    m_stall_s = g("sparkmirror_mirror_stalled_seconds", "How long the mirror has been waiting (0: not waiting).", ml)
    m_err = c("sparkmirror_mirror_errors_total", "Failures of the mirror's driver services, by service.",
              [*ml, "service"])
    m_hb = c("sparkmirror_heartbeats_total", "MM2 heartbeats emitted.", ml)
    m_ck = g("sparkmirror_checkpoints_groups", "Consumer groups checkpointed in the last round.", ml)
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
        lag_s = []
        for p in s["partitions_detail"]:
            pv = [*mv, p["topic"], str(p["partition"]), p["remote_topic"] or ""]
            if p["lag"] is not None:
                p_lag.add_metric(pv, p["lag"])
            if p.get("lag_seconds") is not None:
                p_lag_s.add_metric(pv, p["lag_seconds"])
                lag_s.append(p["lag_seconds"])
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
        if s["lag"] is not None:
            m_lag.add_metric(mv, s["lag"])
        if lag_s:
            m_lag_s.add_metric(mv, max(lag_s))
        lat = s.get("latency")
        if lat:
            buckets = [(repr(b / 1000), n) for b, n in zip(LATENCY_BUCKETS_MS, lat["le"])]
            m_lat.add_metric(mv, [*buckets, ("+Inf", lat["count"])], lat["sum_ms"] / 1000.0)
        m_top.add_metric(mv, s["topics"])
        m_par.add_metric(mv, s["partitions"])
        m_up.add_metric(mv, 0 if s["errors"] or s.get("waiting") else 1)
        m_stall.add_metric(mv, 1 if s.get("waiting") else 0)
        since = s.get("waiting_since")
        m_stall_s.add_metric(mv, max(now - since, 0.0) if s.get("waiting") and since else 0.0)
        for service in ("monitor", "heartbeats", "checkpoints"):
            m_err.add_metric([*mv, service], (s.get("error_counts") or {}).get(service, 0))
        m_hb.add_metric(mv, s["heartbeats"])
        m_ck.add_metric(mv, s["checkpoint_groups"])
        for cg in s.get("consumer_groups") or []:
            g_lag.add_metric([*mv, cg["group"]], cg["lag"])
            if cg["target_lag"] is not None:
                g_tlag.add_metric([*mv, cg["group"]], cg["target_lag"])
    if generation is not None:
        f_gen.add_metric([flow_group], generation)
    for area, n in sorted((jvm_memory or {}).items()):
        f_mem.add_metric([flow_group, area], n)
    return [p_lag, p_lag_s, p_end, p_pos, p_tot, p_bytes, p_tx, p_last, m_lag, m_lag_s, m_lat, m_top, m_par, m_up,
            m_stall, m_stall_s, m_err, m_hb, m_ck, g_lag, g_tlag, f_gen, f_mem]


def prometheus_text(flow_group: str, snapshot: dict[str, dict], generation: int | None = None,
                    jvm_memory: dict[str, int] | None = None) -> str:
    """The exposition text of a snapshot (what /metrics serves)."""
    from prometheus_client import CollectorRegistry, generate_latest

    class _Static:
        def collect(self):
            return families(flow_group, snapshot, generation, jvm_memory)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Static())
    return generate_latest(registry).decode()
