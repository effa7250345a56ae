"""`sparkmirror import`: Strimzi v1/v1beta2 manifests and mm2.properties to sparkmirror resources."""
from __future__ import annotations

import glob
from pathlib import Path

import pytest
import yaml

from sparkmirror.cli import main
from sparkmirror.resource.plan import plan
from sparkmirror.resource.importer import import_text, parse_properties

STRIMZI = Path("/work/shared/reference/strimzi/examples")


@pytest.mark.parametrize("path", sorted(glob.glob(str(STRIMZI / "v1*" / "kafka-mirror-maker-2*.yaml"))),
                         ids=lambda p: "/".join(Path(p).parts[-2:]))
def test_strimzi_manifests_import_and_mean_the_same(path: str) -> None:
    out = import_text(Path(path).read_text())
    (r,) = out.resources
    assert r["apiVersion"] == "sparkmirror.io/v1alpha1" and r["kind"] == "KafkaMirrorMaker2"
    p = plan(r)
    assert p.errors == []
    (g,) = p.groups
    assert [c.alias for c in g.clusters] == ["cluster-b", "cluster-a"]
    assert g.mirrors[0].topics == ".*" and g.mirrors[0].groups == ".*"
    assert any("spec.replicas: Kafka Connect only" in n for n in out.notes)
    if "/v1/" in path:  # v1 passes through unchanged apart from apiVersion
        src = yaml.safe_load(Path(path).read_text())
        assert r["spec"] == src["spec"]


def test_v1beta2_renames_and_heartbeats() -> None:
    text = """
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker2
metadata: {name: old}
spec:
  version: 3.9.0
  replicas: 1
  connectCluster: t
  externalConfiguration: {env: []}
  clusters:
  - {alias: s, bootstrapServers: "s:9092"}
  - {alias: t, bootstrapServers: "t:9092", config: {group.id: g, config.storage.topic: c}}
  - {alias: other, bootstrapServers: "o:9092"}
  mirrors:
  - sourceCluster: s
    targetCluster: t
    topicsBlacklistPattern: "tmp.*"
    heartbeatConnector: {config: {emit.heartbeats.interval.seconds: 5, heartbeats.topic.replication.factor: 1,
                                  heartbeats.topic.retention.ms: 1000}}
  - sourceCluster: t
    targetCluster: other
"""
    out = import_text(text)
    (r,) = out.resources
    assert r["spec"]["target"]["groupId"] == "g" and r["spec"]["target"]["configStorageTopic"] == "c"
    (m,) = r["spec"]["mirrors"]
    assert m["topicsExcludePattern"] == "tmp.*"
    assert m["sourceConnector"]["config"] == {"emit.heartbeats.interval.seconds": 5,
                                              "heartbeats.topic.replication.factor": 1}
    notes = "\n".join(out.notes)
    assert "spec.externalConfiguration: not carried over" in notes
    assert "spec.mirrors[1]: targets 'other'" in notes
    assert "not carried over: heartbeats.topic.retention.ms" in notes
    assert plan(r).groups[0].mirrors[0].emitHeartbeatsIntervalSeconds == 5
    assert plan(r).groups[0].mirrors[0].heartbeatsTopicReplicationFactor == 1


MM2 = """# two sources into one target
clusters = east, west, central
east.bootstrap.servers = east:9092
west.bootstrap.servers = west:9092
central.bootstrap.servers = central:9092
central.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="u" password="hunter2";
central.client.id = mirror
central.ssl.keystore.key = -----BEGIN PRIVATE KEY-----hunter3
sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter4";
east->central.consumer.ssl.key.password = hunter5
east->central.enabled = true
east->central.topics = orders.*, payments
west->central.enabled = true
central->east.enabled = false
replication.policy.separator = _
sync.group.offsets.enabled = true
tasks.max = 4
"""


def test_mm2_properties(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert parse_properties("a.b=1\nc : 2\nd 3\n# x\n") == {"a.b": "1", "c": "2", "d": "3"}
    f = tmp_path / "mm2.properties"
    f.write_text(MM2)
    out_file = tmp_path / "out.yaml"
    assert main(["import", str(f), "--output-file", str(out_file), "--name", "dc"]) == 0
    err = capsys.readouterr().err
    (r,) = list(yaml.safe_load_all(out_file.read_text()))
    assert r["metadata"]["name"] == "dc"
    assert r["spec"]["target"] == {"alias": "central", "bootstrapServers": "central:9092",
                                   "config": {"client.id": "mirror"}}
    assert [m["source"]["alias"] for m in r["spec"]["mirrors"]] == ["east", "west"]
    p = plan(r)
    assert p.errors == []
    east = p.groups[0].mirrors[0]
    assert east.topics == "(?:orders.*)|(?:payments)" and east.separator == "_" and east.syncGroupOffsets
    for secret in ("hunter2", "hunter3", "hunter4", "hunter5"):
        assert secret not in out_file.read_text() and secret not in err, secret
    assert "east->central.consumer.ssl.key.password: a credential" in err
    assert err.count("sasl.jaas.config: a credential") == 2  # central's and the global one (once)
    assert "central.sasl.jaas.config: a credential; not carried over" in err
    assert "tasks.max]: Kafka Connect only" in err
