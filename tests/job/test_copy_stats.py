"""What the metrics side reads: the driver's epoch stats and the query's own progress (observedMetrics)."""
from __future__ import annotations

import gc
import time
from collections import Counter

from sparkmirror import queries as driver

from .conftest import produce_numbered, wait_for


def test_stats_and_stream_progress(kafka_a, kafka_b, topic, flowgroup, tmp_path):
    src = topic(kafka_a, 2)
    produced_at = time.time()
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 1000)
    cfg = flowgroup(src, epochSeconds=3, mirror_name=f"stats-{src[-5:]}")
    # this pytest process's session-scoped `spark` fixture, when a test of another file made it first, is the
    # session getOrCreate returns here: stopping it would leave those tests a dead one (CI: "No active or default
    # Spark session found" in test_query_stop after this test ran in the same worker)
    shared = _live_session()
    spark = driver.spark_session(cfg, "local[2,4]", {"spark.driver.memory": "512m", "spark.ui.enabled": "false"})
    try:
        stats: dict = {}
        queries = driver.start_queries(spark, cfg, stats, str(tmp_path / "ckpt"))
        name = cfg.mirrors[0].name
        assert [q.name for q in queries] == [f"{cfg.name}/{name}"]

        def copied() -> bool:
            snap = stats[name].snapshot() if name in stats else None
            return bool(snap) and snap["records_total"] == 2000

        wait_for(lambda: copied() or not queries[0].isActive, 240, "2000 records in the stats")
        assert queries[0].isActive, queries[0].exception()
        snap = stats[name].snapshot()
        # a record's latency: source timestamp -> committed; every record was produced before the job started
        since_ms = (time.time() - produced_at) * 1000
        assert snap["topics"] == 1 and snap["lag"] == 0 and snap["error"] is None
        parts = {p["partition"]: p for p in snap["partitions"]}
        assert sorted(parts) == [0, 1]
        for p in parts.values():
            assert p["records_total"] == 1000 and p["next_offset"] == 1000 and p["lag"] == 0
            assert p["bytes_total"] > 0 and p["latency_ms_max"] is not None
            assert 0 < p["latency_ms_avg"] <= p["latency_ms_max"] <= since_ms, (p, since_ms)
            assert p["target_topic"] == f"a.{src}"
            assert p["transactions_total"] >= 1
        # the latency histogram crossed the data source as an array column: every record, each within 300 s
        assert snap["latency"]["count"] == 2000 and snap["latency"]["le"][-1] == 2000
        assert 0 < snap["latency"]["sum_ms"] <= 2000 * since_ms and snap["latency"]["le"] == sorted(snap["latency"]["le"])
        observed = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the epoch that copied may not be the last one reported
            observed = [p["observedMetrics"]["sparkmirror"] for p in queries[0].recentProgress
                        if p.get("observedMetrics", {}).get("sparkmirror")]
            if sum(o["records"] or 0 for o in observed) == 2000:
                break
            time.sleep(1)
        assert sum(o["records"] or 0 for o in observed) == 2000, observed
        assert observed[-1]["partitions"] == 2 and observed[-1]["lag"] == 0
        # py4j binds each Java object Python is handed until Python's object goes, and py4j's objects sit in
        # reference cycles (with their cached methods): in a driver that allocates little the cycle collector comes
        # seldom, and each epoch's Dataset (its whole plan) and session wrapper stayed bound (a soak's heap dump).
        # The sink detaches them (queries.release): with Python's collector off, what the gateway binds anew over a
        # few epochs holds no epoch's Dataset or session but the running one's (small objects of pyspark's calls stay
        # till the collector runs; how many depends on timing: CI saw 11 in 4 epochs, so they are not counted)
        bindings = spark.sparkContext._gateway.java_gateway_server.getGateway().getBindings()
        wait_for(lambda: (queries[0].lastProgress or {}).get("batchId", 0) >= 2, 60, "two epochs")
        gc.disable()
        try:
            first = queries[0].lastProgress["batchId"]
            before = set(bindings.keySet())
            time.sleep(5 * cfg.epochSeconds)  # no call of py4j's meanwhile: each binds what it returns
            added = set(bindings.keySet()) - before
            epochs = queries[0].lastProgress["batchId"] - first
            kinds = Counter(_class_name(bindings.get(key)) for key in added)
        finally:
            gc.enable()
        # the epoch running as the bindings were listed holds its own two till its sink returns: at most 1 each
        held = [n for k, n in kinds.items() if k.rsplit(".", 1)[-1] in ("Dataset", "SparkSession")]
        assert epochs >= 3 and max(held, default=0) <= 1, f"py4j's gateway binds {dict(kinds)} anew in {epochs} epochs"
        driver.drain(queries, [], 10)
    finally:
        if shared:  # theirs to stop: only this test's queries go
            for q in spark.streams.active:
                if q.name and q.name.startswith(f"{cfg.name}/"):
                    q.stop()
        else:
            spark.stop()


def _live_session() -> bool:
    """Whether this process already has a running SparkSession (getOrCreate would return it)."""
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    return session is not None and session._sc._jsc is not None


def _class_name(obj) -> str:
    """The Java class of what py4j's gateway binds (gone meanwhile: unbound since it was listed)."""
    return obj.getClass().getName() if obj is not None and hasattr(obj, "getClass") else type(obj).__name__
