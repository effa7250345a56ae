"""`sparkmirror failover`: the mirror stops at a consistent point, consumer groups move exactly, `--undo`.

Real brokers throughout; the running mirror is the real job (local Spark). Every record a consumer reads on the
target after the failover is counted by sequence number: what the group had not consumed on the source, each
exactly once.
"""
from __future__ import annotations

import json
import re
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror.cli import main
from sparkmirror.failover.report import (PartitionMove, can_move, decide, document, named_groups, table,
                                         to_commit)
from sparkmirror.failover.run import failover, undo_all
from sparkmirror.mm2formats import Checkpoint
from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import (commit_group, consume_as_group, count_records, group_offsets, produce_numbered,
                                     read_topic, unique_name)

from tests.support.campaign import RECORDS_IN_CAMPAIGN

from .conftest import mirror_once, wait_for

pytestmark = pytest.mark.minutes(2.7)


def _read_as(bootstrap: str, group: str, topic: str, upto: dict[int, int]) -> dict[int, list[int]]:
    """A consumer of `group` reads each partition's first `upto[p]` records and commits: sequences read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    out: dict[int, list[int]] = {p: [] for p in upto}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in upto])
        deadline = time.monotonic() + 60
        while any(len(out[p]) < n for p, n in upto.items()) and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None and len(out[m.partition()]) < upto[m.partition()]:
                    out[m.partition()].append(int(m.value().decode().split(":")[1]))
        c.commit(offsets=[TopicPartition(topic, p, upto[p]) for p in upto], asynchronous=False)
    finally:
        c.close()
    assert {p: len(v) for p, v in out.items()} == upto
    return out


def test_decide_moves_idle_groups_forward_only() -> None:
    cps = [Checkpoint("g", "a.t", 0, 60, 58), Checkpoint("g", "a.t", 1, 10, 9)]
    rows = decide("g", cps, {("a.t", 1): 20}, 0, {"a.t": "t"})
    assert [(r.partition, r.action) for r in rows] == [(0, "committed"), (1, "kept")]
    assert to_commit(rows) == {"g": {("a.t", 0): 58}} and can_move(rows)
    busy = decide("g", cps, {}, 2, {"a.t": "t"})
    assert {r.action for r in busy} == {"active"} and not can_move(busy) and to_commit(busy) == {}
    assert PartitionMove("g", "t", "a.t", 0, 1, 2, "committed").as_dict()["sourceTopic"] == "t"
    stopped = [{"flowGroup": "fg", "fencedIds": ["x.lane-0"], "atMs": 1, "tookMs": 80, "alreadyFailedOver": False,
                "mirrors": ["a-to-b", "c-to-b"]}]
    doc = document("a-to-b", "a", "b", "source", stopped, rows + busy, not_copied=7)
    assert not doc["ok"] and [g["group"] for g in doc["groups"]] == ["g"]
    text = table(doc).splitlines()
    assert text[1].endswith("its other mirrors stop with it: c-to-b")
    assert text[3].strip().startswith("7 records on the source were not copied")
    assert any(line.split()[:7] == ["g", "t", "0", "60", "a.t", "58", "committed"] for line in text)
    assert text[-1].startswith("consumers cannot all move yet")


def test_groups_not_moved_are_named_and_checkpoint_ages_shown() -> None:
    rows = decide("g", [Checkpoint("g", "a.t", 0, 60, 58)], {}, 0, {"a.t": "t"}) + \
        decide("h", [Checkpoint("h", "a.t", 0, 7, 7)], {}, 1, {"a.t": "t"})
    doc = document("a-to-b", "a", "b", "checkpoints", [], rows, None, ["group x: no checkpoint on target 'b'"],
                   {"g": 4200, "h": 90}, ["x"])
    assert doc["groupsNotMoved"] == ["h", "x"] and not doc["ok"]
    assert [(g["group"], g["moved"], g["checkpointAgeMs"]) for g in doc["groups"]] == [("g", True, 4200),
                                                                                        ("h", False, 90)]
    text = table(doc)
    assert "groups not moved: h, x" in text and "group g: last checkpoint 4.2 s old" in text
    assert named_groups("app-1|app\\.v1|x-.*|[ab]") == ["app-1", "app.v1"] and named_groups(None) == []


@pytest.mark.kafka
@pytest.mark.parametrize("copy", [RECORDS_IN_CAMPAIGN, "batches"])
def test_failover_stops_the_mirror_and_moves_groups_exactly(kafka_a, kafka_b, topic, flowgroup, job, figure,
                                                            copy) -> None:
    src = topic(kafka_a, 2)
    cfg = flowgroup(src, copy=copy, mirror={"groups": "fo-.*", "emitCheckpointsIntervalSeconds": 2})
    mirror = cfg.mirrors[0]
    dst = f"a.{src}"
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 150)
    running = job(cfg)
    wait_for(lambda: count_records(kafka_b.bootstrap, dst) == 300, 240, "the first 300 records on the target")
    group, other = unique_name("fo-app"), unique_name("fo-other")
    commit_group(kafka_a.bootstrap, group, {(src, 0): 60, (src, 1): 100})  # the group consumed part of it
    commit_group(kafka_a.bootstrap, other, {(src, 0): 5})  # selected by the mirror, not by this failover
    produce_numbered(kafka_a.bootstrap, src, 2, 150, 50)

    # a planned switch: producers stopped, the mirror catches up, then stops; the group moves exactly
    t0 = time.monotonic()
    doc = failover([cfg], mirror, lambda g: g == group, timeout=30, wait_seconds=120)
    took = time.monotonic() - t0
    assert doc["ok"], doc
    # the job keeps running until it notices; records produced now must not reach the target
    produce_numbered(kafka_a.bootstrap, src, 2, 200, 20)
    assert doc["offsetsFrom"] == "source" and [s["flowGroup"] for s in doc["stopped"]] == [cfg.name]
    assert doc["notCopied"] == 0  # --wait-caught-up: everything was copied before the stop
    assert len(doc["stopped"][0]["fencedIds"]) == 2  # both lanes' transactional ids
    rows = {r["partition"]: r for g in doc["groups"] for r in g["partitions"]}
    assert {p: (r["action"], r["sourceOffset"]) for p, r in rows.items()} == {0: ("committed", 60), 1: ("committed", 100)}
    assert group_offsets(kafka_b.bootstrap, group) == {(dst, p): r["targetOffset"] for p, r in rows.items()}
    assert other not in {g["group"] for g in doc["groups"]} and not group_offsets(kafka_b.bootstrap, other)
    # every record the group had not consumed, exactly once, and nothing else
    assert consume_as_group(kafka_b.bootstrap, group, dst, 2) == {0: list(range(60, 200)), 1: list(range(100, 200))}
    t_stop = time.monotonic()

    # the running job sees the failover mark and exits by itself, having copied nothing more
    running.proc.wait(120)
    noticed = time.monotonic() - t_stop
    assert running.proc.returncode == 0, running.log()[-3000:]
    assert "was failed over" in running.log()
    assert f"copying {copy})" in running.log(), "the lanes did not take the path asked for"
    assert count_records(kafka_b.bootstrap, dst) == 400
    # run again, the failover is idempotent: same time, fenced again, the group already where it belongs
    again_doc = failover([cfg], mirror, lambda g: g == group, timeout=30)
    assert again_doc["stopped"][0]["alreadyFailedOver"] and again_doc["stopped"][0]["atMs"] == doc["stopped"][0]["atMs"]
    assert {r["action"] for g in again_doc["groups"] for r in g["partitions"]} == {"kept"}
    assert again_doc["notCopied"] == 40  # produced after the failover: they stay on the source
    # a driver started now refuses to copy, saying why
    refused = job(cfg)
    refused.proc.wait(120)
    assert refused.proc.returncode == 1 and "was failed over" in refused.log()

    # undo: the mirror copies again from where it stopped, nothing lost or repeated
    undone = undo_all([cfg], mirror)
    assert undone["stopped"] == [{"flowGroup": cfg.name, "undone": True}]
    again = job(cfg)
    wait_for(lambda: count_records(kafka_b.bootstrap, dst) >= 440, 240, "the 40 later records on the target")
    seqs = {p: [int(r.value.decode().split(":")[1]) for r in recs] for p, recs in read_topic(kafka_b.bootstrap, dst).items()}
    assert seqs == {0: list(range(220)), 1: list(range(220))}
    assert again.stop() == 0
    mark_ms = doc["stopped"][0]["tookMs"]
    figure(f"failover_{copy}", f"failover ({copy}): caught up, stopped, translated and committed in {took:.1f} s "
           "(mark and fencing "
           f"{mark_ms} ms); the running job exited {noticed:.1f} s later; the moved group read 240 records on "
           "the target, each once; after --undo, 440 records once")


@pytest.mark.kafka
def test_failover_command_with_the_source_gone_uses_the_last_checkpoints(kafka_b, topic, tmp_path, capfd) -> None:
    """The disaster case: the source cluster's broker is stopped; groups move to their last checkpoints, a group
    that read part of the topic on the source reads the rest on the target, each record once, and a group with
    consumers on the target is refused (exit 1), named in the report."""
    east = KafkaCluster("east", tmp_path / "east").start()  # its own: this test stops it
    try:
        _source_dies(east, kafka_b, topic, tmp_path, capfd)
    finally:
        east.stop()


def _source_dies(kafka_a: KafkaCluster, kafka_b: KafkaCluster, topic, tmp_path, capfd) -> None:
    src = topic(kafka_a, 2)
    name = unique_name("fo")
    alias = unique_name("east")  # its own `<alias>.checkpoints.internal` on the shared target: others read theirs
    doc = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
           "metadata": {"name": name, "namespace": "dr"},
           "spec": {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                    "mirrors": [{"source": {"alias": alias, "bootstrapServers": kafka_a.bootstrap},
                                 "topicsPattern": src, "groupsPattern": "dr-.*"}]}}
    live = tmp_path / "live.yaml"
    live.write_text(json.dumps(doc))
    from sparkmirror.runner.resources import load

    cfg = load([str(live)]).configs[0]
    mirror = cfg.mirrors[0]
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 80)
    routes = mirror_once(cfg)
    moved, busy = unique_name("dr-moved"), unique_name("dr-busy")
    read_on_source = _read_as(kafka_a.bootstrap, moved, src, {0: 30, 1: 50})  # consumed and committed there
    commit_group(kafka_a.bootstrap, busy, {(src, 0): 10})
    emitter = CheckpointEmitter(cfg, mirror)  # what the running mirror emitted before the source went away
    try:
        emitter.run_once(sync_offsets=False)
    finally:
        emitter.close()
    dst = routes[0].target_topic
    stray = Producer({"bootstrap.servers": kafka_b.bootstrap})  # another writer's record: skipped, not a crash
    stray.produce(emitter.topic, key=b"\x00\x01x", value=b"not a checkpoint", partition=0)
    assert stray.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_b.bootstrap, "group.id": busy, "auto.offset.reset": "earliest"})
    consumer.subscribe([dst])
    try:
        wait_for(lambda: consumer.poll(0.5) is not None or bool(consumer.assignment()), 60, "the busy consumer joins")
        kafka_a.stop()  # the source cluster dies
        gone = live
        rc = main(["failover", "-f", str(gone), "--mirror", alias, "-o", "json", "--timeout", "20",
                   "--log-file", str(tmp_path / "failover.log")])
    finally:
        consumer.close()
    out, err = capfd.readouterr()
    report = json.loads(out)
    assert rc == 1, (out, err)
    assert f"source cluster {alias!r}" in err and "using the last checkpoints" in err
    assert report["offsetsFrom"] == "checkpoints" and not report["ok"]
    groups = {g["group"]: g["partitions"] for g in report["groups"]}
    assert {r["action"] for r in groups[busy]} == {"active"}
    assert {(r["partition"], r["action"], r["sourceOffset"]) for r in groups[moved]} == \
        {(0, "committed", 30), (1, "committed", 50)}
    # what the group read on the source, then on the target: every record once
    on_target = consume_as_group(kafka_b.bootstrap, moved, dst, 2)
    assert {p: read_on_source[p] + on_target[p] for p in (0, 1)} == {0: list(range(80)), 1: list(range(80))}

    assert {g["group"]: g["checkpointAgeMs"] is not None for g in report["groups"]} == {moved: True, busy: True}
    assert report["groupsNotMoved"] == [busy]

    # a selected group with no checkpoint yet (source gone): named as not moved, not `ok` (was `"groups": []`, ok)
    rc = main(["failover", "-f", str(gone), "--mirror", alias, "-o", "json", "--timeout", "20", "--groups",
               "dr-none-.*", "--log-file", str(tmp_path / "none.log")])
    out, err = capfd.readouterr()
    report = json.loads(out)
    assert rc == 1 and not report["ok"] and report["groups"] == [], (out, err)
    assert "no selected group has a checkpoint" in report["notMoved"][0]
    # one named beside a moved one: the moved one stays where it is, the named one is reported by name
    ghost = unique_name("dr-ghost")
    rc = main(["failover", "-f", str(gone), "--mirror", alias, "-o", "json", "--timeout", "20", "--groups",
               f"{moved}|{ghost}", "--log-file", str(tmp_path / "ghost.log")])
    out, err = capfd.readouterr()
    report = json.loads(out)
    assert rc == 1 and not report["ok"] and report["groupsNotMoved"] == [ghost], (out, err)
    assert [g["group"] for g in report["groups"]] == [moved] and report["groups"][0]["moved"]
    assert report["notMoved"] == [f"group {ghost}: no checkpoint on target 'b' (the mirror had not emitted one for "
                                  "it yet): its consumers would start at auto.offset.reset there"]

    # a mirror that never emitted checkpoints, its source gone: nothing to translate from, said plainly (exit 1)
    never = json.loads(json.dumps(doc))
    never["metadata"]["name"] = unique_name("fo-never")
    never["spec"]["mirrors"][0]["source"]["alias"] = "zz"
    (tmp_path / "never.yaml").write_text(json.dumps(never))
    assert main(["failover", "-f", str(tmp_path / "never.yaml"), "--timeout", "20",
                 "--log-file", str(tmp_path / "never.log")]) == 1
    assert "has no checkpoints topic 'zz.checkpoints.internal'" in capfd.readouterr().err

    # usage errors: one line naming the option, exit 2
    assert main(["failover", "-f", str(gone), "--mirror", "nope"]) == 2
    assert re.search(r"--mirror: no mirror named 'nope'", capfd.readouterr().err)
    assert main(["failover", "-f", str(gone), "--groups", "["]) == 2
    assert "--groups: invalid regex" in capfd.readouterr().err
