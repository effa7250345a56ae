"""A single-node KRaft Kafka cluster (combined broker + controller) run from the cached Maven jars."""
from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import install, paths
from .procs import DevEnvError, check_port_free, free_port, spawn, stop_pid, wait_until


def java_cmd(libs: Path, main: str, *args: str, heap: str = "512m", log4j: bool = True) -> list[str]:
    java = shutil.which("java") or "java"
    cmd = [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]
    if log4j:
        cmd.append(f"-Dlog4j2.configurationFile={paths.HERE / 'log4j2.properties'}")
    return [*cmd, "-cp", f"{libs}/*", main, *args]


@dataclass
class KafkaCluster:
    """One named cluster on its own loopback ports, with its data and log under `home`."""

    name: str
    home: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "512m"
    extra: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.home / "kafka.log"

    def properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.segment.bytes": str(64 * 1024 * 1024),
            **self.extra,
        }

    def start(self, timeout: float = 90.0) -> "KafkaCluster":
        libs = install.kafka()
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        for p, role in ((self.port, "broker"), (self.controller_port, "controller")):
            check_port_free(p, f"Kafka cluster {self.name!r} {role}")
        self.home.mkdir(parents=True, exist_ok=True)
        props = self.home / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        if not (self.home / "data" / "meta.properties").exists():
            fmt_log = self.home / "format.log"
            with open(fmt_log, "wb") as out:
                rc = subprocess.call(java_cmd(libs, "kafka.tools.StorageTool", "format", "-t",
                                              uuid.uuid4().hex[:22], "-c", str(props), heap="256m"),
                                     stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                raise DevEnvError(f"Kafka cluster {self.name!r}: formatting storage failed; see {fmt_log}:\n"
                                  + fmt_log.read_text(errors="replace")[-2000:])
        self.proc = spawn(java_cmd(libs, "kafka.Kafka", str(props), heap=self.heap), self.log)
        self.pid = self.proc.pid
        try:
            wait_until(self._ready, self.proc, f"Kafka cluster {self.name!r} ({self.bootstrap})", self.log, timeout)
        except DevEnvError:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        import socket

        from confluent_kafka.admin import AdminClient

        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()  # quiet probe before librdkafka

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 1000})
        md = admin.list_topics(timeout=1)
        return len(md.brokers) == 1 and md.controller_id >= 0

    def stop(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid)
            if self.proc is not None:
                self.proc.wait(timeout=5)
            self.pid = None
