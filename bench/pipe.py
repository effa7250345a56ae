"""A reference, not a product: the least a Python + librdkafka mirror can do per record. `lanes` processes,
each assigned a share of the source partitions from the beginning, consume in batches and produce to
`src.<topic>` (same partition, key, value, headers, timestamp) with no delivery callbacks, no progress
records, no transactions, no Spark. The gap between it and sparkmirror is what Spark and the mirror's
bookkeeping cost; the gap between it and MM2 is the client libraries and languages.

    python -m bench.pipe --source HOST:PORT --target HOST:PORT --topics REGEX --lanes N
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import signal
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def lane(source: str, target: str, parts: list[tuple[str, int]], prefix: str) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    c = Consumer({"bootstrap.servers": source, "group.id": "bench-pipe", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.max.bytes": 64 * 1024 * 1024})
    p = Producer({"bootstrap.servers": target, "linger.ms": 5, "batch.size": 1_000_000, "acks": "all",
                  "enable.idempotence": True, "queue.buffering.max.kbytes": 1_048_576})
    c.assign([TopicPartition(t, n, -2) for t, n in parts])
    produce, poll = p.produce, p.poll
    while True:
        # the first record ends the wait (a batch consume() would hold it to the timeout), the rest come in one
        # batch call: the lanes' own pattern, so the pipe is a reference for latency as well as throughput
        first = c.poll(0.1)
        if first is None:
            poll(0)
            continue
        msgs = c.consume(num_messages=9999, timeout=0)
        msgs.insert(0, first)
        for m in msgs:
            if m.error() is not None:
                continue
            while True:
                try:
                    produce(prefix + m.topic(), value=m.value(), key=m.key(), partition=m.partition(),
                            headers=m.headers(), timestamp=m.timestamp()[1])
                    break
                except BufferError:
                    poll(0.01)
        poll(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--topics", required=True)
    ap.add_argument("--lanes", type=int, default=2)
    ap.add_argument("--prefix", default="src.")
    a = ap.parse_args(argv)
    pat = re.compile(a.topics)
    md = AdminClient({"bootstrap.servers": a.source}).list_topics(timeout=30)
    topics = {n: len(t.partitions) for n, t in md.topics.items() if pat.fullmatch(n)}
    tadmin = AdminClient({"bootstrap.servers": a.target})
    have = tadmin.list_topics(timeout=30).topics
    new = [NewTopic(a.prefix + n, num_partitions=k, replication_factor=1) for n, k in topics.items()
           if a.prefix + n not in have]
    for f in (tadmin.create_topics(new).values() if new else []):
        f.result(30)
    time.sleep(1)
    parts = sorted((t, n) for t, k in topics.items() for n in range(k))
    procs = [mp.Process(target=lane, args=(a.source, a.target, parts[i::a.lanes], a.prefix))
             for i in range(a.lanes)]
    for pr in procs:
        pr.start()
    signal.signal(signal.SIGTERM, lambda *_: [pr.terminate() for pr in procs] and sys.exit(0))
    for pr in procs:
        pr.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
