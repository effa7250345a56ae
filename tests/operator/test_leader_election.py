"""Several operator replicas, one acts: leader election on a Lease, on the real API server.

The rules alone (pure), two electors racing for one Lease, and two (then three) `sparkmirror operator`
processes against one API server: only the Lease's holder reconciles and posts Events; killed, a standby takes
over and reconciles what changed meanwhile; stopped gracefully, it hands over at once.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.leader import LeaderElector, Timing, claim, released

from .conftest import wait_for
from .test_operator import names, resource, secret

KMM2 = "KafkaMirrorMaker2"


def test_timing_problems_name_the_options() -> None:
    assert Timing().problems() == []
    assert Timing(10, 10, 2).problems() == [
        "--leader-elect-renew-deadline (10) must be less than --leader-elect-lease-duration (10)"]
    assert Timing(15, 10, 10).problems() == [
        "--leader-elect-retry-period (10) must be less than --leader-elect-renew-deadline (10)"]
    assert Timing(15, 10, 0).problems() == ["--leader-elect-retry-period must be > 0 (got 0)"]


def test_operator_command_refuses_bad_timing() -> None:
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "operator", "--leader-elect",
                          "--leader-elect-lease-duration", "5", "--leader-elect-renew-deadline", "8"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("sparkmirror operator: --leader-elect-renew-deadline (8) must be less than "
                                  "--leader-elect-lease-duration (5)")


def test_claim_and_release_rewrite_only_the_holder_fields() -> None:
    lease = {"kind": "Lease", "metadata": {"name": "l", "resourceVersion": "7"},
             "spec": {"holderIdentity": "a", "acquireTime": "then", "renewTime": "then", "leaseTransitions": 2}}
    taken = claim(lease, "b", 15)
    assert taken["metadata"]["resourceVersion"] == "7"  # the write fails if anybody wrote in between
    assert taken["spec"]["holderIdentity"] == "b" and taken["spec"]["leaseTransitions"] == 3
    assert taken["spec"]["acquireTime"] != "then" and taken["spec"]["leaseDurationSeconds"] == 15
    renewed = claim(taken, "b", 15)
    assert renewed["spec"]["acquireTime"] == taken["spec"]["acquireTime"]  # a renewal is no transition
    assert renewed["spec"]["leaseTransitions"] == 3
    free = released(renewed)
    assert "holderIdentity" not in free["spec"] and free["spec"]["leaseDurationSeconds"] == 1
    assert claim(free, "c", 15)["spec"]["leaseTransitions"] == 3  # nobody held it: no transition either
    assert lease["spec"]["holderIdentity"] == "a"  # pure: the input is untouched


@pytest.mark.k8s
def test_two_electors_one_lease(kube, namespace) -> None:
    """Two candidates on the real API server: one wins, the other waits out the lease and then takes it;
    a released Lease is taken at the next try."""
    timing = Timing(lease_duration=2, renew_deadline=1.5, retry_period=0.2)
    with kube.api_client() as api:
        a = LeaderElector(KubeApi(api), namespace, "race", "a", timing)
        b = LeaderElector(KubeApi(api), namespace, "race", "b", timing)
        assert a.try_acquire_or_renew() is True  # created
        assert b.try_acquire_or_renew() is False and b.holder == "a"
        assert a.try_acquire_or_renew() is True  # renewed
        assert b.try_acquire_or_renew() is False  # renewed: b's clock starts again
        start = time.monotonic()
        waited = b.wait_for_leadership()  # a stops renewing (as if killed)
        assert 1.8 <= time.monotonic() - start and waited >= 1.8
        lease = KubeApi(api).get("Lease", namespace, "race")
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
        assert a.try_acquire_or_renew() is False and a.holder == "b"
        b.release()
        assert a.try_acquire_or_renew() is True  # released: no waiting


@pytest.mark.k8s
def test_a_leader_whose_lease_is_taken_stops_acting(kube, namespace, caplog) -> None:
    """Somebody else holds the Lease (an operator that missed its renewals, a hand edit): the running work is
    stopped at the next renewal and run_elected says leadership was lost (exit code 1)."""
    import asyncio
    import threading

    from sparkmirror_operator.leader import run_elected

    timing = Timing(lease_duration=3, renew_deadline=2, retry_period=0.2)
    started = threading.Event()
    with kube.api_client() as api:
        kapi = KubeApi(api)
        elector = LeaderElector(kapi, namespace, "taken", "me", timing)

        def work(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:  # what kopf.run does with the flag
            started.set()
            loop.run_until_complete(asyncio.wait_for(stop.wait(), 30))

        result: list[int] = []
        runner = threading.Thread(target=lambda: result.append(run_elected(elector, work)))
        with caplog.at_level("INFO", logger="sparkmirror_operator.leader"):
            runner.start()
            assert started.wait(30)
            lease = kapi.get("Lease", namespace, "taken")
            t0 = time.monotonic()
            kapi.replace(claim(lease, "intruder", 3))
            runner.join(30)
            stopped_s = time.monotonic() - t0
        assert result == [1]
        assert stopped_s < timing.retry_period + 2
        assert f"lost leadership: Lease {namespace}/taken is now held by intruder" in caplog.text
        assert kapi.get("Lease", namespace, "taken")["spec"]["holderIdentity"] == "intruder"  # not released


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `sparkmirror operator --leader-elect` process, named like a pod (POD_NAME)."""
    LEASE = "smm-leader"
    TIMING = ["--leader-elect-lease-duration", "5", "--leader-elect-renew-deadline", "4",
              "--leader-elect-retry-period", "0.5"]

    def __init__(self, name: str, kube, namespace: str, tmp: Path) -> None:
        self.name, self.port, self.log = name, _free_port(), tmp / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparkmirror.cli", "operator", "--kubeconfig", str(kube.kubeconfig),
                 "-n", namespace, "--status-interval", "2", "--liveness", f"http://127.0.0.1:{self.port}/healthz",
                 "--leader-elect", "--leader-elect-resource-name", self.LEASE, *self.TIMING],
                env={**os.environ, "POD_NAME": name, "POD_NAMESPACE": namespace},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text()

    def healthz(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
            return r.read().decode()

    def stop(self, sig: int) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"{self.name} did not stop on signal {sig} within 30s") from None


def _holder(kapi: KubeApi, namespace: str) -> str:
    return ((kapi.get("Lease", namespace, Replica.LEASE) or {}).get("spec") or {}).get("holderIdentity") or ""


def _reporters(kapi: KubeApi, namespace: str) -> dict[str, int]:
    """Which operator instance posted the Events in the namespace (kopf's reportingInstance), with counts."""
    out: dict[str, int] = {}
    for e in kapi.list("Event", namespace):
        if e.get("reportingComponent") == "kopf":
            out[e.get("reportingInstance")] = out.get(e.get("reportingInstance"), 0) + 1
    return out


@pytest.mark.k8s
def test_two_operators_one_acts_and_a_standby_takes_over(kube, kmm2_crd, kapi, namespace, tmp_path,
                                                         figure) -> None:
    replicas = {n: Replica(n, kube, namespace, tmp_path) for n in ("op-1", "op-2")}
    try:
        leader_name = wait_for("a leader", lambda: _holder(kapi, namespace), timeout=60)
        leader = replicas[leader_name]
        standby = next(r for n, r in replicas.items() if n != leader_name)
        wait_for("the standby says so", lambda: f"standing by: Lease {namespace}/{Replica.LEASE} is held by "
                                                f"{leader_name}" in standby.text(), timeout=30)
        assert standby.healthz() == "standby\n"  # alive while standing by: its liveness probe passes

        kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
        kapi.create(resource("ha", namespace))
        wait_for("applications from the leader", lambda: names(kapi, "SparkApplication", namespace, "ha")
                 == ["ha-a", "ha-c"], timeout=60)
        wait_for("status written", lambda: (kapi.get(KMM2, namespace, "ha").get("status") or {})
                 .get("observedGeneration") == 1)
        wait_for("the leader's Events", lambda: _reporters(kapi, namespace).get(leader_name))
        time.sleep(5)  # two status-timer periods: a standby running handlers would have acted by now
        assert set(_reporters(kapi, namespace)) == {leader_name}
        assert "Handler" not in standby.text() and "ha-a" not in standby.text()
        assert "became leader" in leader.text() and "Handler 'reconcile'" in leader.text()
        assert standby.proc.poll() is None and leader.proc.poll() is None

        # the leader dies without a word (no release): the standby waits out the lease, then acts
        t0 = time.monotonic()
        leader.stop(signal.SIGKILL)
        body = kapi.get(KMM2, namespace, "ha")
        body["spec"]["mirrors"] = body["spec"]["mirrors"][:1]  # changed after the kill: only the new leader can do it
        kapi.replace(body)
        wait_for("the standby holds the Lease", lambda: _holder(kapi, namespace) == standby.name, timeout=60)
        lease_s = time.monotonic() - t0
        wait_for("the change reconciled by the new leader", lambda: names(kapi, "SparkApplication", namespace, "ha")
                 == ["ha-a"] and kapi.get(KMM2, namespace, "ha")["status"].get("observedGeneration") == 2,
                 timeout=60)
        takeover_s = time.monotonic() - t0
        assert _reporters(kapi, namespace).get(standby.name)
        assert "became leader" in standby.text()
        assert takeover_s < 5 + 30  # the lease duration plus a start; generous for a loaded machine
        figure("leader_takeover", f"killed leader -> standby holds the Lease: {lease_s:.2f}s; change reconciled: "
               f"{takeover_s:.2f}s (lease duration 5s, retry 0.5s)")
        figure("takeover_lease_s", round(lease_s, 2))
        figure("takeover_reconciled_s", round(takeover_s, 2))

        # a graceful stop (rolling update, drain) releases the Lease: the next standby takes it at once
        third = Replica("op-3", kube, namespace, tmp_path)
        replicas["op-3"] = third
        wait_for("op-3 standing by", lambda: "standing by" in third.text(), timeout=30)
        t1 = time.monotonic()
        assert standby.stop(signal.SIGTERM) == 0
        wait_for("op-3 holds the Lease", lambda: _holder(kapi, namespace) == "op-3", timeout=30)
        handover_s = time.monotonic() - t1
        assert "released leadership" in standby.text()
        figure("graceful_handover", f"graceful stop -> next standby holds the Lease: {handover_s:.2f}s (includes the "
               f"old leader's shutdown)")
        figure("graceful_handover_s", round(handover_s, 2))
        assert handover_s < 5 + 15
    finally:
        for r in replicas.values():
            r.stop(signal.SIGTERM)
        for r in replicas.values():
            print(f"--- {r.name} ---\n" + "\n".join(r.text().splitlines()[-15:]))
