"""`sparkmirror run -f FILE`: validation errors naming the field, and real runs in local Spark (subprocess)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewPartitions

from sparkmirror_dev.procs import free_port
from sparkmirror_dev.testing import create_topic, unique_name

from .conftest import produce_numbered, read_topic, wait_for

pytestmark = pytest.mark.minutes(2.4)


def resource(source_bootstrap: str, target_bootstrap: str, topics: str, name: str | None = None,
             source: str = "a", target: str = "b", **spec) -> dict:
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": name or unique_name("mm2"), "namespace": "local"},
            "spec": {"target": {"alias": target, "bootstrapServers": target_bootstrap},
                     "mirrors": [{"source": {"alias": source, "bootstrapServers": source_bootstrap},
                                  "topicsPattern": topics,
                                  "sourceConnector": {"config": {"refresh.topics.interval.seconds": 2}}}],
                     "spark": {"parallelism": 2, "epochSeconds": 4},
                     "progressTopic": unique_name("progress"), **spec}}


def write(tmp_path: Path, *docs: dict) -> Path:
    p = tmp_path / f"{unique_name('res')}.yaml"
    p.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return p


def sparkmirror(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkmirror.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


# -- bad input: a clear error naming the field, no Spark started -------------------------------------------

def test_invalid_regex_names_the_field(tmp_path) -> None:
    r = resource("127.0.0.1:1", "127.0.0.1:2", "(orders")
    out = sparkmirror("run", "-f", str(write(tmp_path, r)))
    assert out.returncode == 2, out
    assert "spec.mirrors[0].topicsPattern" in out.stderr and "regex" in out.stderr.lower(), out.stderr


def test_unknown_cluster_alias_names_the_field(tmp_path) -> None:
    r = resource("127.0.0.1:1", "127.0.0.1:2", "t.*", flowGroups=[{"name": "g", "mirrors": ["nowhere"]}])
    out = sparkmirror("run", "-f", str(write(tmp_path, r)))
    assert out.returncode == 2, out
    assert "spec.flowGroups[0].mirrors" in out.stderr and "'nowhere'" in out.stderr, out.stderr


def test_not_a_resource(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    out = sparkmirror("run", "-f", str(bad))
    assert out.returncode == 2 and "not valid YAML" in out.stderr, out.stderr
    other = write(tmp_path, {"apiVersion": "v1", "kind": "ConfigMap"})
    out = sparkmirror("run", "-f", str(other))
    assert out.returncode == 2 and "kind: expected 'KafkaMirrorMaker2'" in out.stderr, out.stderr


def test_unreachable_bootstrap_names_the_field(tmp_path, kafka_b) -> None:
    port = free_port()
    out = sparkmirror("run", "-f", str(write(tmp_path, resource(f"127.0.0.1:{port}", kafka_b.bootstrap, "t.*"))))
    assert out.returncode == 1, out
    assert f"spec.mirrors[0].source.bootstrapServers: cluster 'a' at 127.0.0.1:{port} is unreachable" in out.stderr, \
        out.stderr


def test_check_prints_flow_groups(tmp_path) -> None:
    out = sparkmirror("run", "--check", "-f", str(write(tmp_path, resource("127.0.0.1:1", "127.0.0.1:2", "t.*"))))
    assert out.returncode == 0 and "a -> b (topics t.*)" in out.stdout, out


# -- real runs ------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, tmp_path: Path, *files: Path) -> None:
        self.log = tmp_path / f"{unique_name('run')}.log"
        args = [a for f in files for a in ("-f", str(f))]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        self.proc = subprocess.Popen([sys.executable, "-m", "sparkmirror.cli", "run", *args, "--interval", "1",
                                      "--conf", "spark.driver.memory=512m"], stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self, timeout: float = 150) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def counts(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: len(rs) for p, rs in read_topic(bootstrap, topic).items()}


@pytest.mark.spark
def test_run_mirrors_new_topics_and_partitions_and_stops_on_sigterm(tmp_path, kafka_a, kafka_b) -> None:
    prefix = unique_name("run")
    t1 = create_topic(kafka_a.bootstrap, f"{prefix}-one", 2, {"retention.ms": "86400000"})
    produce_numbered(kafka_a.bootstrap, t1, 2, 0, 300)
    group = unique_name("run-app")
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": kafka_a.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(t1, 0, 120), TopicPartition(t1, 1, 300)], asynchronous=False)
    c.close()
    r = resource(kafka_a.bootstrap, kafka_b.bootstrap, f"{prefix}.*")
    r["spec"]["mirrors"][0]["groupsPattern"] = group
    r["spec"]["mirrors"][0]["checkpointConnector"] = {"config": {"emit.checkpoints.interval.seconds": 2}}
    runner = Runner(tmp_path, write(tmp_path, r))
    try:
        has = lambda t, want: (t in AdminClient({"bootstrap.servers": kafka_b.bootstrap}).list_topics(timeout=10).topics  # noqa: E731
                               and counts(kafka_b.bootstrap, t) == want)
        wait_for(lambda: runner.proc.poll() is None and has(f"a.{t1}", {0: 300, 1: 300}) or runner.proc.poll() is not None,
                 240, "the first topic mirrored")
        assert runner.proc.poll() is None, runner.output()[-3000:]
        # while running: a new matching topic, and a partition added to the first one
        t2 = create_topic(kafka_a.bootstrap, f"{prefix}-two", 1)
        produce_numbered(kafka_a.bootstrap, t2, 1, 0, 50)
        admin = AdminClient({"bootstrap.servers": kafka_a.bootstrap})
        admin.create_partitions([NewPartitions(t1, 3)])[t1].result(30)
        time.sleep(1)
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": kafka_a.bootstrap})
        for i in range(40):
            p.produce(t1, value=f"2:{i}".encode(), partition=2)
        assert p.flush(30) == 0
        wait_for(lambda: has(f"a.{t2}", {0: 50}) and has(f"a.{t1}", {0: 300, 1: 300, 2: 40}), 180,
                 "the new topic and the new partition mirrored")
        # beside the copy: MM2 heartbeats and checkpoints on the target, in MM2's formats
        from sparkmirror.mm2formats import Checkpoint, Heartbeat

        def checkpoints() -> dict:
            recs = read_topic(kafka_b.bootstrap, "a.checkpoints.internal")[0]
            return {(cp.topic, cp.partition): (cp.upstream_offset, cp.downstream_offset)
                    for cp in (Checkpoint.decode(x.key, x.value) for x in recs) if cp.group == group}
        wait_for(lambda: {k: up for k, (up, _down) in checkpoints().items()} == {(f"a.{t1}", 0): 120,
                                                                                (f"a.{t1}", 1): 300},
                 60, "checkpoints of the group")
        cps = checkpoints()
        target = read_topic(kafka_b.bootstrap, f"a.{t1}")
        # the group continues on the target with exactly the record it would have read next on the source
        assert [r.value for r in target[0] if r.offset >= cps[(f"a.{t1}", 0)][1]][0] == b"0:120"
        assert [r for r in target[1] if r.offset >= cps[(f"a.{t1}", 1)][1]] == []   # it had read everything
        assert cps[(f"a.{t1}", 1)][1] > target[1][-1].offset
        beats = [Heartbeat.decode(x.key, x.value) for x in read_topic(kafka_b.bootstrap, "heartbeats")[0]]
        assert any(h.source_cluster_alias == "a" and h.target_cluster_alias == "b" for h in beats)
        assert runner.proc.poll() is None, runner.output()[-3000:]
        rc = runner.terminate()
        assert rc == 0, runner.output()[-3000:]
        out = runner.output()
        assert "SIGTERM: stopping" in out and "MIRROR" in out, out[-3000:]
        # exactly once: the target holds each record once
        assert counts(kafka_b.bootstrap, f"a.{t1}") == {0: 300, 1: 300, 2: 40}
        assert counts(kafka_b.bootstrap, f"a.{t2}") == {0: 50}
    finally:
        runner.kill()


@pytest.mark.spark
def test_two_way_identity_mirrors_do_not_loop(tmp_path, kafka_a, kafka_b) -> None:
    """A->B and B->A at once, identity policy (same topic names): the provenance header stops the loop."""
    prefix = unique_name("both")
    shared = f"{prefix}-shared"
    for c in (kafka_a, kafka_b):
        create_topic(c.bootstrap, shared, 2)
    produce_numbered(kafka_a.bootstrap, shared, 2, 0, 100)        # values "<p>:<0..99>"
    produce_numbered(kafka_b.bootstrap, shared, 2, 1000, 80)      # values "<p>:<1000..1079>"
    identity = {"config": {"replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
                           "refresh.topics.interval.seconds": 2}}
    a2b = resource(kafka_a.bootstrap, kafka_b.bootstrap, f"{prefix}.*", source="a", target="b")
    b2a = resource(kafka_b.bootstrap, kafka_a.bootstrap, f"{prefix}.*", source="b", target="a")
    for r in (a2b, b2a):
        r["spec"]["mirrors"][0]["sourceConnector"] = identity
    out = sparkmirror("run", "-f", str(write(tmp_path, a2b)), "-f", str(write(tmp_path, b2a)), "--until-caught-up",
                      "--timeout", "400", "--conf", "spark.driver.memory=512m", timeout=600)
    (tmp_path / "run.out").write_text(out.stdout + "\n--- stderr\n" + out.stderr)
    shown = "\n".join(dict.fromkeys(line for line in out.stdout.splitlines()))  # distinct progress lines
    assert out.returncode == 0, (shown[-4000:], out.stderr[-3000:])
    assert "caught up" in out.stdout
    for c in (kafka_a, kafka_b):
        recs = read_topic(c.bootstrap, shared)
        for p in (0, 1):
            values = sorted(r.value.decode() for r in recs[p])
            want = sorted([f"{p}:{i}" for i in range(100)] + [f"{p}:{i}" for i in range(1000, 1080)])
            assert values == want, (c.name, p, len(values))  # each record once: none came back
    # what crossed carries its provenance; what stayed home does not
    on_b = read_topic(kafka_b.bootstrap, shared)[0]
    assert all(dict(r.headers or ())["sparkmirror-provenance"] == b"a" for r in on_b
               if int(r.value.split(b":")[1]) < 1000)
    assert all("sparkmirror-provenance" not in dict(r.headers or ()) for r in on_b
               if int(r.value.split(b":")[1]) >= 1000)


@pytest.mark.spark
def test_ctrl_c_stops_cleanly(tmp_path, kafka_a, kafka_b) -> None:
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group: JVM and Python workers too."""
    prefix = unique_name("ctrlc")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-t", 1)
    produce_numbered(kafka_a.bootstrap, t, 1, 0, 20)
    runner = Runner(tmp_path, write(tmp_path, resource(kafka_a.bootstrap, kafka_b.bootstrap, f"{prefix}.*")))
    try:
        wait_for(lambda: "caught up" in runner.output() or runner.proc.poll() is not None, 240, "caught up")
        assert runner.proc.poll() is None, runner.output()[-3000:]
        os.killpg(runner.proc.pid, signal.SIGINT)
        rc = runner.proc.wait(150)
        assert rc == 0, runner.output()[-3000:]
        assert "SIGINT: stopping" in runner.output()
        assert counts(kafka_b.bootstrap, f"a.{t}") == {0: 20}
    finally:
        runner.kill()


@pytest.mark.spark
def test_run_console_is_quiet_and_progress_as_json_has_live_bytes(tmp_path, kafka_a, kafka_b) -> None:
    """The console holds the runner's lines and the progress (here -o json) only; Spark, lane and librdkafka logs
    are in the log file it names; bytes/s comes from the same commits as records/s (100-byte values, no keys; the
    batch path, the default, counts the record batches' bytes: Kafka's framing, 8-12 bytes a record here, with)."""
    from confluent_kafka import Producer

    t = create_topic(kafka_a.bootstrap, unique_name("quiet"), 2, {"retention.ms": "86400000"})
    p = Producer({"bootstrap.servers": kafka_a.bootstrap, "linger.ms": 20})
    for i in range(3000):
        p.produce(t, value=b"%100d" % i, partition=i % 2)
    assert p.flush(30) == 0
    log = tmp_path / "run.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "run", "-f",
                          str(write(tmp_path, resource(kafka_a.bootstrap, kafka_b.bootstrap, t))), "-o", "json",
                          "--until-caught-up", "--timeout", "240", "--interval", "1", "--log-file", str(log),
                          "--conf", "spark.driver.memory=512m"],
                         capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-3000:] + log.read_text(errors="replace")[-3000:]
    assert out.stderr.splitlines()[0] == f"sparkmirror run: logs (Spark, lanes, Kafka clients): {log}; -v shows " \
                                         "them here", out.stderr
    noise = [ln for ln in (out.stdout + out.stderr).splitlines()
             if ln.startswith("%") or " INFO " in ln or " WARN " in ln or "WARNING" in ln]
    assert noise == [], noise[:10]
    logged = log.read_text(errors="replace")
    assert "INFO sparkmirror.copying" in logged, logged[-2000:]  # the lanes' logs, from Spark's Python workers

    states = [json.loads(ln) for ln in out.stdout.splitlines()]
    (last,) = states[-1]["mirrors"]
    # at least: MM2 also mirrors the source's heartbeats topic, which other tests' mirrors may have filled
    assert last["status"] == "caught up" and last["records_total"] >= 3000 and last["lag"] == 0
    # while data flows (a heartbeat a second is far below 50 records/s), bytes/s follows records/s; a window may
    # also hold a few heartbeats (from this run or left by other tests' mirrors), each well under 100 bytes
    flowing = [m for s in states for m in s["mirrors"] if m["records_per_s"] >= 50]
    assert flowing, states
    for m in flowing:
        assert 100 * m["records_per_s"] * 0.97 - 100 * 5 <= m["bytes_per_s"] <= 112 * m["records_per_s"] * 1.02, m
