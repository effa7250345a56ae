"""The Spark side of a driver: the session, one streaming query per mirror with its sink, and the drain that
stops queries after their running epochs committed. `driver.Driver` decides when; this module knows how.

The queries' sink is `foreachBatch` on the driver: it receives the lanes' per-partition summaries of each
epoch and folds them into the driver's `MirrorStats`. pyspark is imported lazily so the pieces that only read
stats work without it.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from .resource.flowgroup import FlowGroupConfig
from .sparkdefaults import driver_env_to_set, local_worker_env
from .stats import MirrorStats

log = logging.getLogger("sparkmirror.driver")  # the epoch lines keep the logger name tools read (bench/scale.py)


_DRIVER_ENV_SET: set[str] = set()  # the names of `DRIVER_ENV` this process set itself (not the user)


def claim_driver_env() -> None:
    """Puts `sparkdefaults.DRIVER_ENV` (those the user did not set) into this process's environment, for the JVM it
    will start. Called by the job's entry point while it has one thread: setenv while other threads read the
    environment (librdkafka's, OpenSSL's) is not safe; a job that set it beside its running clients died of
    SIGSEGV as Spark started."""
    to_set = driver_env_to_set(os.environ)
    os.environ.update(to_set)
    _DRIVER_ENV_SET.update(to_set)


class MirrorFailed(RuntimeError):
    """A lane stopped on a permanent error (a CopyError); the query fails with its message."""


def spark_session(config: FlowGroupConfig, master: str | None = None, extra: dict[str, str] | None = None):
    """A session for this flow group; registers the data source. Speculation off: a lane must run once."""
    from pyspark.sql import SparkSession

    from .datasource import MirrorDataSource
    from .sparkdefaults import SPARK_DEFAULTS

    builder = SparkSession.builder.appName(f"sparkmirror-{config.name}")
    if master:
        builder = builder.master(master)
    elif not (os.environ.get("PYSPARK_GATEWAY_PORT") or os.environ.get("SPARK_MASTER")
              or "spark.master" in (extra or {})):  # spark-submit (gateway already up) brings its own master
        builder = builder.master("local[*,4]")  # up to 4 attempts per task, as on a cluster
    conf = {"spark.speculation": "false", "spark.sql.shuffle.partitions": "1", "spark.ui.showConsoleProgress": "false",
            "spark.python.worker.reuse": "true", "spark.sql.streaming.stopTimeout": "120s", **SPARK_DEFAULTS,
            **(extra or {})}
    local = (master or "").startswith("local") or not (master or os.environ.get("PYSPARK_GATEWAY_PORT")
                                                        or "spark.master" in conf)
    if local and not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in conf:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # local workers: this interpreter, which has sparkmirror
    if local and not os.environ.get("PYSPARK_GATEWAY_PORT"):  # local lanes' workers inherit the JVM's environment
        conf = {**local_worker_env(_DRIVER_ENV_SET), **conf}  # glibc's default for them
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.dataSource.register(MirrorDataSource)
    return spark


def start_queries(spark, config: FlowGroupConfig, stats: dict[str, MirrorStats], checkpoint_root: str | None = None,
                  drain_file: str | None = None, go_file: str | None = None) -> list:
    """One streaming query per mirror (`start_query`), under `checkpoint_root` (or the flow group's checkpointDir,
    or a temporary directory)."""
    root = checkpoint_root_of(config, checkpoint_root)
    return [start_query(spark, config, mirror.name, stats, root, drain_file, go_file) for mirror in config.mirrors]


def checkpoint_root_of(config: FlowGroupConfig, given: str | None = None) -> str:
    """Where the flow group's query checkpoints live: the one given (`--checkpoint`), its checkpointDir, or a new
    temporary directory (a run that starts from the progress topic alone)."""
    return given or config.checkpointDir or tempfile.mkdtemp(prefix=f"sparkmirror-{config.name}-")


def start_query(spark, config: FlowGroupConfig, mirror_name: str, stats: dict[str, MirrorStats], root: str,
                drain_file: str | None = None, go_file: str | None = None):
    """The streaming query of one mirror, named `<flow group>/<mirror>` (and `@g<generation>` after the first);
    its summaries feed `stats[mirror name]`, so a mirror's figures carry on across worker generations.

    `drain_file`: once that file exists no new epoch is planned, so `drain()` can stop the queries after the
    running epoch committed instead of interrupting lanes inside a transaction. `go_file`: no epoch is planned
    before that file exists (a standby generation: queries up, topics synced, not copying).
    """
    from .datasource import FORMAT

    gen = config.worker.generation
    mstats = stats.setdefault(mirror_name, MirrorStats(mirror_name))

    def sink(batch_df, batch_id: int) -> None:
        try:
            rows = collect_batch(batch_df)  # runs the epoch's lane tasks
        finally:
            release(batch_df)
        arrived_ms = int(time.time() * 1000)
        t1 = time.monotonic()
        mstats.update(rows)
        t2 = time.monotonic()
        errors = [r["error"] for r in rows if r["error"]]
        if errors:
            raise MirrorFailed(errors[0])
        moved = sum(r["records"] for r in rows)
        starts = [r["epoch_start_ms"] for r in rows if r["epoch_start_ms"]]
        gap = (min(starts) - mstats.prev_epoch_end_ms) if starts and mstats.prev_epoch_end_ms else None
        mstats.prev_epoch_end_ms = max((r["epoch_end_ms"] for r in rows), default=None)
        # the rows' own cost at the boundary grows with the partitions (bench/scale.py reads these figures)
        last_end = mstats.prev_epoch_end_ms
        log.info("mirror %s epoch %d: %d records, lag %s%s (%d rows: in the driver %s ms after the last lane's "
                 "epoch ended, counted in %.0f ms)", mstats.mirror, batch_id, moved, mstats.lag(),
                 f", {gap} ms between the epochs' tasks" if gap is not None else "", len(rows),
                 arrived_ms - last_end if last_end else "-", (t2 - t1) * 1000)

    reader = (spark.readStream.format(FORMAT).option("config", config.model_dump_json())
              .option("mirror", mirror_name))
    if drain_file:
        reader = reader.option("drainFile", drain_file)
    if go_file:
        reader = reader.option("goFile", go_file)
    checkpoint = Path(root) / config.name / (mirror_name if gen == 1 else f"{mirror_name}@g{gen}")
    return (_observed(reader.load()).writeStream.queryName(query_name(config.name, mirror_name, gen))
            .foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint)).start())


def release(batch_df) -> None:
    """Lets the driver JVM drop an epoch's Dataset now. py4j keeps every Java object Python holds in its gateway's
    bindings until Python's object is collected; the DataFrame pyspark hands `foreachBatch` (and the session
    wrapper made for it) are left to Python's cycle collector, which runs rarely in a driver that allocates little:
    a soak's heap dump at 17 minutes found 21 epochs' Datasets, each holding its whole plan (~1,000 lazy values),
    bound in py4j's gateway, most of the driver's live-heap growth. Detaching removes the binding and the
    finalizer that would remove it later."""
    for obj in (getattr(batch_df, "_jdf", None), getattr(getattr(batch_df, "_session", None), "_jsparkSession", None)):
        detach = getattr(obj, "_detach", None)
        if detach is not None:
            try:
                detach()
            except Exception:  # noqa: BLE001 - the JVM went away (a stop): nothing left to release
                pass


class BatchStopped(RuntimeError):
    """A batch whose job the query's own stop interrupted or cancelled (see `collect_batch`)."""


_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


def stopped_batch(py4j_text: str) -> str | None:
    """The error a stopped batch's sink raises to Spark, from py4j's text of its `collect()` error (None: not a
    stop, the error goes to Spark whole). Pure.

    A Java error's text from py4j carries the whole Java stack (8 KB for a cancelled collect). Spark 4.1's
    `StreamExecution.isInterruptionException`, which tells a stop from a failure, matches the Python side's
    traceback with the regex `py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(...)`,
    whose `(.|...)*` recurses once per character in Java: on those 8 KB the stream thread dies of a
    `java.lang.StackOverflowError` (printed at every handoff) and the query ends without its "Stopped" status.
    Kept to the error's own lines before its stack, the text matches at once (an interruption) or names the
    cancelled job group (`org.apache.spark.SparkException`, `cancelled`, the query's runId: Spark's other test)."""
    head = py4j_text.split("\n\tat ", 1)[0].strip()
    said = head.split("\n: ", 1)[-1]
    if not said.startswith(_INTERRUPTIONS) and not (
            said.startswith("org.apache.spark.SparkException") and "cancelled" in said):
        return None
    return f"py4j.protocol.Py4JJavaError: {head}"


def collect_batch(batch_df) -> list:
    """The batch's rows. An error of its job that the query's stop caused reaches Spark as `BatchStopped` with a
    short text (`stopped_batch`), any other as it is (its whole text names the failure: `root_message`)."""
    from py4j.protocol import Py4JJavaError

    try:
        return batch_df.collect()
    except Py4JJavaError as e:
        stopped = stopped_batch(str(e))
        if stopped is None:
            raise
    raise BatchStopped(stopped)  # (outside the handler: no "during handling" chain with py4j's text in it)


RESTARTABLE = ("Python worker failed to connect back",)
"""Query failures that say nothing of the mirror: Spark waits 10 s (fixed) for a Python worker it started to
connect back, which a loaded host can miss. Such a query is started again from its checkpoint (the lanes resume
from the target's progress, so nothing repeats), up to `RESTARTS` times in a driver's life."""
RESTARTS = 5


def query_name(flow_group: str, mirror: str, generation: int) -> str:
    """Unique among a session's active queries, also while two generations or split flow groups run a mirror."""
    return f"{flow_group}/{mirror}" + (f"@g{generation}" if generation > 1 else "")


def mirror_of(query_name: str) -> str:
    return query_name.split("/", 1)[-1].rsplit("@g", 1)[0]


def _observed(df):
    """Per-epoch totals in the query's own progress: `query.lastProgress["observedMetrics"]["sparkmirror"]`
    holds records, bytes, lag (records, summed over the partitions reported), latency_ms_sum/max, partitions
    (reported: a lane reports those with something new, and its first), fenced."""
    from pyspark.sql import functions as F

    return df.observe("sparkmirror", F.sum("records").alias("records"), F.sum("bytes").alias("bytes"),
                      F.sum(F.greatest(F.col("lag"), F.lit(0))).alias("lag"),
                      F.sum("latency_ms_sum").alias("latency_ms_sum"), F.max("latency_ms_max").alias("latency_ms_max"),
                      F.count(F.when(F.col("partition") >= 0, 1)).alias("partitions"),
                      F.sum(F.col("fenced").cast("int")).alias("fenced"))


def drain(queries: list, drain_files: list[str], timeout: float, settle: float = 1.0) -> bool:
    """Stop cleanly: no new epochs, wait (up to `timeout`) for running epochs to commit, then `settle` seconds
    for lanes copying between epochs to end their transactions, then stop. False when an epoch was still
    running at the deadline (its lanes, on a lost executor say, may have left transactions open); then there is
    no settling: the caller fences the lanes at once, which ends their transactions whatever they do, and the
    whole stop has to fit in the driver pod's grace period (epochSeconds + 60 s: the kind e2e saw a drain that
    ran out, plus the settle, leave the fencing no time before the SIGKILL)."""
    in_time = True
    if drain_files:
        for f in drain_files:
            Path(f).touch()
        deadline = time.monotonic() + timeout
        running = True
        while running and time.monotonic() < deadline:
            # asked once a round: a query checking for new data between epochs looks active for a moment, so a
            # second look could call a drain that ended "late"
            running = _any_running(queries)
            if running:
                time.sleep(0.5)
        in_time = not running
        if in_time:
            time.sleep(settle)
    for q in queries:
        stop_query(q)
    return in_time


def _any_running(queries: list) -> bool:
    """Whether an epoch is still running; False once Spark itself is gone (its JVM got the signal too)."""
    try:
        return any(q.isActive and (q.status.get("isTriggerActive") or q.status.get("isDataAvailable"))
                   for q in queries)
    except Exception:  # noqa: BLE001 - py4j: the JVM went away; nothing left to wait for
        return False


def root_message(text: str) -> str:
    """The sparkmirror error inside a Spark/Py4J exception text, if there is one."""
    for marker in ("MirrorFailed: ", "SourceGapError: ", "CopyError: ", "TopicSyncError: ",
                   "ReplicationFactorRefused: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return text.strip().splitlines()[0] if text.strip() else text


def stop_query(q) -> None:
    try:
        if q.isActive:
            q.stop()
    except Exception as e:  # noqa: BLE001 - its lanes were fenced; nothing of theirs can commit any more
        try:
            name = q.name
        except Exception:  # noqa: BLE001 - the JVM is gone (it got the stop signal too): nothing left to stop
            name = "?"
        log.warning("stopping query %s: %s", name, str(e).splitlines()[0] if str(e) else e)
