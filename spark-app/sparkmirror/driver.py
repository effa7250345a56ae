"""The driver's life, one way for every entry point (`spark-submit job.py`, `python -m sparkmirror.job`,
`sparkmirror run`): the Spark session, one streaming query per mirror of each flow group, the driver services
beside them (live lag, heartbeats, checkpoints, metrics), and a drain that lets running epochs commit.

The queries' sink is `foreachBatch` on the driver: it receives the lanes' per-partition summaries of each
epoch and folds them into the driver's `MirrorStats`, which the driver hands to its services. pyspark is
imported lazily so the pieces that only read stats work without it.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from .resource.flowgroup import FlowGroupConfig
from .stats import MirrorStats

log = logging.getLogger("sparkmirror.driver")


class MirrorFailed(RuntimeError):
    """A lane stopped on a permanent error (a CopyError); the query fails with its message."""


def spark_session(config: FlowGroupConfig, master: str | None = None, extra: dict[str, str] | None = None):
    """A session for this flow group; registers the data source. Speculation off: a lane must run once."""
    from pyspark.sql import SparkSession

    from .datasource import MirrorDataSource

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


def start_queries(spark, config: FlowGroupConfig, stats: dict[str, MirrorStats], checkpoint_root: str | None = None,
                  drain_file: str | None = None) -> list:
    """One streaming query per mirror, named after it; their summaries feed `stats[mirror name]`.

    `drain_file`: once that file exists no new epoch is planned, so `drain()` can stop the queries after the
    running epoch committed instead of interrupting lanes inside a transaction.
    """
    from .datasource import FORMAT

    root = checkpoint_root or config.checkpointDir or tempfile.mkdtemp(prefix=f"sparkmirror-{config.name}-")
    queries = []
    for mirror in config.mirrors:
        mstats = stats.setdefault(mirror.name, MirrorStats(mirror.name))

        def sink(batch_df, batch_id: int, mstats: MirrorStats = mstats) -> None:
            rows = batch_df.collect()
            mstats.update(rows)
            errors = [r["error"] for r in rows if r["error"]]
            if errors:
                raise MirrorFailed(errors[0])
            moved = sum(r["records"] for r in rows)
            starts = [r["epoch_start_ms"] for r in rows if r["epoch_start_ms"]]
            gap = (min(starts) - mstats.prev_epoch_end_ms) if starts and mstats.prev_epoch_end_ms else None
            mstats.prev_epoch_end_ms = max((r["epoch_end_ms"] for r in rows), default=None)
            log.info("mirror %s epoch %d: %d records, lag %s%s", mstats.mirror, batch_id, moved,
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
                      F.count(F.when(F.col("partition") >= 0, 1)).alias("partitions"),
                      F.sum(F.col("fenced").cast("int")).alias("fenced"))


def drain(queries: list, drain_file: str | None, timeout: float, settle: float = 1.0) -> None:
    """Stop cleanly: no new epochs, wait (up to `timeout`) for running epochs to commit, then `settle` seconds
    for lanes copying between epochs to end their transactions, then stop."""
    if drain_file:
        Path(drain_file).touch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                q.isActive and (q.status.get("isTriggerActive") or q.status.get("isDataAvailable"))
                for q in queries):
            time.sleep(0.5)
        time.sleep(settle)
    for q in queries:
        try:
            if q.isActive:
                q.stop()
        except Exception as e:  # noqa: BLE001 - stopping anyway; lanes resume from the progress topic
            log.warning("stopping query %s: %s", q.name, str(e).splitlines()[0] if str(e) else e)


def root_message(text: str) -> str:
    """The sparkmirror error inside a Spark/Py4J exception text, if there is one."""
    for marker in ("MirrorFailed: ", "SourceGapError: ", "CopyError: ", "TopicSyncError: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return text.strip().splitlines()[0] if text.strip() else text


class Driver:
    """One driver process: a Spark session running every mirror of `configs`, with each flow group's services.

    `start()` then `stop()` (or `run()`, which also handles SIGTERM/SIGINT and reports failures). Services start
    before Spark: they show lag while Spark starts, and heartbeats begin at once.
    """

    def __init__(self, configs: list[FlowGroupConfig], master: str | None = None,
                 spark_conf: dict[str, str] | None = None, checkpoint_root: str | None = None,
                 metrics_bind: str | None = None) -> None:
        self.configs, self.master, self.spark_conf = configs, master, spark_conf or {}
        self.checkpoint_root = checkpoint_root
        self.metrics_bind = metrics_bind
        self.stats: dict[str, MirrorStats] = {}
        self.spark = None
        self.queries: list = []
        self.services: list = []
        # once this file exists no new epoch is planned: stop() lets running epochs commit instead of interrupting
        self.drain_file = str(Path(tempfile.mkdtemp(prefix="sparkmirror-drain-")) / "drain")

    def stats_snapshot(self) -> dict[str, dict]:
        """{mirror name: MirrorStats.snapshot()}: what the services and the runner read of the epochs."""
        return {name: s.snapshot() for name, s in list(self.stats.items())}

    def start(self) -> "Driver":
        from .metrics import DriverServices

        for cfg in self.configs:
            self.services.append(DriverServices(cfg, stats=self.stats_snapshot, bind=self.metrics_bind).start())
        self.spark = spark_session(self.configs[0], self.master, self.spark_conf)
        for cfg in self.configs:
            self.queries += start_queries(self.spark, cfg, self.stats, self.checkpoint_root, self.drain_file)
        return self

    def failures(self) -> dict[str, str]:
        """query (mirror) name -> error, for queries that stopped with an exception."""
        out = {}
        for q in self.queries:
            if not q.isActive:
                exc = q.exception()
                if exc is not None:
                    out[q.name] = root_message(str(exc))
        return out

    def stopped(self) -> bool:
        return any(not q.isActive for q in self.queries)

    def stop(self) -> None:
        """Drain (no new epochs, running ones commit; at most one epoch plus 30 s), then stop everything."""
        # an epoch still interrupted at the deadline fails its foreachBatch with an InterruptedException that
        # py4j logs as an error; expected then (its open transactions are aborted, nothing is lost)
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        if self.queries:
            epoch = max(c.epochSeconds for c in self.configs)
            drain(self.queries, self.drain_file, epoch + 30, self._settle_seconds(epoch))
        for svc in self.services:
            svc.stop()
        self.services = []
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception as e:  # noqa: BLE001
                log.warning("stopping Spark: %s", e)
            self.spark = None

    def _settle_seconds(self, epoch_seconds: float) -> float:
        """How long lanes may go on copying between epochs after the last one: in local mode they see the drain
        file within a transaction; executors elsewhere cannot, and stop on their own after the carry window."""
        from .datasource import CARRY_SECONDS

        try:
            local = self.spark is None or self.spark.sparkContext.master.startswith("local")
        except Exception:  # noqa: BLE001 - a session already going away: no executors to wait for
            local = True
        return 1.0 if local else min(epoch_seconds, CARRY_SECONDS) + 2.0

    def run(self) -> int:
        """Run until stopped (SIGTERM/SIGINT: 0) or a mirror fails (1)."""
        stopping = threading.Event()

        def on_signal(signum, _frame) -> None:
            log.info("signal %d: draining and stopping", signum)
            stopping.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        self.start()
        rc = 0
        try:
            while not stopping.is_set():
                if self.stopped():
                    for name, error in self.failures().items():
                        self.stats[name].error = self.stats[name].error or error
                        log.error("mirror %s failed: %s", name, error)
                        print(f"sparkmirror: mirror {name!r} failed: {error}", file=sys.stderr, flush=True)
                        rc = 1
                    stopping.set()
                stopping.wait(1.0)
        finally:
            self.stop()
        return rc
