"""Throughput / latency figures of the data path on this machine (not a test; run by hand):

    .venv/bin/python -m tests.job.measure_copy lanes     # lane copier alone: records/s, MB/s, 100 B and 1 KiB, EOS/ALO
    .venv/bin/python -m tests.job.measure_copy latency   # only the latency part of `lanes` (2000 records/s of 1 KiB)
    .venv/bin/python -m tests.job.measure_copy epochs    # whole job: bounded epochs (5 s) vs short micro-batches (0.5 s)

Starts its own two KRaft clusters under a temporary directory and stops them at the end.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import create_topic, produce_waiting, unique_name
from sparkmirror.resource.flowgroup import FlowGroupConfig

PARTS = 4


def _config(a: str, b: str, topic: str, delivery: str, **kw) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": unique_name("measure"), "delivery": delivery, "lanes": 2, "epochSeconds": 120,
        "commitIntervalMs": 100, "progressTopic": unique_name("progress"),
        "clusters": [{"alias": "a", "bootstrapServers": a}, {"alias": "b", "bootstrapServers": b}],
        "mirrors": [{"name": "m", "source": "a", "target": "b", "topics": topic}], **kw})


def _fill(bootstrap: str, topic: str, n: int, size: int, rate: float | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 500_000,
                  "queue.buffering.max.messages": 2_000_000})
    value = os.urandom(size)
    start = time.monotonic()
    for i in range(n):
        produce_waiting(p, topic, key=str(i).encode(), value=value, partition=i % PARTS)
        if rate and i % 100 == 0:
            ahead = i / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
            p.poll(0)
    p.flush(120)


def _lane(config_json: str, lane: int, parts: list, expected: int, q) -> None:
    from sparkmirror.copying import LaneCopy, run_epoch

    cfg = FlowGroupConfig.model_validate_json(config_json)
    holder: dict = {}

    def done() -> bool:
        c = holder.get("c")
        return c is not None and sum(s.records for s in c.summaries.values()) >= expected

    c = LaneCopy(cfg, cfg.mirrors[0], lane, parts, should_stop=done)
    holder["c"] = c
    t0 = time.monotonic()
    sums = run_epoch(c)
    q.put({"lane": lane, "seconds": time.monotonic() - t0, "records": sum(s.records for s in sums),
           "bytes": sum(s.bytes for s in sums), "lat_sum": sum(s.latency_ms_sum for s in sums),
           "lat_max": max(s.latency_ms_max for s in sums), "txns": sum(s.transactions for s in sums)})


def _run_lanes(cfg: FlowGroupConfig, topic: str, remote: str, expected: int) -> list[dict]:
    from sparkmirror.lanes import plan_lanes
    from sparkmirror.progress import ensure_progress_topic

    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    lanes = plan_lanes("m", 2, [(topic, remote, PARTS)])
    q = mp.get_context("spawn").Queue()
    procs = []
    for lane in [ln for ln in lanes if ln.partitions]:
        exp = expected * len(lane.partitions) // PARTS
        p = mp.get_context("spawn").Process(target=_lane, args=(cfg.model_dump_json(), lane.index,
                                                                list(lane.partitions), exp, q))
        p.start()
        procs.append(p)
    out = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return out


def lanes(a: KafkaCluster, b: KafkaCluster, latency_only: bool = False) -> list[dict]:
    results = []
    for size, n in (() if latency_only else ((100, 400_000), (1024, 200_000))):
        for delivery in ("exactly-once", "at-least-once"):
            topic = create_topic(a.bootstrap, unique_name(f"m{size}"), PARTS)
            remote = create_topic(b.bootstrap, f"a.{topic}", PARTS)
            _fill(a.bootstrap, topic, n, size)
            cfg = _config(a.bootstrap, b.bootstrap, topic, delivery)
            t0 = time.monotonic()
            lanes_out = _run_lanes(cfg, topic, remote, n)
            wall = time.monotonic() - t0
            recs = sum(x["records"] for x in lanes_out)
            nbytes = sum(x["bytes"] for x in lanes_out)
            copy_s = max(x["seconds"] for x in lanes_out)
            r = {"what": "backlog", "size": size, "delivery": delivery, "records": recs,
                 "records_per_s": round(recs / copy_s), "MB_per_s": round(nbytes / copy_s / 1e6, 2),
                 "lane_seconds": round(copy_s, 2), "wall_s": round(wall, 2),
                 "txns": sum(x["txns"] for x in lanes_out)}
            print(json.dumps(r), flush=True)
            results.append(r)
    # latency at a steady rate (records already flowing while the lanes run)
    for delivery in ("exactly-once", "at-least-once"):
        topic = create_topic(a.bootstrap, unique_name("mlat"), PARTS)
        remote = create_topic(b.bootstrap, f"a.{topic}", PARTS)
        cfg = _config(a.bootstrap, b.bootstrap, topic, delivery)
        n, rate = 20_000, 2000.0
        import threading
        def later() -> None:  # start producing once the lanes are up, so start-up is not counted as latency
            time.sleep(15)
            _fill(a.bootstrap, topic, n, 1024, rate)

        t = threading.Thread(target=later)
        t.start()
        lanes_out = _run_lanes(cfg, topic, remote, n)
        t.join()
        recs = sum(x["records"] for x in lanes_out)
        r = {"what": "latency", "size": 1024, "rate": rate, "delivery": delivery, "records": recs,
             "latency_ms_avg": round(sum(x["lat_sum"] for x in lanes_out) / max(recs, 1), 1),
             "latency_ms_max": max(x["lat_max"] for x in lanes_out)}
        print(json.dumps(r), flush=True)
        results.append(r)
    return results


def epochs(a: KafkaCluster, b: KafkaCluster, workdir: Path) -> list[dict]:
    """The whole job on a backlog: time from the first mirrored record to the last, per epoch length."""
    import subprocess

    from confluent_kafka import Consumer, TopicPartition

    results = []
    n = 200_000
    for epoch_s in (5.0, 0.5):
        topic = create_topic(a.bootstrap, unique_name("mep"), PARTS)
        _fill(a.bootstrap, topic, n, 1024)
        cfg = _config(a.bootstrap, b.bootstrap, topic, "exactly-once", epochSeconds=epoch_s)
        path = workdir / f"{cfg.name}.yaml"
        path.write_text(cfg.to_yaml())
        log = open(workdir / f"{cfg.name}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "sparkmirror.job", "--config", str(path), "--master",
                                 "local[2,4]", "--conf", "spark.driver.memory=512m", "--conf",
                                 "spark.ui.enabled=false", "--checkpoint", str(workdir / cfg.name)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "m"})
        first = last = None
        try:
            while True:
                try:
                    md = c.list_topics(f"a.{topic}", timeout=5).topics[f"a.{topic}"]
                    total = sum(c.get_watermark_offsets(TopicPartition(f"a.{topic}", p), timeout=5)[1]
                                for p in md.partitions)
                except Exception:  # noqa: BLE001 - not created yet
                    total = 0
                now = time.monotonic()
                if total > 0 and first is None:
                    first = now
                if total >= n:  # offsets include transaction markers: close enough for the end time
                    last = now
                    break
                if proc.poll() is not None:
                    log.flush()
                    tail = Path(log.name).read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"job exited ({proc.returncode}):\n{tail}")
                time.sleep(0.2)
        finally:
            os.killpg(proc.pid, 9)
            proc.wait()
            c.close()
        r = {"what": "job", "epochSeconds": epoch_s, "records": n, "size": 1024,
             "records_per_s": round(n / (last - first)), "MB_per_s": round(n * 1024 / (last - first) / 1e6, 2)}
        print(json.dumps(r), flush=True)
        results.append(r)
    return results


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "lanes"
    with tempfile.TemporaryDirectory(prefix="sparkmirror-measure-") as d:
        root = Path(d)
        a = KafkaCluster("ma", root / "a", heap="768m").start()
        b = KafkaCluster("mb", root / "b", heap="768m").start()
        try:
            if what == "epochs":
                epochs(a, b, root)
            else:
                lanes(a, b, latency_only=what == "latency")
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    main()
