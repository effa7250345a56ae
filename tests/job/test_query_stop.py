"""A query stopped while its batch's job runs (every handoff, every drain that runs out) ends as a stop: its
sink hands Spark a short error (`queries.stopped_batch`), so Spark's own test for "interrupted by stop" — a Java
regex that recurses once per character — no longer overflows the stream thread's stack on py4j's 8 KB text."""
from __future__ import annotations

import re
import threading
import time

import pytest

from sparkmirror.queries import collect_batch, stopped_batch

pytestmark = [pytest.mark.spark]

# Spark 4.1.1's StreamExecution.PROXY_ERROR, as its jar holds it (the interruptions joined by "|")
SPARK_PROXY_ERROR = re.compile(r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
                               r"(java.lang.InterruptedException|java.io.InterruptedIOException|"
                               r"java.nio.channels.ClosedByInterruptException)")
STACK = "".join(f"\n\tat org.apache.spark.scheduler.DAGScheduler.frame{i}(DAGScheduler.scala:{i})" for i in range(120))


def test_an_interrupted_or_cancelled_batch_is_told_in_a_line_spark_reads_as_a_stop():
    interrupted = stopped_batch("An error occurred while calling o72.collectToPython.\n: java.lang.InterruptedException"
                                + STACK)
    assert interrupted == "py4j.protocol.Py4JJavaError: An error occurred while calling o72.collectToPython.\n: " \
                          "java.lang.InterruptedException"
    assert SPARK_PROXY_ERROR.search(interrupted)
    run_id = "0374c7cb-ab81-4283-b6b5-e80eda916ddb"
    cancelled = stopped_batch(
        "An error occurred while calling o90.collectToPython.\n: org.apache.spark.SparkException: [SPARK_JOB_CANCELLED]"
        f" Job 4 cancelled Query m/a@g2 [id = 87a9566e, runId = {run_id}] was stopped SQLSTATE: XXKDA" + STACK
        + "\nCaused by: java.lang.InterruptedException" + STACK)
    assert cancelled is not None and "\tat " not in cancelled and "Caused by" not in cancelled
    # Spark's other test (isCancelledJobGroup): the SparkException, "cancelled" and the job group (the runId)
    assert "org.apache.spark.SparkException" in cancelled and "cancelled" in cancelled and run_id in cancelled


def test_a_failed_batch_keeps_its_whole_text():
    assert stopped_batch("An error occurred while calling o72.collectToPython.\n: org.apache.spark.SparkException: "
                         "Job aborted due to stage failure: Task 0 in stage 3.0 failed: org.apache.spark.api.python."
                         "PythonException: sparkmirror.copying.errors.CopyError: fenced" + STACK) is None
    assert stopped_batch("An error occurred while calling o5.collectToPython.\n: org.apache.spark.SparkException: "
                         "Python worker failed to connect back." + STACK) is None


def test_a_query_stopped_mid_batch_ends_stopped(spark):
    """Real Spark: the batch's job runs for minutes (a sum over 10^12 numbers, in the JVM: no Python worker to wait
    for on a loaded host); the query is stopped while it runs. Without the short error the stream thread dies of a
    StackOverflowError in Spark's regex and its status never says Stopped."""
    running = threading.Event()

    def sink(batch_df, batch_id: int) -> None:
        running.set()
        collect_batch(batch_df.sparkSession.range(0, 10**12, 1, 2).selectExpr("sum(id)"))

    q = spark.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream.foreachBatch(sink).start()
    try:
        assert running.wait(120), q.exception()
        deadline = time.monotonic() + 120
        while not spark.sparkContext.statusTracker().getActiveJobsIds() and q.isActive and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        assert spark.sparkContext.statusTracker().getActiveJobsIds(), f"the batch's job is not running: {q.exception()}"
        time.sleep(1)
    finally:
        q.stop()
    assert q.exception() is None
    assert q.status["message"] == "Stopped", q.status
