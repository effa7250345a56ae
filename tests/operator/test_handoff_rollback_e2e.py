"""A handoff undone after the Lease moved, end to end: the operator on the real API server, the local runner playing
the Spark operator (each worker generation its own Spark driver process), real Kafka, records flowing.

Generation 2 (another version, another lane count) warms up, the Lease moves to it, generation 1 becomes a hot
spare; generation 2's driver is killed (SIGKILL, its whole process group) two seconds after the move, before its
first epoch could end. The operator moves the Lease back, generation 1 (the same driver process, never
restarted) takes the flow group back and copies on. Every record is counted on the target by sequence numbers
per partition: none missing, none twice; the pause is read from the commits on the progress topic.
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from sparkmirror.resource.names import LEASE_HOLDER, LEASE_REVOKED, application_name, lease_name
from sparkmirror_dev.testing import NumberedProducer, check_numbered, count_records, read_topic

from .conftest import KMM2, condition, kmm2_status, merge_patch, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(3), pytest.mark.solo]

PROGRESS_TOPIC = "sparkmirror.progress.internal"


def _commits(bootstrap: str, resource: str) -> list[tuple[int, int, int, int]]:
    """(commit ms, generation, partition, records) of every progress record of `resource` with records in it,
    read_committed (the topic is not compacted within a test: its segments roll every 10 minutes)."""
    out = []
    for recs in read_topic(bootstrap, PROGRESS_TOPIC).values():
        for r in recs:
            try:
                key, value = json.loads(r.key or b"null"), json.loads(r.value or b"null")
            except ValueError:
                continue
            if isinstance(key, list) and len(key) >= 4 and key[3] == resource and isinstance(value, dict) \
                    and value.get("count"):
                out.append((int(value["commitMs"]), int(value["gen"]), int(key[2]), int(value["count"])))
    return sorted(out)


@pytest.mark.timeout(600)
def test_a_successor_killed_after_the_lease_moved_is_rolled_back_and_the_spare_copies_on(
        operator, kapi, namespace, kafka_a, kafka_b, topic, tmp_path, figure) -> None:
    from tests.support.spark_runner import LocalSparkRunner

    t = topic(kafka_a, partitions=3)
    name = "spare"
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": name, "namespace": namespace},
            "spec": {"version": "1.0",
                     "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": t,
                                  "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}],
                     "spark": {"parallelism": 2, "epochSeconds": 6, "executor": {"instances": 1}},
                     "upgrade": {"readyTimeoutSeconds": 300, "handoffTimeoutSeconds": 120}}}
    old_app, new_app, lease = application_name(name, "a", 1), application_name(name, "a", 2), lease_name(name, "a")

    def lease_annotations() -> dict[str, str]:
        return ((kapi.get("Lease", namespace, lease) or {}).get("metadata") or {}).get("annotations") or {}

    producer = NumberedProducer(kafka_a.bootstrap, t, rate=50)
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner") as runner:
        producer.start()
        try:
            kapi.create(body)
            wait_for("copying", lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) > 100, timeout=240,
                     interval=2.0)
            spare_pid = runner.jobs[old_app].proc.pid
            merge_patch(kapi, namespace, name, {"spec": {"version": "2.0", "spark": {"parallelism": 3}}})
            wait_for("the Lease to move to generation 2", lambda: lease_annotations().get(LEASE_HOLDER) == "2",
                     timeout=300, interval=0.1)
            t_moved = time.time()
            # generation 2 takes over and commits transactions; its first epoch (6 s from its go mark, which comes
            # after the move) cannot have ended before the kill
            deadline = time.monotonic() + 5.5
            while time.monotonic() < deadline and not any(
                    gen == 2 for _ms, gen, _p, _n in _commits(kafka_b.bootstrap, f"{namespace}/{name}")):
                time.sleep(0.2)
            os.killpg(runner.jobs[new_app].proc.pid, signal.SIGKILL)  # its driver, JVM and Python workers
            t_killed = time.time()
            assert "sparkmirror.io/took-over.g2" not in lease_annotations()
            wait_for("the Lease to move back to generation 1", lambda: lease_annotations().get(LEASE_HOLDER) == "1",
                     timeout=120, interval=0.1)
            t_back = time.time()
            st = wait_for("the rollback on the status", lambda: (s := kmm2_status(kapi, namespace, name)).get(
                "rollback") and condition(s, "Upgrading").get("reason") == "HandoffRolledBack" and s, timeout=60)
            assert st["rollback"]["generation"] == 2 and st["rollback"]["leaseMovedBack"] is True
            assert "before its first commit" in st["rollback"]["reason"], st["rollback"]
            assert json.loads(lease_annotations()[LEASE_REVOKED])["generation"] == 2
            time.sleep(8)  # copying on in generation 1
        finally:
            sent = producer.stop()
        wait_for(f"a.{t} to catch up", lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) >= 3 * sent,
                 timeout=180, interval=2.0)
        time.sleep(3)  # a duplicate would land after the count was reached
        # the spare itself copied on: the same driver process, never restarted; generation 2 is gone
        assert runner.jobs[old_app].proc.pid == spare_pid and runner.jobs[old_app].proc.poll() is None
        assert sorted(a["metadata"]["name"] for a in kapi.list("SparkApplication", namespace)) == [old_app]
        assert not runner.errors, runner.errors
        log = runner.jobs[old_app].log_path.read_text(errors="replace")
    check_numbered(kafka_b.bootstrap, f"a.{t}", 3, sent)
    assert "took the flow groups back" in log, log[-3000:]
    commits = _commits(kafka_b.bootstrap, f"{namespace}/{name}")
    by_gen2 = sum(n for _ms, gen, _p, n in commits if gen == 2)
    moved_ms, killed_ms, back_ms = int(t_moved * 1000), int(t_killed * 1000), int(t_back * 1000)
    before_move = [ms for ms, gen, _p, _n in commits if gen == 1 and ms < moved_ms]
    before_kill = [ms for ms, _gen, _p, _n in commits if ms < killed_ms]
    resumed = [ms for ms, gen, _p, _n in commits if gen == 1 and ms > killed_ms]
    assert before_move and resumed, commits[-10:]
    figure("handoff_rollback", (
        f"{3 * sent} records, 0 missing, 0 duplicated; generation 2 committed {by_gen2} records before it was "
        f"killed {t_killed - t_moved:.1f} s after the Lease moved to it; the rollback took {resumed[0] - killed_ms} ms "
        f"from the kill to generation 1's first commit (the Lease moved back {back_ms - killed_ms} ms after the "
        f"kill, as the test's 0.1 s poll saw it; the spare committed {resumed[0] - back_ms} ms after that); no commit "
        f"for {resumed[0] - before_kill[-1]} ms (the last one before the kill -> generation 1's first after it)"))
