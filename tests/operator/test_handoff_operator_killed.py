"""The operator SIGKILLed at each step of a handoff, and started again: the handoff still completes, nothing is lost
and nothing is copied twice.

The operator runs as its own process (`sparkmirror operator`, what its Deployment's pod runs) against the real API
server; the local runner plays the Spark operator (each worker generation its own Spark driver process); real Kafka
with records flowing. Four version changes, one per step of the handoff (rollout.py): the operator's process group
is killed the moment the step is seen through the API (the standby's application created; its driver's
`ready.g<N>` on the Lease; the Lease moved to it; its `took-over.g<N>`), left dead for a few seconds while the
drivers carry on, and started again. What the operator knows lives in the cluster (applications, ConfigMaps,
Leases), so the new process must take the handoff up where it was: one application left per flow group, the
handoff recorded, `Upgrading` cleared. Every record is counted on the target by sequence number per partition.

A campaign test (`make campaign`): four handoffs of a few minutes each on 2 cores.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkmirror.resource.names import LEASE_HOLDER, application_name, lease_name, lease_ready_key, lease_took_over_key
from sparkmirror_dev.testing import NumberedProducer, check_numbered, count_records

from .conftest import KMM2, condition, kmm2_status, merge_patch, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(12), pytest.mark.solo,
              pytest.mark.skipif(os.environ.get("SPARKMIRROR_CAMPAIGN") != "1",
                                 reason="campaign (make campaign): four handoffs with the operator killed in each")]

DEAD_S = 4.0  # how long the operator stays dead: the drivers' Lease renewals and reports go on meanwhile


class OperatorProcess:
    """`sparkmirror operator` as its own process group, started again after a SIGKILL (its Deployment would)."""

    def __init__(self, kube, namespace: str, log: Path) -> None:
        self.kube, self.namespace, self.log = kube, namespace, log
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparkmirror.cli", "operator", "--kubeconfig", str(self.kube.kubeconfig),
                 "-n", self.namespace, "--status-interval", "2"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.starts += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def test_the_operator_killed_at_each_step_of_a_handoff(kube, kmm2_crd, kapi, namespace, kafka_a, kafka_b, topic,
                                                        tmp_path, figure, monkeypatch) -> None:
    from tests.support.spark_runner import LocalSparkRunner

    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))  # the drivers' (the runner's jobs') way to their Leases
    t = topic(kafka_a, partitions=3)
    name = "opkill"
    lease = lease_name(name, "a")
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": name, "namespace": namespace},
            "spec": {"version": "1.0",
                     "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap}, "topicsPattern": t,
                                  "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}],
                     "spark": {"parallelism": 2, "epochSeconds": 5, "executor": {"instances": 1}},
                     "upgrade": {"readyTimeoutSeconds": 360, "handoffTimeoutSeconds": 120}}}

    def annotations() -> dict[str, str]:
        return ((kapi.get("Lease", namespace, lease) or {}).get("metadata") or {}).get("annotations") or {}

    def apps() -> list[str]:
        return sorted(a["metadata"]["name"] for a in kapi.list("SparkApplication", namespace))

    steps = {  # the step -> seen (for the handoff from generation g to g + 1)
        "standby application created": lambda g: application_name(name, "a", g + 1) in apps(),
        "ready reported on the Lease": lambda g: lease_ready_key(g + 1) in annotations(),
        "Lease moved": lambda g: annotations().get(LEASE_HOLDER) == str(g + 1),
        "took over": lambda g: lease_took_over_key(g + 1) in annotations(),
    }
    op = OperatorProcess(kube, namespace, tmp_path / "operator.log")
    producer = NumberedProducer(kafka_a.bootstrap, t, rate=50)
    rows = []
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner") as runner:
        op.start()
        producer.start()
        try:
            kapi.create(body)
            wait_for("copying", lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) > 100, timeout=240,
                     interval=2.0)
            for gen, (step, seen) in enumerate(steps.items(), start=1):
                merge_patch(kapi, namespace, name, {"spec": {"version": f"{gen + 1}.0"}})
                wait_for(f"handoff {gen}: {step}", lambda: seen(gen), timeout=420, interval=0.05)
                op.kill()
                t_killed = time.monotonic()
                at_kill = {"holder": annotations().get(LEASE_HOLDER), "apps": apps(),
                           "took_over": lease_took_over_key(gen + 1) in annotations()}
                time.sleep(DEAD_S)
                assert runner.jobs[application_name(name, "a", gen)].proc.poll() is None or at_kill["took_over"], \
                    "the running generation must not end while the operator is away before the takeover"
                op.start()

                def done(gen=gen):
                    st = kmm2_status(kapi, namespace, name)
                    return len(st.get("handoffs") or []) >= gen and condition(st, "Upgrading").get("status") == "False" \
                        and apps() == [application_name(name, "a", gen + 1)] and st

                try:
                    st = wait_for(f"handoff {gen} completed by the restarted operator", done, timeout=480,
                                  interval=0.5)
                except AssertionError as e:
                    st = kmm2_status(kapi, namespace, name)
                    raise AssertionError(f"{e}; conditions {st.get('conditions')}; rollback {st.get('rollback')}; "
                                         f"apps {apps()}; Lease {annotations()}; runner errors {runner.errors}; "
                                         f"operator log: {op.log.read_text(errors='replace')[-3000:]}") from None
                assert not st.get("rollback") or st["rollback"].get("generation") != gen + 1, st["rollback"]
                assert annotations().get(LEASE_HOLDER) == str(gen + 1)
                rows.append(f"killed at '{step}' (Lease holder {at_kill['holder']}, applications "
                            f"{len(at_kill['apps'])}); handoff {gen} -> {gen + 1} completed "
                            f"{time.monotonic() - t_killed:.1f} s after the kill ({DEAD_S:.0f} s of it dead)")
                assert not runner.errors, runner.errors
        finally:
            sent = producer.stop()
            op.kill()
        wait_for(f"a.{t} to catch up", lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) >= 3 * sent,
                 timeout=240, interval=2.0)
        time.sleep(3)  # a duplicate would land after the count was reached
    check_numbered(kafka_b.bootstrap, f"a.{t}", 3, sent)
    figure("operator_killed_mid_handoff", "\n  ".join(
        [f"{len(rows)} handoffs, the operator SIGKILLed in each and started again; {sent * 3} records, 0 missing, "
         f"0 duplicated:", *rows]))
