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


def test_secrets_resolved_in_memory_through_a_reader(tmp_path: Path) -> None:
    """The operator's clients: every reference goes through the reader and lands as text; no file is read."""
    seen = []

    def resolve(ref) -> str:
        seen.append(ref)
        return f"<{ref.file or ref.env}>"

    tls = Cluster(alias="x", bootstrapServers="127.0.0.1:1", tls={"caFiles": ["secret:/ca/a.crt", "secret:/ca/b.crt"]},
                  authentication={"type": "tls", "certificateFile": "secret:/u/user.crt", "keyFile": "secret:/u/user.key"})
    conf = tls.client_config(resolve)
    assert conf["ssl.ca.pem"] == "<secret:/ca/a.crt>\n<secret:/ca/b.crt>" and conf["security.protocol"] == "SSL"
    assert (conf["ssl.certificate.pem"], conf["ssl.key.pem"]) == ("<secret:/u/user.crt>", "<secret:/u/user.key>")
    assert not any(k.endswith(".location") for k in conf)
    sasl = Cluster(alias="x", bootstrapServers="127.0.0.1:1",
                   authentication={"type": "scram-sha-256", "username": "u", "password": {"env": "PW_VAR"}})
    conf = sasl.client_config(resolve)
    assert conf["sasl.password"] == "<PW_VAR>" and conf["security.protocol"] == "SASL_PLAINTEXT"
    assert [r.file or r.env for r in seen] == ["secret:/ca/a.crt", "secret:/ca/b.crt", "secret:/u/user.crt",
                                              "secret:/u/user.key", "PW_VAR"]


@pytest.mark.parametrize(("field", "eos", "alo", "given"), [("commitIntervalMs", 100, 1000, 250),
                                                           ("lingerMs", 100, 20, 0)])
def test_delivery_defaults(field: str, eos: int, alo: int, given: int) -> None:
    """commitIntervalMs: exactly-once records are visible at the commit (100 ms), at-least-once ones once
    acknowledged, where the interval only bounds what a crash copies again (1,000 ms). lingerMs: at-least-once
    lanes linger 20 ms, for fewer produce requests on the target; exactly-once ones their commit interval
    (`linger_ms`). A value given is kept; a resource that gives none gets its delivery's through the plan."""
    import yaml

    from sparkmirror.resource.plan import plan

    base = {"name": "g", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                      {"alias": "b", "bootstrapServers": "127.0.0.1:2"}],
            "mirrors": [{"name": "a-to-b", "source": "a", "target": "b"}]}
    alo_base = {**base, "delivery": "at-least-once"}
    assert getattr(FlowGroupConfig.model_validate(base), field) == eos
    assert getattr(FlowGroupConfig.model_validate(alo_base), field) == alo
    assert getattr(FlowGroupConfig.model_validate({**alo_base, field: None}), field) == alo
    assert getattr(FlowGroupConfig.model_validate({**alo_base, field: given}), field) == given
    with pytest.raises(ValidationError, match=field):
        FlowGroupConfig.model_validate({**base, field: -1})
    with pytest.raises(ValidationError, match="delivery"):
        FlowGroupConfig.model_validate({**base, "delivery": "twice"})
    resource = yaml.safe_load((Path(__file__).parents[1] / "operator" / "data" / "render" /
                               "strimzi-tls.input.yaml").read_text())
    for delivery, ms in (("at-least-once", alo), ("exactly-once", eos)):
        resource["spec"]["delivery"] = delivery
        assert {getattr(g, field) for g in plan(resource).groups} == {ms}
    resource["spec"].setdefault("spark", {})[field] = 40
    assert {getattr(g, field) for g in plan(resource).groups} == {40}


def test_exactly_once_lanes_linger_their_commit_interval() -> None:
    """Exactly-once records become visible at the commit, whose flush sends what lingers: with no lingerMs a lane
    lingers its commit interval (capped at lingerMs' own limit, 60 s), given at the flow group or the resource."""
    import yaml

    from sparkmirror.resource.plan import plan

    base = {"name": "g", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                      {"alias": "b", "bootstrapServers": "127.0.0.1:2"}],
            "mirrors": [{"name": "a-to-b", "source": "a", "target": "b"}]}
    for conf, want in (({"commitIntervalMs": 250}, 250), ({"commitIntervalMs": 120000}, 60000),
                       ({"commitIntervalMs": 250, "lingerMs": 7}, 7),
                       ({"commitIntervalMs": 250, "delivery": "at-least-once"}, 20)):
        assert FlowGroupConfig.model_validate({**base, **conf}).lingerMs == want, conf
    resource = yaml.safe_load((Path(__file__).parents[1] / "operator" / "data" / "render" /
                               "strimzi-tls.input.yaml").read_text())
    resource["spec"]["delivery"] = "exactly-once"
    resource["spec"].setdefault("spark", {})["commitIntervalMs"] = 300
    assert {(g.commitIntervalMs, g.lingerMs) for g in plan(resource).groups} == {(300, 300)}


def test_lane_producers_linger_as_the_flow_group_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lanes' producers are made with the flow group's lingerMs, transactional or not."""
    from sparkmirror.copying import start

    made: list[dict] = []
    monkeypatch.setattr(start, "Producer", lambda conf: made.append(conf) or conf)
    base = {"name": "g", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                      {"alias": "b", "bootstrapServers": "127.0.0.1:2"}],
            "mirrors": [{"name": "a-to-b", "source": "a", "target": "b"}]}
    for conf, want in (({"delivery": "at-least-once"}, 20), ({}, 100), ({"lingerMs": 0}, 0)):
        cfg = FlowGroupConfig.model_validate({**base, **conf})
        for transactional in (False, True):
            start.new_producer(cfg, {"bootstrap.servers": "127.0.0.1:2"}, "tid", {}, transactional)
            assert made[-1]["linger.ms"] == want
