"""A Spark standalone cluster on loopback (a master and workers from pyspark's own classes), so executors run as
JVMs of their own, as on a real cluster manager."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from .procs import DevEnvError, free_port

SPARK_HOME = Path(pyspark.__file__).parent


class Daemon:
    """A spark-class process in its own process group, log under `workdir`."""

    def __init__(self, name: str, args: list[str], workdir: Path, env: dict[str, str]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / f"{name}.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def master_state(ui: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
            return json.loads(r.read() or b"{}")
    except (OSError, ValueError):
        return {}


def _wait(pred, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise DevEnvError(f"Spark standalone: timed out after {timeout:.0f}s waiting for {what}")


class StandaloneCluster:
    """Master + `workers` workers of `cores` cores each; `stop()` kills them (and their executors)."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "700m") -> None:
        self.workdir = workdir
        self.env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []

    def start(self, timeout: float = 120.0) -> "StandaloneCluster":
        self.master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                        str(self.port), "--webui-port", str(self.ui)], self.workdir, self.env)
        try:
            _wait(lambda: master_state(self.ui).get("status") == "ALIVE", timeout, "the master")
            for i in range(1, self.n_workers + 1):
                self.workers.append(Daemon(
                    f"worker{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                                   str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()),
                                   "--work-dir", str(self.workdir / f"work{i}"), self.url], self.workdir, self.env))
            _wait(lambda: master_state(self.ui).get("aliveworkers") == self.n_workers, timeout,
                  f"{self.n_workers} workers registered")
        except DevEnvError:
            self.stop()
            raise
        return self

    def state(self) -> dict:
        return master_state(self.ui)

    def stop(self) -> None:
        for d in reversed([*(x for x in [self.master] if x), *self.workers]):
            d.kill()
        self.workers, self.master = [], None
