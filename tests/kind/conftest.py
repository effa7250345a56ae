"""The kind ground once for the kind module (see sparkmirror_dev.kindground): a Docker engine (started here when
none answers), every image built on this machine, a kind cluster, both operators installed with Helm, and
Kafka clusters as pods. Tests give their mirrors and topics names of their own. Module-scoped, not
session-scoped: the solo phase's next modules (the handoff e2e: three Spark drivers at once) must not share the
two cores with the cluster and the mirrors still copying in it (a load average of 25 was seen)."""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sparkmirror_dev import docker, kindground
from sparkmirror_dev.kindground import KindGround
from sparkmirror_dev.procs import DevEnvError


@pytest.fixture(scope="module")
def kind_ground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindGround]:
    try:
        engine = docker.ensure_engine()
    except DevEnvError as e:
        pytest.skip(f"no Docker engine answers and none could be started here: {e}")
    ground = None
    name = os.environ.get("SPARKMIRROR_KIND_CLUSTER", kindground.DEFAULT_NAME)
    try:
        ground = kindground.up(tmp_path_factory.mktemp("kind") / "kubeconfig", name, fresh=not kindground.keep())
        yield ground
    finally:
        if ground is not None:
            ground.stop_forwards()
        if not kindground.keep():
            kindground.down(name)
        engine.stop()
