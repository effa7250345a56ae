"""Credentials rotated while the mirror runs (credentials.py): a SCRAM user's password changed on the broker and
in the job's password file, in both orders and apart as a kubelet's Secret sync puts them, is picked up without
a restart and nothing is lost or copied twice.

The target is a cluster of its own with a SASL_SSL (SCRAM-SHA-512) listener whose sessions re-authenticate every
10 s (`connections.max.reauth.ms`, KIP-368): a client on the old password is refused within 10 s of the broker's
change. A producer writes numbered records throughout; afterwards a read_committed consumer on the target must
find every sequence number exactly once per partition, in order, and the job must still be running; the driver's
own clients must have followed too (heartbeats written after the rotations, a topic created after them mirrored).
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.certs import CertificateAuthority
from sparkmirror_dev.kafka import KafkaCluster, Security
from sparkmirror_dev.testing import NumberedProducer, check_numbered, unique_name

from sparkmirror.copying import LaneCopy, run_epoch
from sparkmirror.lanes import plan_lanes
from sparkmirror.mm2formats import Heartbeat
from sparkmirror.progress import ensure_progress_topic

from .committed import Progress, wait_committed
from .conftest import close_kept_lanes, numbered_sequences, produce_numbered, read_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(3.7)]

PARTS = 3
USER = "mirror"
FIRST_PASSWORD = "rotate-pw-1"
FILE_LATE_S = 45.0  # the broker's change to the file's: a kubelet's Secret sync takes up to a minute or two
BROKER_LATE_S = 15.0  # the file's change to the broker's


@pytest.fixture(scope="module")
def reauth_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A cluster whose SCRAM sessions re-authenticate every 10 s; PLAINTEXT stays the tests' admin door."""
    root = tmp_path_factory.mktemp("rotate")
    ca = CertificateAuthority(root / "certs")
    cluster = KafkaCluster("rot", root / "rot", extra={"connections.max.reauth.ms": "10000"},
                           security=Security(ca, listeners=("SASL_SSL",),
                                             scram_users={USER: FIRST_PASSWORD, "lane": "lane-pw"}))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _set_password_on_broker(cluster: KafkaCluster, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for fut in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(USER, info,
                                                                               password.encode())]).values():
        fut.result(30)


def _write_secret_file(path: Path, password: str) -> None:
    """As the kubelet does: the new contents appear whole (a rename), never half written."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(password)
    os.replace(tmp, path)


def _target_entry(cluster: KafkaCluster, d: Path, user: str, password: str) -> tuple[dict, Path]:
    """The cluster entry of the SASL_SSL listener, its CA and password as files in `d` (mounted Secret keys)."""
    pw_file, ca_file = d / f"{user}.password", d / "ca.crt"
    pw_file.write_text(password)
    ca_file.write_bytes(cluster.security.ca.cert.read_bytes())
    return {"alias": "r", "bootstrapServers": cluster.bootstrap_of("SASL_SSL"), "tls": {"caFiles": [str(ca_file)]},
            "authentication": {"type": "scram-sha-512", "username": user, "password": {"file": str(pw_file)}}}, \
        pw_file


def test_kept_lane_clients_are_made_again_when_the_credentials_change(kafka_a, reauth_kafka, topic, tmp_path,
                                                                        caplog) -> None:
    """A lane's clients kept between epochs (copying/sessions.py) are resumed while the Secret stays; replaced
    (here: the same password, new file contents), the next epoch starts afresh, fencing the kept producer, and
    its new clients are kept in turn. Every record once."""
    src = topic(kafka_a, 2)
    dst = topic(reauth_kafka, 2, name=f"a.{src}")
    entry, pw_file = _target_entry(reauth_kafka, tmp_path, "lane", "lane-pw")
    cfg = FlowGroupConfig.model_validate({
        "name": unique_name("rotate-lane"), "lanes": 1, "commitIntervalMs": 100,
        "progressTopic": unique_name("progress"),
        "clusters": [{"alias": "a", "bootstrapServers": kafka_a.bootstrap}, entry],
        "mirrors": [{"name": "a-to-r", "source": "a", "target": "r", "topics": src}]})
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("r").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, 2)])[0].partitions)

    def run(epoch: int, prev: int) -> LaneCopy:
        c = LaneCopy(cfg, mirror, 0, parts, 2.0, epoch=epoch, prev_epoch=prev)
        run_epoch(c)
        return c

    caplog.set_level(logging.INFO, logger="sparkmirror.copying.sessions")
    try:
        runs = []
        for i, (epoch, prev) in enumerate(((10, 0), (20, 10), (30, 20), (40, 30))):
            produce_numbered(kafka_a.bootstrap, src, 2, i * 200, 200)
            if epoch == 30:
                _write_secret_file(pw_file, "lane-pw\n")  # the Secret replaced: new contents, the same password
            caplog.clear()
            runs.append(run(epoch, prev))
            if epoch == 30:
                assert "the cluster credentials changed since they were made" in caplog.text, caplog.text
    finally:
        close_kept_lanes()
    assert [r.reused for r in runs] == [False, True, False, True]
    assert numbered_sequences(reauth_kafka.bootstrap, dst) == {p: list(range(800)) for p in range(2)}


def test_password_rotated_while_mirroring(kafka_a, reauth_kafka, topic, job, tmp_path, figure) -> None:
    target = reauth_kafka
    src = topic(kafka_a, PARTS)
    remote = f"a.{src}"
    entry, pw_file = _target_entry(target, tmp_path, USER, FIRST_PASSWORD)
    cfg = FlowGroupConfig.model_validate({
        "name": unique_name("rotate"), "lanes": 2, "epochSeconds": 5, "commitIntervalMs": 100,
        "transactionTimeoutMs": 20000, "progressTopic": unique_name("progress"),
        "clusters": [{"alias": "a", "bootstrapServers": kafka_a.bootstrap}, entry],
        "mirrors": [{"name": "a-to-r", "source": "a", "target": "r", "topics": f"{src}|{src}-later.*",
                     "emitCheckpoints": False}]})
    producer = NumberedProducer(kafka_a.bootstrap, src, rate=100.0, partitions=PARTS)
    producer.start()
    jp = job(cfg)
    alive = lambda: jp.proc.poll() is None  # noqa: E731
    wait_committed(target.bootstrap, remote, 1, alive, 300, "copying")
    assert alive(), jp.log()[-3000:]
    progress = Progress(target.bootstrap, remote)
    progress.sample_for(10, alive)

    # 1. the broker first, the file FILE_LATE_S later (a Secret the cluster's operator changed, mounted late)
    t_broker1 = time.monotonic()
    _set_password_on_broker(target, "rotate-pw-2")
    progress.sample_for(FILE_LATE_S, alive)
    t_file1 = time.monotonic()
    _write_secret_file(pw_file, "rotate-pw-2")
    progress.sample_until_moved(t_file1, 45, alive)

    # 2. the file first, the broker BROKER_LATE_S later
    t_file2 = time.monotonic()
    _write_secret_file(pw_file, "rotate-pw-3")
    progress.sample_for(BROKER_LATE_S, alive)
    t_broker2, rotated = time.monotonic(), time.time()
    _set_password_on_broker(target, "rotate-pw-3")
    progress.sample_until_moved(t_broker2, 30, alive)

    # the driver's own clients follow too: heartbeats on the target and a topic new on the source, mirrored
    later = topic(kafka_a, 1, name=f"{src}-later")
    produce_numbered(kafka_a.bootstrap, later, 1, 0, 100)
    wait_for(lambda: _newest_heartbeat(target.bootstrap) > rotated * 1000 or not alive(), 120,
             "a heartbeat written after the last rotation")
    wait_committed(target.bootstrap, f"a.{later}", 100, alive, 180, "a topic created after the rotations mirrored",
                   partitions=1)
    sent = producer.stop()
    wait_committed(target.bootstrap, remote, sent * PARTS, alive, 180, "catch-up")
    time.sleep(5)  # a duplicate would show up after the count was reached
    log = jp.log()
    print("what the job said of the rotations:\n" + "\n".join(
        ln for ln in log.splitlines() if " sparkmirror." in ln and any(
            w in ln for w in ("credentials", "reachable", "refuses", "failed", "afresh"))))
    assert alive(), log[-4000:]
    check_numbered(target.bootstrap, remote, PARTS, sent)  # every sequence once per partition, in order
    check_numbered(target.bootstrap, f"a.{later}", 1, 100)
    after1, after2 = progress.moved_after(t_file1), progress.moved_after(t_broker2)
    still1, still2 = progress.longest_still(t_broker1), progress.longest_still(t_file2)
    def secs(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    figure("password_rotation", f"{sent * PARTS} records, 0 missing, 0 duplicated, the job never ended; broker "
           f"then file {FILE_LATE_S:.0f} s later: copying again {secs(after1)} s after the file changed (longest "
           f"stall from the broker's change {still1:.0f} s); file then broker {BROKER_LATE_S:.0f} s later: copying "
           f"{secs(after2)} s after the broker's change (longest stall from the file's change {still2:.0f} s)")
    assert after1 is not None and after2 is not None
    assert jp.stop() == 0, jp.log()[-3000:]


def _newest_heartbeat(bootstrap: str) -> int:
    try:
        return max((Heartbeat.decode(r.key, r.value).timestamp for r in read_topic(bootstrap, "heartbeats", 20)[0]),
                   default=0)
    except Exception:  # noqa: BLE001 - not there yet
        return 0
