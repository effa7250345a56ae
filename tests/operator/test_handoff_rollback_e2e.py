"""A handoff undone, end to end: the operator on the real API server, the local runner playing the Spark operator
(each worker generation its own Spark driver process), real Kafka, records flowing.

Killed: generation 2 (another version, another lane count) warms up, the Lease moves to it, generation 1 becomes
a hot spare; generation 2's driver is killed (SIGKILL, its whole process group) two seconds after the move, before
its first epoch could end. The operator moves the Lease back, generation 1 (the same driver process, never
restarted) takes the flow group back and copies on.

Stalled: a successor that is alive but stopped (SIGSTOP of every process of its job) reports no failure: before the
Lease moved `readyTimeoutSeconds` catches it (it never gets ready); after, it stops renewing the Lease, and the
operator moves the Lease back after `leaseDurationSeconds`, long before `handoffTimeoutSeconds`.

Every record is counted on the target by sequence numbers per partition: none missing, none twice; the pauses are
read from the commits on the progress topic.
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from sparkmirror.resource.names import LEASE_HOLDER, LEASE_REVOKED, application_name, lease_name
from sparkmirror_operator.renewal import renewed_ms
from sparkmirror_dev.testing import read_topic

from .conftest import KMM2, condition, kmm2_status, merge_patch, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(5), pytest.mark.solo]

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


def _resource(namespace: str, name: str, kafka_a, kafka_b, t: str, upgrade: dict) -> dict:
    """Both tests' resource: `t` mirrored a -> b, two lanes, 6 s epochs; `upgrade` holds the timeouts under test."""
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": name, "namespace": namespace},
            "spec": {"version": "1.0",
                     "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": t,
                                  "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}],
                     "spark": {"parallelism": 2, "epochSeconds": 6, "executor": {"instances": 1}},
                     "upgrade": upgrade}}


@pytest.mark.timeout(600)
def test_a_successor_killed_after_the_lease_moved_is_rolled_back_and_the_spare_copies_on(
        operator, kapi, namespace, kafka_a, kafka_b, topic, tmp_path, figure) -> None:
    from tests.support.counted import CountedMirror

    t = topic(kafka_a, partitions=3)
    name = "spare"
    body = _resource(namespace, name, kafka_a, kafka_b, t, {"readyTimeoutSeconds": 300, "handoffTimeoutSeconds": 120})
    old_app, new_app, lease = application_name(name, "a", 1), application_name(name, "a", 2), lease_name(name, "a")

    def lease_annotations() -> dict[str, str]:
        return ((kapi.get("Lease", namespace, lease) or {}).get("metadata") or {}).get("annotations") or {}

    with CountedMirror(kapi, namespace, tmp_path / "runner", kafka_a.bootstrap, kafka_b.bootstrap, t) as counted:
        runner = counted.runner
        counted.start(body, copied=100, timeout=240)
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
        counted.caught_up(timeout=180)
        # the spare itself copied on: the same driver process, never restarted; generation 2 is gone
        assert runner.jobs[old_app].proc.pid == spare_pid and runner.jobs[old_app].proc.poll() is None
        assert sorted(a["metadata"]["name"] for a in kapi.list("SparkApplication", namespace)) == [old_app]
        assert not runner.errors, runner.errors
        log = runner.jobs[old_app].log_path.read_text(errors="replace")
    counted.check()
    sent = counted.sent
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


def _signal_group(pid: int, sig: int) -> None:
    """`sig` to a job's whole process group (driver, JVM), if it is still there."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it, parents first (from /proc): PySpark's worker daemon puts itself and the
    Python workers, where the lanes copy, in a process group of their own."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children.get(p, [])
    return out


def _stall(pid: int) -> list[int]:
    """SIGSTOP the whole job, as a frozen pod or VM: every process below `pid` (looked at twice, so a Python worker
    forked meanwhile stops too). Returns the processes stopped, for `_wake`."""
    stopped: list[int] = []
    for _ in range(2):
        for p in _descendants(pid):
            if p not in stopped:
                try:
                    os.kill(p, signal.SIGSTOP)
                    stopped.append(p)
                except ProcessLookupError:
                    pass
    return stopped


def _wake(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _log_has(runner, app: str, text: str) -> bool:
    job = runner.jobs.get(app)
    return job is not None and text in job.log_path.read_text(errors="replace")


@pytest.mark.skipif(os.environ.get("SPARKMIRROR_CAMPAIGN") != "1",
                    reason="campaign (make campaign): its freezes race the handoff's own timers on a loaded machine")
@pytest.mark.timeout(720)
def test_a_stalled_successor_is_rolled_back_before_ready_and_after_the_lease_moved(
        operator, kapi, namespace, kafka_a, kafka_b, topic, tmp_path, figure) -> None:
    """A successor that is alive but stalled (SIGSTOP of every process of its job, as a frozen pod: the application
    stays RUNNING, nothing reports a failure) is caught while records flow:

    1. generation 2 stalls before it is ready: the Lease never moves, `readyTimeoutSeconds` removes it, the
       resource says so (`RolledBack`), generation 1 copies throughout;
    2. generation 3 (a later spec, its number never reused) warms up, the Lease moves, it takes over, then stalls
       holding the Lease with its first epoch's transactions open: it stops renewing the Lease, which moves back
       once it has been silent for `leaseDurationSeconds` (5 s; `handoffTimeoutSeconds` is 120 s), generation 1
       (the hot spare, the same process) fences generation 3's lanes and copies on.

    Each stalled process is woken (SIGCONT) after its rollback, as a paused VM or a GC pause ends: fenced and
    removed by then, it must add nothing. Every record is counted by sequence numbers per partition."""
    from tests.support.counted import CountedMirror

    t = topic(kafka_a, partitions=3)
    name = "stalled"
    body = _resource(namespace, name, kafka_a, kafka_b, t,
                     {"readyTimeoutSeconds": 45, "handoffTimeoutSeconds": 120, "leaseDurationSeconds": 5})
    old_app, lease = application_name(name, "a", 1), lease_name(name, "a")
    resource = f"{namespace}/{name}"

    def lease_annotations() -> dict[str, str]:
        return ((kapi.get("Lease", namespace, lease) or {}).get("metadata") or {}).get("annotations") or {}

    def renewed_after(ms: int) -> bool:
        return (renewed_ms(kapi.get("Lease", namespace, lease)) or 0) > ms

    def new_job(runner):
        return next((j for n, j in list(runner.jobs.items()) if n != old_app), None)

    stalled: list = []  # the Popen of every process group this test stopped
    try:
        with CountedMirror(kapi, namespace, tmp_path / "runner", kafka_a.bootstrap, kafka_b.bootstrap,
                           t) as counted:
            runner = counted.runner
            counted.start(body, copied=100, timeout=240)
            spare_pid = runner.jobs[old_app].proc.pid

            # 1. generation 2 stalls before it is ready
            merge_patch(kapi, namespace, name, {"spec": {"version": "2.0"}})
            job2 = wait_for("generation 2's driver", lambda: new_job(runner), timeout=60, interval=0.05)
            try:  # up, its standby epoch planned, warming up: stalled before it can say ready
                wait_for("generation 2's standby epoch", lambda: _log_has(runner, job2.name, "planned in"),
                         timeout=35, interval=0.05)
                stage2 = "with its standby epoch planned, warming up"
            except AssertionError:  # a slow start on a loaded machine: stalled where it is
                stage2 = "before it planned its standby epoch"
            assert not [k for k in lease_annotations() if k.endswith(".g2")], lease_annotations()
            stalled.append((job2.proc, _stall(job2.proc.pid)))
            t_stall2 = time.time()
            st = wait_for("the standby rolled back", lambda: (s := kmm2_status(kapi, namespace, name)).get(
                "rollback") and condition(s, "Upgrading").get("reason") == "RolledBack" and s, timeout=120,
                interval=0.5)
            t_rolled2 = time.time()
            assert st["rollback"]["generation"] == 2 and not st["rollback"].get("leaseMovedBack"), st["rollback"]
            assert "not ready within spec.upgrade.readyTimeoutSeconds (45 s)" in st["rollback"]["reason"]
            assert lease_annotations().get(LEASE_HOLDER) == "1" and LEASE_REVOKED not in lease_annotations()
            wait_for("generation 2's application removed", lambda: [a["metadata"]["name"] for a in kapi.list(
                "SparkApplication", namespace)] == [old_app], timeout=60)
            _wake(stalled[0][1])  # wakes to the runner's SIGTERM (or gets it next)
            wait_for("generation 2's driver to end", lambda: job2.proc.poll() is not None, timeout=60)

            # 2. generation 3 takes over, then stalls holding the Lease
            merge_patch(kapi, namespace, name, {"spec": {"version": "3.0", "spark": {"parallelism": 3},
                                                         "upgrade": {"readyTimeoutSeconds": 300}}})
            wait_for("the Lease to move to generation 3", lambda: lease_annotations().get(LEASE_HOLDER) == "3",
                     timeout=300, interval=0.1)
            t_moved = time.time()
            job3 = new_job(runner)
            assert job3 is not None and job3.name == application_name(name, "a", 3), runner.jobs
            # its first epoch ends 6 s after its go mark: stalled right after the takeover, it committed none
            wait_for("generation 3 to take over", lambda: _log_has(runner, job3.name, "generation 3 took over"),
                     timeout=60, interval=0.05)
            # the holder renews the Lease (every leaseDurationSeconds / 3): generation 3 has, since the move
            wait_for("generation 3 to renew the Lease", lambda: renewed_after(int(t_moved * 1000)), timeout=5,
                     interval=0.05)
            stalled.append((job3.proc, _stall(job3.proc.pid)))
            t_stall3 = time.time()
            assert "sparkmirror.io/took-over.g3" not in lease_annotations()
            wait_for("the Lease to move back to generation 1", lambda: lease_annotations().get(LEASE_HOLDER) == "1",
                     timeout=100, interval=0.1)  # within handoffTimeoutSeconds (120 s): the renewals said it
            t_back = time.time()
            st = wait_for("the rollback on the status", lambda: (s := kmm2_status(kapi, namespace, name)).get(
                "rollback") and condition(s, "Upgrading").get("reason") == "HandoffRolledBack" and s, timeout=60)
            assert st["rollback"]["generation"] == 3 and st["rollback"]["leaseMovedBack"] is True
            assert "its driver stalled before its first commit (a: it has not renewed its Lease" in \
                st["rollback"]["reason"] and "(leaseDurationSeconds 5)" in st["rollback"]["reason"], st["rollback"]
            assert json.loads(lease_annotations()[LEASE_REVOKED])["generation"] == 3
            wait_for("the spare's first commit after the stall", lambda: any(
                gen == 1 and ms > t_back * 1000 for ms, gen, _p, _n in _commits(kafka_b.bootstrap, resource)),
                timeout=60, interval=0.5)
            _wake(stalled[1][1])  # fenced and removed by now: it must add nothing
            t_woken3 = time.time()
            wait_for("generation 3's driver to end", lambda: job3.proc.poll() is not None, timeout=60)
            time.sleep(6)  # copying on in generation 1, generation 3's leftovers (if any) landed
            counted.caught_up(timeout=180)
            assert runner.jobs[old_app].proc.pid == spare_pid and runner.jobs[old_app].proc.poll() is None
            assert sorted(a["metadata"]["name"] for a in kapi.list("SparkApplication", namespace)) == [old_app]
            assert not runner.errors, runner.errors
            annotations = lease_annotations()
            assert annotations.get(LEASE_HOLDER) == "1" and not any(
                k.endswith((".g2", ".g3")) for k in annotations), annotations  # no leftover report of theirs
            log = runner.jobs[old_app].log_path.read_text(errors="replace")
    finally:
        for proc, pids in stalled:  # nothing left stopped or running, whatever failed above
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)
            _wake(pids)  # Python workers outside the group end once woken: their JVM is gone
    counted.check()
    sent = counted.sent
    assert "took the flow groups back" in log, log[-3000:]
    commits = _commits(kafka_b.bootstrap, resource)
    # generation 2 never took over; generation 3 committed lane transactions until it stalled, none once woken
    assert not [c for c in commits if c[1] == 2 or (c[1] == 3 and c[0] >= int(t_woken3 * 1000))], commits
    by_gen3 = sum(n for _ms, gen, _p, n in commits if gen == 3)
    stall2_ms, rolled2_ms = int(t_stall2 * 1000), int(t_rolled2 * 1000)
    during_standby = [ms for ms, gen, _p, _n in commits if gen == 1 and stall2_ms < ms < rolled2_ms]
    assert during_standby, commits[-10:]  # generation 1 copied while generation 2 sat stalled
    gaps = [b - a for a, b in zip([stall2_ms, *during_standby], [*during_standby, rolled2_ms])]
    stall3_ms, back_ms, moved_ms = int(t_stall3 * 1000), int(t_back * 1000), int(t_moved * 1000)
    before = [ms for ms, _gen, _p, _n in commits if ms < moved_ms]
    resumed = [ms for ms, gen, _p, _n in commits if gen == 1 and ms > stall3_ms]
    assert before and resumed, commits[-10:]
    assert back_ms - stall3_ms < 30_000, (back_ms - stall3_ms)  # leaseDurationSeconds 5, not handoffTimeoutSeconds 120
    figure("handoff_stalled", (
        f"{3 * sent} records, 0 missing, 0 duplicated. Stalled before ready (SIGSTOP {stage2}): generation 2 "
        f"rolled back {t_rolled2 - t_stall2:.1f} s after the stall (readyTimeoutSeconds 45, from its creation), the "
        f"Lease never moved, generation 1 committed {len(during_standby)} times meanwhile (longest gap {max(gaps)} "
        f"ms). Stalled holding the Lease: generation 3 stopped {t_stall3 - t_moved:.1f} s after the Lease moved to "
        f"it, right after its takeover, having committed {by_gen3} records (its first epoch not ended); "
        f"the Lease moved back {back_ms - stall3_ms} ms after the stall ({back_ms - moved_ms} ms after the move; "
        f"its renewals stopped: leaseDurationSeconds 5, handoffTimeoutSeconds 120, the operator's 2 s handoff timer, "
        f"the test's 0.1 s poll), generation 1's first commit {resumed[0] - stall3_ms} ms "
        f"after the stall ({resumed[0] - back_ms} ms after the move back); no commit for {resumed[0] - before[-1]} "
        f"ms (the last before the move -> the spare's first after the stall); woken after that, generations 2 and 3 "
        f"added nothing"))
