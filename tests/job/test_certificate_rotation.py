"""Certificates rotated while the mirror copies over mTLS, on both copy paths (`copy: records`, librdkafka; `copy:
batches`, the wire client): the broker's certificate replaced (a new key from the same CA, then a CA rollover)
and the job's client certificate files replaced (the same), without a restart, nothing lost or copied twice.

The cluster has one mTLS listener and KRaft's StandardAuthorizer; each client certificate has a principal of its
own (CN=mirror-gen1..3) with ACLs. The broker takes its new keystore and truststore in place through Kafka's own
`kafka-configs` (dynamic listener configs); the test reads the certificate the listener serves to see it did.
The job's certificate, key and trust bundle are a mounted Secret as the kubelet writes one: files behind the
`..data` symlink, all swapped at once. Both source and target are this cluster (two aliases), so reading and
writing both go through TLS. In the end the ACLs of the old certificates' principals are deleted: a client of the
job still on an old certificate would then be refused (authorization ends the mirror at once), so the job going
on copying proves every client of it moved to the new files. Records are counted by sequence numbers per
partition: 0 missing, 0 duplicated, in order; the longest stall of the committed end is the figure.
"""
from __future__ import annotations

import re
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.certs import CertificateAuthority, Issued
from sparkmirror_dev.kafka import KafkaCluster, Security
from sparkmirror_dev.mountedsecret import MountedSecret
from sparkmirror_dev.testing import NumberedProducer, check_numbered, create_topic, unique_name

from tests.support.campaign import RECORDS_IN_CAMPAIGN

from .committed import Progress, wait_committed
from .conftest import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(6.5)]

PARTS = 3
LANES = 2
SANS = ["DNS:localhost", "IP:127.0.0.1"]  # the broker's names: Kafka refuses a new keystore whose names differ
HOLDERS = ("the services' clients", "the topic sync's clients")  # the driver's, made again on a file change


@pytest.fixture(scope="module")
def tls_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A cluster of its own (its certificates are replaced) with an mTLS listener and the authorizer on."""
    root = tmp_path_factory.mktemp("tlsrot")
    cluster = KafkaCluster("tlsrot", root / "tlsrot",
                           security=Security(CertificateAuthority(root / "ca1"), listeners=("MTLS",), authorizer=True))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def served_certificate(host_port: str) -> bytes:
    """The DER certificate a TLS listener serves now (a new connection: what a client connecting now meets)."""
    host, _, port = host_port.rpartition(":")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # only looking at it
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            return tls.getpeercert(binary_form=True) or b""


def der(issued: Issued) -> bytes:
    return ssl.PEM_cert_to_DER_cert(issued.cert.read_text())


def _client(ca: CertificateAuthority, gen: int) -> Issued:
    return ca.issue(f"client-gen{gen}", f"mirror-gen{gen}", client=True)


def test_certificates_rotated_while_mirroring(tls_kafka, job, tmp_path, figure, copy_path) -> None:
    k = tls_kafka
    ca1 = k.security.ca
    ca2 = CertificateAuthority(tmp_path / "ca2", name="sparkmirror-test-ca-2")
    for gen in (1, 2, 3):
        k.allow(f"User:CN=mirror-gen{gen}")
    first = ca1.issue(f"broker-{k.name}", "localhost", SANS)  # the certificate the cluster started with
    if served_certificate(k.bootstrap_of("MTLS")) != der(first):  # a test before rotated it: back to CA 1
        k.alter_broker_config({"listener.name.mtls.ssl.keystore.location": str(first.keystore),
                               "listener.name.mtls.ssl.truststore.location": str(ca1.cert)})
        wait_for(lambda: served_certificate(k.bootstrap_of("MTLS")) == der(first), 60, "CA 1's certificate again")
    gen1 = _client(ca1, 1)
    secret = MountedSecret(tmp_path / "secret", {"ca.crt": ca1.cert.read_bytes(), "tls.crt": gen1.cert.read_bytes(),
                                                 "tls.key": gen1.key.read_bytes()})
    src = unique_name("tlsrot")
    create_topic(k.bootstrap, src, PARTS)
    remote = f"x.{src}"

    def entry(alias: str) -> dict:
        return {"alias": alias, "bootstrapServers": k.bootstrap_of("MTLS"), "tls": {"caFiles": [secret.path("ca.crt")]},
                "authentication": {"type": "tls", "certificateFile": secret.path("tls.crt"),
                                   "keyFile": secret.path("tls.key")}}

    cfg = FlowGroupConfig.model_validate({
        "name": unique_name(f"tlsrot-{copy_path}"), "lanes": LANES, "epochSeconds": 5, "commitIntervalMs": 100,
        "transactionTimeoutMs": 20000, "progressTopic": unique_name("progress"), "copy": copy_path,
        "clusters": [entry("x"), entry("y")],
        "mirrors": [{"name": "x-to-y", "source": "x", "target": "y", "topics": src, "emitCheckpoints": False,
                     "emitHeartbeats": False}]})  # one cluster: its heartbeats would be mirrored into itself
    producer = NumberedProducer(k.bootstrap, src, rate=100.0, partitions=PARTS)  # the PLAINTEXT admin door
    producer.start()
    jp = job(cfg)
    alive = lambda: jp.proc.poll() is None  # noqa: E731
    wait_committed(k.bootstrap, remote, 1, alive, 300, "copying")
    assert alive(), jp.log()[-3000:]
    progress = Progress(k.bootstrap, remote)

    def watch(seconds: float) -> None:
        """Let the mirror copy for `seconds`, the job alive all along."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            assert alive(), "the job ended: " + jp.log()[-3000:]
            time.sleep(0.5)

    def copying_anew(since_ms: int, what: str, driver_changes: int = 0) -> None:
        """Until every lane began an epoch planned after `since_ms` (clients made from the files then, if they
        changed) and the driver made its clients again for each of `driver_changes` file changes (5 s checks),
        then until copying moved: waited for, not a fixed 10-15 s a step; the job alive all along."""
        def made_again() -> bool:
            assert alive(), "the job ended: " + jp.log()[-3000:]
            log = jp.log()
            lanes = {tid for tid, epoch in re.findall(r"lane (\S+): epoch (\d+) starts in worker", log)
                     if int(epoch) > since_ms}
            return len(lanes) == LANES and all(log.count(f"changed: making {h} again") >= driver_changes
                                               for h in HOLDERS)

        wait_for(made_again, 90, f"every client of the job made again after the {what}")
        t = time.monotonic()
        wait_for(lambda: progress.moved_after(t) is not None or not alive(), 60, f"copying after the {what}")

    with progress.sampling():  # the committed end every second, from before the rotations to after them
        watch(10)
        baseline = progress.longest_still(0.0)  # epoch boundaries and all, before anything is rotated
        listener = k.bootstrap_of("MTLS")
        steps: dict[str, float] = {}
        file_changes = 0

        def broker_keystore(issued: Issued, what: str, truststore: Path | None = None) -> None:
            props = {"listener.name.mtls.ssl.keystore.location": str(issued.keystore)}
            if truststore is not None:
                props["listener.name.mtls.ssl.truststore.location"] = str(truststore)
            k.alter_broker_config(props)  # a JVM starting on this small machine: seconds, before the broker changes
            steps[what] = time.monotonic()
            wait_for(lambda: served_certificate(listener) == der(issued), 60, f"the listener serving the {what}")
            copying_anew(int(time.time() * 1000), what)  # an epoch boundary past the change, copying on

        def client_files(issued: Issued, what: str, ca: bytes) -> None:
            nonlocal file_changes
            steps[what], since_ms = time.monotonic(), int(time.time() * 1000)
            secret.update({"ca.crt": ca, "tls.crt": issued.cert.read_bytes(), "tls.key": issued.key.read_bytes()})
            file_changes += 1
            copying_anew(since_ms, what, file_changes)

        # 1. a new key from the same CA: the broker's, then the job's
        broker_keystore(ca1.issue("broker-tlsrot-2", "localhost", SANS), "broker certificate, same CA")
        client_files(_client(ca1, 2), "client certificate, same CA", ca1.cert.read_bytes())
        # 2. CA rollover: both sides trust both CAs first, then the broker and the job move to CA 2's certificates
        bundle = ca1.cert.read_bytes() + ca2.cert.read_bytes()
        client_files(_client(ca1, 2), "job's trust bundle: CA 1 + CA 2", bundle)
        (tmp_path / "truststore.pem").write_bytes(bundle)
        broker_keystore(ca2.issue("broker-tlsrot-3", "localhost", SANS), "broker certificate of CA 2",
                        truststore=tmp_path / "truststore.pem")
        client_files(_client(ca2, 3), "client certificate of CA 2", bundle)
        # 3. the old certificates' principals lose their ACLs: a client still on one would be refused now
        steps["old principals' ACLs deleted"] = time.monotonic()
        for gen in (1, 2):
                k.disallow(f"User:CN=mirror-gen{gen}", timeout=120)  # a busy machine: the controller lags
        watch(10)

    sent = producer.stop()
    wait_committed(k.bootstrap, remote, sent * PARTS, alive, 180, "catch-up")
    time.sleep(5)  # a duplicate would show up after the count was reached
    log = jp.log()
    assert alive(), log[-4000:]
    print("what the job said of the rotations:\n" + "\n".join(
        ln for ln in log.splitlines() if " sparkmirror." in ln and any(
            w in ln for w in ("credentials", "reachable", "refuses", "failed", "afresh"))))
    check_numbered(k.bootstrap, remote, PARTS, sent)  # every sequence once per partition, in order
    began = min(steps.values())
    moved = {what: progress.moved_after(t) for what, t in steps.items()}
    figure(f"certificate_rotation_{copy_path}",
           f"{sent * PARTS} records, 0 missing, 0 duplicated, the job never ended; longest stall from the first "
           f"rotation on {progress.longest_still(began):.1f} s (before any: {baseline:.1f} s); copying again after "
           f"each step: "
           + "; ".join(f"{w}: {'-' if m is None else f'{m:.1f} s'}" for w, m in moved.items()))
    assert all(m is not None for m in moved.values()), moved
    # the driver's clients were made again at each of the 3 changes of the job's files (5 s checks, 15 s apart);
    # the lanes' are made afresh at their next epoch or start, in whichever worker: the deleted ACLs prove it
    for holder in ("the services' clients", "the topic sync's clients"):
        assert log.count(f"changed: making {holder} again") == 3, holder
    assert jp.stop() == 0, jp.log()[-3000:]


@pytest.fixture(params=[RECORDS_IN_CAMPAIGN, "batches"])
def copy_path(request: pytest.FixtureRequest) -> str:
    return request.param
