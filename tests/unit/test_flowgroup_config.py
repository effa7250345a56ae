"""The flow-group config turns references into librdkafka settings at run time, never holding secrets."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkmirror.resource.flowgroup import Cluster, FlowGroupConfig


def _pem(tmp_path: Path, name: str) -> Path:
    f = tmp_path / name
    f.write_text(f"-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----\n")
    return f


def test_one_ca_file_is_a_location_several_become_one_pem(tmp_path: Path) -> None:
    a, b = _pem(tmp_path, "a.crt"), _pem(tmp_path, "b.crt")
    one = Cluster(alias="x", bootstrapServers="127.0.0.1:1", tls={"caFiles": [str(a)]}).client_config()
    assert one["ssl.ca.location"] == str(a) and one["security.protocol"] == "SSL"
    many = Cluster(alias="x", bootstrapServers="127.0.0.1:1", tls={"caFiles": [str(tmp_path / "*.crt")]})
    pem = many.client_config()["ssl.ca.pem"]
    assert "a.crt" in pem and "b.crt" in pem and "ssl.ca.location" not in many.client_config()
    with pytest.raises(FileNotFoundError, match="tls.caFiles"):
        Cluster(alias="x", bootstrapServers="127.0.0.1:1", tls={"caFiles": [str(tmp_path / "*.pem")]}).client_config()


def test_password_is_read_from_the_referenced_file_only_at_run_time(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    c = Cluster(alias="x", bootstrapServers="127.0.0.1:1",
                authentication={"type": "scram-sha-512", "username": "u", "password": {"file": str(secret)}})
    assert "s3cret" not in c.model_dump_json()
    conf = c.client_config()
    assert conf["sasl.password"] == "s3cret" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["security.protocol"] == "SASL_PLAINTEXT"


def test_references_are_checked_and_errors_name_the_field() -> None:
    base = {"name": "g", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                      {"alias": "b", "bootstrapServers": "127.0.0.1:2"}]}
    with pytest.raises(ValidationError, match=r"mirrors\[0\].target: unknown cluster alias 'c'"):
        FlowGroupConfig.model_validate({**base, "mirrors": [{"name": "m", "source": "a", "target": "c"}]})
    with pytest.raises(ValidationError, match="invalid regex"):
        FlowGroupConfig.model_validate({**base, "mirrors": [{"name": "m", "source": "a", "target": "b",
                                                             "topics": "(["}]})
    ok = FlowGroupConfig.model_validate({**base, "mirrors": [{"name": "m", "source": "a", "target": "b"}]})
    assert FlowGroupConfig.from_yaml(ok.to_yaml()) == ok


def test_secrets_read_in_memory_become_pem_text_and_passwords() -> None:
    """The operator's own clients: the same config, with secrets read through its readers (never from disk)."""
    held = {"/s/ca.crt": "CA", "/s/user.crt": "CERT", "/s/user.key": "KEY"}
    mtls = Cluster(alias="x", bootstrapServers="127.0.0.1:1", tls={"caFiles": ["/s/ca.crt"]},
                   authentication={"type": "tls", "certificateFile": "/s/user.crt", "keyFile": "/s/user.key"})
    conf = mtls.client_config(files=held.__getitem__, env={}.__getitem__)
    assert conf == {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL", "ssl.ca.pem": "CA",
                    "ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY"}
    assert mtls.client_config()["ssl.certificate.location"] == "/s/user.crt"  # the job: mounted files
    scram = Cluster(alias="x", bootstrapServers="127.0.0.1:1",
                    authentication={"type": "scram-sha-512", "username": "u", "password": {"env": "PW"}})
    assert scram.client_config(files=held.__getitem__, env={"PW": "secret"}.__getitem__)["sasl.password"] == "secret"
    with pytest.raises(KeyError):
        scram.client_config(files=held.__getitem__, env={}.__getitem__)
