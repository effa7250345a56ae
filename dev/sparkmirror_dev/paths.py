"""Pinned versions and where fetched or built things are cached (outside git)."""
from __future__ import annotations

import os
from pathlib import Path

KAFKA_VERSION = "4.4.0"  # the default test ground (the newest release), the demo, the kind cluster's brokers
KAFKA_MATRIX_VERSIONS = ("3.9.2", "4.1.2")
"""The broker matrix's other releases (tests/job/test_broker_matrix.py): the last 3.x (ZooKeeper or KRaft) and the
4.x before the ground's."""
MM2_VERSION = "4.3.1"
"""MirrorMaker 2 beside sparkmirror (bench, tests/job/mm2java.py): the newest release whose `connect-mirror` Maven
Central serves (4.4.0's is not published there)."""
K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"
SPARK_OPERATOR_VERSION = "v2.4.0"
HELM_VERSION = "v3.22.0"
KIND_VERSION = "v0.33.0"
COREDNS_VERSION = "v1.14.2"  # what kubeadm of K8S_VERSION deploys
PROMETHEUS_VERSION = "v0.316.0"  # the Go module's tag of Prometheus v3.16.0: promtool (tests), prometheus (the picture)
GOPHER_LUA_VERSION = "v1.1.2"  # github.com/yuin/gopher-lua: Argo CD's Lua runtime, runs the shipped health check
CLI_UTILS_VERSION = "v0.37.2"  # sigs.k8s.io/cli-utils: kstatus, what Flux and kpt read a status with

HERE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    return Path(os.environ.get("SPARKMIRROR_CACHE", Path.home() / ".cache" / "sparkmirror"))


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    return cache_dir() / "kafka" / version / "libs"


def bin_dir() -> Path:
    return cache_dir() / "bin"


def spark_application_crd() -> Path:
    return cache_dir() / "crds" / f"sparkapplications-{SPARK_OPERATOR_VERSION}.yaml"


def dev_root() -> Path:
    """Where `sparkmirror dev up` keeps data, logs and its state file."""
    return Path(os.environ.get("SPARKMIRROR_DEV_HOME", cache_dir() / "dev"))
