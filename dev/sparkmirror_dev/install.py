"""Fetches and builds what the local environment runs, each step skipped when its result is already cached."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from . import paths
from .procs import DevEnvError


def _run(cmd: list[str], what: str, log: Path, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                             cwd=(env or {}).get("PWD"))
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise DevEnvError(f"{what} failed (exit {rc}); last lines of {log}:\n{tail}")


def kafka(version: str = paths.KAFKA_VERSION) -> Path:
    """Apache Kafka's jars (broker, tools, log4j2; for 3.x also ZooKeeper, a dependency of its broker) from Maven
    Central, via Maven; MirrorMaker 2's too for `paths.MM2_VERSION` only (bench, tests/job/mm2java.py: Central
    does not serve connect-mirror for every release). Fetched into a directory of its own and renamed into place when
    complete, so two processes fetching at once, or one interrupted, never leave a half-filled cache."""
    libs = paths.kafka_libs(version)
    stamp = libs / ".complete"
    if stamp.exists():
        return libs
    t0 = time.monotonic()
    print(f"fetching Apache Kafka {version} jars from Maven Central into {libs} ...", flush=True)
    libs.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{libs.name}.partial-", dir=libs.parent))
    only = [] if version == paths.MM2_VERSION else ["-DbrokerOnly"]
    try:
        _run(["mvn", "-q", "-B", "-f", str(paths.HERE / "kafka-pom.xml"), f"-Dkafka.version={version}", *only,
              "dependency:copy-dependencies", f"-DoutputDirectory={partial}", "-DincludeScope=runtime"],
             f"fetching Kafka {version} jars with Maven", paths.cache_dir() / "logs" / f"mvn-kafka-{version}.log")
        (partial / ".complete").write_text(version)
        try:
            partial.rename(libs)
        except OSError:  # another process completed it first (or an old, unstamped directory is in the way)
            if not stamp.exists():
                shutil.rmtree(libs, ignore_errors=True)
                partial.rename(libs)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    print(f"Kafka {version} jars ready in {time.monotonic() - t0:.0f}s", flush=True)
    return libs


_LEGACY_TOOLS = {"ConfigCommand": "kafka.admin.ConfigCommand", "DumpLogSegments": "kafka.tools.DumpLogSegments"}


@functools.lru_cache(maxsize=None)
def tool_class(version: str, name: str) -> str:
    """The main class of one of Kafka's own tools in a release: newer releases moved the Scala ones (`kafka-configs`,
    `kafka-dump-log`) into the tools module (`org.apache.kafka.tools`), older ones keep them where they were."""
    moved = f"org/apache/kafka/tools/{name}.class"
    for jar in kafka(version).glob("kafka-tools-*.jar"):
        with zipfile.ZipFile(jar) as z:
            if moved in z.namelist():
                return f"org.apache.kafka.tools.{name}"
    return _LEGACY_TOOLS[name]


def kafka_matrix() -> list[Path]:
    """Every version of the broker matrix besides the default one, and MirrorMaker 2's (`make setup`: CI never
    fetches mid-test)."""
    return [kafka(v) for v in paths.KAFKA_MATRIX_VERSIONS] + [mirrormaker2()]


def mirrormaker2() -> Path:
    """MirrorMaker 2's release (`paths.MM2_VERSION`) with its Connect runtime: what the bench and the tests run beside
    sparkmirror, against brokers of any release."""
    return kafka(paths.MM2_VERSION)


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


def node_binaries() -> Path:
    """kubelet, kubeadm, kube-scheduler and kube-proxy: what a kind node adds to the control plane's binaries."""
    needed = ["kubelet", "kubeadm", "kube-scheduler", "kube-proxy"]
    if all((paths.bin_dir() / b).exists() and (paths.bin_dir() / f".{b}.{paths.K8S_VERSION}").exists()
           for b in needed):
        return paths.bin_dir()
    t0 = time.monotonic()
    print(f"building {', '.join(needed)} {paths.K8S_VERSION} from k8s.io/kubernetes ...", flush=True)
    env = {"K8S_VERSION": paths.K8S_VERSION, "SPARKMIRROR_CACHE": str(paths.cache_dir())}
    _run(["bash", str(paths.HERE / "build-k8s.sh"), "node"], "building the node's Kubernetes binaries",
         paths.cache_dir() / "logs" / "build-k8s-node.log", env)
    print(f"node binaries ready in {time.monotonic() - t0:.0f}s", flush=True)
    return paths.bin_dir()


def coredns() -> Path:
    return go_tool("coredns", "github.com/coredns/coredns", paths.COREDNS_VERSION)


def kubernetes_tools() -> Path:
    """What the Kubernetes and chart tests use: the control plane and kubectl, helm for the chart, and promtool
    for its alerts (`promtool test rules`)."""
    kubernetes()
    helm()
    promtool()
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


def promtool() -> Path:
    """Prometheus' rule checker: the tests run `promtool check rules` on the chart's alerts and dashboard queries,
    and `promtool test rules` on each alert firing and not firing (about 6 minutes cold on 2 cores)."""
    return go_tool("promtool", "github.com/prometheus/prometheus/cmd/promtool", paths.PROMETHEUS_VERSION)


def prometheus() -> Path:
    """The Prometheus server (API only: the web UI's assets are not built), for `dashboard_picture`."""
    return go_tool("prometheus", "github.com/prometheus/prometheus/cmd/prometheus", paths.PROMETHEUS_VERSION)


def kind() -> Path:
    return go_tool("kind", "sigs.k8s.io/kind", paths.KIND_VERSION)


def _go_program(name: str, module: str, version: str) -> Path:
    """`<name>/main.go` built against one Go module at a pinned version, into the cache's bin; its module is made
    in the cache (no go.mod in git) and rebuilt when the source or the version changes."""
    import hashlib

    target = paths.bin_dir() / name
    source = (paths.HERE / name / "main.go").read_text()
    stamp = paths.bin_dir() / f".{name}.{version}.{hashlib.sha1(source.encode()).hexdigest()[:12]}"
    if target.exists() and stamp.exists():
        return target
    t0 = time.monotonic()
    print(f"building {name} ({module} {version}) from its Go module ...", flush=True)
    work = paths.cache_dir() / "build" / name
    work.mkdir(parents=True, exist_ok=True)
    for old in ("go.mod", "go.sum"):
        (work / old).unlink(missing_ok=True)
    (work / "main.go").write_text(source)
    log = paths.cache_dir() / "logs" / f"build-{name}.log"
    env = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false", "PWD": str(work)}
    _run(["go", "mod", "init", f"sparkmirror.dev/{name}"], f"go mod init ({name})", log, env)
    _run(["go", "get", f"{module}@{version}"], f"fetching {module}", log, env)
    _run(["go", "mod", "tidy"], f"go mod tidy ({name})", log, env)
    _run(["go", "build", "-trimpath", "-o", str(target), "."], f"building {name}", log, env)
    for old in paths.bin_dir().glob(f".{name}.*"):
        old.unlink()
    stamp.touch()
    print(f"{name} ready in {time.monotonic() - t0:.0f}s", flush=True)
    return target


def kstatus() -> Path:
    """`kstatus/main.go` built against sigs.k8s.io/cli-utils: computes a status the way Flux does, so tests check
    the operator's conditions with the library itself."""
    return _go_program("kstatus", "sigs.k8s.io/cli-utils", paths.CLI_UTILS_VERSION)


def argocd_lua() -> Path:
    """`argocdlua/main.go` built against github.com/yuin/gopher-lua: runs the Argo CD health check in Argo CD's own
    Lua runtime, with the libraries Argo CD opens for a custom check."""
    return _go_program("argocdlua", "github.com/yuin/gopher-lua", paths.GOPHER_LUA_VERSION)


def spark_operator_binary() -> Path:
    """The Kubeflow Spark operator (controller and webhook in one binary) from its Go module. Its go.mod pins
    Kubernetes libraries with `replace`, which `go install pkg@version` refuses, so it is built in a copy."""
    target = paths.bin_dir() / "spark-operator"
    stamp = paths.bin_dir() / f".spark-operator.{paths.SPARK_OPERATOR_VERSION}"
    if target.exists() and stamp.exists():
        return target
    t0 = time.monotonic()
    print(f"building the Spark operator {paths.SPARK_OPERATOR_VERSION} from its Go module ...", flush=True)
    src = spark_operator_chart().parents[1]
    work = paths.cache_dir() / "build" / f"spark-operator-{paths.SPARK_OPERATOR_VERSION}"
    if not work.exists():
        import shutil

        shutil.copytree(src, work)
        subprocess.check_call(["chmod", "-R", "u+w", str(work)])
    _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(target), "./cmd/operator"],
         "building the Spark operator", paths.cache_dir() / "logs" / "build-spark-operator.log",
         {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false", "PWD": str(work)})
    for old in paths.bin_dir().glob(".spark-operator.*"):
        old.unlink()
    stamp.touch()
    print(f"spark-operator ready in {time.monotonic() - t0:.0f}s", flush=True)
    return target


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
