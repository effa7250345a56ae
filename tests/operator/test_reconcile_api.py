"""The Reconciler and the status refresh on the real API server, without a running operator (nothing else
reconciles these resources meanwhile): RBAC errors and stale refreshes land right."""
from __future__ import annotations

import pytest

from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler

from .test_operator import KMM2, resource, secret

pytestmark = pytest.mark.k8s


def test_unreadable_secret_is_a_condition_not_a_crash(kube, kmm2_crd, kapi, namespace) -> None:
    """An operator whose RBAC cannot read a referenced Secret (403) says so on the status, naming the Secret."""
    from kubernetes.client import ApiException

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    everything_but_secrets = [
        {"apiGroups": ["sparkmirror.io", "sparkoperator.k8s.io", "coordination.k8s.io"], "resources": ["*"],
         "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["configmaps", "events"], "verbs": ["*"]},
    ]
    meta = {"name": "no-secrets", "namespace": namespace}
    kapi.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    kapi.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
                 "rules": everything_but_secrets})
    kapi.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-secrets"},
                 "subjects": [{"kind": "ServiceAccount", "name": "no-secrets", "namespace": namespace}]})
    created = kapi.create(resource("unreadable", namespace))
    kube.wait_allowed(f"system:serviceaccount:{namespace}:no-secrets", namespace, "create", "configmaps")
    with kube.api_client() as api:
        api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:no-secrets")
        as_operator = KubeApi(api)
        with pytest.raises(ApiException) as e:  # the premise: this identity cannot read Secrets
            as_operator.get("Secret", namespace, "mirror-user")
        assert e.value.status == 403
        result = Reconciler(as_operator).reconcile(created, with_lag=True)
    deg = next(c for c in result.status["conditions"] if c["type"] == "Degraded")
    assert deg["status"] == "True" and deg["reason"] == "SecretUnreadable", deg
    assert (f"Secret {namespace}/mirror-user referenced by spec.target.authentication.passwordSecret cannot be "
            "read: 403 Forbidden") in deg["message"]
    assert "SparkApplication/unreadable-a" in result.applied  # the rest of the reconcile still happened


def test_a_stale_status_refresh_never_puts_back_an_older_generation(kube, kmm2_crd, kapi, namespace) -> None:
    """The status timer runs beside the update handler: a refresh computed from the resource as it was before
    an update must not overwrite the status the handler wrote for the newer generation."""
    import kopf

    from sparkmirror_operator import handlers

    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(resource("race", namespace))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    first = kapi.get(KMM2, namespace, "race")
    kapi.patch_status(KMM2, namespace, "race", rec.reconcile(first).status)
    stale = kapi.get(KMM2, namespace, "race")             # what a timer run starts from (generation 1)
    kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/race", [],
               {"spec": {"version": "2.0"}}, "application/merge-patch+json")
    fresh = kapi.get(KMM2, namespace, "race")
    assert fresh["metadata"]["generation"] == 2
    kapi.patch_status(KMM2, namespace, "race", rec.reconcile(fresh).status)   # the update handler's write
    assert kapi.get(KMM2, namespace, "race")["status"]["observedGeneration"] == 2

    memo = kopf.Memo()
    memo.reconciler = rec
    handlers.refresh_status(body=stale, memo=memo)        # the timer run that began before the update ends
    st = kapi.get(KMM2, namespace, "race")["status"]
    # 2.0 is a worker generation in standby (no driver runs here to take over): 1.0 is what runs
    assert st["observedGeneration"] == 2 and st["version"] == "1.0", st
    # from a current view the refresh is written
    current = kapi.get(KMM2, namespace, "race")
    assert handlers._write_status(rec.api, current, {**current["status"], "lag": 7})
    assert kapi.get(KMM2, namespace, "race")["status"]["lag"] == 7
