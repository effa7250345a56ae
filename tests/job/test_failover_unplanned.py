"""Unplanned failover repeats no more than one checkpoint interval (issue 39, item 7).

Real brokers, the real job (local Spark): a producer writes to the source and a consumer group reads it there,
committing after every batch, while the mirror copies with `emit.checkpoints.interval.seconds: 5`. Checkpoints
must reach the target from the first copied range on and keep their interval; then the source's broker is
killed mid-stream and `sparkmirror failover` moves the group to its last checkpoint (one short probe of the dead
source, nothing more asked of it). On the target the group re-reads at most what was produced in one interval
(plus its own uncommitted batch), and misses nothing the target holds: counted by sequence numbers per
partition.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from sparkmirror.cli import main
from sparkmirror.mm2formats import Checkpoint
from sparkmirror.progress import read_progress
from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import consume_as_group, create_topic, read_topic, unique_name

from .conftest import numbered_sequences, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(1.4)]

INTERVAL = 5.0   # emit.checkpoints.interval.seconds
RATE = 40        # sequences per second on each of the 2 partitions
BATCH = 50       # the group reads at most this many records before it commits


class _Writer(threading.Thread):
    """Numbered records `<partition>:<seq>` to both partitions, RATE a second each, until the broker dies."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.done = bootstrap, topic, threading.Event()

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": 5000})
        seq, t0 = 0, time.monotonic()
        while not self.done.is_set():
            for part in (0, 1):
                p.produce(self.topic, value=f"{part}:{seq}".encode(), partition=part)
            seq += 1
            p.poll(0)
            time.sleep(max(0.0, t0 + seq / RATE - time.monotonic()))
        p.flush(1)


class _Group(threading.Thread):
    """A consumer of `group` on the source that commits after every batch it reads (at most BATCH records): `read`
    holds (partition, sequence, record timestamp) of everything it read."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic, self.done = bootstrap, group, topic, threading.Event()
        self.read: list[tuple[int, int, int]] = []
        self.stopped = threading.Event()  # reading is over (closing the consumer may wait on the dead broker)

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "session.timeout.ms": 6000})
        c.subscribe([self.topic])
        try:
            while not self.done.is_set():
                batch = [m for m in c.consume(BATCH, 0.2) if m.error() is None]
                if not batch:
                    continue
                self.read += [(m.partition(), int(m.value().decode().split(":")[1]), m.timestamp()[1])
                              for m in batch]
                try:
                    c.commit(asynchronous=True)  # a synchronous commit would wait for ever on the dead broker
                except KafkaException:
                    return
        finally:
            self.stopped.set()
            c.close()


def _rounds(stamps: list[int]) -> list[int]:
    """Checkpoint emission rounds: one timestamp per round (a round writes its records within milliseconds)."""
    out: list[int] = []
    for ts in sorted(stamps):
        if not out or ts - out[-1] > 1000:
            out.append(ts)
    return out


def test_unplanned_failover_repeats_at_most_one_checkpoint_interval(tmp_path, kafka_b, job, capfd, figure) -> None:
    east = KafkaCluster("east", tmp_path / "east").start()  # its own: this test kills it
    try:
        _unplanned(east, kafka_b, tmp_path, job, capfd, figure)
    finally:
        east.stop()


def _unplanned(east: KafkaCluster, kafka_b: KafkaCluster, tmp_path, job, capfd, figure) -> None:
    from sparkmirror.runner.resources import load

    src = create_topic(east.bootstrap, unique_name("orders"), 2)
    alias, group = unique_name("east"), unique_name("ck-app")
    doc = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
           "metadata": {"name": unique_name("ck"), "namespace": "dr"},
           "spec": {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                    "mirrors": [{"source": {"alias": alias, "bootstrapServers": east.bootstrap},
                                 "topicsPattern": src, "groupsPattern": "ck-.*",
                                 "checkpointConnector": {"config": {
                                     "emit.checkpoints.interval.seconds": INTERVAL}}}]}}
    resource = tmp_path / "mirror.yaml"
    resource.write_text(json.dumps(doc))
    cfg = load([str(resource)]).configs[0]
    dst, ckpt_topic = f"{alias}.{src}", f"{alias}.checkpoints.internal"
    writer, reader = _Writer(east.bootstrap, src), _Group(east.bootstrap, group, src)
    writer.start()
    reader.start()
    job(cfg)

    def rounds() -> list[int]:
        try:
            recs = read_topic(kafka_b.bootstrap, ckpt_topic).get(0, [])
        except KeyError:
            return []
        return _rounds([r.timestamp for r in recs if Checkpoint.decode(r.key, r.value).group == group])

    wait_for(lambda: bool(rounds()), 240, "the group's first checkpoint on the target")
    first = rounds()[0]
    time.sleep(max(0.0, first / 1000 + 6 * INTERVAL + 2 - time.time()))  # >= 30 s of checkpoints
    killed_ms = int(time.time() * 1000)
    east.kill()  # the source cluster dies mid-stream: no clean shutdown
    reader.done.set()
    writer.done.set()
    assert reader.stopped.wait(30)
    writer.join(30)
    read_on_source = list(reader.read)

    # the checkpoints reached the target from the first copied range on, one round per interval
    seen = [r for r in rounds() if r <= killed_ms]
    state = read_progress(cfg.cluster("b").client_config(), cfg.progressTopic, alias, resource=cfg.resource)
    copy_began = min(r.commit_ms for m in state.maps.values() for r in m.records)
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    assert len(seen) >= 6, seen
    assert seen[0] - copy_began <= INTERVAL * 1000, (copy_began, seen[:3])
    assert max(gaps) <= 2 * INTERVAL * 1000, gaps  # a behaviour bound (the interval, one interval of slack)

    # failover with the source dead: one short probe, then the last checkpoints
    t0 = time.monotonic()
    rc = main(["failover", "-f", str(resource), "--mirror", alias, "--groups", group, "-o", "json",
               "--log-file", str(tmp_path / "failover.log")])
    took, done_ms = time.monotonic() - t0, int(time.time() * 1000)
    out, err = capfd.readouterr()
    report = json.loads(out)
    assert rc == 0 and report["ok"] and report["offsetsFrom"] == "checkpoints", (out, err)
    [moved] = report["groups"]
    assert moved["group"] == group and {r["action"] for r in moved["partitions"]} == {"committed"}
    age_ms = moved["checkpointAgeMs"]
    written = done_ms - age_ms  # when the checkpoint used was written, give or take the failover's own time
    assert seen[-1] <= written <= killed_ms + took * 1000, (seen[-1], written, killed_ms)
    age_at_kill = killed_ms - seen[-1]

    # the group resumes on the target: it re-reads at most one interval, and misses nothing the target holds
    on_target = consume_as_group(kafka_b.bootstrap, group, dst, 2)
    held = numbered_sequences(kafka_b.bootstrap, dst)
    on_source = {p: [s for q, s, _ts in read_on_source if q == p] for p in (0, 1)}
    reread = sum(len(set(on_source[p]) & set(on_target[p])) for p in (0, 1))
    missing = sum(len(set(held.get(p, [])) - set(on_source[p]) - set(on_target[p])) for p in (0, 1))
    twice = sum(len(v) - len(set(v)) for v in on_target.values())
    in_interval = sum(1 for _p, _s, ts in read_on_source if ts > killed_ms - INTERVAL * 1000)
    assert missing == 0 and twice == 0, (missing, twice)
    assert all(v == sorted(v) and (not v or v == list(range(v[0], v[-1] + 1))) for v in on_target.values())
    assert reread <= in_interval + BATCH, (reread, in_interval, age_ms)
    figure("unplanned_failover", f"checkpoints every {min(gaps) / 1000:.1f}-{max(gaps) / 1000:.1f} s (interval "
           f"{INTERVAL:.0f} s, {len(seen)} rounds), the first {(seen[0] - copy_began) / 1000:.1f} s after copying "
           f"began; source killed {age_at_kill / 1000:.1f} s after the last checkpoint ({age_ms / 1000:.1f} s old when "
           f"the failover used it), the group re-read {reread} "
           f"records ({in_interval} read in the last interval, a batch at most {BATCH}), 0 "
           f"missing; failover with the source dead took {took:.1f} s")
