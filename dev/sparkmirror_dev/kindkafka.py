"""Kafka clusters as pods on the kind ground: plain, or TLS + SCRAM-SHA-512 with its credentials in Secrets.

Each cluster is one KRaft node (the image from `images.kafka_image`) with three listeners:
- INTERNAL, what mirrors use: `<name>.<namespace>.svc:9092`, PLAINTEXT or SASL_SSL with SCRAM-SHA-512;
- EXTERNAL, what the tests' own clients use through `kubectl port-forward` on a loopback port;
- REPLICATION and CONTROLLER on localhost inside the pod.
Manifests are pure functions of the settings; certificates are made with openssl on the host.
"""
from __future__ import annotations

import base64
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .certs import CertificateAuthority
from .procs import DevEnvError, log_tail, spawn, stop_pid

SCRAM_MECHANISM = "SCRAM-SHA-512"
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@dataclass
class KafkaPod:
    name: str
    namespace: str
    image: str
    external_port: int
    tls: bool = False
    users: dict[str, str] = field(default_factory=dict)  # SCRAM users (name -> password), with tls

    @property
    def internal_bootstrap(self) -> str:
        return f"{self.name}.{self.namespace}.svc:9092"

    @property
    def external_bootstrap(self) -> str:
        return f"127.0.0.1:{self.external_port}"

    @property
    def tls_secret(self) -> str:
        return f"{self.name}-tls"

    def properties(self) -> str:
        internal = "SASL_SSL" if self.tls else "PLAINTEXT"
        lines = [
            "listeners=INTERNAL://:9092,REPLICATION://localhost:9093,EXTERNAL://:9094,CONTROLLER://localhost:9095",
            f"advertised.listeners=INTERNAL://{self.internal_bootstrap},REPLICATION://localhost:9093,"
            f"EXTERNAL://{self.external_bootstrap}",
            f"listener.security.protocol.map=INTERNAL:{internal},REPLICATION:PLAINTEXT,EXTERNAL:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=REPLICATION",
        ]
        if self.tls:
            lines += [
                f"listener.name.internal.sasl.enabled.mechanisms={SCRAM_MECHANISM}",
                f"listener.name.internal.{SCRAM_MECHANISM.lower()}.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "listener.name.internal.ssl.keystore.type=PEM",
                "listener.name.internal.ssl.keystore.location=/etc/kafka/tls/keystore.pem",
            ]
        return "\n".join(lines)

    def manifests(self) -> list[dict[str, Any]]:
        labels = {"app.kubernetes.io/name": "kafka", "app.kubernetes.io/instance": self.name}
        env = [{"name": "KAFKA_PROPERTIES", "value": self.properties()}]
        mounts = [{"name": "data", "mountPath": "/var/lib/kafka/data"}]
        volumes: list[dict[str, Any]] = [{"name": "data", "emptyDir": {}}]
        if self.tls:
            env.append({"name": "KAFKA_SCRAM_USERS", "valueFrom": {"secretKeyRef": {
                "name": f"{self.name}-scram-users", "key": "users"}}})
            mounts.append({"name": "tls", "mountPath": "/etc/kafka/tls", "readOnly": True})
            volumes.append({"name": "tls", "secret": {"secretName": self.tls_secret, "defaultMode": 0o440}})
        container = {"name": "kafka", "image": self.image, "imagePullPolicy": "IfNotPresent", "env": env,
                     "ports": [{"name": "internal", "containerPort": 9092},
                               {"name": "external", "containerPort": 9094}],
                     "readinessProbe": {"tcpSocket": {"port": 9092}, "periodSeconds": 2},
                     "resources": {"requests": {"cpu": "50m", "memory": "512Mi"}},
                     "securityContext": RESTRICTED_CONTAINER, "volumeMounts": mounts}
        meta = {"name": self.name, "namespace": self.namespace, "labels": labels}
        return [
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
             "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels},
                                   "spec": {"securityContext": RESTRICTED_POD, "containers": [container],
                                            "volumes": volumes}}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": meta,
             "spec": {"selector": labels, "ports": [{"name": "internal", "port": 9092, "targetPort": 9092},
                                                    {"name": "external", "port": 9094, "targetPort": 9094}]}},
        ]


def secret(name: str, namespace: str, data: dict[str, str | bytes]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode() for k, v in data.items()}}


def make_tls(common_name: str, dns_names: list[str]) -> dict[str, bytes]:
    """A CA and a server certificate for the broker (PEM): {'ca.crt', 'keystore.pem'}; keystore.pem holds the
    unencrypted PKCS#8 key followed by the certificate chain, as Kafka's PEM keystore expects."""
    with tempfile.TemporaryDirectory() as tmp:
        ca = CertificateAuthority(Path(tmp))
        server = ca.issue("server", common_name, [f"DNS:{n}" for n in dns_names])
        return {"ca.crt": ca.cert.read_bytes(), "keystore.pem": server.keystore.read_bytes()}


def cluster_objects(pod: KafkaPod, tls: dict[str, bytes] | None = None) -> list[dict[str, Any]]:
    """Everything a Kafka pod needs in its namespace: Secrets (TLS keystore, SCRAM users) and the manifests."""
    objs: list[dict[str, Any]] = []
    if pod.tls:
        assert tls is not None, "a TLS cluster needs its keystore"
        objs.append(secret(pod.tls_secret, pod.namespace, {"keystore.pem": tls["keystore.pem"]}))
        objs.append(secret(f"{pod.name}-scram-users", pod.namespace,
                           {"users": "\n".join(f"{u}={p}" for u, p in pod.users.items())}))
    return objs + pod.manifests()


class PortForward:
    """`kubectl port-forward` of a Service port to a loopback port, restarted if it drops."""

    def __init__(self, kubectl: list[str], namespace: str, target: str, local: int, remote: int, log: Path) -> None:
        self.cmd = [*kubectl, "-n", namespace, "port-forward", "--address", "127.0.0.1", target, f"{local}:{remote}"]
        self.local, self.log = local, log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> "PortForward":
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = spawn(self.cmd, self.log)
            try:
                with socket.create_connection(("127.0.0.1", self.local), timeout=1):
                    return self
            except OSError:
                time.sleep(0.5)
        raise DevEnvError(f"port-forward to 127.0.0.1:{self.local} did not open; see {self.log}:\n"
                          f"{log_tail(self.log)}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_pid(self.proc.pid, timeout=5)
