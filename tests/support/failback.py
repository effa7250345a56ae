"""What the failback tests share (tests/job/test_failback.py, test_transforms_failover.py): a group reading part
of a topic, the mirror resources of a -> b and b -> a, `sparkmirror failback` run, the topics a test made."""
from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror.cli import main


def read_some(bootstrap: str, group: str, topic: str, partitions: int, n: int | dict[int, int]) -> dict[int, list[int]]:
    """A consumer of `group` reads `n` records of each partition (or n[partition]) from its committed offsets (the
    start when it has none) and commits after them: the sequence numbers it read."""
    want = n if isinstance(n, dict) else {p: n for p in range(partitions)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    last: dict[int, int] = {}
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        c.assign([TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else -2) for tp in committed])
        deadline = time.monotonic() + 60
        while any(len(v) < want[p] for p, v in out.items()) and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None and len(out[m.partition()]) < want[m.partition()]:
                    out[m.partition()].append(int(m.value().decode().split(":")[1]))
                    last[m.partition()] = m.offset()
        c.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
    finally:
        c.close()
    assert all(len(v) == want[p] for p, v in out.items()), out
    return out


IDENTITY = {"config": {"replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}}


def mirror_resource(name: str, target: tuple[str, str], source: tuple[str, str], topics: str,
              identity: bool = False, copy: str = "records") -> dict:
    mirror = {"source": {"alias": source[0], "bootstrapServers": source[1]}, "topicsPattern": topics,
              "groupsPattern": "fb-.*", **({"sourceConnector": IDENTITY} if identity else {})}
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": name, "namespace": "dr"},
            "spec": {"target": {"alias": target[0], "bootstrapServers": target[1]}, "mirrors": [mirror],
                     "copy": copy}}


def topics_of(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def delete_topics(bootstrap: str, topics: set[str]) -> None:
    if topics:
        admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answers: the futures need it
        for fut in admin.delete_topics(sorted(topics), operation_timeout=30).values():
            try:
                fut.result(30)
            except Exception:  # noqa: BLE001 - already gone
                pass


def run_failback(files: dict, group: str, log: str, capfd) -> tuple[dict, float]:
    """`sparkmirror failback` of mirror a for `group`: (its JSON report, seconds taken); it must succeed."""
    capfd.readouterr()
    t0 = time.monotonic()
    rc = main(["failback", "-f", str(files["fwd"]), "-f", str(files["rev"]), "--mirror", "a", "--groups", group,
               "-o", "json", "--log-file", log])
    took = time.monotonic() - t0
    doc = json.loads(capfd.readouterr().out)
    assert rc == 0 and doc["ok"], doc
    return doc, took
