"""Least privilege, proven on the real API server (RBAC authorizer, admission on): after `helm install`, what the
operator's and the drivers' ServiceAccounts may and may not do (`kubectl auth can-i` as each), and what the chart's
admission policies refuse that RBAC cannot (real writes as the driver and as the operator). The threat model:
charts/sparkmirror/README.md."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import time

import pytest

from sparkmirror.resource.names import LEASE_HOLDER, lease_ready_key
from .conftest import wait_for
from .test_chart import CHART, helm

pytestmark = [pytest.mark.k8s, pytest.mark.skipif(helm() is None, reason="no helm binary")]

# (verb, resource[, subresource]): what the operator must be able to do in a served namespace ...
OPERATOR_MAY = [("create", "sparkapplications.sparkoperator.k8s.io"), ("delete", "sparkapplications.sparkoperator.k8s.io"),
                ("create", "configmaps"), ("delete", "configmaps"), ("create", "leases.coordination.k8s.io"),
                ("patch", "leases.coordination.k8s.io"), ("watch", "kafkamirrormaker2s.sparkmirror.io"),
                ("patch", "kafkamirrormaker2s.sparkmirror.io", "status"), ("create", "events"),
                ("get", "secrets")]
# ... and what would make it (nearly) namespace admin: a pod mounts any Secret and runs as any ServiceAccount;
# RBAC objects grant anything it holds to anyone
OPERATOR_MAY_NOT = [("create", "pods"), ("delete", "pods"), ("create", "pods", "exec"), ("create", "serviceaccounts"),
                    ("create", "serviceaccounts", "token"), ("create", "roles.rbac.authorization.k8s.io"),
                    ("create", "rolebindings.rbac.authorization.k8s.io"), ("bind", "clusterroles.rbac.authorization.k8s.io"),
                    ("create", "services"), ("create", "deployments.apps"), ("create", "jobs.batch"),
                    ("list", "secrets"), ("watch", "secrets"), ("create", "secrets"), ("update", "secrets"),
                    ("create", "persistentvolumeclaims")]
# Spark on Kubernetes: executors and what they need, plus the handoff's read and report
DRIVER_MAY = [("create", "pods"), ("delete", "pods"), ("watch", "pods"), ("create", "configmaps"),
              ("create", "services"), ("create", "persistentvolumeclaims"), ("get", "leases.coordination.k8s.io"),
              ("patch", "leases.coordination.k8s.io"), ("list", "leases.coordination.k8s.io"),
              ("watch", "leases.coordination.k8s.io")]
# nothing of the operator's state: its resource and status, applications, Lease moves; no Secrets, no RBAC
DRIVER_MAY_NOT = [("get", "kafkamirrormaker2s.sparkmirror.io"), ("patch", "kafkamirrormaker2s.sparkmirror.io", "status"),
                  ("update", "kafkamirrormaker2s.sparkmirror.io", "status"), ("create", "sparkapplications.sparkoperator.k8s.io"),
                  ("patch", "sparkapplications.sparkoperator.k8s.io"), ("update", "leases.coordination.k8s.io"),
                  ("create", "leases.coordination.k8s.io"), ("delete", "leases.coordination.k8s.io"),
                  ("update", "configmaps"), ("patch", "configmaps"),
                  ("get", "secrets"), ("list", "secrets"), ("create", "serviceaccounts"),
                  ("create", "serviceaccounts", "token"), ("create", "roles.rbac.authorization.k8s.io"),
                  ("create", "rolebindings.rbac.authorization.k8s.io"), ("create", "pods", "exec")]


def can_i(kube, user: str, namespace: str, verb: str, resource: str, sub: str | None = None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={user}", f"--namespace={namespace}"]
    res = kube.kubectl(*args, *([f"--subresource={sub}"] if sub else []), check=False)
    assert res.stdout.strip() in ("yes", "no"), res.stdout + res.stderr  # an error is not a "no"
    return res.stdout.strip() == "yes"


def refused(kube, user: str, *args: str, input: str | None = None, timeout: float = 30.0) -> str:
    """Run kubectl as user until the API server refuses (an admission policy is in force shortly after it is
    created, as RBAC is); the refusal's message."""
    deadline = time.monotonic() + timeout
    while True:
        res = kube.kubectl(*args, f"--as={user}", input=input, check=False)
        if res.returncode != 0:
            return res.stderr
        if time.monotonic() > deadline:
            raise AssertionError(f"kubectl {' '.join(args)} as {user} still allowed after {timeout:.0f}s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def release(kube, kmm2_crd, tmp_path_factory) -> dict[str, str]:
    """The chart installed by helm, serving two namespaces: the release's own (where the operator's ServiceAccount
    lives, beside drivers: the worst case) and a jobs namespace."""
    name = f"rbac{int(time.time()) % 100000}"
    ns, jobs = f"{name}-ops", f"{name}-jobs"
    for n in (ns, jobs):
        kube.kubectl("create", "namespace", n)
    res = subprocess.run([helm(), "install", name, str(CHART), "--kubeconfig", str(kube.kubeconfig), "--namespace", ns,
                          "--skip-crds", "--set", f"watchNamespaces={{{ns},{jobs}}}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    full = f"{name}-sparkmirror"
    out = {"ns": ns, "jobs": jobs, "release": name, "operator": f"system:serviceaccount:{ns}:{full}",
           "driver_sa": f"{full}-driver", "operator_sa": full, "lease": f"{full}-leader"}
    out["driver"] = f"system:serviceaccount:{ns}:{out['driver_sa']}"
    kube.wait_allowed(out["operator"], ns, "create", "sparkapplications.sparkoperator.k8s.io")
    kube.wait_allowed(out["driver"], ns, "create", "pods")
    kube.wait_allowed(f"system:serviceaccount:{jobs}:{out['driver_sa']}", jobs, "create", "pods")
    yield out
    subprocess.run([helm(), "uninstall", name, "--kubeconfig", str(kube.kubeconfig), "--namespace", ns],
                   capture_output=True, text=True, timeout=120)


def test_what_the_operator_may_and_may_not_do(kube, release) -> None:
    user = release["operator"]
    for ns in (release["ns"], release["jobs"]):
        assert [c for c in OPERATOR_MAY if not can_i(kube, user, ns, *c)] == [], ns
        assert [c for c in OPERATOR_MAY_NOT if can_i(kube, user, ns, *c)] == [], ns
    # nothing outside the namespaces it serves
    assert not can_i(kube, user, "default", "create", "sparkapplications.sparkoperator.k8s.io")
    assert not can_i(kube, user, "default", "get", "secrets")
    # its election Lease by name; the flow groups' Leases in the served namespaces
    assert can_i(kube, user, release["ns"], "update", f"leases.coordination.k8s.io/{release['lease']}")


def test_what_the_drivers_may_and_may_not_do(kube, release) -> None:
    for ns in (release["ns"], release["jobs"]):
        user = f"system:serviceaccount:{ns}:{release['driver_sa']}"  # one account per served namespace
        assert [c for c in DRIVER_MAY if not can_i(kube, user, ns, *c)] == [], ns
        assert [c for c in DRIVER_MAY_NOT if can_i(kube, user, ns, *c)] == [], ns
        assert not can_i(kube, user, "default", "create", "pods")
    # a namespace's driver account has no right in the other namespace
    other = f"system:serviceaccount:{release['jobs']}:{release['driver_sa']}"
    assert not can_i(kube, other, release["ns"], "create", "pods")


def _lease(namespace: str, name: str, labels: dict[str, str], annotations: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": namespace, "labels": labels,
                                    "annotations": annotations},
                       "spec": {"holderIdentity": "m-a", "leaseDurationSeconds": 15}})


def _pod(namespace: str, name: str, sa: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                       "spec": {"serviceAccountName": sa, "containers": [{"name": "c", "image": "busybox"}]}})


OPERATOR_LABELS = {"app.kubernetes.io/managed-by": "sparkmirror-operator", "sparkmirror.io/resource": "m"}


def test_the_admission_policy_keeps_drivers_off_the_operators_state(kube, release) -> None:
    """What RBAC cannot express (labels, fields, annotation keys), refused by the drivers' admission policy with a
    message saying why; what a driver does for Spark and the handoff still passes."""
    ns, driver = release["ns"], release["driver"]
    flow_lease = "m-a"
    kube.kubectl("create", "-f", "-", input=_lease(ns, flow_lease, {**OPERATOR_LABELS, "app.kubernetes.io/component": "lease"},
                                                   {LEASE_HOLDER: "1"}))
    kube.kubectl("create", "-f", "-", input=_lease(ns, release["lease"], {}, {}))  # the operators' election
    kube.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m-a-config", "namespace": ns,
                                                            "labels": {**OPERATOR_LABELS,
                                                                       "app.kubernetes.io/component": "flow-group"}},
        "data": {"flowgroup.yaml": "name: a"}}))

    def patch(name: str, body: dict) -> list[str]:
        return ["patch", "lease", name, f"--namespace={ns}", "--type=merge", "-p", json.dumps(body)]

    # the Lease's holder (which generation copies) is the operator's: refused
    msg = refused(kube, driver, *patch(flow_lease, {"metadata": {"annotations": {LEASE_HOLDER: "2"}}}))
    assert "may change only its reports" in msg
    assert "may change only its reports" in refused(kube, driver, *patch(flow_lease, {"spec": {"holderIdentity": "x"}}))
    assert "may change only its reports" in refused(
        kube, driver, *patch(flow_lease, {"spec": {"leaseDurationSeconds": 3600}}))  # never stalled
    assert "may change only its reports" in refused(
        kube, driver, *patch(flow_lease, {"metadata": {"labels": {"sparkmirror.io/resource": "other"}}}))
    # another Lease of the namespace (the operators' leader election): refused whatever the change
    assert "only its flow groups' Leases" in refused(
        kube, driver, *patch(release["lease"], {"metadata": {"annotations": {lease_ready_key(2): "1"}}}))
    # the operator's ConfigMaps: not deleted, not forged
    assert "ConfigMaps" in refused(kube, driver, "delete", "configmap", "m-a-config", f"--namespace={ns}")
    forged = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "m-a-g9-config", "namespace": ns,
                                      "labels": {"sparkmirror.io/resource": "m"}}, "data": {}})
    assert "ConfigMaps" in refused(kube, driver, "create", "-f", "-", input=forged)
    # a pod as another ServiceAccount (the operator's, in its own namespace): refused
    assert "only as its own ServiceAccount" in refused(
        kube, driver, "create", "-f", "-", input=_pod(ns, "as-operator", release["operator_sa"]))

    # what stays allowed: the handoff's reports, Spark's executor pod and ConfigMap
    kube.kubectl("patch", "lease", flow_lease, f"--namespace={ns}", "--type=merge", f"--as={driver}",
                 "-p", json.dumps({"metadata": {"annotations": {lease_ready_key(2): "123"}}}))
    kube.kubectl("patch", "lease", flow_lease, f"--namespace={ns}", "--type=merge", f"--as={driver}",
                 "-p", json.dumps({"spec": {"renewTime": "2026-01-02T03:04:05.000006Z"}}))  # the holder renews
    kube.kubectl("create", "-f", "-", f"--as={driver}", input=_pod(ns, "exec-1", release["driver_sa"]))
    kube.kubectl("create", "configmap", "spark-exec-1-conf-map", f"--namespace={ns}", f"--as={driver}")
    kube.kubectl("delete", "configmap", "spark-exec-1-conf-map", f"--namespace={ns}", f"--as={driver}")
    after = json.loads(kube.kubectl("get", "lease", flow_lease, f"--namespace={ns}", "-o", "json").stdout)
    assert after["metadata"]["annotations"] == {LEASE_HOLDER: "1", lease_ready_key(2): "123"}
    assert after["spec"]["holderIdentity"] == "m-a" and after["spec"]["leaseDurationSeconds"] == 15
    assert after["spec"]["renewTime"] == "2026-01-02T03:04:05.000006Z"


def test_the_admission_policy_keeps_the_operator_to_its_own_objects(kube, release) -> None:
    """The operator's Role covers every ConfigMap and Lease of a served namespace; its policy refuses those not
    carrying its label, but for its election Lease."""
    ns, op = release["jobs"], release["operator"]
    kube.kubectl("create", "configmap", "someone-elses", f"--namespace={ns}")
    assert "writes only its own" in refused(kube, op, "label", "configmap", "someone-elses", "x=y", f"--namespace={ns}")
    assert "writes only its own" in refused(kube, op, "delete", "configmap", "someone-elses", f"--namespace={ns}")
    assert "writes only its own" in refused(kube, op, "create", "-f", "-", input=_lease(ns, "not-mine", {}, {}))
    # a ConfigMap labelled as its own, and its election Lease by name (in the release's namespace), pass
    kube.kubectl("create", "-f", "-", f"--as={op}", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine", "namespace": ns,
                                                            "labels": {"sparkmirror.io/resource": "m"}}}))
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", f"--as={op}",
                 input=_lease(release["ns"], release["lease"], {}, {}))


def test_the_operator_reconciles_and_a_driver_reports_with_the_installed_rights(kube, release) -> None:
    """End to end with the rights helm installed: the operator (as its ServiceAccount) renders a resource whose
    applications name the drivers' account; a driver (as that account) reads its Lease and reports ready on it
    through the job's own client (handoff/lease.py), and cannot move it."""
    from kubernetes import client

    import threading

    from sparkmirror.handoff.lease import LeaseGate, LeaseRef
    from sparkmirror.handoff.renewal import Renewal
    from sparkmirror.handoff.takeover import Takeover
    from sparkmirror.resource.names import EXIT_TOO_FEW_BROKERS, LEASE_FAILURE, lease_took_over_key
    from sparkmirror_operator.kubeapi import KubeApi
    from sparkmirror_operator.reconcile import Reconciler
    from sparkmirror_operator.render import Settings

    ns = release["jobs"]
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": ns},
            "spec": {"target": {"alias": "b", "bootstrapServers": "127.0.0.1:1"},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:2"}}]}}
    with kube.api_client() as admin:
        created = KubeApi(admin).create(body)
    settings = Settings(driver_service_account=release["driver_sa"])
    with kube.api_client() as api:
        api.set_default_header("Impersonate-User", release["operator"])
        result = Reconciler(KubeApi(api), settings).reconcile(created)
    assert not [c for c in result.status["conditions"] if c["type"] == "Degraded" and c["status"] == "True"], \
        result.status
    assert sorted(result.applied) == ["ConfigMap/m-a-config", "Lease/m-a", "SparkApplication/m-a"]
    with kube.api_client() as admin:
        app = KubeApi(admin).get("SparkApplication", ns, "m-a")
    assert app["spec"]["driver"]["serviceAccount"] == app["spec"]["executor"]["serviceAccount"] == release["driver_sa"]

    with kube.api_client() as api:
        api.set_default_header("Impersonate-User", f"system:serviceaccount:{ns}:{release['driver_sa']}")
        gate = LeaseGate([LeaseRef(ns, "m-a", 1)], api=client.CoordinationV1Api(api))
        assert gate.holders() == {LeaseRef(ns, "m-a", 1): 1}
        # followed through a watch with the installed rights (leasewatch.py), no read per look
        wait_for("the Lease's watch", lambda: gate._watch.annotations(ns, "m-a")[0], timeout=20)
        gate.report_ready()
        gate.report_took_over(Takeover(1, ["a"], at_ms=5, took_ms=7))
        gate.report_failure(EXIT_TOO_FEW_BROKERS, "topic 'a.t' needs replication factor 3")  # (on kind the policy
        # once refused it, and the status never said why the driver ended)
        renewal = Renewal(client.CoordinationV1Api(api), [(ns, "m-a", 1), (ns, "m-a", 2)], threading.Event())
        renewal.round()  # generation 1 holds the Lease and renews it; generation 2 (not the holder) leaves it
        assert renewal.renewals == 1
        with pytest.raises(client.ApiException) as e:
            client.CoordinationV1Api(api).patch_namespaced_lease(
                "m-a", ns, {"metadata": {"annotations": {LEASE_HOLDER: "7"}}})
        assert e.value.status in (403, 422) and "reports" in e.value.body
    with kube.api_client() as admin:
        lease = KubeApi(admin).get("Lease", ns, "m-a")
    annotations = lease["metadata"]["annotations"]
    assert annotations[LEASE_HOLDER] == "1" and lease_ready_key(1) in annotations
    assert json.loads(annotations[lease_took_over_key(1)]) == {"atMs": 5, "tookMs": 7, "fenced": 0}
    failure = json.loads(annotations[LEASE_FAILURE])
    assert (failure["generation"], failure["exitCode"]) == (1, EXIT_TOO_FEW_BROKERS) and "factor 3" in failure["message"]
    renewed = dt.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.timezone.utc) - renewed).total_seconds()) < 60, lease["spec"]
    assert lease["spec"]["holderIdentity"] == "m-a"  # the operator's, untouched


def test_watch_all_namespaces_is_cluster_wide_only_where_needed(kube, kmm2_crd) -> None:
    """watchAllNamespaces: the operator's rules (no Secrets) through a ClusterRole, so it serves a namespace the
    chart never heard of; Secrets and the drivers' account only in watchNamespaces; no pod or RBAC right anywhere."""
    name = f"all{int(time.time()) % 100000}"
    ns, listed, other = f"{name}-ops", f"{name}-listed", f"{name}-other"
    for n in (ns, listed, other):
        kube.kubectl("create", "namespace", n)
    res = subprocess.run([helm(), "install", name, str(CHART), "--kubeconfig", str(kube.kubeconfig), "--namespace", ns,
                          "--skip-crds", "--set", "watchAllNamespaces=true", "--set", f"watchNamespaces={{{listed}}}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        op = f"system:serviceaccount:{ns}:{name}-sparkmirror"
        kube.wait_allowed(op, other, "create", "sparkapplications.sparkoperator.k8s.io")
        kube.wait_allowed(op, listed, "get", "secrets")
        assert can_i(kube, op, other, "list", "namespaces") and can_i(kube, op, other, "create", "leases.coordination.k8s.io")
        assert not can_i(kube, op, other, "get", "secrets")
        for where in (ns, listed, other):
            assert [c for c in OPERATOR_MAY_NOT if can_i(kube, op, where, *c)] == [], where
        driver = f"system:serviceaccount:{listed}:{name}-sparkmirror-driver"
        kube.wait_allowed(driver, listed, "create", "pods")
        assert not can_i(kube, driver, other, "create", "pods")
        assert kube.kubectl("get", "serviceaccount", f"{name}-sparkmirror-driver", f"--namespace={other}",
                            check=False).returncode != 0  # drivers run only where their account exists
    finally:
        subprocess.run([helm(), "uninstall", name, "--kubeconfig", str(kube.kubeconfig), "--namespace", ns],
                       capture_output=True, text=True, timeout=120)
