"""The generated CRD: up to date, and on the real API server it accepts valid resources (Strimzi examples with
only the apiVersion changed among them) and refuses malformed ones with a message naming the field."""
from __future__ import annotations

import copy
import glob
from pathlib import Path

import pytest
import yaml

from sparkmirror_operator import crdgen

STRIMZI = Path("/work/shared/reference/strimzi/examples/v1")


def test_crd_files_are_not_stale() -> None:
    stale = crdgen.stale()
    assert stale == [], f"stale CRD files {stale}: run python -m sparkmirror_operator.crdgen --write"


def test_every_field_has_a_description() -> None:
    root = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert crdgen._missing_descriptions(root, "") == []
    spec = root["properties"]["spec"]["properties"]
    assert spec["delivery"]["enum"] == ["exactly-once", "at-least-once"]
    assert spec["state"]["enum"] == ["running", "paused", "stopped"]
    conditions = root["properties"]["status"]["properties"]["conditions"]
    # one entry per type, as GitOps tools and server-side apply expect; a map key must be required
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


BASE = {
    "apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
    "metadata": {"name": "m"},
    "spec": {
        "version": "1.0",
        "target": {"alias": "b", "bootstrapServers": "127.0.0.1:9093"},
        "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:9092"}, "topicsPattern": "t.*"}],
    },
}


def variant(path: str | None = None, value=None, *, delete: bool = False, name: str = "m") -> dict:
    r = copy.deepcopy(BASE)
    r["metadata"]["name"] = name
    if path:
        node = r
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node[p]
        last = parts[-1]
        if delete:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return r


def strimzi_examples() -> list[dict]:
    out = []
    for p in sorted(glob.glob(str(STRIMZI / "kafka-mirror-maker-2*.yaml"))):
        r = yaml.safe_load(Path(p).read_text())
        r["apiVersion"] = "sparkmirror.io/v1alpha1"
        r["metadata"]["name"] = Path(p).stem.replace("kafka-mirror-maker-2", "strimzi")[:40].rstrip("-")
        out.append(r)
    return out


VALID = [
    variant(name="minimal"),
    variant("spec.flowGroups", [{"name": "g1", "mirrors": ["a"], "topicsPattern": "x.*", "parallelism": 4}],
            name="with-groups"),
    variant("spec.target.authentication", {"type": "scram-sha-512", "username": "u",
                                           "passwordSecret": {"secretName": "s", "password": "p"},
                                           "allowPlaintextCredentials": True}, name="scram-plaintext-allowed"),
    variant("spec.target", {"alias": "b", "bootstrapServers": "h:9093",
                            "tls": {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]},
                            "authentication": {"type": "scram-sha-512", "username": "u",
                                               "passwordSecret": {"secretName": "s", "password": "p"}}},
            name="scram-tls"),
    variant("spec.spark", {"image": "img:1", "driver": {"cores": 1, "memory": "512m"},
                           "executor": {"instances": 2, "cores": 2, "memory": "2g"},
                           "sparkConf": {"spark.x": "y"}}, name="spark"),
    variant("spec.state", "paused", name="paused"),
    # per-client keys the plan takes, a Connect worker's group.id (not applicable), values of every type
    variant("spec.target.config", {"producer.compression.type": "lz4", "consumer.fetch.min.bytes": 1,
                                   "group.id": "connect-cluster", "admin.client.id": "x", "x.flag": True},
            name="client-keys"),
    variant("spec.mirrors.0.sourceConnector", {"config": {"source.consumer.fetch.max.wait.ms": 200,
                                                          "producer.override.batch.size": "65536",
                                                          "sync.topic.acls.enabled": False}},
            name="connector-client-keys"),
    variant("spec.mirrors.0.transforms", [{"type": "dropRecords", "header": "kind", "headerValue": "debug"},
                                          {"type": "dropJsonFields", "fields": ["secret", "a.b"]},
                                          {"type": "renameHeader", "from": "t", "to": "x-t"},
                                          {"type": "addHeader", "name": "via", "value": "sparkmirror"},
                                          {"type": "python", "callable": "my.module:fn"},
                                          {"type": "route", "topics": "a\\.(.*)", "replacement": "dr-$1"}],
            name="transforms"),
]

# (case, resource, text the API server's message must contain)
MALFORMED = [
    ("transform missing its fields", variant("spec.mirrors.0.transforms", [{"type": "renameHeader", "from": "t"}]),
     "renameHeader needs from, to"),
    ("transform of an unknown kind", variant("spec.mirrors.0.transforms", [{"type": "regexRouter"}]),
     "spec.mirrors[0].transforms[0].type"),
    ("mirror source equals target",
     variant("spec.mirrors.0.source.alias", "b"), "mirrors[].source.alias must differ from target.alias"),
    ("duplicate source aliases",
     variant("spec.mirrors", [{"source": {"alias": "a", "bootstrapServers": "h:1"}},
                              {"source": {"alias": "a", "bootstrapServers": "h:2"}}]),
     "mirrors[].source.alias must be unique"),
    ("flow group names an unknown mirror",
     variant("spec.flowGroups", [{"name": "g", "mirrors": ["nope"]}]),
     "spec.flowGroups: Invalid value: flowGroups[].mirrors must name mirrors by their source alias"),
    ("duplicate flow group names",
     variant("spec.flowGroups", [{"name": "g", "mirrors": ["a"]}, {"name": "g", "mirrors": ["a"]}]),
     "flowGroups[].name must be unique"),
    ("failover names an unknown mirror", variant("spec.failover", {"mirrors": ["nope"]}),
     "spec.failover: Invalid value: failover.mirrors must name mirrors by their source alias"),
    ("handoff timeout within the first epoch",
     variant("spec.upgrade", {"handoffTimeoutSeconds": 30}),
     "spec.upgrade: Invalid value: upgrade.handoffTimeoutSeconds must be longer than spark.epochSeconds"),
    ("failover wait out of range", variant("spec.failover", {"mirrors": ["a"], "waitCaughtUpSeconds": -1}),
     "spec.failover.waitCaughtUpSeconds"),
    ("autoscaling lanes upside down", variant("spec.autoscaling", {"minLanes": 5, "maxLanes": 2}),
     "spec.autoscaling.minLanes: Invalid value: autoscaling.minLanes must be at most autoscaling.maxLanes"),
    ("autoscaling executors upside down", variant("spec.autoscaling", {"minExecutors": 9, "maxExecutors": 3}),
     "autoscaling.minExecutors must be at most autoscaling.maxExecutors"),
    ("autoscaling with two targets", variant("spec.autoscaling", {"targetLagSeconds": 30,
                                                                  "targetRecordsPerSecondPerLane": 100}),
     "set one of autoscaling.targetLagSeconds or autoscaling.targetRecordsPerSecondPerLane, not both"),
    ("bad delivery enum", variant("spec.delivery", "twice"), "spec.delivery"),
    ("bad state enum", variant("spec.state", "sleeping"), "spec.state"),
    ("executor instances out of range", variant("spec.spark", {"executor": {"instances": 0}}),
     "spec.spark.executor.instances"),
    ("parallelism out of range", variant("spec.spark", {"parallelism": 5000}), "spec.spark.parallelism"),
    ("bad memory", variant("spec.spark", {"driver": {"memory": "lots"}}), "spec.spark.driver.memory"),
    ("missing target", variant("spec.target", delete=True), "spec.target"),
    ("no mirrors", variant("spec.mirrors", []), "spec.mirrors"),
    ("missing bootstrapServers", variant("spec.mirrors.0.source.bootstrapServers", delete=True),
     "spec.mirrors[0].source.bootstrapServers"),
    ("scram without password secret",
     variant("spec.target.authentication", {"type": "scram-sha-512", "username": "u"}),
     "spec.target.authentication.passwordSecret"),
    ("password over a plaintext listener",
     variant("spec.mirrors.0.source.authentication", {"type": "plain", "username": "u",
                                                     "passwordSecret": {"secretName": "s", "password": "p"}}),
     "a password must not travel over a plaintext listener"),
    ("tls auth without certificateAndKey", variant("spec.target.authentication", {"type": "tls"}),
     "spec.target.authentication.certificateAndKey"),
    ("bad authentication type", variant("spec.target.authentication", {"type": "kerberos"}),
     "spec.target.authentication.type"),
    ("trusted certificate with neither certificate nor pattern",
     variant("spec.target.tls", {"trustedCertificates": [{"secretName": "ca"}]}),
     "spec.target.tls.trustedCertificates[0]"),
    ("bad flow group name", variant("spec.flowGroups", [{"name": "Not_A_Label", "mirrors": ["a"]}]),
     "spec.flowGroups[0].name"),
    ("flow group without mirrors", variant("spec.flowGroups", [{"name": "g", "mirrors": []}]),
     "spec.flowGroups[0].mirrors"),
    ("unknown field", variant("spec.tagret", {"alias": "x"}), "tagret"),
    ("name too long", variant(name="m" * 45), "metadata.name"),
]


@pytest.mark.k8s
def test_crd_installs_and_accepts_valid_resources(kube, kmm2_crd, namespace) -> None:
    from kubernetes import client

    with kube.api_client() as api:
        co = client.CustomObjectsApi(api)
        for r in VALID + strimzi_examples():
            created = co.create_namespaced_custom_object("sparkmirror.io", "v1alpha1", namespace,
                                                         "kafkamirrormaker2s", r)
            assert created["spec"]["target"]["alias"] == r["spec"]["target"]["alias"]
        got = co.get_namespaced_custom_object("sparkmirror.io", "v1alpha1", namespace, "kafkamirrormaker2s",
                                              "strimzi-sync-groups")
        # Strimzi fields survive (not pruned), MM2 config values keep their types
        assert got["spec"]["target"]["groupId"] == "my-mirror-maker-2-group"
        assert got["spec"]["mirrors"][0]["checkpointConnector"]["config"]["sync.group.offsets.enabled"] == "true"
        assert got["spec"]["mirrors"][0]["sourceConnector"]["config"]["offset.lag.max"] == 100


@pytest.mark.k8s
def test_conditions_are_a_map_keyed_by_type(kube, kmm2_crd, namespace) -> None:
    """The API server itself refuses two conditions of one type: the list-type map GitOps tools rely on."""
    from kubernetes import client

    cond = {"type": "Ready", "status": "True", "reason": "Running", "message": "1/1 flow groups running"}
    with kube.api_client() as api:
        co = client.CustomObjectsApi(api)
        created = co.create_namespaced_custom_object("sparkmirror.io", "v1alpha1", namespace, "kafkamirrormaker2s",
                                                     variant(name="conds"))
        args = ("sparkmirror.io", "v1alpha1", namespace, "kafkamirrormaker2s", "conds")
        ok = co.replace_namespaced_custom_object_status(*args, {**created, "status": {"conditions": [
            cond, {**cond, "type": "Stalled", "status": "False", "reason": "AsExpected"}]}})
        assert [c["type"] for c in ok["status"]["conditions"]] == ["Ready", "Stalled"]
        with pytest.raises(client.ApiException) as e:
            co.replace_namespaced_custom_object_status(*args, {**ok, "status": {"conditions": [cond, cond]}})
        assert e.value.status == 422 and "Duplicate value" in e.value.body, e.value.body


@pytest.mark.k8s
def test_malformed_resources_are_refused_naming_the_field(kube, kmm2_crd, namespace) -> None:
    import json

    from kubernetes import client

    messages = {}
    with kube.api_client() as api:
        co = client.CustomObjectsApi(api)
        for case, r, expected in MALFORMED:
            with pytest.raises(client.ApiException) as e:
                co.create_namespaced_custom_object("sparkmirror.io", "v1alpha1", namespace, "kafkamirrormaker2s",
                                                   r, field_validation="Strict")
            assert e.value.status in (400, 422), (case, e.value.body)
            msg = json.loads(e.value.body)["message"]
            messages[case] = msg
            assert expected in msg, (case, msg)
    print("\n".join(f"{c}: {m}" for c, m in messages.items()))  # the list of cases and what each got (-s)


@pytest.mark.k8s
def test_kubectl_explain_reads_the_descriptions(kube, kmm2_crd, tmp_path) -> None:
    cache = f"--cache-dir={tmp_path}"  # discovery fresh, with the CRD in it
    out = kube.kubectl("explain", cache, "smm2.spec.mirrors.source.alias").stdout
    assert "Alias of the cluster" in out
    out = kube.kubectl("explain", cache, "kafkamirrormaker2s.spec.target.groupId").stdout
    assert "Kafka Connect only" in out
    out = kube.kubectl("explain", cache, "smm2.status.flowGroups.lag").stdout
    assert "Records on the sources not yet committed on the target" in out


@pytest.mark.k8s
def test_owned_client_keys_are_refused_naming_the_field_and_the_key(kube, kmm2_crd, namespace) -> None:
    """issue 37: the keys the mirror owns most often set are refused at `kubectl apply` (CEL rules from
    refusedkeys.py), as the plan refuses them at reconcile, in every config that holds per-client keys; the
    field, the key and why are named. A boolean value is refused by the key's declaration, naming the field."""
    import json

    from kubernetes import client

    from sparkmirror.resource.refusedkeys import cluster_config_refusals, connector_config_refusals

    cluster, connector = cluster_config_refusals(), connector_config_refusals()
    cases = [("spec.target.config", "producer.transactional.id", "t", cluster),
             ("spec.target.config", "acks", "all", cluster),
             ("spec.mirrors.0.source.config", "consumer.isolation.level", "read_uncommitted", cluster),
             ("spec.mirrors.0.sourceConnector.config", "source.consumer.group.id", "g", connector),
             ("spec.mirrors.0.sourceConnector.config", "producer.override.acks", 1, connector),
             ("spec.mirrors.0.checkpointConnector.config", "consumer.enable.auto.commit", "false", connector)]
    with kube.api_client() as api:
        co = client.CustomObjectsApi(api)
        args = ("sparkmirror.io", "v1alpha1", namespace, "kafkamirrormaker2s")
        for i, (where, key, value, refusals) in enumerate(cases):
            path = where.replace("mirrors.0.", "mirrors[0].")
            with pytest.raises(client.ApiException) as e:
                co.create_namespaced_custom_object(*args, _with_config(where, {key: value}, f"owned-{i}"),
                                                   field_validation="Strict")
            msg = json.loads(e.value.body)["message"]
            assert e.value.status == 422 and f"{path}.{key}: Invalid value" in msg, (key, msg)
            assert f"config[{key}]: {refusals[key]}" in msg, (key, msg)
            print(msg)  # what `kubectl apply` shows (-s)
        with pytest.raises(client.ApiException) as e:
            co.create_namespaced_custom_object(*args, _with_config("spec.target.config",
                                                                   {"enable.auto.commit": False}, "owned-bool"))
        msg = json.loads(e.value.body)["message"]
        assert e.value.status == 422 and "spec.target.config.enable.auto.commit" in msg, msg
        print(msg)
        # keys the plan takes, and one it refuses only under exactly-once (its call): the API server takes them
        taken = {"source.consumer.fetch.min.bytes": 1, "producer.override.enable.idempotence": "false"}
        created = co.create_namespaced_custom_object(*args, _with_config("spec.mirrors.0.sourceConnector.config",
                                                                         taken, "taken"), field_validation="Strict")
        assert created["spec"]["mirrors"][0]["sourceConnector"]["config"] == taken
    # `kubectl apply` itself, as a user runs it
    bad = _with_config("spec.mirrors.0.sourceConnector.config", {"target.producer.transactional.id": "t"}, "applied")
    out = kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert out.returncode != 0 and "spec.mirrors[0].sourceConnector.config.target.producer.transactional.id" in \
        out.stderr and "the mirror owns transactional.id" in out.stderr, out.stderr
    ok = _with_config("spec.mirrors.0.sourceConnector.config", {"target.producer.compression.type": "zstd"}, "applied")
    out = kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(ok), check=False)
    assert out.returncode == 0 and "created" in out.stdout, out.stderr


def _with_config(where: str, config: dict, name: str) -> dict:
    """BASE named `name`, with `config` at `where` (a dotted path; connectors made as needed)."""
    r = variant(name=name)
    node = r
    for p in where.split(".")[:-1]:
        node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
    node[where.rsplit(".", 1)[1]] = config
    return r
