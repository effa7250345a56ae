"""`python -m sparkmirror_dev.demo` (`make demo`): two local Kafka clusters, generated data, a mirror run to the end.

1. starts two single-node KRaft clusters, `east` and `central`, on free loopback ports (`sparkmirror_dev`);
2. creates a few topics on `east` and fills them with generated records (keys, headers, a few tombstones),
   with one consumer group committing part way;
3. writes a KafkaMirrorMaker2 resource for east -> central and runs it with `sparkmirror run` in local Spark,
   showing progress, until every partition is caught up (Spark and Kafka client logs go to the log file it
   names; `-v` shows them instead);
4. prints a per-topic comparison of source and target record counts (read_committed), the consumer group's
   translated offsets from MM2's checkpoints topic, and stops everything it started.

Exit status 0 when every topic has the same count on both sides.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

TOPICS = {"orders": 3, "payments": 2, "clicks": 4}


def generate(bootstrap: str, topics: dict[str, int], records: int, seed: int = 7) -> dict[str, int]:
    from confluent_kafka import Producer

    rnd = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "enable.idempotence": True})
    sent: dict[str, int] = {}
    for topic, parts in topics.items():
        for i in range(records):
            key = f"{topic[:-1]}-{rnd.randrange(records // 4 + 1)}".encode()
            value = None if i % 97 == 13 else f'{{"n": {i}, "amount": {rnd.randrange(10_000)}}}'.encode()
            headers = [("source", b"demo"), ("trace-id", uuid.UUID(int=rnd.getrandbits(128)).bytes)]
            while True:
                try:
                    p.produce(topic, key=key, value=value, headers=headers, partition=i % parts)
                    break
                except BufferError:
                    p.poll(0.1)
        sent[topic] = records
    if p.flush(60):
        raise RuntimeError("generated records were not all delivered")
    return sent


def count(bootstrap: str, topic: str, timeout: float = 60.0) -> int:
    """Records a read_committed consumer reads from every partition, to the end."""
    from .testing import count_records

    return count_records(bootstrap, topic, timeout)


def commit_group(bootstrap: str, group: str, topic: str, parts: int, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, p, offset) for p in range(parts)], asynchronous=False)
    c.close()


def read_checkpoints(bootstrap: str, source_alias: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from sparkmirror.mm2formats import Checkpoint

    topic = f"{source_alias}.checkpoints.internal"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-ckpt-{uuid.uuid4().hex[:6]}",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    out = {}
    try:
        if topic not in c.list_topics(timeout=10).topics:
            return out
        c.assign([TopicPartition(topic, 0, -2)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            cp = Checkpoint.decode(m.key(), m.value())
            if cp.group == group:
                out[(cp.topic, cp.partition)] = (cp.upstream_offset, cp.downstream_offset)
    finally:
        c.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkmirror-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000, help="records per topic (default 10000)")
    parser.add_argument("--timeout", type=float, default=900, help="give up after this many seconds")
    parser.add_argument("--keep", action="store_true", help="leave the clusters' data directory in place")
    parser.add_argument("-v", "--verbose", action="store_true", help="Spark and Kafka client logs on the console")
    args = parser.parse_args(argv)
    if args.verbose:
        return _demo(args)
    from sparkmirror.runner.console import QuietConsole, default_log_path

    # the demo's own Kafka clients log to the run's file too (librdkafka writes to descriptor 2 directly)
    with QuietConsole(default_log_path()):
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    from .env import start_all
    from .kafka import KafkaCluster
    from .testing import create_topic
    from sparkmirror.runner import cli as runner_cli

    from .procs import DevEnvError

    home = Path(tempfile.mkdtemp(prefix="sparkmirror-demo-"))
    print(f"== starting two Kafka clusters (data in {home}) ...", flush=True)
    t0 = time.monotonic()
    for attempt in range(3):  # a free port can be taken by another process before the broker binds it
        east, central = KafkaCluster("east", home / "east"), KafkaCluster("central", home / "central")
        try:
            start_all([east, central])
            break
        except DevEnvError as e:
            if attempt == 2 or "already in use" not in str(e):
                print(f"== could not start the clusters: {e}", file=sys.stderr)
                shutil.rmtree(home, ignore_errors=True)
                return 1
            print(f"   {e}; trying other ports", flush=True)
    try:
        print(f"   east    {east.bootstrap}\n   central {central.bootstrap}   ({time.monotonic() - t0:.0f}s)", flush=True)
        for topic, parts in TOPICS.items():
            create_topic(east.bootstrap, topic, parts, {"retention.ms": str(7 * 24 * 3600 * 1000)})
        print(f"== generating {args.records} records into each of {', '.join(TOPICS)} on east ...", flush=True)
        generate(east.bootstrap, TOPICS, args.records)
        group = "billing-app"
        commit_group(east.bootstrap, group, "orders", TOPICS["orders"], args.records // TOPICS["orders"] // 2)

        resource = {
            "apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "demo", "namespace": "local"},
            "spec": {
                "target": {"alias": "central", "bootstrapServers": central.bootstrap},
                "mirrors": [{
                    "source": {"alias": "east", "bootstrapServers": east.bootstrap},
                    "topicsPattern": "|".join(TOPICS),
                    "groupsPattern": group,
                    "checkpointConnector": {"config": {"emit.checkpoints.interval.seconds": 2,
                                                       "sync.group.offsets.enabled": True,
                                                       "sync.group.offsets.interval.seconds": 2}},
                }],
                "spark": {"parallelism": 2, "epochSeconds": 10},
            },
        }
        path = home / "mirror.yaml"
        path.write_text(yaml.safe_dump(resource, sort_keys=False))
        print(f"== mirroring east -> central with `sparkmirror run -f {path}` until caught up ...", flush=True)
        rc = runner_cli.run(runner_cli.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(
            ["-f", str(path), "--until-caught-up", "--timeout", str(args.timeout), "--interval", "1",
             *(["-v"] if args.verbose else [])]))  # the run's log file is outside `home`: it outlives the demo
        if rc != 0:
            print(f"== the mirror did not catch up (exit {rc})", flush=True)
            return rc

        print("\n== per-topic comparison (read_committed record counts)", flush=True)
        print(f"   {'TOPIC':<12} {'SOURCE (east)':>14} {'REMOTE TOPIC':<18} {'TARGET (central)':>17}  ")
        ok = True
        for topic in TOPICS:
            src, dst = count(east.bootstrap, topic), count(central.bootstrap, f"east.{topic}")
            ok &= src == dst
            print(f"   {topic:<12} {src:>14} {'east.' + topic:<18} {dst:>17}  {'same' if src == dst else 'DIFFERENT'}")
        cps = read_checkpoints(central.bootstrap, "east", group)
        if cps:
            print(f"\n== consumer group {group!r}: offsets translated into central (MM2 checkpoints)")
            for (t, p), (up, down) in sorted(cps.items()):
                print(f"   {t}[{p}]: east offset {up} -> central offset {down}")
        print("\n== " + ("every topic has the same count on both sides" if ok else "COUNTS DIFFER"), flush=True)
        return 0 if ok else 1
    finally:
        print("== stopping the clusters ...", flush=True)
        for c in (east, central):
            c.stop()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
