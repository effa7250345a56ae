"""Bad input below the commands: secrets that are not text, provenance headers that are not UTF-8, passwords
over plaintext, bind addresses. Each is named where it is (file, variable, field, record), never shown."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sparkmirror.replication import PROVENANCE_HEADER, RecordStamper, provenance, undecodable_provenance
from sparkmirror.resource.documents import InputError, mapping_documents_of
from sparkmirror.resource.flowgroup import Cluster, FlowGroupConfig, SecretUnreadable, SecretValue
from sparkmirror.resource.plan import plan

SECRET = b"hunter\xff\xfe2-s3cr3t"


def _no_leak(text: str) -> None:
    for leak in ("hunter", "s3cr3t", "\\xff", "0xff", "\udcff"):
        assert leak not in text, text


def test_a_secret_file_that_is_not_text_is_named_not_shown(tmp_path: Path) -> None:
    pw = tmp_path / "password"
    pw.write_bytes(SECRET)
    with pytest.raises(SecretUnreadable) as e:
        SecretValue(file=str(pw)).read()
    assert str(e.value) == f"secret file {pw} is not UTF-8 text (a password, certificate or key must be)"
    _no_leak(str(e.value))
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no UnicodeDecodeError text behind it


def test_an_environment_password_that_is_not_text_is_named_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    os.environb[b"SM_TEST_PW"] = SECRET
    try:
        with pytest.raises(SecretUnreadable) as e:
            SecretValue(env="SM_TEST_PW").read()
    finally:
        del os.environb[b"SM_TEST_PW"]
    assert str(e.value) == "environment variable SM_TEST_PW is not UTF-8 text (a password must be)"
    _no_leak(str(e.value))


def test_several_ca_files_one_not_text(tmp_path: Path) -> None:
    good, bad = tmp_path / "a.crt", tmp_path / "b.crt"
    good.write_text("-----BEGIN CERTIFICATE-----\n")
    bad.write_bytes(SECRET)
    c = Cluster(alias="x", bootstrapServers="h:1", tls={"caFiles": [str(good), str(bad)]})
    with pytest.raises(SecretUnreadable, match=f"CA file {bad} is not UTF-8 text"):
        c.client_config()


def test_provenance_header_not_utf8_is_copied_with_its_bytes_and_named(caplog: pytest.LogCaptureFixture) -> None:
    """A provenance header another producer filled with arbitrary bytes neither stops the copy nor loses the
    bytes: the record is copied (it did not come from the target), the header keeps them with our hop after
    them, and one warning names the record (topic, partition, offset)."""
    headers = [("other", b"\x00\xff"), (PROVENANCE_HEADER, b"\xff\xfe,east")]
    assert undecodable_provenance(headers) and not undecodable_provenance([(PROVENANCE_HEADER, b"east")])
    assert len(provenance(headers)) == 2
    stamper = RecordStamper(True, "west", "central")
    with caplog.at_level(logging.WARNING, logger="sparkmirror.replication"):
        assert stamper.should_copy(headers, ("orders", 3, 41))
        assert stamper.should_copy(headers, ("orders", 3, 42))  # the same partition: logged once
    assert stamper.headers_for(headers) == [("other", b"\x00\xff"), (PROVENANCE_HEADER, b"\xff\xfe,east,west")]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [f"mirror west->central: orders[3] offset 41: header {PROVENANCE_HEADER} is not UTF-8; "
                        "copied with its bytes kept (further such records of this partition are not logged)"]
    # a hop that is the target still stops a loop, whatever bytes sit beside it
    assert not stamper.should_copy([(PROVENANCE_HEADER, b"\xff,central")], ("orders", 3, 43))


def _resource(target_auth: dict, tls: bool = False) -> dict:
    target = {"alias": "b", "bootstrapServers": "h:9093", "authentication": target_auth}
    if tls:
        target["tls"] = {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]}
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
            "spec": {"target": target, "mirrors": [{"source": {"alias": "a", "bootstrapServers": "h:9092"}}]}}


SCRAM = {"type": "scram-sha-512", "username": "u", "passwordSecret": {"secretName": "pw", "password": "password"}}


def test_a_password_never_travels_in_plaintext_unless_the_resource_says_so() -> None:
    refused = plan(_resource(SCRAM))
    assert [(e.field, e.message) for e in refused.errors] == [
        ("spec.target.authentication", "a password must not travel over a plaintext listener: set tls, or "
                                       "authentication.allowPlaintextCredentials: true to accept it")]
    allowed = plan(_resource({**SCRAM, "allowPlaintextCredentials": True}))
    assert not allowed.errors
    conf = allowed.groups[0].cluster("b").client_config(lambda ref: "pw")
    assert conf["security.protocol"] == "SASL_PLAINTEXT"
    over_tls = plan(_resource(SCRAM, tls=True))
    assert not over_tls.errors
    assert over_tls.groups[0].cluster("b").client_config(lambda ref: "pem")["security.protocol"] == "SASL_SSL"
    # a client certificate is no password: mTLS needs no permission
    mtls = {"type": "tls", "certificateAndKey": {"secretName": "u", "certificate": "c", "key": "k"}}
    assert not plan(_resource(mtls)).errors


def test_metrics_bind_must_be_an_address() -> None:
    base = {"name": "g",
            "clusters": [{"alias": "a", "bootstrapServers": "h:1"}, {"alias": "b", "bootstrapServers": "h:2"}],
            "mirrors": [{"name": "a", "source": "a", "target": "b"}]}
    assert FlowGroupConfig.model_validate({**base, "metricsBind": "127.0.0.1"}).metricsBind == "127.0.0.1"
    assert FlowGroupConfig.model_validate({**base, "metricsBind": "::"}).metricsBind == "::"
    with pytest.raises(ValueError, match="expected an IP address, got 'everywhere'"):
        FlowGroupConfig.model_validate({**base, "metricsBind": "everywhere"})


@pytest.mark.parametrize(("text", "message"), [
    ("a: [\n", "doc: not valid YAML: expected the node content, but found '<stream end>' (line 2, column 1)"),
    ("a: 1\n---\n- x\n", "doc (document 2): expected a thing (a mapping), got a list"),
    ("---\n---\n", "doc: empty: expected a thing"),
    ("true\n", "doc: expected a thing (a mapping), got a boolean"),
    ("a: 1\nb: \"\x07\"\n", "doc: not valid YAML: character #x0007 is not allowed (line 2, column 5)"),
])
def test_yaml_problems_are_one_line(text: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        mapping_documents_of(text, "doc", "a thing")
    assert str(e.value) == message
