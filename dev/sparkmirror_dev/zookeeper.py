"""A standalone ZooKeeper server on a loopback port, run from a Kafka 3.x release's jars (its broker depends on
ZooKeeper's): the metadata store of a ZooKeeper-mode broker (`KafkaCluster(zookeeper=True)`). Kafka 4.x has no
ZooKeeper mode."""
from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .procs import DevEnvError, java_cmd, pick_ports, spawn, stop_pid, wait_until

MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"  # what Kafka 3.x's zookeeper-server-start.sh runs


@dataclass
class ZooKeeper:
    home: Path
    libs: Path
    port: int = 0
    heap: str = "128m"
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.home / "zookeeper.log"

    def start(self, timeout: float = 60.0) -> "ZooKeeper":
        if not list(self.libs.glob("zookeeper-*.jar")):
            raise DevEnvError(f"no ZooKeeper jar in {self.libs}: only Kafka 3.x releases run in ZooKeeper mode")
        self.port = pick_ports({"client": self.port}, "ZooKeeper")["client"]
        self.home.mkdir(parents=True, exist_ok=True)
        cfg = self.home / "zoo.cfg"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in {
            "dataDir": self.home / "data", "clientPort": self.port, "clientPortAddress": "127.0.0.1",
            "tickTime": 2000, "maxClientCnxns": 0,
            "admin.enableServer": "false",  # its HTTP admin server would take port 8080 on every interface
            "4lw.commands.whitelist": "srvr",  # the readiness probe below
        }.items()))
        self.proc = spawn(java_cmd(self.libs, MAIN, str(cfg), heap=self.heap), self.log)
        self.pid = self.proc.pid
        try:
            wait_until(self._ready, self.proc, f"ZooKeeper ({self.connect})", self.log, timeout)
        except DevEnvError:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"srvr")
            answer = b""
            while chunk := s.recv(4096):  # the server closes after its answer
                answer += chunk
            return b"Mode: standalone" in answer

    def stop(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid)
            if self.proc is not None:
                self.proc.wait(timeout=5)
            self.pid = None
