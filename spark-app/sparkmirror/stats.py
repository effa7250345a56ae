"""What the driver knows from the epochs themselves: every epoch's per-partition summary rows (the lanes'
`SUMMARY_SCHEMA`) folded into per-mirror figures. The driver owns one `MirrorStats` per mirror and hands their
snapshots to the metrics endpoint and the runner's display; nothing here needs pyspark.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .copying.summary import LATENCY_BUCKETS_MS


@dataclass
class PartitionStats:
    """Latest view of one mirrored partition, from the last epoch that touched it."""

    source_topic: str
    partition: int
    target_topic: str
    records_total: int = 0
    bytes_total: int = 0
    next_offset: int = -1
    source_end: int = -1
    lag: int = -1
    records_per_s: float = 0.0
    bytes_per_s: float = 0.0
    latency_ms_avg: float | None = None
    latency_ms_max: int | None = None
    last_commit_ms: int | None = None
    lane: int = -1
    transactions_total: int = 0  # transactions that committed this partition's records, since the driver started


@dataclass
class MirrorStats:
    """Per-mirror counters fed by every epoch's summary rows (driver side, thread-safe)."""

    mirror: str
    partitions: dict[tuple[str, int], PartitionStats] = field(default_factory=dict)
    epochs: int = 0
    last_epoch_end_ms: int | None = None
    prev_epoch_end_ms: int | None = None  # the sink's: the boundary gap it logs
    error: str | None = None
    waiting: str | None = None  # what a lane waited for as the last epoch ended ("target cluster 'b' unreachable")
    waiting_since_ms: int = 0
    # end-to-end latency histogram of every record mirrored since the driver started (cumulative `le` counts)
    latency_le: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS_MS))
    latency_count: int = 0
    latency_sum_ms: int = 0
    batches: int = 0  # batch path: batches forwarded as they were, since the driver started
    rebuilt: dict[str, int] = field(default_factory=dict)  # batch path: batches rebuilt, per reason
    transformed: dict[str, int] = field(default_factory=dict)  # records the transforms dropped / found not JSON
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def update(self, rows: list) -> None:
        """Fold one epoch's rows (dicts or Rows with the copying.SUMMARY_SCHEMA fields) into the stats. A lane
        reports only the partitions with something new (copying/ledger.py): the others keep their last figures,
        and their rates are zero (they copied nothing this epoch)."""
        with self._lock:
            self.epochs += 1
            self.waiting, self.waiting_since_ms = None, 0
            for ps in self.partitions.values():
                ps.records_per_s = ps.bytes_per_s = 0.0
            for r in rows:
                r = r.asDict() if hasattr(r, "asDict") else r
                if r.get("error"):
                    self.error = r["error"]
                    continue
                if r.get("waiting") and (self.waiting is None or r["waiting_since_ms"] < self.waiting_since_ms):
                    self.waiting, self.waiting_since_ms = r["waiting"], r["waiting_since_ms"]
                k = (r["source_topic"], r["partition"])
                ps = self.partitions.setdefault(k, PartitionStats(r["source_topic"], r["partition"],
                                                                  r["target_topic"]))
                secs = max((r["epoch_end_ms"] - r["epoch_start_ms"]) / 1000.0, 1e-3)
                ps.records_total += r["records"]
                ps.transactions_total += r.get("transactions") or 0
                self.batches += r.get("batches") or 0
                for why, n in (r.get("rebuilt") or {}).items():
                    self.rebuilt[why] = self.rebuilt.get(why, 0) + n
                for what, n in (r.get("transformed") or {}).items():
                    self.transformed[what] = self.transformed.get(what, 0) + n
                ps.bytes_total += r["bytes"]
                ps.records_per_s = r["records"] / secs
                ps.bytes_per_s = r["bytes"] / secs
                ps.lane = r["lane"]
                if r["next_offset"] >= 0:
                    ps.next_offset = r["next_offset"]
                ps.source_end, ps.lag = r["source_end"], r["lag"]
                if r["records"] > 0:
                    ps.latency_ms_avg = r["latency_ms_sum"] / r["records"]
                    ps.latency_ms_max = r["latency_ms_max"]
                    ps.last_commit_ms = r["epoch_end_ms"]
                    if r.get("latency_le"):
                        self.latency_le = [a + b for a, b in zip(self.latency_le, r["latency_le"])]
                        self.latency_count += r["records"]
                        self.latency_sum_ms += r["latency_ms_sum"]
                self.last_epoch_end_ms = max(self.last_epoch_end_ms or 0, r["epoch_end_ms"])

    def lag(self) -> int:
        """Records behind, summed over the partitions whose lag is known."""
        with self._lock:
            return sum(p.lag for p in self.partitions.values() if p.lag > 0)

    def snapshot(self) -> dict:
        """A JSON-able copy: totals and per-partition figures (lag in records, records/s, bytes/s, latency)."""
        with self._lock:
            parts = [vars(p).copy() for p in self.partitions.values()]
            latency = {"le": list(self.latency_le), "count": self.latency_count, "sum_ms": self.latency_sum_ms}
        lags = [p["lag"] for p in parts if p["lag"] >= 0]
        return {"mirror": self.mirror, "epochs": self.epochs, "error": self.error,
                "topics": len({p["source_topic"] for p in parts}), "partitions": parts,
                "lag": sum(lags) if lags else None,
                "records_per_s": sum(p["records_per_s"] for p in parts),
                "bytes_per_s": sum(p["bytes_per_s"] for p in parts),
                "records_total": sum(p["records_total"] for p in parts),
                "last_epoch_end_ms": self.last_epoch_end_ms, "waiting": self.waiting,
                "waiting_since": self.waiting_since_ms / 1000 if self.waiting_since_ms else None,
                "latency": latency, "batches": self.batches, "rebuilt": dict(self.rebuilt),
                "transformed": dict(self.transformed)}
