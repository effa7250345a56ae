"""Driver-side services beside the streaming queries: live lag, Prometheus metrics, heartbeats, checkpoints.

`DriverServices(config).start()` runs, in two daemon threads per flow group (checkpoints on their own):
- per mirror a `MirrorMonitor` (`mirrormonitor.py`): follows the progress topic on the target (what is committed
  there is what is mirrored) and the source's end offsets, giving per-partition lag in records and records/s
  live, independent of Spark's epoch length;
- heartbeats every `emitHeartbeatsIntervalSeconds` and checkpoints / group offset sync every
  `emitCheckpointsIntervalSeconds` (`heartbeats.py`, `checkpoints.py`): checkpoint rounds run on a thread of
  their own (a slow live-lag poll does not delay them), keep their interval (due one interval after the last was
  due) and, while nothing is copied yet, come every second, so the first checkpoint follows the first committed
  range; both threads read the progress topic through the monitor's one `ProgressTail` (under its lock), whose
  poll stops at the end it began from;
- when `metricsPort` is set, Prometheus text on `http://<bind>:<metricsPort>/metrics` (prometheus_client).

Records/s, bytes/s, transactions, time lag and commit stall are live too (`mirrormonitor.py`). Records totals
and replication latency (commit time minus record timestamp) come from the copy job's epoch summaries, which the
driver hands over as `stats` (`driver.Driver.stats_snapshot`); nothing here reaches for the driver. `snapshot()`
merges both views; the runner draws its progress from it.

A cluster that does not answer is no error: the mirror is *waiting* (`waiting`, `waiting_since` in the
snapshot; `sparkmirror_mirror_stalled` and `sparkmirror_mirror_stalled_seconds`), as the services see it live
or the lanes reported it at the end of their last epoch; one log line when it starts, one when it ends.

Credentials rotated in place (a Secret's file replaced, credentials.py): every few seconds each mirror's services
compare the fingerprint of their clusters' secrets with the one their clients were made with, and make the
clients again when it changed (`_renew`), counters carried over.

The Prometheus families made of the snapshot, their names and labels: `exposition.py`.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .copypath import copy_path_of
from .copying.errors import transient_reason
from .credentials import CredentialWatch
from .exposition import EXPORTED, PER_PARTITION, families, prometheus_text  # noqa: F401 - the endpoint's API
from .mirrormonitor import MirrorMonitor
from .outage import Outage
from .progress import partition_lag
from .resource.flowgroup import FlowGroupConfig, Mirror

log = logging.getLogger(__name__)

FIRST_CHECKPOINT_RETRY_S = 1.0  # checkpoint rounds while nothing of the mirror is copied yet (see _checkpoint)


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
    credentials: CredentialWatch | None = None  # the secrets its clients were made with (see `_renew`)
    # held by the checkpoints' thread for a round, by `_renew` (the services' thread) to close the clients a round
    # uses: the emitter and the monitor's progress-topic reader it shares
    round_lock: threading.Lock = field(default_factory=threading.Lock)

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
        self._threads: list[threading.Thread] = []
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
        # checkpoints on a thread of their own: a slow live-lag poll (bounded source reads) or heartbeat does not
        # delay a round, nor a round (source reads) the live lag
        self._threads = [threading.Thread(target=self._run, args=(tick,), daemon=True,
                                          name=f"sparkmirror-{what}-{self.config.name}")
                         for what, tick in (("services", self._tick), ("checkpoints", self._checkpoints_due))]
        for t in self._threads:
            t.start()
        return self

    def size_history(self, cap: int) -> None:
        """The offset history's cap the driver sized (`historycap`): for the tails made from now on and those
        already following the progress topic (trimmed at their next range)."""
        self.config = self.config.model_copy(update={"offsetHistory": cap})
        for m in self.mirrors.values():
            for tail in {id(t): t for t in (getattr(m.monitor, "tail", None), getattr(m.checkpoints, "tail", None))
                         if t is not None}.values():
                with tail.lock:
                    tail.state.max_history = cap

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
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
        marks so far (`ProgressState.superseded_why`; with `failover_only`, only a failover or a rollback of this
        generation counts: a Lease-driven handoff is the Lease's to announce)."""
        cfg = self.config
        for m in list(self.mirrors.values()):
            if m.monitor is None:
                continue
            state = m.monitor.tail.state
            of = (cfg.resource, cfg.resourceUid, cfg.name)
            if failover_only and of not in state.failovers and not state.rolled_back(*of, cfg.worker.generation):
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

    def _renew(self, m: _Mirror) -> None:
        """The credentials of the mirror's clusters changed (a Secret replaced in place, credentials.py): the
        services' clients are made again at once, from the new ones. The monitor's counters carry over (a
        Prometheus counter must not go back); its new progress-topic reader reads the topic afresh."""
        assert m.credentials is not None
        log.info("mirror %s: the credentials of cluster %s changed: making the services' clients again",
                 m.mirror.name, m.credentials.names())
        old = m.monitor
        with m.round_lock:  # a checkpoint round under way ends first: it uses the emitter and the monitor's reader
            for part in (m.checkpoints, m.heartbeats, m.monitor):
                if part is not None:
                    try:
                        part.close()
                    except Exception:  # noqa: BLE001 - clients on refused credentials: closing is best effort
                        pass
            m.checkpoints = m.heartbeats = m.monitor = None
            m.next_poll = m.next_heartbeat = m.next_checkpoint = 0.0
        if old is not None:
            self._guard(m, "monitor", lambda: setattr(m, "monitor", MirrorMonitor(self.config, m.mirror)))
            if m.monitor is not None:
                m.monitor.carry_on_from(old)

    def _tick(self, m: _Mirror, now: float) -> None:
        mirror = m.mirror
        if m.credentials is None:  # read before any client of the mirror's is made
            m.credentials = CredentialWatch([self.config.cluster(mirror.source), self.config.cluster(mirror.target)])
        elif m.credentials.changed():
            self._renew(m)
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

    def _checkpoints_due(self, m: _Mirror, now: float) -> None:
        """The checkpoints' thread: a round when one is due (once the monitor's tail, which it shares, exists)."""
        mirror = m.mirror
        if not (self._want_checkpoints and (mirror.emitCheckpoints or mirror.syncGroupOffsets)):
            return
        with m.round_lock:  # `_renew` closes nothing of the round's while it runs
            if now >= m.next_checkpoint and m.monitor is not None:
                self._checkpoint(m, m.next_checkpoint or now)

    def _checkpoint(self, m: _Mirror, due: float) -> None:
        """One checkpoint round. Rounds keep their interval (the next is due one interval after this one was
        due, not after it ended); while nothing of the mirror is copied yet a round is tried again after
        FIRST_CHECKPOINT_RETRY_S, so the first checkpoint follows the first committed range at once."""
        mirror = m.mirror
        interval = min([mirror.emitCheckpointsIntervalSeconds] * mirror.emitCheckpoints
                       + [mirror.syncGroupOffsetsIntervalSeconds] * mirror.syncGroupOffsets)
        from .checkpoints import CheckpointEmitter

        if m.checkpoints is None:
            # one progress-topic reader per mirror on the driver: the monitor's (used under its lock)
            tail = m.monitor.tail if m.monitor is not None else None
            self._guard(m, "checkpoints", lambda: setattr(m, "checkpoints",
                                                          CheckpointEmitter(self.config, mirror, tail=tail)))
        if m.checkpoints is not None:
            def run() -> None:
                cps = m.checkpoints.run_once()
                m.checkpoint_groups = len(cps)
            self._guard(m, "checkpoints", run)
        waiting = m.checkpoints is None or m.checkpoints.nothing_mirrored
        step = min(interval, FIRST_CHECKPOINT_RETRY_S) if waiting else interval
        m.next_checkpoint = max(due + step, time.monotonic())

    def _run(self, tick: Callable[[_Mirror, float], None]) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for m in self.mirrors.values():
                if self._stop.is_set():
                    break
                tick(m, now)
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
                    "stall_seconds": lv.stall_seconds(time.time()) if lv else None,
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
                "transactions": m.monitor.transactions if m.monitor is not None else 0,
                "heartbeats": getattr(m.heartbeats, "sent", 0), "checkpoint_groups": m.checkpoint_groups,
                "consumer_groups": [{"group": c.group, "lag": c.lag, "target_lag": c.target_lag,
                                     "partitions": c.partitions} for c in getattr(m.checkpoints, "lags", [])],
                "updated": m.monitor.updated if m.monitor is not None else None,
                "errors": errors, "partitions_detail": parts, "waiting": waiting, "waiting_since": since,
                "error_counts": dict(m.error_counts), "latency": js.get("latency"),
                "batches": js.get("batches", 0), "rebuilt": js.get("rebuilt") or {},
                "transformed": js.get("transformed") or {},
                "copy": copy_path_of(self.config, m.mirror)._asdict(),
                **deletion_figures(m),
            }
        return out


def deletion_figures(m: _Mirror) -> dict[str, int]:
    """Deletion propagation's figures from the mirror's topic records (`topicOf`), as its progress tail read them."""
    if m.monitor is None:
        return {}
    with m.monitor.tail.lock:
        records = [v for (_res, mirror, _remote), v in m.monitor.tail.state.topics.items() if mirror == m.mirror.name]
    return {"remote_topics_deleted": sum(1 for v in records if v.get("deletedMs") is not None),
            "remote_topics_pending_deletion": sum(1 for v in records if v.get("goneMs") is not None
                                                  and v.get("deletedMs") is None)}


class _Collector:
    """prometheus_client collector reading DriverServices.snapshot() at scrape time."""

    def __init__(self, services: DriverServices) -> None:
        self.services = services

    def collect(self) -> Iterable:
        cfg = self.services.config
        return families(cfg.name, self.services.snapshot(), cfg.worker.generation, self.services.jvm_memory(),
                        cfg.metricsPerPartition is not False)
