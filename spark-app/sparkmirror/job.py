"""The mirror job: `spark-submit job.py --config flowgroup.yaml` (or `python -m sparkmirror.job`, or
`sparkmirror.job:main`). One Spark application per flow group, one streaming query per mirror (named after it).
Imports are absolute because spark-submit runs this file as a script.

The queries' sink is `foreachBatch` on the driver: it receives the lanes' per-partition summaries of each
epoch and folds them into `STATS`, the driver-side structure the metrics endpoint and the runner read.
pyspark is imported lazily so `MirrorStats` / `stats_snapshot()` can be used without it.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkmirror.resource.flowgroup import FlowGroupConfig

log = logging.getLogger("sparkmirror.job")


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


@dataclass
class MirrorStats:
    """Per-mirror counters fed by every epoch's summary rows (driver side, thread-safe)."""

    mirror: str
    partitions: dict[tuple[str, int], PartitionStats] = field(default_factory=dict)
    epochs: int = 0
    last_epoch_end_ms: int | None = None
    prev_epoch_end_ms: int | None = None  # the sink's: the boundary gap it logs
    error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def update(self, rows: list) -> None:
        """Fold one epoch's rows (dicts or Rows with the copier.SUMMARY_SCHEMA fields) into the stats."""
        with self._lock:
            self.epochs += 1
            for r in rows:
                r = r.asDict() if hasattr(r, "asDict") else r
                if r.get("error"):
                    self.error = r["error"]
                    continue
                k = (r["source_topic"], r["partition"])
                ps = self.partitions.setdefault(k, PartitionStats(r["source_topic"], r["partition"],
                                                                  r["target_topic"]))
                secs = max((r["epoch_end_ms"] - r["epoch_start_ms"]) / 1000.0, 1e-3)
                ps.records_total += r["records"]
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
                self.last_epoch_end_ms = max(self.last_epoch_end_ms or 0, r["epoch_end_ms"])

    def snapshot(self) -> dict:
        """A JSON-able copy: totals and per-partition figures (lag in records, records/s, bytes/s, latency)."""
        with self._lock:
            parts = [vars(p).copy() for p in self.partitions.values()]
        lags = [p["lag"] for p in parts if p["lag"] >= 0]
        return {"mirror": self.mirror, "epochs": self.epochs, "error": self.error,
                "topics": len({p["source_topic"] for p in parts}), "partitions": parts,
                "lag": sum(lags) if lags else None,
                "records_per_s": sum(p["records_per_s"] for p in parts),
                "bytes_per_s": sum(p["bytes_per_s"] for p in parts),
                "records_total": sum(p["records_total"] for p in parts),
                "last_epoch_end_ms": self.last_epoch_end_ms}


class MirrorFailed(RuntimeError):
    """A lane stopped on a permanent error (copier.CopyError); the query fails with its message."""


STATS: dict[str, MirrorStats] = {}
"""mirror name -> MirrorStats of the queries running in this driver process."""


def stats_snapshot() -> dict[str, dict]:
    """What metrics.py / the runner read: {mirror name: MirrorStats.snapshot()}."""
    return {name: s.snapshot() for name, s in list(STATS.items())}


def spark_session(config: FlowGroupConfig, master: str | None = None, extra: dict[str, str] | None = None):
    """A session for this flow group; registers the data source. Speculation off: a lane must run once."""
    from pyspark.sql import SparkSession

    from sparkmirror.datasource import MirrorDataSource

    builder = SparkSession.builder.appName(f"sparkmirror-{config.name}")
    if master:
        builder = builder.master(master)
    elif not (os.environ.get("PYSPARK_GATEWAY_PORT") or os.environ.get("SPARK_MASTER")
              or "spark.master" in (extra or {})):  # spark-submit (gateway already up) brings its own master
        builder = builder.master("local[*,4]")  # up to 4 attempts per task, as on a cluster
    conf = {"spark.speculation": "false", "spark.sql.shuffle.partitions": "1", "spark.ui.showConsoleProgress": "false",
            "spark.python.worker.reuse": "true", "spark.sql.streaming.stopTimeout": "120s",
            **(extra or {})}
    local = (master or "").startswith("local") or not (master or os.environ.get("PYSPARK_GATEWAY_PORT")
                                                        or "spark.master" in conf)
    if local and not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in conf:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # local workers: this interpreter, which has sparkmirror
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.dataSource.register(MirrorDataSource)
    return spark


def start_queries(spark, config: FlowGroupConfig, checkpoint_root: str | None = None,
                  drain_file: str | None = None) -> list:
    """One streaming query per mirror, named after it; their summaries feed STATS.

    `drain_file`: once that file exists no new epoch is planned, so `drain()` can stop the queries after the
    running epoch committed instead of interrupting lanes inside a transaction.
    """
    from sparkmirror.datasource import FORMAT

    root = checkpoint_root or config.checkpointDir or tempfile.mkdtemp(prefix=f"sparkmirror-{config.name}-")
    queries = []
    for mirror in config.mirrors:
        stats = STATS.setdefault(mirror.name, MirrorStats(mirror.name))

        def sink(batch_df, batch_id: int, stats: MirrorStats = stats) -> None:
            rows = batch_df.collect()
            stats.update(rows)
            errors = [r["error"] for r in rows if r["error"]]
            if errors:
                raise MirrorFailed(errors[0])
            moved = sum(r["records"] for r in rows)
            starts = [r["epoch_start_ms"] for r in rows if r["epoch_start_ms"]]
            gap = (min(starts) - stats.prev_epoch_end_ms) if starts and stats.prev_epoch_end_ms else None
            stats.prev_epoch_end_ms = max((r["epoch_end_ms"] for r in rows), default=None)
            log.info("mirror %s epoch %d: %d records, lag %s%s", stats.mirror, batch_id, moved,
                     sum(max(r["lag"], 0) for r in rows),
                     f", {gap} ms between the epochs' tasks" if gap is not None else "")

        reader = (spark.readStream.format(FORMAT).option("config", config.model_dump_json())
                  .option("mirror", mirror.name))
        if drain_file:
            reader = reader.option("drainFile", drain_file)
        q = (_observed(reader.load()).writeStream.queryName(mirror.name).foreachBatch(sink)
             .option("checkpointLocation", str(Path(root) / config.name / mirror.name)).start())
        queries.append(q)
    return queries


def _observed(df):
    """Per-epoch totals in the query's own progress: `query.lastProgress["observedMetrics"]["sparkmirror"]`
    holds records, bytes, lag (records, summed over partitions), latency_ms_sum/max, partitions, fenced."""
    from pyspark.sql import functions as F

    return df.observe("sparkmirror", F.sum("records").alias("records"), F.sum("bytes").alias("bytes"),
                      F.sum(F.greatest(F.col("lag"), F.lit(0))).alias("lag"),
                      F.sum("latency_ms_sum").alias("latency_ms_sum"), F.max("latency_ms_max").alias("latency_ms_max"),
                      F.count(F.when(F.col("partition") >= 0, 1)).alias("partitions"), F.sum(F.col("fenced").cast("int")).alias("fenced"))


def drain(queries: list, drain_file: str | None, timeout: float) -> None:
    """Stop cleanly: no new epochs, wait (up to `timeout`) for running epochs to commit, then stop."""
    if drain_file:
        Path(drain_file).touch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                q.isActive and (q.status.get("isTriggerActive") or q.status.get("isDataAvailable"))
                for q in queries):
            time.sleep(0.5)
        time.sleep(1.0)  # exactly-once lanes copying between epochs see the drain file within a transaction
    for q in queries:
        try:
            if q.isActive:
                q.stop()
        except Exception as e:  # noqa: BLE001 - stopping anyway; lanes resume from the progress topic
            log.warning("stopping query %s: %s", q.name, str(e).splitlines()[0] if str(e) else e)


def run(config: FlowGroupConfig, master: str | None = None, extra_conf: dict[str, str] | None = None,
        checkpoint_root: str | None = None) -> int:
    """Run every mirror of the flow group until stopped (SIGTERM/SIGINT: 0) or one fails (1).

    Beside the queries it runs `metrics.DriverServices` (live lag, heartbeats, checkpoints, Prometheus).
    """
    from sparkmirror.metrics import DriverServices

    stopping = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("signal %d: draining and stopping", signum)
        stopping.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    spark = spark_session(config, master, extra_conf)
    drain_file = str(Path(tempfile.mkdtemp(prefix="sparkmirror-drain-")) / "drain")
    services = DriverServices(config, stats=stats_snapshot).start()
    queries = start_queries(spark, config, checkpoint_root, drain_file)
    rc = 0
    try:
        while not stopping.is_set():
            for q in queries:
                if not q.isActive:
                    exc = q.exception()
                    if exc is not None:
                        STATS[q.name].error = STATS[q.name].error or _root_message(str(exc))
                        log.error("mirror %s failed: %s", q.name, _root_message(str(exc)))
                        print(f"sparkmirror: mirror {q.name!r} failed: {_root_message(str(exc))}",
                              file=sys.stderr, flush=True)
                        rc = 1
                    stopping.set()
            stopping.wait(1.0)
    finally:
        drain(queries, drain_file, config.epochSeconds + 30)
        services.stop()
        try:
            spark.stop()
        except Exception as e:  # noqa: BLE001
            log.warning("stopping Spark: %s", e)
    return rc


def _root_message(text: str) -> str:
    """The sparkmirror error inside a Spark/Py4J exception text, if there is one."""
    for marker in ("MirrorFailed: ", "sparkmirror.copier.SourceGapError: ", "sparkmirror.copier.CopyError: ",
                   "sparkmirror.topicsync.TopicSyncError: ", "CopyError: ", "SourceGapError: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return text.strip().splitlines()[0] if text.strip() else text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkmirror-job", description="Run one sparkmirror flow group.")
    parser.add_argument("--config", required=True, help="flow-group YAML (FlowGroupConfig)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*,4])")
    parser.add_argument("--checkpoint", help="Spark checkpoint root (an optimisation; may be lost)")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark conf")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = FlowGroupConfig.from_yaml(Path(args.config).read_text())
    except Exception as e:  # noqa: BLE001 - the message names the field
        print(f"sparkmirror: {args.config}: invalid flow-group config: {e}", file=sys.stderr)
        return 2
    extra = dict(kv.split("=", 1) for kv in args.conf)
    return run(config, args.master, extra, args.checkpoint)


if __name__ == "__main__":  # also `spark-submit job.py`: run the package's copy so STATS is one object
    from sparkmirror.job import main as _main

    sys.exit(_main())
