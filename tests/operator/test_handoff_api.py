"""Handoff decisions on the real API server, the Reconciler called directly (nothing else reconciles here; the
one test with the running operator comes last, as the operator runs on for the rest of the module):
the drivers' reports are written on the Leases as the drivers write them (merge patches of annotations by
another field manager), the Spark operator's part played by the stand-in runner where a job must run."""
from __future__ import annotations

import json
import time

import pytest

from sparkmirror.resource.names import lease_ready_key, lease_took_over_key
from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler
from sparkmirror_operator.observed import ANNOTATION_LAST_GENERATION
from sparkmirror_operator.restarts import ANNOTATION_REFUSED

from .conftest import wait_for
from .test_operator import KMM2, names, resource, secret

pytestmark = [pytest.mark.k8s, pytest.mark.minutes(2.1)]


def _report(kapi: KubeApi, namespace: str, lease: str, annotations: dict[str, str | None]) -> None:
    """What a driver does (handoff/lease.py): a merge patch of its own annotations on the Lease."""
    kapi._call("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}", [],
               {"metadata": {"annotations": annotations}}, "application/merge-patch+json")


def _annotations(kapi: KubeApi, namespace: str, lease: str) -> dict[str, str]:
    return ((kapi.get("Lease", namespace, lease) or {}).get("metadata") or {}).get("annotations") or {}


def _reconcile(rec: Reconciler, kapi: KubeApi, namespace: str, name: str) -> dict:
    """One reconcile of the resource as it is now, its status written as the handler does."""
    result = rec.reconcile(kapi.get(KMM2, namespace, name))
    kapi.patch_status(KMM2, namespace, name, result.status)
    return result.status


def _cond(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def _patch(kapi: KubeApi, namespace: str, name: str, body: dict) -> None:
    kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/{name}", [],
               body, "application/merge-patch+json")


def test_a_split_hands_over_only_when_every_successor_took_over(kube, kmm2_crd, kapi, namespace) -> None:
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("split", namespace, upgrade={"handoffTimeoutSeconds": 300}))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    _reconcile(rec, kapi, namespace, "split")
    assert names(kapi, "SparkApplication", namespace, "split") == ["split-a", "split-c"]
    _patch(kapi, namespace, "split", {"spec": {"flowGroups": [
        {"name": "one", "mirrors": ["a"], "topicsPattern": "t1"},
        {"name": "two", "mirrors": ["a"], "topicsPattern": "t2"},
        {"name": "c", "mirrors": ["c"]}]}})
    _reconcile(rec, kapi, namespace, "split")
    assert names(kapi, "SparkApplication", namespace, "split") == ["split-a", "split-c", "split-one-g2",
                                                                    "split-two-g2"]
    for lease in ("split-one", "split-two"):  # both standbys warm: the Leases move
        _report(kapi, namespace, lease, {lease_ready_key(2): str(int(time.time() * 1000))})
    _reconcile(rec, kapi, namespace, "split")
    assert all(_annotations(kapi, namespace, f"split-{g}")["sparkmirror.io/holder-generation"] == "2"
               for g in ("a", "one", "two"))
    took = json.dumps({"atMs": int(time.time() * 1000), "tookMs": 120, "fenced": 2})
    _report(kapi, namespace, "split-one", {lease_took_over_key(2): took})
    st = _reconcile(rec, kapi, namespace, "split")
    assert "split-a" in names(kapi, "SparkApplication", namespace, "split")  # a hot spare for t2's partitions
    assert "split-a" in names(kapi, "Lease", namespace, "split")
    upgrading = _cond(st, "Upgrading")
    assert upgrading["status"] == "True" and "1/2 took over" in upgrading["message"], upgrading
    assert not st.get("handoffs")
    _report(kapi, namespace, "split-two", {lease_took_over_key(2): took})
    st = _reconcile(rec, kapi, namespace, "split")
    assert names(kapi, "SparkApplication", namespace, "split") == ["split-c", "split-one-g2", "split-two-g2"]
    assert names(kapi, "Lease", namespace, "split") == ["split-c", "split-one", "split-two"]
    assert _cond(st, "Upgrading")["status"] == "False" and _cond(st, "Degraded")["status"] == "False"
    assert [(h["fromFlowGroups"], h["toFlowGroups"]) for h in st["handoffs"]] == [(["a"], ["one", "two"])]


def test_a_ready_report_from_an_earlier_submission_does_not_move_the_lease(kube, kmm2_crd, kapi, namespace) -> None:
    """Generation 2's application was resubmitted (a new `status.submissionID`, as the Spark operator writes it)
    after its first driver reported ready: that report is stale, the Lease stays and the report is dropped; the
    new driver's report, naming the current submission, moves the Lease."""
    from sparkmirror.resource.names import LEASE_HOLDER

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("subm", namespace, flowGroups=[{"name": "a", "mirrors": ["a", "c"]}]))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    _reconcile(rec, kapi, namespace, "subm")
    _patch(kapi, namespace, "subm", {"spec": {"version": "2.0"}})
    _reconcile(rec, kapi, namespace, "subm")
    assert names(kapi, "SparkApplication", namespace, "subm") == ["subm-a", "subm-a-g2"]

    def submitted(submission: str) -> None:
        kapi.patch_status("SparkApplication", namespace, "subm-a-g2",
                          {"submissionID": submission, "applicationState": {"state": "RUNNING"}, "driverInfo": {}})

    def ready(submission: str) -> str:
        return json.dumps({"atMs": int(time.time() * 1000), "submissionID": submission})

    submitted("first-submission")
    _report(kapi, namespace, "subm-a", {lease_ready_key(2): ready("first-submission")})
    submitted("second-submission")  # its driver restarted: cold again, its old report still on the Lease
    _reconcile(rec, kapi, namespace, "subm")
    lease = _annotations(kapi, namespace, "subm-a")
    assert lease[LEASE_HOLDER] == "1" and lease_ready_key(2) not in lease  # not moved, the stale report dropped
    _reconcile(rec, kapi, namespace, "subm")
    assert _annotations(kapi, namespace, "subm-a")[LEASE_HOLDER] == "1"
    _report(kapi, namespace, "subm-a", {lease_ready_key(2): ready("second-submission")})
    _reconcile(rec, kapi, namespace, "subm")
    assert _annotations(kapi, namespace, "subm-a")[LEASE_HOLDER] == "2"


def test_a_successor_failing_after_the_lease_moved_moves_it_back(kube, kmm2_crd, kapi, namespace) -> None:
    """Generation 2 fails after the Lease moved to it and before its first commit: the Lease names 1 again and
    says what 2 held (generation 1 fences it before copying again), 2 is removed, the resource says why."""
    from sparkmirror.resource.names import LEASE_HOLDER, LEASE_REVOKED

    from .test_operator import set_spark_state

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("back", namespace, flowGroups=[{"name": "a", "mirrors": ["a", "c"]}]))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    _reconcile(rec, kapi, namespace, "back")
    _patch(kapi, namespace, "back", {"spec": {"version": "2.0", "spark": {"parallelism": 3}}})
    _reconcile(rec, kapi, namespace, "back")
    _report(kapi, namespace, "back-a", {lease_ready_key(2): str(int(time.time() * 1000))})
    _reconcile(rec, kapi, namespace, "back")
    assert _annotations(kapi, namespace, "back-a")[LEASE_HOLDER] == "2"
    set_spark_state(kapi, namespace, "back-a-g2", "FAILED", "driver container failed with ExitCode: 1")
    result = rec.reconcile(kapi.get(KMM2, namespace, "back"))
    kapi.patch_status(KMM2, namespace, "back", result.status)
    assert names(kapi, "SparkApplication", namespace, "back") == ["back-a"]
    lease = _annotations(kapi, namespace, "back-a")
    assert lease[LEASE_HOLDER] == "1" and lease_ready_key(2) not in lease
    revoked = json.loads(lease[LEASE_REVOKED])
    assert revoked["generation"] == 2 and revoked["flowGroups"] == ["a"]
    assert len(revoked["transactionalIds"]["b"]) == 6  # 3 lanes for each of the two mirrors
    upgrading = _cond(result.status, "Upgrading")
    assert upgrading["status"] == "False" and upgrading["reason"] == "HandoffRolledBack", upgrading
    assert "stopped before its first commit (a: FAILED" in upgrading["message"]
    assert result.status["rollback"]["leaseMovedBack"] is True
    assert [e.reason for e in result.events if e.type == "Warning"] == ["HandoffRolledBack"]
    st = _reconcile(rec, kapi, namespace, "back")  # and it stays so: no new standby for this spec
    assert names(kapi, "SparkApplication", namespace, "back") == ["back-a"]
    assert _cond(st, "Upgrading")["reason"] == "HandoffRolledBack"
    assert json.loads(_annotations(kapi, namespace, "back-a")[LEASE_REVOKED]) == revoked


def test_a_successor_that_never_renews_the_lease_is_moved_back_by_the_handoff_timer(kube, kmm2_crd, kapi,
                                                                                     namespace, monkeypatch) -> None:
    """The Lease moved to generation 2, whose driver never renews it (frozen: no event comes): the handoff timer
    (handlers.handoff_deadlines, every few seconds while a handoff is under way) moves the Lease back once 2 has
    been silent for leaseDurationSeconds (3 s), not after handoffTimeoutSeconds (300 s); outside a handoff the
    timer does nothing."""
    import kopf

    from sparkmirror.resource.names import LEASE_HOLDER
    from sparkmirror_operator import handlers

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("frozen", namespace, flowGroups=[{"name": "a", "mirrors": ["a", "c"]}],
                         upgrade={"handoffTimeoutSeconds": 300, "leaseDurationSeconds": 3}))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    memo = kopf.Memo()
    memo.reconciler = rec
    posted: list[tuple[str, str]] = []  # kopf posts Events only inside a running operator: kept here instead
    monkeypatch.setattr(handlers.kopf, "event", lambda _body, type, reason, message: posted.append((type, reason)))
    _reconcile(rec, kapi, namespace, "frozen")
    before = kapi.get(KMM2, namespace, "frozen")
    handlers.handoff_deadlines(body=before, memo=memo)  # no handoff: nothing reconciled, nothing written
    assert kapi.get(KMM2, namespace, "frozen")["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    _patch(kapi, namespace, "frozen", {"spec": {"version": "2.0"}})
    _reconcile(rec, kapi, namespace, "frozen")
    _report(kapi, namespace, "frozen-a", {lease_ready_key(2): str(int(time.time() * 1000))})
    moved = time.monotonic()  # (before the reconcile that stamps the move: the silence is counted from the stamp)
    _reconcile(rec, kapi, namespace, "frozen")
    assert _annotations(kapi, namespace, "frozen-a")[LEASE_HOLDER] == "2"
    handlers.handoff_deadlines(body=kapi.get(KMM2, namespace, "frozen"), memo=memo)
    assert _annotations(kapi, namespace, "frozen-a")[LEASE_HOLDER] == "2"  # within 3 s of the move: it waits
    while _annotations(kapi, namespace, "frozen-a")[LEASE_HOLDER] == "2":
        assert time.monotonic() - moved < 30, "the Lease did not move back"
        time.sleep(0.5)  # the timer's interval in this test
        handlers.handoff_deadlines(body=kapi.get(KMM2, namespace, "frozen"), memo=memo)
    back = time.monotonic() - moved
    assert 3 < back < 10, back
    st = kapi.get(KMM2, namespace, "frozen")["status"]
    assert st["rollback"]["leaseMovedBack"] is True and _cond(st, "Upgrading")["reason"] == "HandoffRolledBack"
    assert "its driver stalled before its first commit (a: it has not renewed its Lease since the Lease moved " \
        "to it" in st["rollback"]["reason"], st["rollback"]
    assert names(kapi, "SparkApplication", namespace, "frozen") == ["frozen-a"]
    assert ("Warning", "HandoffRolledBack") in posted, posted


def test_a_rolled_back_generation_number_is_never_given_out_again(kube, kmm2_crd, kapi, namespace) -> None:
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("numbers", namespace, upgrade={"readyTimeoutSeconds": 10}, flowGroups=[
        {"name": "a", "mirrors": ["a", "c"]}]))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    _reconcile(rec, kapi, namespace, "numbers")
    _patch(kapi, namespace, "numbers", {"spec": {"version": "2.0"}})
    _reconcile(rec, kapi, namespace, "numbers")
    assert names(kapi, "SparkApplication", namespace, "numbers") == ["numbers-a", "numbers-a-g2"]
    time.sleep(11)  # generation 2 never reports ready
    st = _reconcile(rec, kapi, namespace, "numbers")
    assert st["rollback"]["generation"] == 2
    assert names(kapi, "SparkApplication", namespace, "numbers") == ["numbers-a"]
    assert _annotations(kapi, namespace, "numbers-a")[ANNOTATION_LAST_GENERATION] == "2"
    # its driver's report arrives late: the next reconcile removes it
    _report(kapi, namespace, "numbers-a", {lease_ready_key(2): str(int(time.time() * 1000))})
    _reconcile(rec, kapi, namespace, "numbers")
    assert lease_ready_key(2) not in _annotations(kapi, namespace, "numbers-a")
    # a new spec: a fresh number, and the Lease stays until that one reports ready
    _report(kapi, namespace, "numbers-a", {lease_ready_key(2): str(int(time.time() * 1000))})
    _patch(kapi, namespace, "numbers", {"spec": {"version": "3.0"}})
    _reconcile(rec, kapi, namespace, "numbers")
    assert names(kapi, "SparkApplication", namespace, "numbers") == ["numbers-a", "numbers-a-g3"]
    lease = _annotations(kapi, namespace, "numbers-a")
    assert lease["sparkmirror.io/holder-generation"] == "1" and lease[ANNOTATION_LAST_GENERATION] == "3"
    assert lease_ready_key(2) not in lease


def test_a_refusing_job_is_not_restarted_until_its_group_is(kube, kmm2_crd, kapi, namespace, tmp_path) -> None:
    """The job exits 2 when its config names a Secret file it cannot read (here: the stand-in runner does not
    mount Secrets), before Spark starts: a permanent refusal. Its application goes, the resource says why,
    nothing resubmits it; `sparkmirror.io/restart` naming the group starts a new generation."""
    from tests.support.spark_runner import LocalSparkRunner

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("refuse", namespace, flowGroups=[{"name": "a", "mirrors": ["a", "c"]}]))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner"):
        _reconcile(rec, kapi, namespace, "refuse")

        def refused() -> dict | None:
            app = kapi.get("SparkApplication", namespace, "refuse-a")
            state = ((app or {}).get("status") or {}).get("applicationState") or {}
            return state if "ExitCode: 2" in (state.get("errorMessage") or "") else None

        state = wait_for("the job to exit 2", refused, timeout=120)
        assert state["state"] == "FAILING"  # the Spark operator alone would submit it again
        st = _reconcile(rec, kapi, namespace, "refuse")
        assert names(kapi, "SparkApplication", namespace, "refuse") == []
        assert json.loads(_annotations(kapi, namespace, "refuse-a")[ANNOTATION_REFUSED])["exitCode"] == 2
        degraded, stalled = _cond(st, "Degraded"), _cond(st, "Stalled")
        assert degraded["reason"] == "ApplicationRefused" and "exited with code 2" in degraded["message"]
        assert stalled["status"] == "True"
        st = _reconcile(rec, kapi, namespace, "refuse")  # and again: still not run
        assert names(kapi, "SparkApplication", namespace, "refuse") == [] and \
            _cond(st, "Degraded")["reason"] == "ApplicationRefused"
        kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/refuse",
                   [], {"metadata": {"annotations": {"sparkmirror.io/restart": "a@1"}}},
                   "application/merge-patch+json")
        st = _reconcile(rec, kapi, namespace, "refuse")
        assert names(kapi, "SparkApplication", namespace, "refuse") == ["refuse-a-g2"]
        assert ANNOTATION_REFUSED not in _annotations(kapi, namespace, "refuse-a")
        assert _cond(st, "Degraded")["reason"] != "ApplicationRefused"


def test_a_driver_reports_its_takeover_once_its_first_epoch_committed(kube, kapi, namespace) -> None:
    """handoff.lease.LeaseGate on the real API server: the took-over report waits for the first epoch after
    the takeover, carries when and how many records, and lands on this flow group's Lease only."""
    import threading

    from kubernetes import client

    from sparkmirror.handoff.lease import LeaseGate, LeaseRef
    from sparkmirror.handoff.takeover import Takeover
    from sparkmirror.stats import MirrorStats

    for lease in ("fe-one", "fe-two"):
        kapi.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": lease, "namespace": namespace}, "spec": {}})
    stats = MirrorStats("m")
    stop = threading.Event()
    with kube.api_client() as api:
        gate = LeaseGate([LeaseRef(namespace, "fe-one", 2), LeaseRef(namespace, "fe-two", 2)],
                         api=client.CoordinationV1Api(api))
        thread = gate.report_first_epoch(Takeover(2, ["one"], ["id"], at_ms=100, took_ms=40), "fe-one",
                                         {"m": stats.snapshot()}, stop, lambda: {"m": stats.snapshot()})
        time.sleep(1.0)
        assert lease_took_over_key(2) not in _annotations(kapi, namespace, "fe-one")  # no epoch yet
        stats.update([{"source_topic": "t", "partition": 0, "target_topic": "a.t", "records": 12, "bytes": 12,
                       "epoch_start_ms": 1_000, "epoch_end_ms": 2_000, "lane": 0, "next_offset": 12,
                       "source_end": 12, "lag": 0, "latency_ms_sum": 0, "latency_ms_max": 0}])
        thread.join(10)
        assert not thread.is_alive()
    report = json.loads(_annotations(kapi, namespace, "fe-one")[lease_took_over_key(2)])
    assert report == {"atMs": 100, "tookMs": 40, "fenced": 1, "firstEpochMs": 2_000, "firstEpochRecords": 12,
                      "latencyMaxMs": 0}
    assert lease_took_over_key(2) not in _annotations(kapi, namespace, "fe-two")


def test_a_hot_spare_sees_its_lease_move_back_or_its_successor_take_over(kube, kapi, namespace) -> None:
    """handoff.lease.LeaseGate on the real API server, as generation 1 that handed over to 2, following the Lease
    through a watch: it notices the Lease move on; as a spare it waits ("") until 2 took over ("over") or the Lease names 1 again with what the
    operator revoked ("back"); a Lease that moved on and back between two looks is noticed as a take-back due."""
    import threading

    from kubernetes import client

    from sparkmirror.handoff.lease import LeaseGate, LeaseRef
    from sparkmirror.handoff.takeback import Revoked
    from sparkmirror.resource.names import LEASE_HOLDER, LEASE_REVOKED

    kapi.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "hs-a", "namespace": namespace, "annotations": {LEASE_HOLDER: "1"}},
                 "spec": {}})
    revoked = json.dumps({"generation": 2, "flowGroups": ["a"], "transactionalIds": {"b": ["x.lane-0"]}})
    with kube.api_client() as api:
        gates = [LeaseGate([LeaseRef(namespace, "hs-a", 1)], api=client.CoordinationV1Api(api), poll=0.1)
                 for _ in range(3)]
        try:
            gate, again, done = gates
            lost, stopped = threading.Event(), []
            gate.watch(lost, every=0.1, on_lost=lambda: stopped.append(True))
            time.sleep(0.5)
            assert not lost.is_set()
            _report(kapi, namespace, "hs-a", {LEASE_HOLDER: "2"})
            assert lost.wait(10) and gate.successor == 2 and stopped == [True]
            assert gate.spare_verdict(2) == ("", [])
            assert gate._watch.annotations(namespace, "hs-a")[0]  # seen through the watch (leasewatch.py)
            _report(kapi, namespace, "hs-a", {lease_took_over_key(2): "{}"})
            wait_for("the report through the watch", lambda: gate.spare_verdict(2) == ("over", []), timeout=10,
                     interval=0.05)
            _report(kapi, namespace, "hs-a", {LEASE_HOLDER: "1", LEASE_REVOKED: revoked,
                                              lease_took_over_key(2): None})
            # (what the test wrote is seen once the watch delivers it: a driver never reads its own writes back)
            wait_for("the move back through the watch", lambda: list(gate.holders().values()) == [1], timeout=10,
                     interval=0.05)
            assert gate.wait_as_spare(2, threading.Event()) == ("back", [Revoked(2, ("a",), {"b": ["x.lane-0"]})])
            # moved on and back between two looks (or before this driver started): a take-back is due, once
            lost = threading.Event()
            again.watch(lost, every=0.1)
            assert lost.wait(10) and again.successor == 2
            done.taken_back.add(2)
            lost = threading.Event()
            done.watch(lost, every=0.1)
            assert not lost.wait(1.0)
        finally:
            for g in gates:
                g.close()


def test_an_exit_0_nothing_took_over_is_submitted_again(kube, kmm2_crd, kapi, namespace, monkeypatch) -> None:
    """A generation whose driver drained and exited 0 while its Lease still names it (a deleted or evicted
    driver pod): `OnFailure` never resubmits a completed application, so the operator submits it again
    (its minimum age set to 0 here: the test does not wait a minute)."""
    from sparkmirror_operator import exitcontract

    from .test_operator import set_spark_state

    monkeypatch.setattr(exitcontract, "RESUBMIT_AFTER_SECONDS", 0)
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("again", namespace, flowGroups=[{"name": "a", "mirrors": ["a", "c"]}]))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    _reconcile(rec, kapi, namespace, "again")
    first = kapi.get("SparkApplication", namespace, "again-a")
    set_spark_state(kapi, namespace, "again-a", "COMPLETED")
    result = rec.reconcile(kapi.get(KMM2, namespace, "again"))
    now = kapi.get("SparkApplication", namespace, "again-a")
    assert now is not None and now["metadata"]["uid"] != first["metadata"]["uid"]  # a new application
    assert any(e.reason == "Resubmitted" for e in result.events)


def test_the_operator_removes_a_refusing_job_and_it_is_not_submitted_again(operator, kapi, namespace,
                                                                             tmp_path) -> None:
    """The running operator acts on the application's failed state itself: it removes the application, so the
    Spark operator (the stand-in, which resubmits `onFailureRetryInterval x attempts` = 20 s after a failure)
    has nothing left to resubmit. The 20 s is a head start, not a promise: an operator slower than that on a
    loaded machine may see one more (refused again) attempt, never a loop; after the removal there is none."""
    from tests.support.spark_runner import LocalSparkRunner

    from .conftest import condition, kmm2_status

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("once", namespace, flowGroups=[{"name": "a", "mirrors": ["a", "c"]}]))
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner") as runner:
        # (a status refresh may say so before the application event's reconcile removed it)
        wait_for("the refusal on the status, its application removed",
                 lambda: condition(kmm2_status(kapi, namespace, "once"), "Degraded").get("reason") ==
                 "ApplicationRefused" and not names(kapi, "SparkApplication", namespace, "once"), timeout=120)
        attempts = dict(runner.attempts)
        assert len(attempts) == 1 and list(attempts.values())[0] in (1, 2), attempts
        time.sleep(45)  # past the stand-in's next retry (20 s, then 40 s after a second attempt)
        assert names(kapi, "SparkApplication", namespace, "once") == []
        assert runner.attempts == attempts, (attempts, runner.attempts)
        assert "exited with code 2" in condition(kmm2_status(kapi, namespace, "once"), "Degraded")["message"]
