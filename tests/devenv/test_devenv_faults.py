"""Bad input and faults of the local environment: the error names what failed, shows its log, and nothing is
left running."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from sparkmirror_dev import install, paths
from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.procs import DevEnvError

pytestmark = pytest.mark.minutes(0.9)


def _java_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if "java" in p.name()}


def test_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DevEnvError, match=rf"Kafka cluster 'busy' broker: port 127.0.0.1:{port} is already in use"):
            KafkaCluster("busy", tmp_path / "busy", port=port).start()


def test_broker_that_fails_to_start_shows_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    before = _java_children()
    bad = KafkaCluster("broken", tmp_path / "broken", extra={"num.network.threads": "not-a-number"})
    with pytest.raises(DevEnvError) as err:
        bad.start(timeout=60)
    msg = str(err.value)
    assert "Kafka cluster 'broken'" in msg and "num.network.threads" in msg
    assert _java_children() - before == set()


def test_zookeeper_mode_broker_that_fails_stops_its_zookeeper_too(tmp_path: Path) -> None:
    before = _java_children()
    bad = KafkaCluster("broken-zk", tmp_path / "broken-zk", version=paths.KAFKA_MATRIX_VERSIONS[0], zookeeper=True,
                       extra={"num.network.threads": "not-a-number"})
    with pytest.raises(DevEnvError, match=r"(?s)Kafka cluster 'broken-zk'.*num.network.threads"):
        bad.start(timeout=60)
    assert bad.zk is not None and bad.zk.port > 0  # its ZooKeeper had started
    assert _java_children() - before == set()


def test_zookeeper_mode_of_a_4x_release_is_refused_by_name(tmp_path: Path) -> None:
    before = _java_children()
    with pytest.raises(DevEnvError, match="only Kafka 3.x releases run in ZooKeeper mode"):
        KafkaCluster("zk4", tmp_path / "zk4", zookeeper=True).start()
    assert _java_children() - before == set()


def test_a_release_maven_central_does_not_serve_is_named_and_leaves_no_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPARKMIRROR_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DevEnvError, match=r"fetching Kafka 0\.0\.1-no-such jars with Maven failed") as err:
        install.kafka("0.0.1-no-such")
    assert "kafka_2.13:jar:0.0.1-no-such" in str(err.value)
    assert list((tmp_path / "cache" / "kafka" / "0.0.1-no-such").iterdir()) == []  # no partial directory kept


def test_failed_build_names_the_step_and_shows_the_log(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPARKMIRROR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "ETCD_VERSION", "v3.0.0-no-such-version")
    with pytest.raises(DevEnvError) as err:
        install.kubernetes()
    msg = str(err.value)
    assert "building Kubernetes binaries failed" in msg and "v3.0.0-no-such-version" in msg


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkmirror.cli", "dev", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=300)


def test_dev_up_status_down(tmp_path: Path) -> None:
    env = {"SPARKMIRROR_DEV_HOME": str(tmp_path / "dev")}
    up = _cli("up", env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert "kafka source" in up.stdout and "kafka target" in up.stdout and "KUBECONFIG=" in up.stdout
        status = _cli("status", "--json", env=env)
        assert status.returncode == 0, status.stdout
        st = json.loads(status.stdout)
        assert set(st) == {"kafka/source", "kafka/target", "kube/etcd", "kube/kube-apiserver",
                           "kube/kube-controller-manager"}
        assert all(s["running"] and s["address"].startswith(("127.0.0.1:", "https://127.0.0.1:"))
                   for s in st.values())
        again = _cli("up", env=env)
        assert again.returncode == 1 and "already runs" in again.stderr
        pids = [p["pid"] for p in json.loads((tmp_path / "dev" / "state.json").read_text())["kafka"].values()]
    finally:
        down = _cli("down", env=env)
    assert down.returncode == 0 and "kafka/source" in down.stdout
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert "no local environment" in _cli("status", env=env).stdout
