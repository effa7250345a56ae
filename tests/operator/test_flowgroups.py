"""flow_group_configs / plan: KafkaMirrorMaker2 resource in, flow-group configs (the job's contract) out."""
from __future__ import annotations

import glob
from pathlib import Path

import pytest
import yaml

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.plan import ResourceInvalid, env_name, flow_group_configs, plan

STRIMZI = Path("/work/shared/reference/strimzi/examples")
HERE = Path(__file__).parent / "data"


def resource(**spec_over) -> dict:
    spec = {
        "version": "1.0",
        "target": {"alias": "b", "bootstrapServers": "127.0.0.1:9093"},
        "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:9092"}, "topicsPattern": "orders.*"}],
    }
    spec.update(spec_over)
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "ns"}, "spec": spec}


def strimzi_v1() -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(STRIMZI / "v1" / "kafka-mirror-maker-2*.yaml")))


@pytest.mark.parametrize("path", strimzi_v1(), ids=lambda p: p.name)
def test_strimzi_v1_examples_convert(path: Path) -> None:
    r = yaml.safe_load(path.read_text())
    r["apiVersion"] = "sparkmirror.io/v1alpha1"
    p = plan(r)
    assert p.errors == []
    assert [g.name for g in p.groups] == ["cluster-a"]
    (g,) = p.groups
    assert [c.alias for c in g.clusters] == ["cluster-b", "cluster-a"]
    assert g.mirrors[0].source == "cluster-a" and g.mirrors[0].target == "cluster-b"
    assert g.mirrors[0].groups == ".*"
    assert "spec.target.groupId" in p.not_applicable
    assert "spec.replicas" in p.not_applicable
    assert "spec.mirrors[0].sourceConnector.tasksMax" in p.not_applicable
    assert p.unsupported == []
    # round trip through the job's own parser
    assert FlowGroupConfig.from_yaml(g.to_yaml()) == g


def test_mm2_keys_map_onto_the_job_config() -> None:
    r = resource(mirrors=[{
        "source": {"alias": "a", "bootstrapServers": "127.0.0.1:9092"},
        "sourceConnector": {"config": {
            "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
            "replication.policy.separator": "_", "refresh.topics.interval.seconds": 7,
            "sync.topic.configs.enabled": "false", "config.properties.exclude": "a\\..*, b",
            "replication.factor": 3, "offset-syncs.topic.replication.factor": -1, "foo.bar": 1,
            "sync.topic.acls.enabled": "true", "sync.topic.acls.interval.seconds": 30,
            "sparkmirror.emit.heartbeats.upstream.enabled": "true"}},
        "checkpointConnector": {"config": {"emit.checkpoints.interval.seconds": 5, "sync.group.offsets.enabled": True,
                                           "refresh.groups.interval.seconds": 600}},
        "topicsPattern": "x.*,y", "groupsExcludePattern": "g1"}])
    p = plan(r)
    assert p.errors == []
    m = p.groups[0].mirrors[0]
    assert m.replicationPolicy == "identity" and m.separator == "_"
    assert m.refreshTopicsIntervalSeconds == 7 and m.syncTopicConfigs is False
    assert m.configPropertiesExclude == ["a\\..*", "b"] and m.replicationFactor == 3
    assert m.emitCheckpointsIntervalSeconds == 5 and m.syncGroupOffsets is True
    assert m.emitHeartbeatsUpstream is True and p.groups[0].mirrors[0].emitHeartbeats is True
    assert m.topics == "(?:x.*)|(?:y)" and m.groupsExclude == "g1"
    assert "spec.mirrors[0].sourceConnector.config[offset-syncs.topic.replication.factor]" in p.not_applicable
    assert "spec.mirrors[0].checkpointConnector.config[refresh.groups.interval.seconds]" in p.not_applicable
    assert "spec.mirrors[0].sourceConnector.config[foo.bar]" in p.unsupported
    assert m.syncTopicAcls is True and m.syncTopicAclsIntervalSeconds == 30
    assert not any("sync.topic.acls" in k for k in p.unsupported + p.not_applicable)


def test_replication_factor_keys() -> None:
    """MM2's replication-factor keys: remote topics (default: the source topic's), heartbeats and checkpoints
    topics; the progress topic's is the resource's own field. 0 or less than -1 is refused naming the key."""
    src = {"alias": "a", "bootstrapServers": "127.0.0.1:9092"}
    default = plan(resource()).groups[0]
    assert default.mirrors[0].replicationFactor is None and default.progressTopicReplicationFactor == -1
    assert default.mirrors[0].heartbeatsTopicReplicationFactor == -1
    assert default.mirrors[0].checkpointsTopicReplicationFactor == -1
    p = plan(resource(progressTopicReplicationFactor=3, mirrors=[{
        "source": src, "sourceConnector": {"config": {"replication.factor": "2",
                                                      "heartbeats.topic.replication.factor": 3}},
        "checkpointConnector": {"config": {"checkpoints.topic.replication.factor": -1}}}]))
    assert p.errors == []
    g = p.groups[0]
    m = g.mirrors[0]
    assert (m.replicationFactor, m.heartbeatsTopicReplicationFactor, m.checkpointsTopicReplicationFactor) == (2, 3, -1)
    assert g.progressTopicReplicationFactor == 3
    assert not any("replication.factor" in k for k in p.unsupported + p.not_applicable)
    bad = plan(resource(progressTopicReplicationFactor=0, mirrors=[{
        "source": src, "sourceConnector": {"config": {"replication.factor": 0,
                                                      "heartbeats.topic.replication.factor": "three"}}}]))
    assert [(e.field, e.message) for e in bad.errors] == [
        ("spec.progressTopicReplicationFactor", "must be -1 (the broker's default) or at least 1, got 0"),
        ("spec.mirrors[0].sourceConnector.config[replication.factor]",
         "a replication factor must be -1 (the broker's default) or at least 1, got 0"),
        ("spec.mirrors[0].sourceConnector.config[heartbeats.topic.replication.factor]",
         "expected an integer replication factor, got 'three'")]


def test_default_one_group_per_mirror_and_declared_groups() -> None:
    mirrors = [{"source": {"alias": "a", "bootstrapServers": "h:1"}},
               {"source": {"alias": "C_1", "bootstrapServers": "h:2"}},
               {"source": {"alias": "d", "bootstrapServers": "h:3"}}]
    assert [g.name for g in flow_group_configs(resource(mirrors=mirrors))] == ["a", "c-1", "d"]
    groups = flow_group_configs(resource(mirrors=mirrors, flowGroups=[
        {"name": "big", "mirrors": ["a", "d"], "topicsPattern": "big.*", "parallelism": 8}]))
    assert [g.name for g in groups] == ["big", "c-1"]
    big = groups[0]
    assert [m.name for m in big.mirrors] == ["a", "d"]
    assert [c.alias for c in big.clusters] == ["b", "a", "d"]
    assert big.mirrors[0].lanes == 8
    import re
    assert re.fullmatch(big.mirrors[0].topics, "big1") and not re.fullmatch(big.mirrors[0].topics, "small")


def test_secrets_are_references_never_values() -> None:
    target = {"alias": "b", "bootstrapServers": "h:9093",
              "tls": {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]},
              "authentication": {"type": "scram-sha-512", "username": "u",
                                 "passwordSecret": {"secretName": "pw", "password": "password"}}}
    source = {"alias": "a", "bootstrapServers": "h:9094",
              "authentication": {"type": "tls", "certificateAndKey": {"secretName": "user", "certificate": "user.crt",
                                                                      "key": "user.key"}}}
    r = resource(target=target, mirrors=[{"source": source}])
    (g,) = flow_group_configs(r)
    b, a = g.clusters
    assert b.tls.caFiles == ["/etc/sparkmirror/secrets/ca/ca.crt"]
    assert b.authentication.password.file == "/etc/sparkmirror/secrets/pw/password"
    assert a.authentication.certificateFile == "/etc/sparkmirror/secrets/user/user.crt"
    (g,) = flow_group_configs(r, secrets="env")
    assert g.clusters[0].authentication.password.env == env_name("pw", "password") == "SPARKMIRROR_SECRET_PW_PASSWORD"
    p = plan(r, secret_keys=lambda s: ["ca.crt", "other.crt", "x"] if s == "ca" else None)
    assert p.secret_names() == ["ca", "pw", "user"]


def test_pattern_certificates_resolve_with_known_keys() -> None:
    target = {"alias": "b", "bootstrapServers": "h:9093",
              "tls": {"trustedCertificates": [{"secretName": "ca", "pattern": "*.crt"}]}}
    p = plan(resource(target=target), secret_keys=lambda s: ["ca.crt", "ca.p12", "x.crt"])
    assert p.groups[0].clusters[0].tls.caFiles == ["/etc/sparkmirror/secrets/ca/ca.crt",
                                                   "/etc/sparkmirror/secrets/ca/x.crt"]


@pytest.mark.parametrize("spec_over, field", [
    ({"mirrors": [{"source": {"alias": "a", "bootstrapServers": "h:1"}, "topicsPattern": "(unclosed"}]},
     "spec.mirrors[0].topicsPattern"),
    ({"mirrors": [{"source": {"alias": "b", "bootstrapServers": "h:1"}}]}, "spec.mirrors[0].source.alias"),
    ({"flowGroups": [{"name": "g", "mirrors": ["nope"]}]}, "spec.flowGroups[0].mirrors"),
    ({"delivery": "twice"}, "spec.delivery"),
    ({"mirrors": [{"source": {"alias": "a", "bootstrapServers": "h:1"}, "sourceConnector": {"config": {
        "replication.policy.class": "com.example.MyPolicy"}}}]},
     "spec.mirrors[0].sourceConnector.config[replication.policy.class]"),
    ({"target": {"alias": "b", "bootstrapServers": "h", "config": {"sasl.jaas.config": "x"}}},
     "spec.target.config[sasl.jaas.config]"),
    ({"flowGroups": [{"name": "a", "mirrors": ["a"]}, {"name": "a", "mirrors": ["a"]}]}, "spec.flowGroups[1]"),
])
def test_invalid_resources_name_the_field(spec_over: dict, field: str) -> None:
    with pytest.raises(ResourceInvalid) as e:
        flow_group_configs(resource(**spec_over))
    assert any(p.field == field for p in e.value.problems), e.value.problems


def test_credentials_in_cluster_config_are_refused_not_rendered() -> None:
    target = {"alias": "b", "bootstrapServers": "h", "config": {
        "ssl.key.password": "hunter2", "ssl.keystore.password": "hunter3",
        "ssl.endpoint.identification.algorithm": "none", "client.id": "x"}}
    p = plan(resource(target=target))
    assert sorted(e.field for e in p.errors) == ["spec.target.config[ssl.key.password]",
                                                 "spec.target.config[ssl.keystore.password]"]
    assert p.groups == [] and "hunter" not in str(p.errors)
    target["config"] = {"ssl.endpoint.identification.algorithm": "none", "client.id": "x"}
    (g,) = flow_group_configs(resource(target=target))
    assert g.clusters[0].config == {"ssl.endpoint.identification.algorithm": "none", "client.id": "x"}
