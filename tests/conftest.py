"""Shared test ground: real KRaft Kafka clusters, a real Kubernetes API server, each started once per session.

Each test gets its own topics (`topic` factory) and namespace (`namespace`), so tests share the expensive
processes without sharing state.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparkmirror.devenv.kafka import KafkaCluster
from sparkmirror.devenv.testing import create_topic, unique_name


class LocalKafka:
    """Named clusters; `a` and `b` start with the session, others on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clusters: dict[str, KafkaCluster] = {}

    def cluster(self, name: str) -> KafkaCluster:
        if name not in self.clusters:
            self.clusters[name] = KafkaCluster(name, self.root / name).start()
        return self.clusters[name]

    def stop(self) -> None:
        for c in self.clusters.values():
            c.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    env = LocalKafka(tmp_path_factory.mktemp("kafka"))
    try:
        env.cluster("a")
        env.cluster("b")
        yield env
    finally:
        env.stop()


@pytest.fixture
def kafka_a(kafka: LocalKafka) -> KafkaCluster:
    return kafka.cluster("a")


@pytest.fixture
def kafka_b(kafka: LocalKafka) -> KafkaCluster:
    return kafka.cluster("b")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """topic(cluster, partitions=3, config=None, name=None) creates a topic only this test uses."""

    def make(cluster: KafkaCluster, partitions: int = 3, config: dict[str, str] | None = None,
             name: str | None = None) -> str:
        return create_topic(cluster.bootstrap, name or unique_name(request.node.name), partitions, config)

    return make
