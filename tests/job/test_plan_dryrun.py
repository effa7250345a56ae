"""`sparkmirror plan`: a dry run against real brokers changes nothing, and lists exactly what `run` then does."""
from __future__ import annotations

import json
import time

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, OffsetSpec

from sparkmirror.datasource import MirrorStreamReader
from sparkmirror.progress import PROGRESS_TOPIC_CONFIG
from sparkmirror.runner.resources import load
from sparkmirror.topicsync import list_offsets
from sparkmirror_dev.testing import create_topic, unique_name

from .conftest import produce_numbered
from .test_runner_cli import resource, sparkmirror, write


def snapshot(bootstrap: str, mine: str) -> dict:
    """Everything a dry run must leave alone: topics, partitions, explicit configs, end offsets, consumer groups
    and their committed offsets -- of this test's topics and groups (names containing `mine`, and the progress
    topic it names), so that what other tests left running on the shared clusters does not count."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=30)
    topics = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None and mine in n}
    futs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in topics],
                                  request_timeout=30) if topics else {}
    configs = {res.name: {k: e.value for k, e in fut.result(timeout=30).items()
                          if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
               for res, fut in futs.items()}
    ends = list_offsets(admin, [(t, p) for t, n in topics.items() for p in range(n)], OffsetSpec.latest(), 30) \
        if topics else {}
    groups = sorted(g.group_id for g in admin.list_consumer_groups(request_timeout=30).result(timeout=30).valid
                    if mine in g.group_id)
    committed = {}
    for g in groups:
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(timeout=30)
        committed[g] = sorted((tp.topic, tp.partition, tp.offset) for tp in res.topic_partitions)
    return {"topics": topics, "configs": configs, "ends": ends, "groups": committed}


def both(kafka_a, kafka_b, mine: str) -> dict:
    return {"a": snapshot(kafka_a.bootstrap, mine), "b": snapshot(kafka_b.bootstrap, mine)}


def has_topic(bootstrap: str, name: str) -> bool:
    return name in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics


def commit_group(bootstrap: str, group: str, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])]
                                       )[group].result(timeout=30)


def test_plan_changes_nothing_and_lists_what_run_does(tmp_path, kafka_a, kafka_b, figure) -> None:
    p = unique_name("plan")
    a, b = kafka_a.bootstrap, kafka_b.bootstrap
    create_topic(a, f"{p}-new", 3, {"retention.ms": "3600000"})
    create_topic(a, f"{p}-grow", 4)
    create_topic(b, f"a.{p}-grow", 2)
    create_topic(a, f"{p}-cfg", 2, {"retention.ms": "7200000"})
    create_topic(b, f"a.{p}-cfg", 2, {"retention.ms": "1000000", "max.message.bytes": "500000"})
    create_topic(a, f"{p}-same", 2, {"retention.ms": "5000000"})
    create_topic(b, f"a.{p}-same", 2, {"retention.ms": "5000000"})
    produce_numbered(a, f"{p}-new", 3, 0, 20)
    commit_group(a, f"{p}-group", f"{p}-new", 7)
    res = resource(a, b, f"{p}-.*", progressTopic=f"progress-{p}")
    path = write(tmp_path, res)
    progress = res["spec"]["progressTopic"]

    before = both(kafka_a, kafka_b, p)
    started = time.monotonic()
    out = sparkmirror("plan", "-f", str(path), "-o", "json")
    took = time.monotonic() - started
    assert out.returncode == 0, out
    assert both(kafka_a, kafka_b, p) == before, "plan changed the clusters"
    assert progress not in before["b"]["topics"]
    plan = json.loads(out.stdout)
    assert plan["conflicts"] == [], plan["conflicts"]
    (group,) = plan["flowGroups"]
    (mirror,) = group["mirrors"]
    # no authorizer on these clusters: they list no ACLs, so nothing to sync (the round trip: test_acl_sync.py)
    assert (mirror["acls"]["status"], mirror["acls"]["create"], mirror["acls"]["delete"]) == ("ok", [], []), \
        mirror["acls"]
    rows = {t["source"]: t for t in mirror["topics"] if t["source"].startswith(p)}
    assert {s: (t["partitions"], t["target"], t["action"]) for s, t in rows.items()} == {
        f"{p}-new": (3, f"a.{p}-new", "create retention.ms=3600000"),
        f"{p}-grow": (4, f"a.{p}-grow", "add partitions 2->4"),
        f"{p}-cfg": (2, f"a.{p}-cfg", "update configs retention.ms=7200000; reset configs max.message.bytes"),
        f"{p}-same": (2, f"a.{p}-same", "up to date"),
    }
    internal = {t["role"]: t for t in mirror["internalTopics"]}
    assert internal["progress"] == {"topic": progress, "role": "progress", "configs": PROGRESS_TOPIC_CONFIG,
                                    "action": "create when the mirror starts"}
    assert internal["heartbeats"]["action"] == ("exists" if has_topic(b, "heartbeats")
                                                else "create at the first heartbeat")

    text = sparkmirror("plan", "-f", str(path))
    assert text.returncode == 0, text
    assert "ACTION" in text.stdout and f"a.{p}-grow" in text.stdout and "add partitions 2->4" in text.stdout
    assert "no conflicts" in text.stdout, text.stdout
    assert "    ACLs: up to date\n" in text.stdout, text.stdout
    assert both(kafka_a, kafka_b, p) == before

    # what `run` does when a mirror starts: the data source's first refresh (progress topic, TopicSync.sync())
    (cfg,) = load([str(path)]).configs
    (m,) = cfg.mirrors
    MirrorStreamReader({"config": cfg.model_dump_json(), "mirror": m.name}).refresh_routes(force=True)
    after = both(kafka_a, kafka_b, p)
    assert after["a"] == before["a"], "the source cluster changed"
    tb, ta = before["b"], after["b"]
    created = set(ta["topics"]) - set(tb["topics"])
    assert created == {progress} | {t["target"] for t in mirror["topics"] if "create" in t}
    assert ta["configs"][progress] == PROGRESS_TOPIC_CONFIG
    for t in mirror["topics"]:
        if "create" in t:
            assert ta["topics"][t["target"]] == t["create"]["partitions"]
            assert ta["configs"][t["target"]] == t["create"]["configs"]
    grown = {t: (tb["topics"][t], n) for t, n in ta["topics"].items() if t in tb["topics"] and tb["topics"][t] != n}
    assert grown == {t["target"]: (t["addPartitions"]["from"], t["addPartitions"]["to"])
                     for t in mirror["topics"] if "addPartitions" in t}
    changed = {t: ta["configs"][t] for t in tb["topics"] if ta["configs"][t] != tb["configs"][t]}
    assert changed == {t["target"]: {**{k: v for k, v in tb["configs"][t["target"]].items()
                                        if k not in t["resetConfigs"]}, **t["setConfigs"]}
                       for t in mirror["topics"] if "setConfigs" in t}
    assert ta["groups"] == tb["groups"]

    again = sparkmirror("plan", "-f", str(path), "-o", "yaml")
    assert again.returncode == 0, again
    assert "add partitions" not in again.stdout and "create retention" not in again.stdout
    figure("plan_time", f"plan took {took:.2f} s against two clusters with {len(before['a']['topics'])} + "
           f"{len(before['b']['topics'])} topics")


def test_plan_reports_prevented_and_real_loops(tmp_path, kafka_a, kafka_b) -> None:
    p = unique_name("loop")
    a, b = kafka_a.bootstrap, kafka_b.bootstrap
    create_topic(a, f"{p}-orders", 2)
    create_topic(a, f"b.{p}-back", 1)   # came from cluster b: never mirrored back there
    pattern = f".*{p}-.*"
    there = resource(a, b, pattern, source="a", target="b")
    back = resource(b, a, pattern, source="b", target="a")
    before = both(kafka_a, kafka_b, p)

    out = sparkmirror("plan", "-f", str(write(tmp_path, there, back)), "-o", "json")
    assert out.returncode == 0, out
    plan = json.loads(out.stdout)
    assert plan["conflicts"] == []
    a_to_b = next(m for g in plan["flowGroups"] for m in g["mirrors"] if m["source"] == "a")
    # (a `b.heartbeats` other tests' reverse mirrors left on cluster a is listed too: MM2 mirrors heartbeats always)
    mine = [t for t in a_to_b["notMirrored"] if p in t["topic"]]
    assert [t["topic"] for t in mine] == [f"b.{p}-back"]
    assert "loop prevented" in mine[0]["reason"]
    assert f"a.{p}-orders" in {t["target"] for t in a_to_b["topics"]}

    # the way back calls cluster a "west": a.<topic> on b no longer looks like it came from there
    west = resource(b, a, pattern, source="b", target="west")
    out = sparkmirror("plan", "-f", str(write(tmp_path, there)), "-f", str(write(tmp_path, west)), "-o", "json")
    assert out.returncode == 3, out
    conflicts = json.loads(out.stdout)["conflicts"]
    loops = [c for c in conflicts if c["kind"] == "loop"]
    # (a `heartbeats` topic other tests left on cluster a would echo back the same way: MM2 mirrors it always)
    mine = [c for c in loops if p in c["topic"]]
    assert [c["topic"] for c in mine] == [f"a.{p}-orders"], conflicts
    assert f"back to its origin as 'b.a.{p}-orders'" in mine[0]["message"], mine[0]
    text = sparkmirror("plan", "-f", str(write(tmp_path, there)), "-f", str(write(tmp_path, west)))
    assert text.returncode == 3 and "conflict(s):" in text.stdout and "loop:" in text.stdout, text
    assert both(kafka_a, kafka_b, p) == before


def test_plan_bad_input_and_unreachable(tmp_path, kafka_b) -> None:
    out = sparkmirror("plan", "-f", str(write(tmp_path, resource("127.0.0.1:1", "127.0.0.1:2", "(orders"))))
    assert out.returncode == 2 and "spec.mirrors[0].topicsPattern" in out.stderr, out
    assert "Traceback" not in out.stderr
    from sparkmirror_dev.procs import free_port

    port = free_port()
    out = sparkmirror("plan", "--timeout", "3", "-f", str(write(tmp_path, resource(f"127.0.0.1:{port}", kafka_b.bootstrap,
                                                                                    "t.*"))))
    assert out.returncode == 1, out
    assert f"spec.mirrors[0].source.bootstrapServers: cluster 'a' at 127.0.0.1:{port} is unreachable" in out.stderr
