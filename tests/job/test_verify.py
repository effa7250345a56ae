"""`sparkmirror verify`: a real mirror on real brokers is found equal; a record altered on the target and a stray
record written into it are found, each in exactly its range; verify runs in local Spark (subprocess)."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from sparkmirror.copying import copy_lane
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ProgressRecord, ensure_progress_topic
from sparkmirror.runner.resources import load

from .test_runner_cli import resource, sparkmirror, write

pytestmark = pytest.mark.minutes(1.3)

BASE_TS = int(time.time() * 1000) - 3_600_000  # recent: older ones would fall to the brokers' retention


def _produce(bootstrap: str, topic: str, partition: int, start: int, count: int, value_suffix: bytes = b"",
             ) -> list[int]:
    """Records with keys, headers (a null one too) and timestamps; returns their offsets."""
    offsets: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                  "on_delivery": lambda err, m: offsets.append(m.offset()) if err is None else None})
    for i in range(start, start + count):
        p.produce(topic, key=f"k{partition}-{i}".encode(), value=f"v{partition}-{i}".encode() + value_suffix,
                  partition=partition, headers=[("seq", str(i).encode()), ("dup", b"1"), ("dup", b"2"),
                                                ("null", None)], timestamp=BASE_TS + i)
    assert p.flush(30) == 0
    assert len(offsets) == count
    return sorted(offsets)


def _mirror(cfg, src: str, dst: str, partitions: int = 2) -> None:
    """Copy what the source holds with the real lane copier (no Spark needed for the mirror itself)."""
    mirror = cfg.mirrors[0]
    for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror), [(src, dst, partitions)]):
        copy_lane(cfg, mirror, lane.index, list(lane.partitions), 2.0)


def _verify(path, *args: str) -> tuple[int, dict, float]:
    """Exit status, report and seconds of one `sparkmirror verify -o json` (its own Spark)."""
    log = path.with_suffix(".log")
    t0 = time.monotonic()
    out = sparkmirror("verify", "-f", str(path), "--range-records", "50", "-o", "json", "--log-file", str(log),
                      *args, timeout=400)
    assert out.returncode in (0, 3), (out, log.read_text()[-3000:] if log.exists() else "")
    print("".join(line for line in log.read_text().splitlines(True) if "sparkmirror.verify" in line))
    return out.returncode, json.loads(out.stdout), time.monotonic() - t0


def test_verify_finds_altered_and_stray_records(tmp_path, kafka_a, kafka_b, topic, figure) -> None:
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    path = write(tmp_path, resource(kafka_a.bootstrap, kafka_b.bootstrap, src))
    cfg = load([str(path)]).configs[0]
    target = cfg.cluster("b").client_config()
    ensure_progress_topic(target, cfg.progressTopic)
    for part in (0, 1):
        _produce(kafka_a.bootstrap, src, part, 0, 60)
    _mirror(cfg, src, dst)
    for part in (0, 1):
        _produce(kafka_a.bootstrap, src, part, 60, 60)
    _mirror(cfg, src, dst)
    for part in (0, 1):  # produced, not mirrored yet: not committed, so not compared
        _produce(kafka_a.bootstrap, src, part, 120, 5)

    rc, report, first_seconds = _verify(path)
    assert rc == 0, report
    assert report["summary"]["differs"] == 0 and report["summary"]["records"] == 240, [r["error"] for r in report["ranges"]]
    assert {r["status"] for r in report["ranges"]} == {"equal"}
    for r in report["ranges"]:
        assert r["source"]["hash"] == r["target"]["hash"] and r["source"]["count"] == r["target"]["count"] > 0

    # partition 0: the copy of source offset 120 is altered on the target. The test writes the altered record
    # and the commit that maps 120 to it, as a copier that corrupted the value would have.
    [altered] = _produce(kafka_b.bootstrap, dst, 0, 120, 1, value_suffix=b"-altered")
    progress = Producer(target)
    rec = ProgressRecord("a", src, 0, 121, 120, 120, dst, altered, altered, 1, int(time.time() * 1000), 1,
                         cfg.name, cfg.mirrors[0].name, -1, 0, cfg.resource)
    progress.produce(cfg.progressTopic, key=rec.key(), value=rec.value())
    assert progress.flush(30) == 0
    # partition 1: a stray record written straight into the target, between two commits
    [stray] = _produce(kafka_b.bootstrap, dst, 1, 999, 1)
    for part in (0, 1):
        _produce(kafka_a.bootstrap, src, part, 125, 55)
    _mirror(cfg, src, dst)

    rc, report, second_seconds = _verify(path)
    assert rc == 3, report
    differs = sorted((r for r in report["ranges"] if r["status"] != "equal"), key=lambda r: r["source"]["partition"])
    assert len(differs) == 2, differs
    assert len(report["ranges"]) - 2 == report["summary"]["equal"] >= 4, report["summary"]
    p0, p1 = differs
    assert p0["source"]["partition"] == 0 and p0["source"]["offsets"][0] <= 120 <= p0["source"]["offsets"][1]
    assert p0["source"]["count"] == p0["target"]["count"] and p0["source"]["hash"] != p0["target"]["hash"]
    assert p0["firstDifference"] == {"sourceOffset": 120, "targetOffset": altered, "fields": ["value"]}, p0
    assert p1["source"]["partition"] == 1 and p1["target"]["offsets"][0] <= stray <= p1["target"]["offsets"][1]
    assert p1["target"]["count"] == p1["source"]["count"] + 1, p1
    assert p1["firstDifference"]["targetOffset"] == stray, p1
    assert p1["firstDifference"]["sourceOffset"] == 120, p1  # the stray came before the copy of offset 120
    figure("verify_time", f"verify: {first_seconds:.1f} s (all equal), {second_seconds:.1f} s "
           f"({len(report['ranges'])} ranges, 2 differ)")


def test_verify_bad_input_names_the_problem(tmp_path) -> None:
    out = sparkmirror("verify", "-f", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "missing.yaml: no such file" in out.stderr, out
    path = write(tmp_path, resource("127.0.0.1:1", "127.0.0.1:2", "t.*"))
    out = sparkmirror("verify", "-f", str(path), "--range-records", "0")
    assert out.returncode == 2 and "--range-records: must be at least 1" in out.stderr, out
    out = sparkmirror("verify", "-f", str(path), "--conf", "nokey")
    assert out.returncode == 2 and "--conf: expected K=V" in out.stderr, out


def test_identity_policy_compares_provenance_and_leaves_local_records_out(kafka_a, kafka_b, topic, tmp_path) -> None:
    """Under the identity policy the target topic is shared: local records are not the mirror's, records that came
    from the target are not copied, and the provenance header the copier adds is compared (ranges checked
    in-process here: the Spark part is the test above)."""
    from sparkmirror.replication import PROVENANCE_HEADER
    from sparkmirror.verify.compare import check_range
    from sparkmirror.verify.run import committed_ranges

    name = topic(kafka_a, 1)
    topic(kafka_b, 1, name=name)
    r = resource(kafka_a.bootstrap, kafka_b.bootstrap, name)
    r["spec"]["mirrors"][0]["sourceConnector"] = {"config": {
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}}
    cfg = load([str(write(tmp_path, r))]).configs[0]
    source_conf, target_conf = cfg.cluster("a").client_config(), cfg.cluster("b").client_config()
    ensure_progress_topic(target_conf, cfg.progressTopic)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap})
    p.produce(name, key=b"from-b", value=b"came from b", partition=0, headers=[(PROVENANCE_HEADER, b"b")])
    assert p.flush(30) == 0
    _produce(kafka_a.bootstrap, name, 0, 0, 30)
    _mirror(cfg, name, name, partitions=1)
    _produce(kafka_b.bootstrap, name, 0, 500, 3)  # local producers of the shared topic, between two commits
    _produce(kafka_a.bootstrap, name, 0, 30, 30)
    _mirror(cfg, name, name, partitions=1)

    def check() -> list[dict]:
        return [check_range(x.as_dict(), source_conf, target_conf, True) for x in committed_ranges([cfg], 20)]

    rows = check()
    assert {x["status"] for x in rows} == {"equal"}, rows
    assert sum(x["sourceCount"] for x in rows) == 60 == sum(x["targetCount"] for x in rows)  # "from-b" not copied

    offsets: list[int] = []
    stray = Producer({"bootstrap.servers": kafka_b.bootstrap,  # a record that claims to come from a
                      "on_delivery": lambda err, m: offsets.append(m.offset())})
    stray.produce(name, key=b"k", value=b"v", partition=0, headers=[(PROVENANCE_HEADER, b"a")])
    assert stray.flush(30) == 0
    _produce(kafka_a.bootstrap, name, 0, 60, 30)
    _mirror(cfg, name, name, partitions=1)
    rows = check()
    [bad] = [x for x in rows if x["status"] != "equal"]
    assert bad["targetCount"] == bad["sourceCount"] + 1 and bad["firstDifference"]["targetOffset"] == offsets[0], bad


def test_verify_finds_a_mirror_copied_as_batches_equal(tmp_path, kafka_a, kafka_b, topic) -> None:
    """`copy: batches` writes the same progress records: verify compares the same ranges, record by record, on
    compressed source batches forwarded as they were."""
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    path = write(tmp_path, resource(kafka_a.bootstrap, kafka_b.bootstrap, src, copy="batches"))
    cfg = load([str(path)]).configs[0]
    assert cfg.copy_path == "batches"
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    for i in range(400):
        p.produce(src, key=f"k{i}".encode(), value=f"value {i} ".encode() * 10, partition=i % 2,
                  headers=[("seq", str(i).encode())], timestamp=BASE_TS + i)
    assert p.flush(30) == 0
    _mirror(cfg, src, dst)
    rc, report, _ = _verify(path)
    assert rc == 0 and report["summary"]["differs"] == 0 and report["summary"]["records"] == 400, report["summary"]
