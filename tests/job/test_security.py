"""The mirror on secured brokers: the job, its checkpoint and heartbeat writers and the operator's lag reader
connect through SASL/SCRAM-SHA-512 over TLS, mTLS and TLS alone (a real cluster from the test ground with
KRaft's StandardAuthorizer), and no credential ever shows in a log, an exception or a lag status.

Every password of the secured cluster holds MARKER; each test collects what a user could see (the job's
output, Python logging, exception and error text) and looks for it, and for the raw bytes of a non-UTF-8 one.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror.credentials import GRACE_ENV
from sparkmirror.heartbeats import HeartbeatEmitter
from sparkmirror.mm2formats import Checkpoint, Heartbeat
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.names import EXIT_UNAUTHORIZED
from sparkmirror_dev.certs import CertificateAuthority
from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import check_numbered, commit_group, create_topic, numbered_counts
from sparkmirror_operator.lag import group_lag

from .conftest import produce_numbered, read_topic, unique_name, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(3.5)]
MARKER = "LEAKMARK"  # in every password of `secured_kafka` (tests/conftest.py SECURED_USERS)
SECRET = "sec"       # the Secret the operator's view of a config names: secret:/sec/<file name>


class Secured:
    """Cluster entries of a flow group for the secured cluster, one per listener, with their secrets as files
    in `dir` (mounted Secret keys, what the job reads) or as Secret references (what the operator resolves)."""

    def __init__(self, cluster: KafkaCluster, dir: Path) -> None:
        self.cluster, self.dir = cluster, dir
        self.passwords = 0
        ca = cluster.security.ca
        for name, src in (("ca.crt", ca.cert), ("tls.crt", ca.home / "client.crt"), ("tls.key", ca.home / "client.key")):
            (dir / name).write_bytes(src.read_bytes())

    def file(self, name: str, data: bytes) -> str:
        (self.dir / name).write_bytes(data)
        return str(self.dir / name)

    def entry(self, alias: str, listener: str, user: str = "mirror", password: bytes | None = None,
              ca: str = "ca.crt") -> dict:
        doc = {"alias": alias, "bootstrapServers": self.cluster.bootstrap_of(listener)}
        if listener != "SASL_PLAINTEXT":
            doc["tls"] = {"caFiles": [str(self.dir / ca)]}
        if listener == "MTLS":
            doc["authentication"] = {"type": "tls", "certificateFile": str(self.dir / "tls.crt"),
                                     "keyFile": str(self.dir / "tls.key")}
        elif listener.startswith("SASL"):
            pw = password if password is not None else self.cluster.security.scram_users[user].encode()
            self.passwords += 1
            doc["authentication"] = {"type": "scram-sha-512", "username": user,
                                     "password": {"file": self.file(f"{user}-{self.passwords}.password", pw)}}
        return doc

    def operator_view(self, cfg: FlowGroupConfig) -> tuple[FlowGroupConfig, Callable[[str, str], str]]:
        """The same flow group as the operator holds it: files are Secret references, read in memory."""
        text = cfg.to_yaml().replace(str(self.dir) + "/", f"secret:/{SECRET}/")

        def read(name: str, key: str) -> str:
            assert name == SECRET
            return (self.dir / key).read_bytes().decode()

        return FlowGroupConfig.from_yaml(text), read


@pytest.fixture
def secured(secured_kafka, tmp_path) -> Secured:
    d = tmp_path / "secrets"
    d.mkdir()
    return Secured(secured_kafka, d)


def config(name: str, clusters: list[dict], source: str, target: str, topics: str, **mirror) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": unique_name(name), "clusters": clusters, "lanes": 2, "epochSeconds": 3, "commitIntervalMs": 100,
        "progressTopic": unique_name("progress"),
        "mirrors": [{"name": f"{source}-to-{target}", "source": source, "target": target, "topics": topics,
                     **mirror}]})


def assert_no_leak(*texts: str, secret: bytes = MARKER.encode()) -> None:
    for text in texts:
        assert MARKER not in text
        assert secret.decode("utf-8", "surrogateescape") not in text
        assert secret.decode("latin-1") not in text
        assert repr(secret)[2:-1] not in text  # b'\xff...' shown escaped


def test_job_mirrors_plain_source_to_scram_tls_target(kafka_a, secured, topic, job, caplog, figure) -> None:
    """The job, its heartbeats and checkpoints write through SASL_SSL with SCRAM-SHA-512 and ACLs; the
    operator's lag reader reads the progress topic through the same listener."""
    s = secured.cluster
    src = topic(kafka_a, 3)
    produce_numbered(kafka_a.bootstrap, src, 3, 0, 500)
    group = unique_name("sec-group")
    commit_group(kafka_a.bootstrap, group, {(src, p): 200 for p in range(3)})
    cfg = config("scram", [{"alias": "a", "bootstrapServers": kafka_a.bootstrap}, secured.entry("s", "SASL_SSL")],
                 "a", "s", src, groups="sec-.*", emitCheckpointsIntervalSeconds=1)
    jp = job(cfg)
    dst = f"a.{src}"
    started = time.monotonic()
    wait_for(lambda: jp.proc.poll() is None and _has_topic(s, dst) and numbered_counts(s.bootstrap, dst, 3, 500)
             == (0, 0), 240, f"all 1,500 records on {dst}")
    copied = time.monotonic() - started
    check_numbered(s.bootstrap, dst, 3, 500)  # exactly: none missing, none twice
    wait_for(lambda: any(Checkpoint.decode(r.key, r.value).group == group
                         for r in read_topic(s.bootstrap, "a.checkpoints.internal", timeout=10)[0]), 60,
             "a checkpoint of the source group on the target")
    cps = [Checkpoint.decode(r.key, r.value) for r in read_topic(s.bootstrap, "a.checkpoints.internal")[0]]
    assert {(c.topic, c.partition, c.downstream_offset) for c in cps if c.group == group} == \
        {(dst, p, 200) for p in range(3)}
    beats = [Heartbeat.decode(r.key, r.value) for r in read_topic(s.bootstrap, "heartbeats")[0]]
    assert any((h.source_cluster_alias, h.target_cluster_alias) == ("a", "s") for h in beats)

    view, read = secured.operator_view(cfg)
    lag = group_lag(view, read, {}, timeout=10)
    assert (lag.error, lag.lag, lag.partitions) == (None, 0, 3)
    assert jp.stop() is not None
    figure("sasl_ssl_copy", f"SASL_SSL job: 1,500 records on the target {copied:.1f}s after start")
    assert_no_leak(jp.log(), caplog.text, repr(lag))


def test_job_mirrors_mtls_source_and_emitters_and_lag_through_tls(kafka_b, secured, job, caplog, figure) -> None:
    """mTLS (client certificate, ACLs on its principal) as the job's source; the heartbeat and checkpoint
    writers and the lag reader through TLS alone and SCRAM without TLS too."""
    s = secured.cluster
    src = unique_name("mtls")
    create_topic(s.bootstrap, src, 2)
    produce_numbered(s.bootstrap, src, 2, 0, 400)
    cfg = config("mtls", [secured.entry("s", "MTLS"), {"alias": "b", "bootstrapServers": kafka_b.bootstrap}],
                 "s", "b", src, emitCheckpoints=False)
    jp = job(cfg)
    dst = f"s.{src}"
    started = time.monotonic()
    wait_for(lambda: jp.proc.poll() is None and _has_topic(kafka_b, dst)
             and numbered_counts(kafka_b.bootstrap, dst, 2, 400) == (0, 0), 240, f"all 800 records on {dst}")
    copied = time.monotonic() - started
    check_numbered(kafka_b.bootstrap, dst, 2, 400)
    view, read = secured.operator_view(cfg)
    lag = group_lag(view, read, {}, timeout=10)  # source end offsets through mTLS
    assert (lag.error, lag.lag, lag.partitions) == (None, 0, 2)
    assert jp.stop() is not None
    figure("mtls_copy", f"MTLS job: 800 records on the target {copied:.1f}s after start")

    # the writers MM2 clients read, through each other listener of the secured cluster as their target
    for listener in ("SSL", "SASL_PLAINTEXT"):
        alias = f"x{listener.lower().replace('_', '')}"
        w = config("writers", [{"alias": alias, "bootstrapServers": kafka_b.bootstrap}, secured.entry("s", listener)],
                   alias, "s", src)
        hb = HeartbeatEmitter(w, w.mirrors[0])
        try:
            mark = hb.emit(now_ms=int(time.time() * 1000)).timestamp
        finally:
            hb.close()
        beats = [Heartbeat.decode(r.key, r.value) for r in read_topic(s.bootstrap, "heartbeats")[0]]
        assert Heartbeat(alias, "s", mark) in beats, listener
        ck = CheckpointEmitter(w, w.mirrors[0])
        try:
            assert ck.run_once() == {}  # no group to checkpoint, but connected and authorized on both sides
        finally:
            ck.close()
    assert_no_leak(jp.log(), caplog.text)


def test_refusals_name_the_cluster_never_the_secret(kafka_a, secured, topic, job, caplog, tmp_path,
                                                    figure) -> None:
    """A wrong password and an untrusted CA are clear errors naming the cluster (lag reader and job); a
    password that is not UTF-8 text is refused naming its file; the secret shows nowhere."""
    other = tmp_path / "other-ca"
    secured.file("other-ca.crt", CertificateAuthority(other, name="untrusted").cert.read_bytes())
    src = topic(kafka_a, 1)
    plain_a = {"alias": "a", "bootstrapServers": kafka_a.bootstrap}
    wrong = f"wrong-{MARKER}-pw".encode()
    cases = {
        "wrong password": (secured.entry("s", "SASL_SSL", password=wrong), "AuthenticationFailed"),
        "untrusted CA": (secured.entry("s", "SASL_SSL", ca="other-ca.crt"), "TlsFailed"),
    }
    for what, (entry, reason) in cases.items():
        cfg = config("refused", [plain_a, entry], "a", "s", src)
        view, read = secured.operator_view(cfg)
        lag = group_lag(view, read, {}, timeout=5)
        assert lag.reason == reason, (what, lag)
        assert "'s'" in lag.error and secured.cluster.bootstrap_of("SASL_SSL") in lag.error, lag.error
        assert_no_leak(lag.error, caplog.text)

    # the job itself: refused credentials end it (no endless retry) with a message naming the target
    binary = b"\xff\xfe" + MARKER.encode() + b"\x80"
    # a refusal stands once the same credentials were refused for longer than a rotation's grace (10 s here)
    grace = {GRACE_ENV: "10"}
    jobs = {"wrong password": job(config("refused-job", [plain_a, cases["wrong password"][0]], "a", "s", src),
                                  env=grace),
            "binary password": job(config("binary-job", [plain_a, secured.entry("s", "SASL_SSL", password=binary)],
                                          "a", "s", src), env=grace)}
    for what, jp in jobs.items():
        started = time.monotonic()
        wait_for(lambda: jp.proc.poll() is not None, 240, f"the job with a {what} to end")
        figure("refused_job_end", f"job with a {what}: ended after {time.monotonic() - started:.1f}s, "
               f"exit {jp.proc.returncode}")
        log = jp.log()
        assert jp.proc.returncode != 0, log[-3000:]
        assert_no_leak(log, secret=binary if what == "binary password" else wrong)
    assert "not UTF-8" in jobs["binary password"].log() and ".password" in jobs["binary password"].log()
    assert "'s'" in jobs["wrong password"].log(), jobs["wrong password"].log()[-3000:]
    assert "AuthenticationFailed" in jobs["wrong password"].log(), jobs["wrong password"].log()[-3000:]


def test_a_user_without_write_on_the_target_topic_stops_the_job(kafka_a, secured, topic, job, figure) -> None:
    """ACLs: `limited` may do everything but WRITE topics named a.denied-*: a permanent, clear error."""
    src = topic(kafka_a, 1, name=unique_name("denied"))
    produce_numbered(kafka_a.bootstrap, src, 1, 0, 10)
    cfg = config("acl", [{"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                         secured.entry("s", "SASL_SSL", user="limited")], "a", "s", src)
    jp = job(cfg)
    started = time.monotonic()
    try:
        wait_for(lambda: jp.proc.poll() is not None, 240, "the job refused WRITE to end")
    finally:
        log = jp.log()
        figure("acl_refusal_end", f"ACL refusal: job ended after {time.monotonic() - started:.1f}s, "
               f"exit {jp.proc.returncode}")
        print("its log's last lines:\n" + "\n".join(log.splitlines()[-25:]))
    assert jp.proc.returncode == EXIT_UNAUTHORIZED, log[-3000:]  # the status' AuthorizationFailed
    assert "TOPIC_AUTHORIZATION_FAILED" in log, log[-3000:]
    assert "target cluster 's' refuses the mirror: authorization refused (AuthorizationFailed)" in log, log[-3000:]
    assert f"a.{src}" in log, log[-3000:]
    assert_no_leak(log)


def _has_topic(cluster: KafkaCluster, name: str) -> bool:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    return name in md.topics and md.topics[name].error is None
