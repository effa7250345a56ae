"""The whole product on a local kind cluster, as a user would install it: every image built on this machine,
the Kubeflow Spark operator and sparkmirror installed with their Helm charts, and two Kafka clusters as pods
(east: plain; west: TLS + SCRAM-SHA-512, its CA and a user's password as Secrets in the mirror namespace).

Used by the kind tests and by `sparkmirror dev kind up`. Only loopback and the cluster's own containers are
ever contacted (the tests' Kafka clients go through port-forwards).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import images, install, kindcluster, kindkafka
from .images import REPO
from .procs import free_port

KAFKA_NS = "kafka"
MIRROR_NS = "mirror-e2e"  # enforces the restricted Pod Security Standard
SCRAM_USER, SCRAM_PASSWORD = "mirror", "mirror-secret-1"
DEFAULT_NAME = "sparkmirror-e2e"


class StatusTimeout(AssertionError):
    """A KafkaMirrorMaker2's status did not come to what was waited for; the message says what it showed."""


@dataclass
class KindGround:
    cluster: kindcluster.KindCluster
    east: kindkafka.KafkaPod
    west: kindkafka.KafkaPod
    spark_image: str
    timings: dict[str, float] = field(default_factory=dict)
    forwards: list[kindkafka.PortForward] = field(default_factory=list)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300) -> str:
        res = subprocess.run([*self.cluster.kubectl, *args], input=input, capture_output=True, text=True,
                             timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
        return res.stdout

    def apply(self, objs: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))

    def get(self, kind: str, name: str, namespace: str = MIRROR_NS) -> dict[str, Any]:
        out = self.kubectl("-n", namespace, "get", kind, name, "-o", "json", check=False)
        return json.loads(out) if out.strip() else {}

    def status(self, name: str) -> dict[str, Any]:
        """A KafkaMirrorMaker2's status in the mirror namespace (empty until the operator wrote one)."""
        return self.get("kafkamirrormaker2", name).get("status") or {}

    def wait_status(self, name: str, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str,
                    poll: float = 3.0) -> dict[str, Any]:
        """The status once `pred` holds of it. On timeout, `StatusTimeout` carries the status, the namespace's
        pods and applications and the drivers' last log lines: a wait that fails on a cluster torn down after
        the run must say why on its own."""
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = self.status(name)
            if pred(status):
                return status
            time.sleep(poll)
        pods = self.kubectl("-n", MIRROR_NS, "get", "pods,sparkapplications", "-o", "wide", check=False)
        logs = self.kubectl("-n", MIRROR_NS, "logs", "-l", "spark-role=driver", "--tail=60", "--prefix", check=False)
        leases = json.loads(self.kubectl("-n", MIRROR_NS, "get", "leases", "-o", "json", check=False) or "{}")
        reports = {lease["metadata"]["name"]: {"annotations": lease["metadata"].get("annotations"),
                                               "renewTime": lease.get("spec", {}).get("renewTime")}
                   for lease in leases.get("items", [])}  # (the drivers' reports: what the operator read)
        raise StatusTimeout(f"{name}: not {what} in {timeout:.0f}s; status:\n{json.dumps(status, indent=1)}\n{pods}"
                            f"\nLeases:\n{json.dumps(reports, indent=1)}\ndriver logs:\n{logs}")

    def stop_forwards(self) -> None:
        for f in self.forwards:
            f.stop()


def _helm(cluster: kindcluster.KindCluster, *args: str | Path) -> None:
    res = subprocess.run([*cluster.helm, *map(str, args)], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise AssertionError(f"helm {' '.join(map(str, args[:3]))} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def _timed(timings: dict[str, float], key: str, fn: Callable[..., Any], *args: Any) -> Any:
    t0 = time.monotonic()
    out = fn(*args)
    timings[key] = round(time.monotonic() - t0, 1)
    print(f"kind ground: {key} {timings[key]}s", flush=True)
    return out


def up(kubeconfig: Path, name: str = DEFAULT_NAME, fresh: bool = True) -> KindGround:
    """Build what is missing, create the cluster (anew unless `fresh` is False and it exists) and install."""
    timings: dict[str, float] = {}
    product = _timed(timings, "product images", images.product_images)
    kafka_image = _timed(timings, "kafka image", images.kafka_image)
    operator_image = _timed(timings, "spark operator image", images.spark_operator_image, product["spark"])
    _timed(timings, "node image", kindcluster.kindnode.node_image)
    if fresh:
        subprocess.run([str(install.kind()), "delete", "cluster", "--name", name], capture_output=True)
    cluster = _timed(timings, "cluster create", kindcluster.create, name, kubeconfig)
    _timed(timings, "image load", cluster.load, *product.values(), kafka_image, operator_image)
    east = kindkafka.KafkaPod("kafka-east", KAFKA_NS, kafka_image, free_port())
    west = kindkafka.KafkaPod("kafka-west", KAFKA_NS, kafka_image, free_port(), tls=True,
                              users={SCRAM_USER: SCRAM_PASSWORD})
    ground = KindGround(cluster, east, west, product["spark"], timings)
    ground.apply([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KAFKA_NS}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": MIRROR_NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                                          "pod-security.kubernetes.io/enforce-version": "latest"}}},
    ])
    # Kafka first: its pods start while the charts install
    tls = kindkafka.make_tls(west.name, [west.name, f"{west.name}.{KAFKA_NS}.svc",
                                         f"{west.name}.{KAFKA_NS}.svc.cluster.local"])
    ground.apply(kindkafka.cluster_objects(east) + kindkafka.cluster_objects(west, tls))
    # what a user of west is given: its CA and their SCRAM password, as Secrets in the mirror's namespace
    ground.apply([kindkafka.secret("west-ca", MIRROR_NS, {"ca.crt": tls["ca.crt"]}),
                  kindkafka.secret("west-mirror-user", MIRROR_NS, {"password": SCRAM_PASSWORD}),
                  kindkafka.secret("west-wrong-user", MIRROR_NS, {"password": "not-the-password"})])
    repo, tag = operator_image.rsplit(":", 1)
    _timed(timings, "spark operator chart", _helm, cluster, "upgrade", "--install", "spark-operator",
           install.spark_operator_chart(), "--namespace", "spark-operator", "--create-namespace",
           "--set", "image.registry=docker.io", "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
           "--set", "image.pullPolicy=IfNotPresent", "--set", f"spark.jobNamespaces={{{MIRROR_NS}}}",
           # sparkmirror's applications set pods up through Spark pod templates: no webhook needed
           "--set", "webhook.enable=false", "--wait", "--timeout", "5m")
    op_repo, op_tag = product["operator"].rsplit(":", 1)
    spark_repo, spark_tag = product["spark"].rsplit(":", 1)
    _timed(timings, "sparkmirror chart", _helm, cluster, "upgrade", "--install", "sparkmirror",
           REPO / "charts" / "sparkmirror", "--namespace", "sparkmirror", "--create-namespace",
           "--set", f"image.repository={op_repo}", "--set", f"image.tag={op_tag}",
           "--set", "image.pullPolicy=IfNotPresent", "--set", f"sparkImage.repository={spark_repo}",
           "--set", f"sparkImage.tag={spark_tag}", "--set", "statusIntervalSeconds=5",
           # the chart serves only its own namespace unless told: the mirrors live in theirs
           "--set", f"watchNamespaces={{{MIRROR_NS}}}", "--wait", "--timeout", "5m")
    for pod in (east, west):
        ground.kubectl("-n", KAFKA_NS, "rollout", "status", f"deploy/{pod.name}", "--timeout=300s")
        fwd = kindkafka.PortForward(cluster.kubectl, KAFKA_NS, f"svc/{pod.name}", pod.external_port, 9094,
                                    images.log_path(f"port-forward-{pod.name}"))
        ground.forwards.append(fwd.start())
    print(f"kind ground ready: {json.dumps(timings)}", flush=True)
    return ground


def keep() -> bool:
    """SPARKMIRROR_KEEP_KIND=1: reuse and keep the cluster between runs (for working on the kind tests)."""
    return bool(os.environ.get("SPARKMIRROR_KEEP_KIND"))


def down(name: str = DEFAULT_NAME) -> None:
    subprocess.run([str(install.kind()), "delete", "cluster", "--name", name], capture_output=True)
