"""What a copied record and a copied source batch cost in CPU on the record path and on the batch path (issue 36),
same machine, same run, same source data:

    python -m bench.batchcost [-n 200000] [--size 1024] [--partitions 4] [--out bench/results/batchcost.json]

Starts a source and a target KRaft cluster (the ground's Kafka release from the cached jars) under bench/work/batchcost,
preloads N records as a stock Java producer batches them (batch.size 16 KiB, linger 5 ms, no compression unless
--compression, idempotent), then copies them once per contender, each into its own target topic, each in a fresh process of
its own (a fresh interpreter, so no contender inherits another's clients or warm caches):

- `records-lane`: the product's record path, `LaneCopy` exactly-once (one lane for every partition, progress
  records, commits every `commitIntervalMs`, default 100 ms), confluent-kafka/librdkafka underneath;
- `batches-lane`: the product's batch path, the same lane (`BatchLaneCopy`, `copy: batches`) without Spark: what the
  lane's parts (ledger, shares, committer, progress records) add to the bare `batches` loop;
- `batches-lane-alo`: the same lane at-least-once (an idempotent producer on the wire, progress through a
  librdkafka fence in the committer's thread): what the transactions cost, the mirror and the target broker;
- `records-loop`: the least a record path does for the same promise: a read_committed confluent-kafka
  consumer and a transactional producer, a commit every 100 ms, no progress records;
- `batches`: `BatchReader` -> `BatchWriter` on the hand-written wire layer (`copying/protocol.py`,
  `wire/connection.py`), a transaction every 100 ms, the next Fetch under way while a round is produced;
- `batches-coalesced`: the same, with small uncompressed source batches merged first as the lane's target writer
  merges them (`copying/coalesce.py`): less work for the target broker, more for the mirror;
- `batches@7489faf`: the same loop on the batch path before it (kafka-python's protocol classes and
  connections for Fetch and Produce), for the before/after in one run.

CPU is the contender process's own (user + system, every thread: librdkafka's and kafka-python's included),
from its first read to its last commit; start-up (connections, InitProducerId) is outside (the lane's clock
starts when its first records are copied; its figure with start-up is kept beside). Every contender's
target topic is then read back read_committed and counted: the figures stand only if it holds exactly N records.
The brokers' CPU is given beside, over the contender's whole life (start-up included), on a target broker warmed
up first by a copy that is not counted (a fresh broker's first copy pays its JIT compilation): the batch path sends a
Produce request per source batch and partition, the record path's librdkafka far fewer, larger ones.
Writes the JSON with the commit it ran on (and whether spark-app/ had uncommitted changes).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .gitstate import git, uncommitted

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "work" / "batchcost"
COMMIT_MS = int(os.environ.get("BATCHCOST_COMMIT_MS", "100"))
"""Every contender's commit interval (`--commit-interval-ms`, handed to the children in the environment)."""


def preload(bootstrap: str, topic: str, n: int, size: int, partitions: int, batch_kib: int = 16,
            compression: str = "none", values: str = "same") -> None:
    """`values`: "same" (one random value for every record: a compressing producer shrinks a batch to about one
    record's bytes) or "distinct" (each record its own slice of random bytes, as `python -m bench` preloads:
    compressed batches stay as large as their records: librdkafka sends them uncompressed) or "half" (each record's
    own random bytes, half of them repeated, as `python -m bench` preloads its lz4 topics: lz4 halves a batch)."""
    from confluent_kafka import Producer

    from sparkmirror_dev.testing import produce_waiting

    p = Producer({"bootstrap.servers": bootstrap, "batch.size": batch_kib * 1024, "linger.ms": 5,
                  "compression.type": compression, "enable.idempotence": True})
    value = os.urandom(size)
    filler = os.urandom(1 << 20) if values != "same" else b""
    for i in range(n):
        if filler:
            part = size if values == "distinct" else (size + 1) // 2
            off = (i * 7919) % (len(filler) - part)
            value = (filler[off:off + part] * 2)[:size]
        produce_waiting(p, topic, key=str(i).encode(), value=value, partition=i % partitions)
    if p.flush(300) != 0:
        raise RuntimeError("preload: records left unsent")


def _usage() -> tuple[float, float]:
    return time.process_time(), time.monotonic()


def _split() -> tuple[float, float, float]:
    """(user, system, this thread's) CPU seconds."""
    t = os.times()
    return t.user, t.system, time.thread_time()


def _split_since(start: tuple[float, float, float]) -> dict[str, float]:
    end = _split()
    return {"cpu_user_s": round(end[0] - start[0], 3), "cpu_system_s": round(end[1] - start[1], 3),
            "cpu_copy_thread_s": round(end[2] - start[2], 3)}


def run_batches(source: str, target: str, topic: str, dest: str, partitions: int, n: int,
                coalesced: bool = False) -> dict[str, Any]:
    from sparkmirror.copying.batchreader import BatchReader
    from sparkmirror.copying.batchwriter import BatchWriter
    from sparkmirror.wire.cluster import Wire

    src, dst = Wire({"bootstrap.servers": source}), Wire({"bootstrap.servers": target})
    try:
        writer = BatchWriter(dst, f"batchcost-{os.getpid()}")
        writer.init()
        reader = BatchReader(src)
        reader.assign({(topic, q): 0 for q in range(partitions)})
        batches = records = txns = 0
        cpu, wall = _usage()
        split = _split()
        last_commit = time.monotonic()
        ahead = hasattr(reader, "send")  # the batch path of an older commit (batches@REV) has only `fetch`
        if ahead:
            reader.send()
        while records < n:
            if ahead:
                got = reader.receive()
                reader.send()  # the next Fetch travels while this round is produced
            else:
                got = reader.fetch()
            if coalesced:  # as the lane's target writer does (batchtarget.py)
                from sparkmirror.copying.coalesce import COALESCE_INTO, merge, runs
                got = {k: [merge(g) if len(g) > 1 else g[0] for g, _why in runs(f.batches, COALESCE_INTO)]
                       for k, f in got.items()}
            else:
                got = {k: f.batches for k, f in got.items()}
            writer.produce({(dest, p): bs for (_, p), bs in got.items()})
            for bs in got.values():  # every one acknowledged once produce returns
                batches += len(bs)
                records += sum(b.record_count for b in bs)
            if time.monotonic() - last_commit >= COMMIT_MS / 1000 or records >= n:
                writer.commit()
                txns += 1
                last_commit = time.monotonic()
        reader.assign({})  # the Fetch under way is read and dropped
        cpu_end, wall_end = _usage()
        threads = _split_since(split)
    finally:
        src.close()
        dst.close()
    return {"records": records, "batches": batches, "transactions": txns, "cpu_s": cpu_end - cpu,
            "wall_s": wall_end - wall, **threads}


def run_loop(source: str, target: str, topic: str, dest: str, partitions: int, n: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = Consumer({"bootstrap.servers": source, "group.id": "batchcost", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.max.bytes": 64 << 20})
    p = Producer({"bootstrap.servers": target, "transactional.id": f"batchcost-loop-{os.getpid()}",
                  "linger.ms": COMMIT_MS, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    p.init_transactions(60)
    c.assign([TopicPartition(topic, q, 0) for q in range(partitions)])
    records = txns = 0
    cpu, wall = _usage()
    split = _split()
    p.begin_transaction()
    last_commit = time.monotonic()
    while records < n:
        for m in c.consume(num_messages=10_000, timeout=0.1):
            if m.error() is not None:
                continue
            while True:
                try:
                    p.produce(dest, value=m.value(), key=m.key(), partition=m.partition(),
                              headers=m.headers(), timestamp=m.timestamp()[1])
                    break
                except BufferError:
                    p.poll(0.01)
            records += 1
        p.poll(0)
        if time.monotonic() - last_commit >= COMMIT_MS / 1000 or records >= n:
            p.commit_transaction(60)
            txns += 1
            p.begin_transaction()
            last_commit = time.monotonic()
    p.abort_transaction(60)  # the empty one begun last
    cpu_end, wall_end = _usage()
    threads = _split_since(split)
    c.close()
    return {"records": records, "transactions": txns, "cpu_s": cpu_end - cpu, "wall_s": wall_end - wall,
            **threads}


def run_lane(source: str, target: str, topic: str, dest: str, partitions: int, n: int,
             copy: str = "records", delivery: str = "exactly-once") -> dict[str, Any]:
    from sparkmirror.copying import lane_copy, run_epoch
    from sparkmirror.copying.workerproc import freeze_long_lived
    from sparkmirror.lanes import plan_lanes
    from sparkmirror.progress import ensure_progress_topic
    from sparkmirror.resource.flowgroup import FlowGroupConfig

    progress = f"batchcost-progress-{os.getpid()}"
    cfg = FlowGroupConfig.model_validate({
        "name": f"batchcost-{os.getpid()}", "delivery": delivery, "lanes": 1, "epochSeconds": 600,
        "commitIntervalMs": COMMIT_MS, "progressTopic": progress, "copy": copy,
        "clusters": [{"alias": lane_alias(dest, topic), "bootstrapServers": source},
                     {"alias": "b", "bootstrapServers": target}],
        "mirrors": [{"name": "m", "source": lane_alias(dest, topic), "target": "b", "topics": topic}]})
    ensure_progress_topic(cfg.cluster("b").client_config(), progress)
    lane = plan_lanes("m", 1, [(topic, dest, partitions)])[0]
    holder: dict[str, Any] = {}
    started: list[tuple[float, float]] = []

    def done() -> bool:
        c = holder["c"]
        copied = sum(s.records for s in c.summaries.values())
        if not started and copied:
            started.append(_usage())  # first records copied: start-up is behind
            started.append(_split())
        return copied >= n

    c = lane_copy(cfg, cfg.mirrors[0], lane.index, list(lane.partitions), should_stop=done)
    holder["c"] = c
    freeze_long_lived()  # as a Spark worker does at its first lane: full collections do not walk the modules
    cpu, wall = _usage()
    sums = run_epoch(c)
    cpu_end, wall_end = _usage()
    threads = _split_since(started[1]) if started else {}
    first_cpu, first_wall = started[0] if started else (cpu, wall)
    return {"records": sum(s.records for s in sums), "transactions": sum(s.transactions for s in sums),
            "cpu_s": cpu_end - first_cpu, "wall_s": wall_end - first_wall,
            "cpu_s_with_start_up": cpu_end - cpu, "wall_s_with_start_up": wall_end - wall, **threads}


def run_batches_lane(source: str, target: str, topic: str, dest: str, partitions: int, n: int) -> dict[str, Any]:
    return run_lane(source, target, topic, dest, partitions, n, copy="batches")


def run_batches_lane_alo(source: str, target: str, topic: str, dest: str, partitions: int, n: int) -> dict[str, Any]:
    return run_lane(source, target, topic, dest, partitions, n, copy="batches", delivery="at-least-once")


def run_batches_coalesced(source: str, target: str, topic: str, dest: str, partitions: int, n: int) -> dict:
    return run_batches(source, target, topic, dest, partitions, n, coalesced=True)


def lane_alias(dest: str, topic: str) -> str:
    """A lane contender's source alias: its remote topic (`<alias>.<topic>`) is the contender's own `dest`."""
    assert dest.endswith("." + topic), dest
    return dest[:-len(topic) - 1]


CONTENDERS = {"records-lane": run_lane, "batches-lane": run_batches_lane, "batches-lane-alo": run_batches_lane_alo,
              "records-loop": run_loop,
              "batches": run_batches,
              "batches-coalesced": run_batches_coalesced}
BEFORE = "7489faf"
"""The last commit whose batch path used kafka-python for Fetch and Produce: `batches@7489faf` measures it."""


def _run_child(name: str, args: list[Any]) -> dict[str, Any]:
    """Run contender `name` in a fresh interpreter; `batches@REV` runs the batch path of commit REV (its
    spark-app/ exported under bench/work/batchcost), the measuring code staying this one."""
    paths = [str(REPO / "spark-app"), str(REPO / "operator"), str(REPO / "dev"), str(REPO)]
    if "@" in name:
        name, rev = name.split("@", 1)
        tree = WORK / f"rev-{rev}"
        if not (tree / "spark-app").is_dir():
            tree.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "spark-app"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        paths[0] = str(tree / "spark-app")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.run([sys.executable, "-m", "bench.batchcost", "--child", name, "--child-args",
                           json.dumps(args)], env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"contender {name} ended with {proc.returncode}: {proc.stderr[-3000:]}")


def count_committed(bootstrap: str, topic: str, partitions: int, expected: int) -> int:
    """Records a read_committed consumer reads from `topic`: until none came for 3 s after `expected` (so a
    duplicate past it is counted too), or for 20 s at all."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "batchcost-check", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, q, 0) for q in range(partitions)])
        n, last = 0, time.monotonic()
        while time.monotonic() - last < (3 if n >= expected else 20):
            got = [m for m in c.consume(10_000, 0.5) if m.error() is None]
            if got:
                n += len(got)
                last = time.monotonic()
        return n
    finally:
        c.close()


def source_batches(bootstrap: str, topic: str, partitions: int) -> tuple[int, int]:
    """(batches, bytes) the source holds: read as the batch path reads them."""
    from sparkmirror.copying.batchreader import BatchReader
    from sparkmirror.wire.cluster import Wire

    w = Wire({"bootstrap.servers": bootstrap})
    try:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
        ends = {q: c.get_watermark_offsets(TopicPartition(topic, q), timeout=30)[1] for q in range(partitions)}
        c.close()
        r = BatchReader(w)
        r.assign({(topic, q): 0 for q in range(partitions)})
        n = size = 0
        while any(r.positions[(topic, q)] < ends[q] for q in range(partitions)):
            for f in r.fetch().values():
                n += len(f.batches)
                size += sum(len(b.raw) for b in f.batches)
        return n, size
    finally:
        w.close()


def _broker_cpu(clusters: list[Any]) -> list[float]:
    """CPU seconds (user + system) each cluster's broker JVM has used so far."""
    import psutil

    out = []
    for c in clusters:
        t = psutil.Process(c.pid).cpu_times()
        out.append(t.user + t.system + t.children_user + t.children_system)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024, help="value bytes a record")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--contenders", default=",".join([*CONTENDERS, f"batches@{BEFORE}"]),
                    help="records-lane, batches-lane (LaneCopy on either path, no Spark), batches-lane-alo "
                         "(at-least-once), records-loop, batches, batches@REV (the batch path of commit REV)")
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                    help="the preload's compression.type: compressed batches are forwarded one by one (never merged)")
    ap.add_argument("--values", default="same", choices=["same", "distinct", "half"],
                    help="same: every record the same random value (lz4 shrinks a 16-KiB batch to ~1.3 KiB); distinct: "
                         "random bytes each, as `python -m bench` preloads plain topics (librdkafka does not compress "
                         "them); half: random bytes each, half repeated, as it preloads lz4 topics (lz4 halves a batch)")
    ap.add_argument("--source-batch-kib", type=int, default=16,
                    help="the preload's batch.size (a stock Java producer's 16 KiB by default): how the cost of a "
                         "copied batch depends on its size, on the mirror and on the target broker")
    ap.add_argument("--commit-interval-ms", type=int, default=COMMIT_MS,
                    help="every contender's commit interval (the lanes' commitIntervalMs); default 100")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "batchcost.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-args", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    os.environ["BATCHCOST_COMMIT_MS"] = str(a.commit_interval_ms)  # the children's COMMIT_MS
    if a.child:
        print("RESULT " + json.dumps(CONTENDERS[a.child](*json.loads(a.child_args))), flush=True)
        return 0

    from sparkmirror_dev.kafka import KafkaCluster
    from sparkmirror_dev.testing import create_topic

    WORK.mkdir(parents=True, exist_ok=True)
    clusters = []
    try:
        for name in ("source", "target"):
            shutil.rmtree(WORK / name, ignore_errors=True)
            clusters.append(KafkaCluster(f"batchcost-{name}", WORK / name, heap="1g").start())
        source, target = (c.bootstrap for c in clusters)
        topic = create_topic(source, "batchcost", a.partitions)
        t0 = time.monotonic()
        preload(source, topic, a.records, a.size, a.partitions, a.source_batch_kib, a.compression, a.values)
        print(f"preloaded {a.records} records of {a.size} B in {time.monotonic() - t0:.1f} s", flush=True)
        n_batches, n_bytes = source_batches(source, topic, a.partitions)
        print(f"source: {n_batches} batches, {n_bytes / n_batches / 1024:.1f} KiB and "
              f"{a.records / n_batches:.1f} records a batch", flush=True)
        # a fresh target broker spends seconds of CPU compiling its produce path and registering the first
        # topics' metrics: whoever went first paid it. A copy that is not counted goes first.
        warm = "warmup." + topic
        create_topic(target, warm, a.partitions)
        _run_child("batches", [source, target, topic, warm, a.partitions, a.records])
        print("target broker warmed up by a copy not counted", flush=True)
        results: dict[str, Any] = {}
        for name in a.contenders.split(","):
            dest = f"a.{topic}" if name == "records-lane" else f"{name.replace('@', '-')}.{topic}"
            if name in results:
                raise SystemExit(f"--contenders: {name} twice")
            create_topic(target, dest, a.partitions)
            brokers = _broker_cpu(clusters)
            r = _run_child(name, [source, target, topic, dest, a.partitions, a.records])
            r["source_broker_cpu_s"], r["target_broker_cpu_s"] = (
                round(after - before, 2) for after, before in zip(_broker_cpu(clusters), brokers))
            r["target_committed_records"] = count_committed(target, dest, a.partitions, a.records)
            r["ok"] = r["target_committed_records"] == a.records
            r["cpu_us_per_record"] = round(r["cpu_s"] / a.records * 1e6, 3)
            r["cpu_us_per_source_batch"] = round(r["cpu_s"] / n_batches * 1e6, 1)
            r["records_per_s"] = round(a.records / r["wall_s"])
            results[name] = r
            print(f"{name}: {r['cpu_s']:.2f} CPU s, {r['wall_s']:.2f} s wall: {r['cpu_us_per_record']} us a record, "
                  f"{r['cpu_us_per_source_batch']} us a source batch, {r['records_per_s']} records/s; brokers "
                  f"{r['source_broker_cpu_s']} + {r['target_broker_cpu_s']} CPU s (source + target, the contender's "
                  f"whole life); "
                  f"{r['target_committed_records']} committed on the target", flush=True)
        doc = {"what": "CPU per record and per source batch, record path vs batch path (issue 36)",
               "commit": git("rev-parse", "HEAD"),
               "uncommitted_in_spark_app": bool(uncommitted("spark-app")),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "records": a.records, "record_value_bytes": a.size, "partitions": a.partitions,
               "source_batches": n_batches, "source_batch_kib": round(n_bytes / n_batches / 1024, 2),
               "records_per_batch": round(a.records / n_batches, 2), "compression": a.compression, "values": a.values,
               "commit_interval_ms": a.commit_interval_ms,
               "cpus": os.cpu_count(), "load_avg_1m_at_end": os.getloadavg()[0], "contenders": results}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {a.out}")
        return 0 if all(r["ok"] for r in results.values()) else 1
    finally:
        for c in clusters:
            c.stop()


if __name__ == "__main__":
    sys.exit(main())
