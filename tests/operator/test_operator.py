"""The operator on the real API server: objects appear, change and go; states and errors land on the status.

kopf runs in-process (KopfRunner) against the session's kube-apiserver; the tests play the user (apply,
patch, delete the resource) and the Spark operator (write SparkApplication states).
"""
from __future__ import annotations

import base64
import time

import pytest

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler

from .conftest import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.minutes(2.5)]
KMM2 = "KafkaMirrorMaker2"


def resource(name: str, namespace: str, **spec_over) -> dict:
    spec = {
        "version": "1.0",
        "target": {"alias": "b", "bootstrapServers": "127.0.0.1:19093",
                   "authentication": {"type": "scram-sha-512", "username": "mirror",
                                      "passwordSecret": {"secretName": "mirror-user", "password": "password"},
                                      "allowPlaintextCredentials": True}},  # the local ground is plaintext
        "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:19092"}, "topicsPattern": "t.*"},
                    {"source": {"alias": "c", "bootstrapServers": "127.0.0.1:19094"}, "topicsPattern": "t.*"}],
    }
    spec.update(spec_over)
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def secret(namespace: str, name: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def condition(kapi: KubeApi, ns: str, name: str, type_: str) -> dict | None:
    obj = kapi.get(KMM2, ns, name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def names(kapi: KubeApi, kind: str, ns: str, name: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in kapi.list(kind, ns, f"sparkmirror.io/resource={name}"))


def set_spark_state(kapi: KubeApi, ns: str, app: str, state: str, error: str | None = None) -> None:
    """What the Spark operator does: write .status.applicationState."""
    st = {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}, "driverInfo": {}}
    kapi.patch_status("SparkApplication", ns, app, st)


def expected_groups(namespace: str, name: str) -> set[str]:
    """The flow groups the operator's metrics say it runs (what SparkmirrorMirrorGone compares drivers with)."""
    from sparkmirror_operator import metrics

    return {s.labels["flow_group"] for f in metrics.REGISTRY.collect() for s in f.samples
            if s.name == "sparkmirror_operator_flow_group_expected" and s.value == 1
            and (s.labels["resource_namespace"], s.labels["resource"]) == (namespace, name)}


def test_apply_change_remove_delete(operator, kapi, namespace, figure) -> None:
    kapi.create(secret(namespace, "mirror-user", {"password": "s3cr3t-value"}))
    t0 = time.monotonic()
    kapi.create(resource("m", namespace))
    apps = wait_for("SparkApplications created",
                    lambda: (n := names(kapi, "SparkApplication", namespace, "m")) == ["m-a", "m-c"] and n)
    created_after = time.monotonic() - t0
    figure("apply_to_spark_applications_s", round(created_after, 2))
    figure("apply_to_spark_applications", f"apply -> SparkApplications created: {created_after:.2f}s")
    assert apps == ["m-a", "m-c"]
    assert names(kapi, "ConfigMap", namespace, "m") == ["m-a-config", "m-c-config"]
    wait_for("Leases", lambda: names(kapi, "Lease", namespace, "m") == ["m-a", "m-c"])  # applied after the apps
    for kind in ("ServiceAccount", "Role", "RoleBinding"):  # the chart's, never the operator's
        assert names(kapi, kind, namespace, "m") == []
    owner_uid = kapi.get(KMM2, namespace, "m")["metadata"]["uid"]
    app = kapi.get("SparkApplication", namespace, "m-a")
    assert app["metadata"]["ownerReferences"][0]["uid"] == owner_uid
    assert app["spec"]["restartPolicy"]["type"] == "OnFailure" and app["spec"]["type"] == "Python"
    assert app["spec"]["driver"]["serviceAccount"] == "sparkmirror-driver"
    cm = kapi.get("ConfigMap", namespace, "m-a-config")
    cfg = FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"])
    assert cfg.resource == f"{namespace}/m" and [m.source for m in cfg.mirrors] == ["a"]
    assert cfg.cluster("b").authentication.password.file == "/etc/sparkmirror/secrets/mirror-user/password"
    # credentials never in a rendered object or the status
    for kind in ("ConfigMap", "SparkApplication", "Lease"):
        for o in kapi.list(kind, namespace, "sparkmirror.io/resource=m"):
            assert "s3cr3t-value" not in str(o)
    progressing = wait_for("Progressing condition", lambda: condition(kapi, namespace, "m", "Progressing"))
    assert progressing["status"] == "True"
    st = kapi.get(KMM2, namespace, "m")["status"]
    assert st["observedGeneration"] == 1 and st["flowGroupsReady"] == "0/2" and "s3cr3t-value" not in str(st)
    assert expected_groups(namespace, "m") == {g["name"] for g in st["flowGroups"]} and len(st["flowGroups"]) == 2

    # reconciling again (as on resume) changes nothing
    versions = {(k, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                for k in ("ConfigMap", "SparkApplication", "Lease")
                for o in kapi.list(k, namespace, "sparkmirror.io/resource=m")}
    again = Reconciler(KubeApi(kapi.api)).reconcile(kapi.get(KMM2, namespace, "m"))
    assert again.applied == [] and again.deleted == []
    versions2 = {(k, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                 for k in ("ConfigMap", "SparkApplication", "Lease")
                 for o in kapi.list(k, namespace, "sparkmirror.io/resource=m")}
    assert versions2 == versions

    # change: more executors (a new worker generation of m-a, in standby beside it; no driver runs here to
    # report ready, so m-a keeps copying), mirror c removed -> m-c's objects go
    body = kapi.get(KMM2, namespace, "m")
    body["spec"]["mirrors"] = body["spec"]["mirrors"][:1]
    body["spec"]["spark"] = {"executor": {"instances": 3, "cores": 1, "memory": "1g"}}
    kapi._call("PUT", "/apis/sparkmirror.io/v1alpha1/namespaces/" + namespace + "/kafkamirrormaker2s/m", [], body)
    wait_for("m-a-g2 has 3 executors", lambda: (kapi.get("SparkApplication", namespace, "m-a-g2") or {})
             .get("spec", {}).get("executor", {}).get("instances") == 3)
    assert kapi.get("SparkApplication", namespace, "m-a")["spec"]["executor"]["instances"] != 3
    wait_for("m-c objects deleted", lambda: names(kapi, "SparkApplication", namespace, "m") == ["m-a", "m-a-g2"]
             and names(kapi, "ConfigMap", namespace, "m") == ["m-a-config", "m-a-g2-config"]
             and names(kapi, "Lease", namespace, "m") == ["m-a"])
    assert wait_for("observedGeneration 2", lambda: kapi.get(KMM2, namespace, "m")["status"]["observedGeneration"] == 2)
    wait_for("one flow group expected", lambda: len(expected_groups(namespace, "m")) == 1)

    # delete the resource: the garbage collector removes everything it owns
    kapi.delete(KMM2, namespace, "m")
    wait_for("owned objects garbage-collected", lambda: all(
        names(kapi, k, namespace, "m") == [] for k in ("SparkApplication", "ConfigMap", "Lease")), timeout=90)
    wait_for("no flow group expected once deleted", lambda: expected_groups(namespace, "m") == set())


def test_spark_states_show_in_status(operator, kube, kapi, namespace) -> None:
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("s", namespace))
    wait_for("apps", lambda: names(kapi, "SparkApplication", namespace, "s") == ["s-a", "s-c"])
    set_spark_state(kapi, namespace, "s-a", "RUNNING")
    set_spark_state(kapi, namespace, "s-c", "SUBMITTED")

    def group_state(g: str):
        st = (kapi.get(KMM2, namespace, "s").get("status") or {})
        return next((x.get("sparkState") for x in st.get("flowGroups", []) if x["name"] == g), None)

    wait_for("s-a RUNNING in status", lambda: group_state("a") == "RUNNING" and group_state("c") == "SUBMITTED")
    ready = condition(kapi, namespace, "s", "Ready")
    assert ready["status"] == "False" and ready["reason"] in ("Starting", "Degraded")  # its clusters are made up: the lag timer may say so first
    set_spark_state(kapi, namespace, "s-c", "RUNNING")
    wait_for("Ready", lambda: condition(kapi, namespace, "s", "Ready")["status"] == "True")
    assert kapi.get(KMM2, namespace, "s")["status"]["flowGroupsReady"] == "2/2"
    lines = kube.kubectl("get", "--cache-dir", str(kube.home / f"kubectl-cache-{namespace}"), "smm2", "-n", namespace,
                         "s").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATE", "VERSION", "FLOW", "GROUPS", "LAG", "AGE"]
    assert lines[1].split()[:5] == ["s", "True", "running", "1.0", "2/2"]
    assert condition(kapi, namespace, "s", "Progressing")["status"] == "False"
    set_spark_state(kapi, namespace, "s-c", "FAILED", "driver pod OOMKilled")
    deg = wait_for("Degraded", lambda: (c := condition(kapi, namespace, "s", "Degraded"))["status"] == "True" and c)
    assert deg["reason"] == "ApplicationFailed" and "s-c is FAILED: driver pod OOMKilled" in deg["message"]
    assert condition(kapi, namespace, "s", "Ready")["status"] == "False"
    reasons = wait_for("events", lambda: {e.get("reason") for e in kapi.list("Event", namespace)
                                          if e["involvedObject"]["name"] == "s"} >= {"Ready", "NotReady",
                                                                                   "ApplicationFailed"})
    assert reasons


def test_an_acl_refusal_is_its_own_reason(operator, kapi, namespace) -> None:
    """A driver that ended because a cluster's ACLs refuse the mirror exits EXIT_UNAUTHORIZED (the job's test:
    tests/job/test_security.py); read back from the Spark operator's message, the status says
    AuthorizationFailed, not ApplicationFailed, and its application stays for the Spark operator's back-off."""
    from sparkmirror.resource.names import EXIT_UNAUTHORIZED

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("acl", namespace))
    wait_for("apps", lambda: names(kapi, "SparkApplication", namespace, "acl") == ["acl-a", "acl-c"])
    set_spark_state(kapi, namespace, "acl-c", "RUNNING")
    set_spark_state(kapi, namespace, "acl-a", "FAILING",
                    f"driver container failed with ExitCode: {EXIT_UNAUTHORIZED}, Reason: Error")
    deg = wait_for("Degraded", lambda: (c := condition(kapi, namespace, "acl", "Degraded"))["status"] == "True"
                   and c["reason"] != "AsExpected" and c)
    assert deg["reason"] == "AuthorizationFailed", deg
    assert "a cluster's ACLs refuse the mirror" in deg["message"] and "acl-a is FAILING" in deg["message"], deg
    stalled = condition(kapi, namespace, "acl", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "AuthorizationFailed", stalled
    group = next(g for g in kapi.get(KMM2, namespace, "acl")["status"]["flowGroups"] if g["name"] == "a")
    assert group["message"].startswith("not copying: a cluster's ACLs refuse the mirror"), group
    assert names(kapi, "SparkApplication", namespace, "acl") == ["acl-a", "acl-c"]  # restarted with backoff
    set_spark_state(kapi, namespace, "acl-a", "FAILING", "driver container failed with ExitCode: 1, Reason: Error")
    wait_for("ApplicationFailed for any other exit",
             lambda: condition(kapi, namespace, "acl", "Degraded")["reason"] == "ApplicationFailed")


def test_deleted_application_is_applied_again(operator, kapi, namespace) -> None:
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("d", namespace))
    first = wait_for("app", lambda: kapi.get("SparkApplication", namespace, "d-a"))
    kapi.delete("SparkApplication", namespace, "d-a")
    again = wait_for("app applied again", lambda: (a := kapi.get("SparkApplication", namespace, "d-a"))
                     and a["metadata"]["uid"] != first["metadata"]["uid"] and a)
    assert again["spec"] == first["spec"]
    assert wait_for("Recreated event", lambda: any(e.get("reason") == "Recreated"
                                                   for e in kapi.list("Event", namespace)))


def test_paused_suspends_and_stopped_removes_applications(operator, kapi, namespace) -> None:
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("p", namespace, state="paused"))
    app = wait_for("paused app", lambda: kapi.get("SparkApplication", namespace, "p-a"))
    assert app["spec"]["suspend"] is True
    # the condition of the state before is there until the operator writes the new one: wait for the reason
    wait_for("Paused", lambda: (condition(kapi, namespace, "p", "Ready") or {}).get("reason") == "Paused")
    assert expected_groups(namespace, "p") == set()  # suspended drivers serve no metrics: not "gone"
    kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/p", [],
               {"spec": {"state": "running"}}, "application/merge-patch+json")
    wait_for("resumed", lambda: kapi.get("SparkApplication", namespace, "p-a")["spec"]["suspend"] is False)
    wait_for("both flow groups expected", lambda: len(expected_groups(namespace, "p")) == 2)
    kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/p", [],
               {"spec": {"state": "stopped"}}, "application/merge-patch+json")
    wait_for("apps removed", lambda: names(kapi, "SparkApplication", namespace, "p") == [])
    wait_for("no flow group expected once stopped", lambda: expected_groups(namespace, "p") == set())
    assert names(kapi, "ConfigMap", namespace, "p") == ["p-a-config", "p-c-config"]  # a restart resumes
    # the condition of the state before is there until the operator writes the new one: wait for the reason
    wait_for("Stopped", lambda: (condition(kapi, namespace, "p", "Ready") or {}).get("reason") == "Stopped")


def test_errors_land_on_the_resource(operator, kapi, namespace) -> None:
    # invalid regex (the CRD cannot check Python regexes): nothing applied, the field is named
    kapi.create(resource("bad", namespace, mirrors=[
        {"source": {"alias": "a", "bootstrapServers": "h:1"}, "topicsPattern": "orders(.*"}]))
    # missing Secret: objects applied, Degraded names the Secret and the field referring to it
    kapi.create(resource("nosecret", namespace))
    # a good resource beside them is still served
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("good", namespace, target={"alias": "b", "bootstrapServers": "h:2"}))
    deg = wait_for("InvalidSpec", lambda: condition(kapi, namespace, "bad", "Degraded"))
    assert deg["status"] == "True" and deg["reason"] == "InvalidSpec"
    assert "spec.mirrors[0].topicsPattern" in deg["message"]
    assert names(kapi, "SparkApplication", namespace, "bad") == []
    # in kstatus' terms: the invalid spec is Stalled; the good one Reconciling while its applications start
    stalled = condition(kapi, namespace, "bad", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert condition(kapi, namespace, "bad", "Reconciling")["status"] == "False"
    wait_for("good applied", lambda: names(kapi, "SparkApplication", namespace, "good") == ["good-a", "good-c"])
    reconciling = wait_for("good Reconciling", lambda: condition(kapi, namespace, "good", "Reconciling"))
    assert reconciling["status"] == "True" and reconciling["reason"] == "Starting"
    kapi.delete("Secret", namespace, "mirror-user")
    kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/nosecret", [],
               {"spec": {"version": "1.1"}}, "application/merge-patch+json")
    deg = wait_for("SecretMissing", lambda: (c := condition(kapi, namespace, "nosecret", "Degraded"))
                   and c["reason"] in ("SecretMissing", "Multiple") and c)
    assert f"Secret {namespace}/mirror-user referenced by spec.target.authentication.passwordSecret not found" \
        in deg["message"]
    stalled = condition(kapi, namespace, "nosecret", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] in ("SecretMissing", "Multiple"), stalled
    wait_for("InvalidSpec event", lambda: any(e.get("reason") == "InvalidSpec" and e["involvedObject"]["name"] == "bad"
                                              for e in kapi.list("Event", namespace)))


@pytest.mark.kafka
def test_lag_no_topics_and_unreachable_cluster(operator, kapi, namespace, kafka_a, kafka_b, topic) -> None:
    from confluent_kafka import Producer

    from sparkmirror.progress import PROGRESS_TOPIC_CONFIG, ProgressRecord

    t = topic(kafka_a, partitions=2)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap})
    for i in range(10):
        p.produce(t, value=b"x", partition=i % 2)
    p.flush(10)
    progress = f"progress-{namespace}"[:200]
    topic(kafka_b, partitions=1, config=PROGRESS_TOPIC_CONFIG, name=progress)
    spec = {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap}, "progressTopic": progress,
            "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap}, "topicsPattern": t}]}
    kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                 "metadata": {"name": "lag", "namespace": namespace}, "spec": spec})

    def lag():
        return (kapi.get(KMM2, namespace, "lag").get("status") or {}).get("lag")

    assert wait_for("lag 10", lambda: lag() == 10)
    # what a lane commits: 4 records of partition 0 are on the target
    # stamped a minute ahead: the 30 s rate window still holds it when a loaded machine refreshes the status late
    rec = ProgressRecord("a", t, 0, next_offset=4, source_first=0, source_last=3, target_topic=f"a.{t}",
                         target_first=0, target_last=3, count=4, commit_ms=int(time.time() * 1000) + 60_000,
                         generation=1,
                         flow_group="a", mirror="a", lane=0)
    pp = Producer({"bootstrap.servers": kafka_b.bootstrap})
    pp.produce(progress, key=rec.key(), value=rec.value())
    pp.flush(10)
    assert wait_for("lag 6", lambda: lag() == 6)
    st = kapi.get(KMM2, namespace, "lag")["status"]
    assert st["flowGroups"][0]["partitions"] == 2 and "lastCommitTime" in st["flowGroups"][0]
    assert st["flowGroups"][0]["recordsPerSecond"] == round(4 / 30, 1)  # 4 records committed in the 30 s window

    # a pattern that matches nothing, and a source that cannot be reached
    spec2 = {**spec, "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": "nothing-matches-this"},
                                 {"source": {"alias": "z", "bootstrapServers": "127.0.0.1:1"},
                                  "topicsPattern": t}]}
    kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                 "metadata": {"name": "broken", "namespace": namespace}, "spec": spec2})
    deg = wait_for("Degraded Multiple", lambda: (c := condition(kapi, namespace, "broken", "Degraded"))
                   and c["reason"] == "Multiple" and c, timeout=90)
    assert "flow group 'a': no source topic matches" in deg["message"]
    assert "spec.mirrors[1].source.bootstrapServers: cluster 'z' (127.0.0.1:1) is unreachable" in deg["message"]
    # the first resource is still served
    assert lag() == 6


def test_strimzi_example_reports_not_applicable_and_unsupported(operator, kapi, namespace) -> None:
    import yaml

    src = yaml.safe_load(open("/work/shared/reference/strimzi/examples/v1/kafka-mirror-maker-2.yaml"))
    src["apiVersion"] = "sparkmirror.io/v1alpha1"
    src["metadata"]["namespace"] = namespace
    src["spec"]["mirrors"][0]["sourceConnector"]["config"]["topic.filter.class"] = "x.Filter"  # not supported
    kapi.create(src)
    st = wait_for("status", lambda: (kapi.get(KMM2, namespace, "my-mirror-maker-2").get("status") or {})
                  .get("notApplicable") and kapi.get(KMM2, namespace, "my-mirror-maker-2")["status"])
    assert {"spec.replicas", "spec.target.groupId", "spec.target.configStorageTopic",
            "spec.mirrors[0].sourceConnector.tasksMax"} <= set(st["notApplicable"])
    assert "spec.target.config[plugin.discovery]" in st["notApplicable"]
    assert st["unsupported"] == ["spec.mirrors[0].sourceConnector.config[topic.filter.class]"]
    wait_for("its application", lambda: names(kapi, "SparkApplication", namespace, "my-mirror-maker-2")
             == ["my-mirror-maker-2-cluster-a"])
    # kopf posts events from a queue of its own, after the status patch: wait for it as for the status
    wait_for("UnsupportedConfig event", lambda: [e for e in kapi.list("Event", namespace)
                                                 if e.get("reason") == "UnsupportedConfig"])


