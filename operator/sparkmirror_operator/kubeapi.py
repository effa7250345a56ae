"""A small generic REST layer over `kubernetes.client.ApiClient` for the kinds the operator manages.

Server-side apply (`application/apply-patch+yaml`, field manager `sparkmirror-operator`, forced), list by
label, delete, and status patches, for any kind in `KINDS`, with no discovery round trips.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client, config

from sparkmirror.resource.model import GROUP, PLURAL, VERSION
from .render import FIELD_MANAGER


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        p = f"{base}/namespaces/{quote(namespace)}/{self.plural}" if namespace else f"{base}/{self.plural}"
        return f"{p}/{quote(name)}" if name else p


KINDS = {k.kind: k for k in [
    Kind("v1", "ServiceAccount", "serviceaccounts"),
    Kind("v1", "ConfigMap", "configmaps"),
    Kind("v1", "Secret", "secrets"),
    Kind("v1", "Event", "events"),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    Kind("coordination.k8s.io/v1", "Lease", "leases"),
    Kind("sparkoperator.k8s.io/v1beta2", "SparkApplication", "sparkapplications"),
    Kind(f"{GROUP}/{VERSION}", "KafkaMirrorMaker2", PLURAL),
]}
# what the operator creates per resource, in the order it applies them; no RBAC: the chart provisions the
# drivers' ServiceAccount, Role and RoleBinding (charts/sparkmirror/README.md)
OWNED_KINDS = ["ConfigMap", "Lease", "SparkApplication"]


def api_client() -> client.ApiClient:
    """In a pod: the service account; elsewhere: $KUBECONFIG (read now, not at import) or ~/.kube/config."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return config.new_client_from_config(config_file=path.split(os.pathsep)[0])


class KubeApi:
    def __init__(self, api: client.ApiClient, field_manager: str = FIELD_MANAGER, timeout: float = 30.0) -> None:
        self.api = api
        self.field_manager = field_manager
        self.timeout = timeout

    def _call(self, method: str, path: str, query: list[tuple[str, Any]] | None = None, body: Any = None,
              content_type: str | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        param = self.api.param_serialize(method=method, resource_path=path, query_params=query or [],
                                         header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(*param, _request_timeout=self.timeout)
        resp.read()
        data = resp.data.decode() if isinstance(resp.data, bytes) else (resp.data or "")
        if not 200 <= resp.status < 300:
            raise client.ApiException(status=resp.status, reason=resp.reason, body=data)
        return json.loads(data) if data else {}

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", KINDS[kind].path(namespace, name))
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        return self._call("GET", KINDS[kind].path(namespace), query).get("items", [])

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self._call("PATCH", KINDS[obj["kind"]].path(meta.get("namespace"), meta["name"]),
                          [("fieldManager", self.field_manager), ("force", "true")], obj,
                          "application/apply-patch+yaml")

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        try:
            self._call("DELETE", KINDS[kind].path(namespace, name), [("propagationPolicy", "Background")])
            return True
        except client.ApiException as e:
            if e.status == 404:
                return False
            raise

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        """Merge-patch the status; with resource_version, only if the object is still at that version (else
        ApiException 409)."""
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._call("PATCH", KINDS[kind].path(namespace, name) + "/status", [], body,
                          "application/merge-patch+json")

    def drop_annotations(self, kind: str, namespace: str, name: str, keys: list[str]) -> bool:
        """Remove annotations another field manager wrote (a driver's reports on a Lease: server-side apply
        leaves fields it does not own alone); False when the object is gone."""
        try:
            self._call("PATCH", KINDS[kind].path(namespace, name), [],
                       {"metadata": {"annotations": {k: None for k in keys}}}, "application/merge-patch+json")
            return True
        except client.ApiException as e:
            if e.status == 404:
                return False
            raise

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self._call("POST", KINDS[obj["kind"]].path(meta.get("namespace")), [], obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole object; with metadata.resourceVersion, only if it is still at that version (else 409)."""
        meta = obj["metadata"]
        return self._call("PUT", KINDS[obj["kind"]].path(meta.get("namespace"), meta["name"]), [], obj)
