"""Shared test ground: real KRaft Kafka clusters, a real Kubernetes API server, each started once per session.

Each test gets its own topics (`topic` factory) and namespace (`namespace`), so tests share the expensive
processes without sharing state.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkmirror_dev.env import start_all
from sparkmirror_dev.certs import CertificateAuthority
from sparkmirror_dev.kafka import KafkaCluster, Security
from sparkmirror_dev.paths import KAFKA_VERSION
from sparkmirror_dev.testing import create_topic, unique_name

# Spark must bind to loopback only (it would otherwise pick the machine's first interface).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Python workers must run this interpreter (the venv's), not whatever `python3` is first on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkmirror_dev.kube import KubeApiServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first (their `minutes` mark), so that with two workers (`-n 2 --dist loadfile`) the long
    ones start at once instead of one of them ending the run alone."""

    def minutes(item: pytest.Item) -> float:
        mark = item.get_closest_marker("minutes")
        return float(mark.args[0]) if mark else 0.0

    items.sort(key=minutes, reverse=True)  # stable: the order inside a module and among the rest is kept


_FIGURES: list[str] = []  # "file::test: name: value", from every test's user_properties (also xdist workers')


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """figure(name, value): listed in the run's `figures` summary, which works from output-less xdist workers too."""

    def record(name: str, value: object) -> None:
        request.node.user_properties.append((name, value))

    return record


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        path, _, test = report.nodeid.partition("::")  # a parameter id may hold "/": cut the path only
        _FIGURES.extend(f"{path.rsplit('/', 1)[-1]}::{test}: {key}: {value}" for key, value in report.user_properties)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


class LocalKafka:
    """Named clusters, started on first use or together (`start`); of the ground's Kafka release in KRaft mode
    unless given another version or ZooKeeper mode (the broker matrix)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clusters: dict[str, KafkaCluster] = {}

    def cluster(self, name: str, version: str = KAFKA_VERSION, zookeeper: bool = False) -> KafkaCluster:
        return self.start({name: (version, zookeeper)})[name]

    def start(self, releases: dict[str, tuple[str, bool]]) -> dict[str, KafkaCluster]:
        """name -> (Kafka version, ZooKeeper mode): those clusters, the ones not running yet started at once."""
        new = {n: KafkaCluster(n, self.root / n, version=v, zookeeper=zk)
               for n, (v, zk) in releases.items() if n not in self.clusters}
        if new:
            start_all(list(new.values()))
            self.clusters.update(new)
        for n, (v, zk) in releases.items():
            have = self.clusters[n]
            assert (have.version, have.zookeeper) == (v, zk), f"cluster {n!r} runs {have.version} {have.mode}"
        return {n: self.clusters[n] for n in releases}

    def stop(self) -> None:
        for c in self.clusters.values():
            c.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    env = LocalKafka(tmp_path_factory.mktemp("kafka"))
    env.start({n: (KAFKA_VERSION, False) for n in ("a", "b")})
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture(autouse=True)
def _no_heartbeats_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the shared clusters, the heartbeats topics it made go: every mirror copies heartbeats topics
    whatever its filter (as MM2 does), so one left on cluster a changed what later tests on it count (their
    partitions, their records) depending on the order tests ran in."""
    yield
    if "kafka" not in request.fixturenames:
        return
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    env: LocalKafka = request.getfixturevalue("kafka")
    for cluster in env.clusters.values():
        if cluster.pid is None:
            continue
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        try:
            beats = [t for t in admin.list_topics(timeout=5).topics if t.endswith("heartbeats")]
            for future in admin.delete_topics(beats, operation_timeout=30).values() if beats else ():
                future.result(30)
        except KafkaException:
            pass  # a cluster a test left stopped or unreachable: nothing to tidy there


@pytest.fixture(scope="module")
def kafka_releases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """Clusters of other Kafka releases or modes for one module (the broker matrix): `.start({name: (version,
    zookeeper)})` or `.cluster(name, version, zookeeper=)`; fetched from Maven Central on first use (cached),
    stopped when the module ends."""
    env = LocalKafka(tmp_path_factory.mktemp("releases"))
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture
def kafka_a(kafka: LocalKafka) -> KafkaCluster:
    return kafka.cluster("a")


@pytest.fixture
def kafka_b(kafka: LocalKafka) -> KafkaCluster:
    return kafka.cluster("b")


SECURED_USERS = {"mirror": "mirror-pw-7Qx2LEAKMARK", "limited": "limited-pw-7Qx2LEAKMARK"}
"""SCRAM users of the `secured_kafka` cluster; `limited` may not WRITE topics named `*.denied-*`."""
CLIENT_PRINCIPAL = "User:CN=sparkmirror-client"  # the mTLS client certificate's principal


def _secured_cluster(root: Path, name: str) -> Iterator[KafkaCluster]:
    ca = CertificateAuthority(root / "certs")
    ca.issue("client", "sparkmirror-client", client=True)
    cluster = KafkaCluster(name, root / name, security=Security(ca, scram_users=SECURED_USERS, authorizer=True))
    cluster.start()
    try:
        cluster.allow("User:mirror")
        cluster.allow(CLIENT_PRINCIPAL)
        cluster.allow("User:limited", deny={"WRITE": "a.denied-"})
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One cluster with every secured listener (SSL, MTLS, SASL_SSL and SASL_PLAINTEXT with SCRAM-SHA-512) and
    KRaft's StandardAuthorizer, started only when a test asks for it. Its CA (`.security.ca`) also issued the
    mTLS client certificate `client`. The PLAINTEXT `bootstrap` is the tests' admin door."""
    yield from _secured_cluster(tmp_path_factory.mktemp("secured"), "s")


@pytest.fixture(scope="session")
def secured_kafka_2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A second cluster like `secured_kafka` (same users, same ACLs of its own, its own CA), for what needs the
    authorizer on both sides of a mirror (ACL sync); started only when a test asks for it."""
    yield from _secured_cluster(tmp_path_factory.mktemp("secured2"), "s2")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """topic(cluster, partitions=3, config=None, name=None) creates a topic only this test uses."""

    def make(cluster: KafkaCluster, partitions: int = 3, config: dict[str, str] | None = None,
             name: str | None = None) -> str:
        return create_topic(cluster.bootstrap, name or unique_name(request.node.name), partitions, config)

    return make


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator["KubeApiServer"]:
    """etcd + kube-apiserver + kube-controller-manager (GC, namespaces), SparkApplication CRD installed.

    No kubelet, scheduler or Spark operator runs here: tests that need SparkApplications to run use the
    local runner in tests/support, which plays the Spark operator's part.
    """
    from sparkmirror_dev.kube import KubeApiServer

    server = KubeApiServer(tmp_path_factory.mktemp("kube")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def namespace(kube: "KubeApiServer", request: pytest.FixtureRequest) -> str:
    """A fresh namespace for this test only (left behind on purpose: inspecting it after a failure helps)."""
    from kubernetes import client

    name = unique_name(request.node.name)[:63].rstrip("-")
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


@pytest.fixture(scope="session")
def spark() -> Iterator["SparkSession"]:
    """One local SparkSession (local[2], small memory) for in-process Spark tests."""
    from pyspark.sql import SparkSession

    from sparkmirror.sparkdefaults import SPARK_DEFAULTS

    builder = SparkSession.builder.master("local[2]").appName("sparkmirror-tests")
    for k, v in SPARK_DEFAULTS.items():  # the JVM is shared by every session of this process: start it as the job does
        builder = builder.config(k, v)
    session = (builder.config("spark.driver.memory", "512m").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1").getOrCreate())
    try:
        yield session
    finally:
        session.stop()
