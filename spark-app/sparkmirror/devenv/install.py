"""Fetches and builds what the local environment runs, each step skipped when its result is already cached."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from . import paths
from .procs import DevEnvError


def _run(cmd: list[str], what: str, log: Path, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise DevEnvError(f"{what} failed (exit {rc}); last lines of {log}:\n{tail}")


def kafka() -> Path:
    """Apache Kafka's jars (broker, tools, MirrorMaker 2, log4j2) from Maven Central, via Maven."""
    libs = paths.kafka_libs()
    stamp = libs / ".complete"
    if stamp.exists():
        return libs
    t0 = time.monotonic()
    print(f"fetching Apache Kafka {paths.KAFKA_VERSION} jars from Maven Central into {libs} ...", flush=True)
    _run(["mvn", "-q", "-B", "-f", str(paths.HERE / "kafka-pom.xml"), f"-Dkafka.version={paths.KAFKA_VERSION}",
          "dependency:copy-dependencies", f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
         "fetching Kafka jars with Maven", paths.cache_dir() / "logs" / "mvn-kafka.log")
    stamp.write_text(paths.KAFKA_VERSION)
    print(f"Kafka jars ready in {time.monotonic() - t0:.0f}s", flush=True)
    return libs


def kubernetes() -> Path:
    """etcd, kube-apiserver, kube-controller-manager, kubectl and the SparkApplication CRD from Go modules."""
    t0 = time.monotonic()
    env = {"K8S_VERSION": paths.K8S_VERSION, "ETCD_VERSION": paths.ETCD_VERSION,
           "SPARK_OPERATOR_VERSION": paths.SPARK_OPERATOR_VERSION, "SPARKMIRROR_CACHE": str(paths.cache_dir())}
    needed = ["etcd", "kube-apiserver", "kube-controller-manager", "kubectl"]
    if all((paths.bin_dir() / b).exists() for b in needed) and paths.spark_application_crd().exists():
        return paths.bin_dir()
    print("building etcd, kube-apiserver, kube-controller-manager and kubectl from their Go modules "
          "(first time only, several minutes) ...", flush=True)
    log = paths.cache_dir() / "logs" / "build-k8s.log"
    _run(["bash", str(paths.HERE / "build-k8s.sh"), "all"], "building Kubernetes binaries", log, env)
    print(f"Kubernetes binaries ready in {time.monotonic() - t0:.0f}s", flush=True)
    return paths.bin_dir()


def kubernetes_tools() -> Path:
    """What the Kubernetes tests use: the control plane and kubectl, plus helm for the chart."""
    kubernetes()
    helm()
    return paths.bin_dir()


def go_tool(binary: str, package: str, version: str) -> Path:
    """A Go command whose module builds with plain `go install` (helm, kind), into the cache's bin."""
    target = paths.bin_dir() / binary
    stamp = paths.bin_dir() / f".{binary}.{version}"
    if target.exists() and stamp.exists():
        return target
    t0 = time.monotonic()
    print(f"building {binary} {version} from its Go module ...", flush=True)
    _run(["go", "install", f"{package}@{version}"], f"building {binary}",
         paths.cache_dir() / "logs" / f"build-{binary}.log",
         {"GOBIN": str(paths.bin_dir()), "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -trimpath"})
    for old in paths.bin_dir().glob(f".{binary}.*"):
        old.unlink()
    stamp.touch()
    print(f"{binary} ready in {time.monotonic() - t0:.0f}s", flush=True)
    return target


def helm() -> Path:
    return go_tool("helm", "helm.sh/helm/v3/cmd/helm", paths.HELM_VERSION)


def kind() -> Path:
    return go_tool("kind", "sigs.k8s.io/kind", paths.KIND_VERSION)


def spark_operator_chart() -> Path:
    """The Kubeflow Spark operator's Helm chart, from the same pinned Go module as its CRD."""
    out = subprocess.run(["go", "mod", "download", "-json",
                          f"github.com/kubeflow/spark-operator/v2@{paths.SPARK_OPERATOR_VERSION}"],
                         capture_output=True, text=True, check=True).stdout
    import json

    return Path(json.loads(out)["Dir"]) / "charts" / "spark-operator-chart"


def main() -> None:
    kafka()
    kubernetes_tools()


if __name__ == "__main__":
    main()
