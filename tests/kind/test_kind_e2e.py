"""The whole product on a real Kubernetes cluster made here by kind: images built from the Dockerfile, the
Kubeflow Spark operator and sparkmirror installed with their Helm charts, Kafka clusters as pods, mirrors
applied with kubectl into a namespace that enforces the `restricted` Pod Security Standard.

Records carry a sequence number per partition (value `<partition>:<seq>`) and are counted on the target with a
read_committed consumer: every sequence exactly once, also after the driver and an executor pod are deleted
mid-stream and across a version upgrade by worker-generation handoff; and a consumer group failed over through
`spec.failover` reads on the target every record it had not read, once.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from sparkmirror_dev.testing import (commit_group, consume_as_group, create_topic, open_transactions, produce_numbered,
                                     read_topic)
from sparkmirror_dev.kindground import MIRROR_NS, SCRAM_USER, KindGround

# the first test also builds the ground (cold: Go builds and images, about 15 minutes on 2 cores)
pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600), pytest.mark.minutes(13), pytest.mark.solo]
SPARK = {"imagePullPolicy": "IfNotPresent", "parallelism": 2, "epochSeconds": 20,
         "driver": {"memory": "512m", "coreRequest": "100m"},
         "executor": {"instances": 1, "memory": "512m", "coreRequest": "100m"}}


def _west(ground: KindGround, password_secret: str) -> dict:
    """West as a Strimzi user writes it: TLS trusting its CA, SCRAM-SHA-512 with the password in a Secret."""
    return {"alias": "west", "bootstrapServers": ground.west.internal_bootstrap,
            "tls": {"trustedCertificates": [{"secretName": "west-ca", "certificate": "ca.crt"}]},
            "authentication": {"type": "scram-sha-512", "username": SCRAM_USER,
                               "passwordSecret": {"secretName": password_secret, "password": "password"}}}


def _east(ground: KindGround) -> dict:
    return {"alias": "east", "bootstrapServers": ground.east.internal_bootstrap}


def _mirror(name: str, target: dict, source: dict, topics: str, image: str, copy: str = "records") -> dict:
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": name, "namespace": MIRROR_NS},
            "spec": {"version": "4.1.2", "target": target, "copy": copy,
                     "mirrors": [{"source": source, "topicsPattern": topics}],
                     "spark": {**SPARK, "image": image}}}


def _ready_with_lag_zero(status: dict) -> bool:
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    groups = status.get("flowGroups") or []
    return ready and bool(groups) and all(g.get("lag") == 0 for g in groups)


def _count(bootstrap: str, topic: str, produced: dict[int, int], settle: float = 0.0) -> tuple[int, int]:
    """(missing, duplicated) sequences over all partitions of the target's copy of `topic`. With `settle`, read
    again while records are missing, for up to that many seconds: the status' lag is sampled, so "lag 0" can
    predate the last records a stopped producer wrote (a duplicate never goes away by waiting)."""
    deadline = time.monotonic() + settle
    while True:
        missing, duplicated = _count_once(bootstrap, topic, produced)
        if missing == 0 or time.monotonic() >= deadline:
            return missing, duplicated
        time.sleep(5)


def _count_once(bootstrap: str, topic: str, produced: dict[int, int]) -> tuple[int, int]:
    records = read_topic(bootstrap, topic, timeout=120)
    missing = duplicated = 0
    for part, n in produced.items():
        seqs = [int(r.value.split(b":")[1]) for r in records.get(part, [])]
        assert all(r.value.startswith(f"{part}:".encode()) for r in records.get(part, [])), \
            f"{topic}[{part}] holds a record of another partition"
        missing += len(set(range(n)) - set(seqs))
        duplicated += len(seqs) - len(set(seqs))
    return missing, duplicated


class SteadyProducer:
    """Sequence-numbered records to every partition at a steady rate until stopped (idempotent producer)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, start: int, per_second: int = 100) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.topic, self.partitions, self.next, self.interval = topic, partitions, start, 1.0 / per_second
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            for part in range(self.partitions):
                self.p.produce(self.topic, key=str(self.next).encode(), value=f"{part}:{self.next}".encode(),
                               partition=part)
            self.next += 1
            self.p.poll(0)
            time.sleep(self.interval)

    def start(self) -> "SteadyProducer":
        self.thread.start()
        return self

    def stop(self) -> int:
        self.stop_event.set()
        self.thread.join(30)
        assert self.p.flush(60) == 0
        return self.next


def _pod(ground: KindGround, app: str, role: str) -> str:
    out = ground.kubectl("-n", MIRROR_NS, "get", "pods", "-l",
                         f"sparkoperator.k8s.io/app-name={app},spark-role={role}",
                         "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
    names = out.split()
    assert names, f"no running {role} pod of {app}"
    return names[0]


def test_mirror_on_kind(kind_ground: KindGround, figure: Callable[[str, object], None]) -> None:
    """Both directions between east (plain) and west (TLS + SCRAM), records one way and batches the other: Ready
    with lag 0, every record exactly once, also across the loss of an executor pod and of the driver pod and a
    version upgrade while records flow; then the failover of west -> east through the resource (the operator pod
    reads west with the Secret's password)."""
    g = kind_ground
    suffix = uuid.uuid4().hex[:6]
    orders, payments = f"orders-{suffix}", f"payments-{suffix}"
    create_topic(g.east.external_bootstrap, orders, 4)
    create_topic(g.west.external_bootstrap, payments, 3)
    produce_numbered(g.east.external_bootstrap, orders, 4, 0, 2000)
    produce_numbered(g.west.external_bootstrap, payments, 3, 0, 2000)

    t0 = time.monotonic()
    g.apply([_mirror("east-to-west", _west(g, "west-mirror-user"), _east(g), orders, g.spark_image),
             # the batch path on the real cluster: its own wire client reads west over TLS + SCRAM
             _mirror("west-to-east", _east(g), _west(g, "west-mirror-user"), payments, g.spark_image, "batches")])
    for name in ("east-to-west", "west-to-east"):
        g.wait_status(name, _ready_with_lag_zero, 900, "Ready with lag 0")
    figure("apply_to_ready", f"apply -> Ready with lag 0 (both directions): {time.monotonic() - t0:.0f}s")
    assert _count(g.west.external_bootstrap, f"east.{orders}", {p: 2000 for p in range(4)}) == (0, 0)
    assert _count(g.east.external_bootstrap, f"west.{payments}", {p: 2000 for p in range(3)}) == (0, 0)

    # the loss of pods while records flow: an executor, then the driver
    app = "east-to-west-east"
    steady = SteadyProducer(g.east.external_bootstrap, orders, 4, start=2000).start()
    try:
        time.sleep(15)
        g.kubectl("-n", MIRROR_NS, "delete", "pod", _pod(g, app, "executor"), "--wait=false")
        time.sleep(30)
        # deleted like a rollout would: SIGTERM, the driver drains, so it leaves no transaction open
        driver = _pod(g, app, "driver")
        with _followed_log(g, driver) as log_lines:
            t_del = time.monotonic()
            g.kubectl("-n", MIRROR_NS, "delete", "pod", driver, "--wait=true", "--timeout=180s")
            took = time.monotonic() - t_del
        left_open = open_transactions(g.west.external_bootstrap, f"east.{orders}", 4)
        stop = [line.split(": ", 1)[-1] for line in log_lines()
                if "draining and stopping" in line or "drained in" in line or "lane transactional ids" in line]
        figure("driver_pod_deletion", f"driver pod deleted in {took:.0f}s; transactions left open: {left_open}; "
               f"the driver's stop: {stop or 'not logged (the stop signal did not reach the Python driver)'}")
        assert left_open == {}, ("the stopped driver left transactions open on the target; its stop, as logged:\n"
                                 + "\n".join(_stop_lines(log_lines())))
        time.sleep(15)
        # a version upgrade while records flow: a second worker generation in standby, then the handoff
        t_up = time.monotonic()
        g.kubectl("-n", MIRROR_NS, "patch", "kafkamirrormaker2", "east-to-west", "--type=merge",
                  "-p", '{"spec": {"version": "4.2.0"}}')

        def handed_over(st: dict) -> bool:
            up = next((c for c in st.get("conditions") or [] if c["type"] == "Upgrading"), {})
            return bool(st.get("handoffs")) and up.get("status") == "False" and st.get("version") == "4.2.0"

        st = g.wait_status("east-to-west", handed_over, 900, "the handoff to version 4.2.0")
        figure("upgrade_handoff", f"upgrade 4.1.2 -> 4.2.0 by handoff: {time.monotonic() - t_up:.0f}s from the "
               f"patch; {st['handoffs'][-1]}")
        assert st["flowGroups"][0]["workerGeneration"] == 2
        time.sleep(10)
    finally:
        produced = steady.stop()
    t1 = time.monotonic()
    g.wait_status("east-to-west", _ready_with_lag_zero, 900, "Ready with lag 0 after losing its driver")
    figure("catch_up_after_pod_loss", f"driver and executor deleted: caught up {time.monotonic() - t1:.0f}s after "
           f"the producer stopped ({produced} records per partition)")
    # the status' lag is refreshed every 30 s: "lag 0" may be older than the producer's last records
    final = _count(g.west.external_bootstrap, f"east.{orders}", {p: produced for p in range(4)}, settle=120)
    assert final == (0, 0)
    _failover_on_the_resource(g, payments, suffix, figure)


@contextlib.contextmanager
def _followed_log(g: KindGround, pod: str) -> Iterator[Callable[[], list[str]]]:
    """The pod's log as it is written (`kubectl logs -f`), kept after the pod is gone: where a stop spent its time."""
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([*g.cluster.kubectl, "-n", MIRROR_NS, "logs", "-f", pod], stdout=out,
                            stderr=subprocess.STDOUT, text=True)

    def lines() -> list[str]:
        out.seek(0)
        return out.read().splitlines()

    try:
        yield lines
    finally:
        try:
            proc.wait(timeout=10)  # ends with the pod
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stop_lines(lines: list[str]) -> list[str]:
    """The driver's log from the stop signal on, without Spark's own INFO chatter."""
    start = next((i for i, line in enumerate(lines) if "draining and stopping" in line), max(len(lines) - 200, 0))
    return [line for line in lines[start:] if "sparkmirror" in line or "WARN" in line or "ERROR" in line][-150:]


def _apps(ground: KindGround, prefix: str) -> list[str]:
    out = ground.kubectl("-n", MIRROR_NS, "get", "sparkapplications", "-o", "jsonpath={.items[*].metadata.name}")
    return [n for n in out.split() if n.startswith(prefix)]


def _failover_on_the_resource(g: KindGround, payments: str, suffix: str, figure: Callable[[str, object], None]) -> None:
    """A group read part of `payments` on west; `spec.failover` moves it to east's copy, which it then reads from
    exactly where it was; taken off the list, the mirror's application comes back."""
    group = f"kind-fo-{suffix}"
    commit_group(g.west.external_bootstrap, group, {(payments, p): 500 + 100 * p for p in range(3)})
    produce_numbered(g.west.external_bootstrap, payments, 3, 2000, 100)  # the mirror must catch up on these first
    t0 = time.monotonic()
    g.kubectl("-n", MIRROR_NS, "patch", "kafkamirrormaker2", "west-to-east", "--type=merge", "-p", json.dumps(
        {"spec": {"failover": {"mirrors": ["west"], "groupsPattern": group, "waitCaughtUpSeconds": 300}}}))

    def failed_over(st: dict) -> bool:
        return any(c.get("type") == "FailedOver" and c.get("status") == "True" for c in st.get("conditions") or [])

    st = g.wait_status("west-to-east", failed_over, 600, "failed over")
    took = time.monotonic() - t0
    record = st["failover"][0]
    assert {k: record.get(k) for k in ("mirror", "offsetsFrom", "groupsMoved", "partitionsMoved", "ok")} == \
        {"mirror": "west", "offsetsFrom": "source", "groupsMoved": 1, "partitionsMoved": 3, "ok": True}, record
    deadline = time.monotonic() + 120
    while _apps(g, "west-to-east-") and time.monotonic() < deadline:
        time.sleep(2)
    assert not _apps(g, "west-to-east-"), "the failed-over flow group's SparkApplication is still there"
    read = consume_as_group(g.east.external_bootstrap, group, f"west.{payments}", 3)
    assert read == {p: list(range(500 + 100 * p, 2100)) for p in range(3)}, \
        {p: (v[:3], v[-3:], len(v)) for p, v in read.items()}
    # taken off the list: the failover is undone and the flow group's application comes back
    g.kubectl("-n", MIRROR_NS, "patch", "kafkamirrormaker2", "west-to-east", "--type=merge", "-p",
              '{"spec": {"failover": null}}')
    g.wait_status("west-to-east", lambda st: not st.get("failover") and not failed_over(st), 300, "the failover undone")
    deadline = time.monotonic() + 120
    while not _apps(g, "west-to-east-") and time.monotonic() < deadline:
        time.sleep(2)
    assert _apps(g, "west-to-east-"), "the flow group's SparkApplication did not come back after the undo"
    figure("resource_failover", f"spec.failover on kind: recorded {took:.0f} s after the patch (caught up first); "
           f"the group read {sum(map(len, read.values()))} records on east, each once; the undo brought the "
           "application back")


def test_refused_mirror_says_why(kind_ground: KindGround, figure: Callable[[str, object], None]) -> None:
    """A mirror whose target refuses its credentials is not Ready, and the resource names the cause; so is one
    asking replication factor 3 of the 1-broker east (issue 37 item 5), applied at the same time."""
    g = kind_ground
    few = f"few-{uuid.uuid4().hex[:6]}"
    create_topic(g.west.external_bootstrap, few, 1)
    too_few = _mirror("too-few", _east(g), _west(g, "west-mirror-user"), few, g.spark_image)
    too_few["spec"]["mirrors"][0]["sourceConnector"] = {"config": {"replication.factor": 3}}
    g.apply([_mirror("refused", _west(g, "west-wrong-user"), _east(g), f"refused-{uuid.uuid4().hex[:6]}",
                     g.spark_image), too_few])

    def says_why(status: dict) -> bool:
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        ready, degraded = conds.get("Ready", {}), conds.get("Degraded", {})
        return (ready.get("status") == "False" and degraded.get("status") == "True"
                and degraded.get("reason") == "AuthenticationFailed"
                and "authentication failed" in f"{ready.get('message')}".lower())

    status = g.wait_status("refused", says_why, 600, "reporting the refused authentication")
    figure("refused_mirror_conditions",
           f"refused mirror: {json.dumps([c for c in status['conditions'] if c['type'] != 'Progressing'])}")

    def says_too_few(status: dict) -> bool:
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        ready, degraded = conds.get("Ready", {}), conds.get("Degraded", {})
        said = f"{degraded.get('message')}"
        return (ready.get("status") == "False" and degraded.get("status") == "True"
                and degraded.get("reason") == "ReplicationFactorRefused"
                and f"topic 'west.{few}' needs replication factor 3 (replication.factor) but cluster 'east' has "
                    "1 broker(s): set replication.factor in mirrors[" in said and "to at most 1" in said)

    status = g.wait_status("too-few", says_too_few, 600, "reporting the refused replication factor")
    figure("too_few_brokers_conditions",
           f"too few brokers: {json.dumps([c for c in status['conditions'] if c['type'] != 'Progressing'])}")
    g.kubectl("-n", MIRROR_NS, "delete", "kafkamirrormaker2", "refused", "too-few", "--wait=false")
