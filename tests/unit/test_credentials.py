"""Credentials fingerprints (credentials.py): every file and variable a cluster's client config reads counts, the
secret itself never shows; a holder's watch says once when they changed; a refusal stands only after the grace."""
from __future__ import annotations

from pathlib import Path

import pytest

from sparkmirror.credentials import (GRACE_ENV, ROTATION_GRACE_S, CredentialWatch, RefusalGrace, conf_files_digest,
                                     fingerprint, grace_seconds, references)
from sparkmirror.resource.flowgroup import Cluster


def _cluster(d: Path, **auth) -> Cluster:
    return Cluster.model_validate({"alias": "s", "bootstrapServers": "127.0.0.1:1",
                                   "tls": {"caFiles": [str(d / "ca" / "*.crt"), str(d / "extra.crt")]},
                                   "authentication": auth})


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "ca").mkdir()
    for name, text in (("ca/a.crt", "A"), ("extra.crt", "X"), ("tls.crt", "C"), ("tls.key", "K"), ("pw", "p1")):
        (tmp_path / name).write_text(text)
    return tmp_path


def test_every_file_and_variable_the_config_reads_counts(files: Path, monkeypatch) -> None:
    mtls = _cluster(files, type="tls", certificateFile=str(files / "tls.crt"), keyFile=str(files / "tls.key"))
    scram_file = _cluster(files, type="scram-sha-512", username="u", password={"file": str(files / "pw")})
    monkeypatch.setenv("ROTATE_PW", "e1")
    scram_env = _cluster(files, type="scram-sha-512", username="u", password={"env": "ROTATE_PW"})
    assert references(mtls) == [("glob", str(files / "ca" / "*.crt")), ("file", str(files / "extra.crt")),
                                ("file", str(files / "tls.crt")), ("file", str(files / "tls.key"))]
    assert references(scram_env)[-1] == ("env", "ROTATE_PW")
    before = {"mtls": fingerprint(mtls), "file": fingerprint(scram_file), "env": fingerprint(scram_env)}
    assert "p1" not in before["file"] and len(set(before.values())) == 3
    changes = [
        (lambda: (files / "tls.key").write_text("K2"), {"mtls"}),
        (lambda: (files / "pw").write_text("p2"), {"file"}),
        (lambda: monkeypatch.setenv("ROTATE_PW", "e2"), {"env"}),
        (lambda: (files / "ca" / "b.crt").write_text("B"), {"mtls", "file", "env"}),  # a new file the glob matches
        (lambda: (files / "ca" / "a.crt").write_text("A2"), {"mtls", "file", "env"}),
        (lambda: (files / "extra.crt").unlink(), {"mtls", "file", "env"}),
    ]
    clusters = {"mtls": mtls, "file": scram_file, "env": scram_env}
    for change, moved in changes:
        change()
        now = {k: fingerprint(c) for k, c in clusters.items()}
        assert {k for k in now if now[k] != before[k]} == moved, moved
        before = now
    assert fingerprint(scram_file) == fingerprint(scram_file)  # stable while nothing changes


def test_a_watch_says_once_per_change_and_no_more_often_than_asked(files: Path) -> None:
    now = [0.0]
    c = _cluster(files, type="scram-sha-512", username="u", password={"file": str(files / "pw")})
    w = CredentialWatch([c], every=5.0, clock=lambda: now[0])
    (files / "pw").write_text("p2")
    now[0] = 4.9
    assert not w.changed()  # not due yet
    now[0] = 5.0
    assert w.changed() and w.changed_at == 5.0
    now[0] = 11.0
    assert not w.changed()  # said once
    (files / "pw").write_text("p1")  # back to the first: a change too
    now[0] = 17.0
    assert w.changed()


def test_a_refusal_stands_only_after_the_grace_with_the_same_credentials(files: Path) -> None:
    now = [100.0]
    c = _cluster(files, type="scram-sha-512", username="u", password={"file": str(files / "pw")})
    g = RefusalGrace(grace=60.0, clock=lambda: now[0])
    assert g.refused(c) == 60.0
    now[0] = 150.0
    assert g.refused(c) == pytest.approx(10.0)
    (files / "pw").write_text("p2")  # the new password reached the file: a new grace
    now[0] = 170.0
    assert g.refused(c) == 60.0
    now[0] = 230.0
    assert g.refused(c) is None  # the same credentials refused for the whole grace: the refusal stands
    g.accepted("s")
    assert g.refused(c) == 60.0  # accepted in between: a later refusal gets its own grace


def test_grace_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(GRACE_ENV, raising=False)
    assert grace_seconds() == ROTATION_GRACE_S
    monkeypatch.setenv(GRACE_ENV, "7.5")
    assert grace_seconds() == 7.5
    for bad in ("x", "-1"):
        monkeypatch.setenv(GRACE_ENV, bad)
        assert grace_seconds() == ROTATION_GRACE_S


def test_files_a_client_config_names_by_location(files: Path) -> None:
    conf = {"bootstrap.servers": "b", "ssl.ca.location": str(files / "extra.crt"),
            "ssl.certificate.location": str(files / "tls.crt")}
    d = conf_files_digest(conf)
    (files / "tls.crt").write_text("C2")  # replaced in place: the same config, other contents
    assert conf_files_digest(conf) != d
    assert conf_files_digest({"bootstrap.servers": "b"}) == conf_files_digest({"bootstrap.servers": "c"})


def test_kept_clients_follow_replaced_secrets(tmp_path: Path) -> None:
    """The kept admin clients of a worker (copying/admins.py): the same one while nothing changes; another, in
    place of the first, for a new password or a certificate file replaced in place (the config unchanged)."""
    from sparkmirror.copying.admins import kept_admin
    from sparkmirror_dev.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert.read_bytes())
    conf = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u", "sasl.password": "p1", "ssl.ca.location": str(ca_file)}
    first = kept_admin(conf)
    assert kept_admin(dict(conf)) is first
    second = kept_admin({**conf, "sasl.password": "p2"})
    assert second is not first and kept_admin({**conf, "sasl.password": "p2"}) is second
    ca_file.write_bytes(CertificateAuthority(tmp_path / "ca2", name="rotated").cert.read_bytes())
    third = kept_admin({**conf, "sasl.password": "p2"})
    assert third is not second and kept_admin({**conf, "sasl.password": "p2"}) is third
