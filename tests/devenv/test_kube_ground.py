"""The local API server is a real one: CRDs install, custom objects round-trip, watches deliver updates,
and the garbage collector deletes dependents."""
from __future__ import annotations

import threading
import time

from kubernetes import client, watch

GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"


def _app(name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SparkApplication", "metadata": {"name": name},
            "spec": {"type": "Python", "mode": "cluster", "sparkVersion": "4.1.1", "image": "spark:4.1.1",
                     "mainApplicationFile": "local:///opt/job.py",
                     "driver": {"cores": 1, "memory": "512m"}, "executor": {"instances": 1, "memory": "512m"}}}


def test_spark_application_crd_is_installed(kube) -> None:
    with kube.api_client() as api:
        crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    assert any(v.name == VERSION and v.served for v in crd.spec.versions)


def test_custom_object_round_trip_and_watch(kube, namespace) -> None:
    with kube.api_client() as api:
        co = client.CustomObjectsApi(api)
        created = co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _app("demo"))
        got = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "demo")
        assert got["spec"]["mainApplicationFile"] == "local:///opt/job.py"
        seen: list[dict] = []

        def watch_updates() -> None:
            w = watch.Watch()
            for ev in w.stream(co.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                               resource_version=created["metadata"]["resourceVersion"], timeout_seconds=20):
                seen.append(ev)
                if ev["type"] == "MODIFIED":
                    w.stop()

        t = threading.Thread(target=watch_updates)
        t.start()
        time.sleep(0.5)
        co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "demo",
                                          {"spec": {"image": "spark:4.1.1-python3"}})
        t.join(25)
    modified = [e for e in seen if e["type"] == "MODIFIED"]
    assert modified and modified[0]["object"]["spec"]["image"] == "spark:4.1.1-python3"


def test_garbage_collector_deletes_owned_objects(kube, namespace) -> None:
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        owner = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="owner"), data={"a": "1"}))
        ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="owned", owner_references=[ref]), data={"b": "2"}))
        core.delete_namespaced_config_map("owner", namespace)
        deadline = time.monotonic() + 60
        names = {"owned"}
        while time.monotonic() < deadline and "owned" in names:
            names = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
            time.sleep(0.5)
    assert "owned" not in names, "kube-controller-manager's garbage collector did not delete the dependent"
