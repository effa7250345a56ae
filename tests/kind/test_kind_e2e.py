"""The whole product on a real Kubernetes cluster made by kind: images built from the Dockerfile, the Kubeflow
Spark operator and sparkmirror installed with Helm, two Kafka clusters as pods, a KafkaMirrorMaker2 applied
with kubectl, records counted on the target.

Needs a Docker engine: where none answers (the project's own machines have only the Docker client), the
module skips and says why. Everything here talks only to the kind cluster's own containers.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkmirror.devenv import install, paths

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kind
KAFKA_IMAGE = f"apache/kafka:{paths.KAFKA_VERSION}"
NS = "mirror-e2e"


def _no_docker_reason() -> str | None:
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    res = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if res.returncode != 0:
        first = (res.stderr.strip().splitlines() or ["no answer"])[0]
        return f"no Docker engine answers `docker info` ({first}); kind needs one"
    return None


def _run(*cmd: str | Path, input: str | None = None, timeout: float = 900) -> str:
    res = subprocess.run([str(c) for c in cmd], input=input, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return res.stdout


@pytest.fixture(scope="module")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    reason = _no_docker_reason()
    if reason:
        pytest.skip(reason)
    kind = install.kind()
    name = f"sparkmirror-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    _run(kind, "create", "cluster", "--name", name, "--kubeconfig", kubeconfig, "--wait", "180s")
    try:
        for target in ("operator", "spark"):
            image = f"sparkmirror-{target}:e2e"
            _run("docker", "build", "--target", target, "-t", image, REPO, timeout=1800)
            _run(kind, "load", "docker-image", image, "--name", name)
        yield kubeconfig
    finally:
        subprocess.run([str(kind), "delete", "cluster", "--name", name], capture_output=True)


def _kafka_manifests(name: str) -> list[dict]:
    labels = {"app": name}
    env = {"KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker,controller",
           "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
           "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{name}:9092",
           "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER", "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
           "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
           "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1", "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"containers": [{"name": "kafka", "image": KAFKA_IMAGE, "ports": [{"containerPort": 9092}],
                                      "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
         "spec": {"selector": labels, "ports": [{"port": 9092, "targetPort": 9092}]}},
    ]


def test_mirror_on_kind(kind_cluster: Path) -> None:
    kubectl = [str(paths.bin_dir() / "kubectl"), f"--kubeconfig={kind_cluster}"]
    helm = [str(install.helm()), f"--kubeconfig={kind_cluster}"]
    _run(*kubectl, "create", "namespace", NS)
    _run(*helm, "install", "spark-operator", install.spark_operator_chart(), "--namespace", "spark-operator",
         "--create-namespace", "--set", f"spark.jobNamespaces={{{NS}}}", "--set", "webhook.enable=false",
         "--wait", "--timeout", "5m")
    _run(*helm, "install", "sparkmirror", REPO / "charts" / "sparkmirror", "--namespace", "sparkmirror",
         "--create-namespace", "--set", "image.repository=sparkmirror-operator", "--set", "image.tag=e2e",
         "--set", "image.pullPolicy=Never", "--set", "sparkImage.repository=sparkmirror-spark",
         "--set", "sparkImage.tag=e2e",
         "--wait", "--timeout", "5m")
    docs = [*_kafka_manifests("kafka-source"), *_kafka_manifests("kafka-target")]
    _run(*kubectl, "apply", "-f", "-", input=yaml.safe_dump_all(docs))
    for name in ("kafka-source", "kafka-target"):
        _run(*kubectl, "-n", NS, "rollout", "status", f"deploy/{name}", "--timeout=300s")
    exec_src = [*kubectl, "-n", NS, "exec", "deploy/kafka-source", "--"]
    _run(*exec_src, "/opt/kafka/bin/kafka-topics.sh", "--bootstrap-server", "localhost:9092", "--create",
         "--topic", "orders", "--partitions", "4")
    _run(*exec_src, "/opt/kafka/bin/kafka-producer-perf-test.sh", "--topic", "orders", "--num-records", "10000",
         "--record-size", "200", "--throughput", "-1", "--producer-props", "bootstrap.servers=localhost:9092")
    mirror = {
        "apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
        "metadata": {"name": "e2e", "namespace": NS},
        "spec": {"version": paths.KAFKA_VERSION,
                 "target": {"alias": "target", "bootstrapServers": "kafka-target:9092"},
                 "mirrors": [{"source": {"alias": "source", "bootstrapServers": "kafka-source:9092"},
                              "topicsPattern": "orders"}],
                 "spark": {"image": "sparkmirror-spark:e2e", "imagePullPolicy": "Never",
                           "driver": {"memory": "512m"}, "executor": {"instances": 1, "memory": "512m"}}},
    }
    _run(*kubectl, "apply", "-f", "-", input=yaml.safe_dump(mirror))
    deadline = time.monotonic() + 900
    status: dict = {}
    while time.monotonic() < deadline:
        status = json.loads(_run(*kubectl, "-n", NS, "get", "kafkamirrormaker2/e2e", "-o", "json")).get("status", {})
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        if ready and status.get("flowGroups") and all(g.get("lag") == 0 for g in status.get("flowGroups", [])):
            break
        time.sleep(10)
    else:
        raise AssertionError(f"not Ready with lag 0 in 15 min: {json.dumps(status, indent=2)}")
    offsets = _run(*kubectl, "-n", NS, "exec", "deploy/kafka-target", "--", "/opt/kafka/bin/kafka-get-offsets.sh",
                   "--bootstrap-server", "localhost:9092", "--topic", "source.orders")
    # exactly-once: transaction markers take offsets too, so count records with a read_committed consumer
    consumed = _run(*kubectl, "-n", NS, "exec", "deploy/kafka-target", "--", "/opt/kafka/bin/kafka-console-consumer.sh",
                    "--bootstrap-server", "localhost:9092", "--topic", "source.orders", "--from-beginning",
                    "--isolation-level", "read_committed", "--timeout-ms", "20000")
    assert offsets.strip(), "remote topic source.orders was not created"
    assert len(consumed.splitlines()) == 10000
