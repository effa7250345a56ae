"""What a fault campaign (`python -m bench.chaos`) acts on and watches: the mirror as a spark-submit process, the
Spark processes it kills (executors, Python workers), and the target's progress (when it grew)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from confluent_kafka import Consumer, TopicPartition

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.standalone import SPARK_HOME, StandaloneCluster

JOB = Path(__file__).resolve().parent.parent / "spark-app" / "sparkmirror" / "job.py"


class Progress(threading.Thread):
    """Samples the remote topic's end offsets (sum over partitions) every `interval` s: when the target grew."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions, self.interval = bootstrap, topic, partitions, interval
        self.grew: list[tuple[float, int]] = []   # (monotonic time, total) whenever the total grew
        self._stop_evt = threading.Event()

    def run(self) -> None:
        """Each partition on its own: one partition whose leader just died must not hide the others' growth; a
        failed read drops the consumer, so the next one starts from fresh metadata (the new leaders)."""
        last: dict[int, int] = {}
        c = None
        while not self._stop_evt.wait(self.interval):
            grew = False
            for p in range(self.partitions):
                try:
                    if c is None:
                        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-progress",
                                      "socket.timeout.ms": 5000})
                    hi = c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=3)[1]
                except Exception:  # noqa: BLE001 - leader or cluster away, topic not there yet: no progress here
                    if c is not None:
                        c.close()
                    c = None
                    continue
                if p in last and hi > last[p]:
                    grew = True
                last[p] = max(hi, last.get(p, -1))
            if grew:
                self.grew.append((time.monotonic(), sum(last.values())))
        if c is not None:
            c.close()

    def first_growth_after(self, t: float) -> float:
        return next((g for g, _ in self.grew if g > t), 0.0)

    def stall(self, t0: float, t1: float) -> float:
        """Longest time without growth in [t0, t1]."""
        marks = [t0, *(g for g, _ in self.grew if t0 < g < t1), t1]
        return max(b - a for a, b in zip(marks, marks[1:]))

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(10)


class Mirror:
    """The job submitted to the standalone cluster with spark-submit (client mode), in its own process group."""

    def __init__(self, config: FlowGroupConfig, workdir: Path, spark: StandaloneCluster) -> None:
        self.config_path = workdir / "flowgroup.yaml"
        self.config_path.write_text(config.to_yaml())
        self.log_path = workdir / "job.log"
        self.cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", spark.url, "--deploy-mode", "client",
                    "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
                    "--conf", f"spark.executor.cores={spark.cores}", "--conf", f"spark.cores.max={spark.cores}",
                    "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
                    "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.enabled=false",
                    str(JOB), "--config", str(self.config_path), "--checkpoint", str(workdir / "checkpoint")]
        self.env = spark.env
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver: spark-submit's JVM and the Python driver (one process group)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(60)

    def stop(self, timeout: float = 120) -> int | None:
        """SIGTERM to the Python driver (a clean stop), then SIGKILL whatever is left."""
        if not self.alive():
            return self.proc.poll() if self.proc else None
        driver = [p for p in psutil.Process(self.proc.pid).children(recursive=True) if _cmd(p).find(str(JOB)) >= 0]
        for p in driver:
            p.terminate()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.kill()
        return rc

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def task_started_since(self, offset: int) -> bool:
        """Whether the driver logged a task launch after byte `offset` of its log."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return b"Starting task" in f.read()

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def executors() -> list[psutil.Process]:
    return [p for p in psutil.process_iter() if "CoarseGrainedExecutorBackend" in _cmd(p)]


def python_workers() -> list[psutil.Process]:
    """Python workers forked by pyspark.daemon under the executors (the ones that run lane tasks)."""
    out = []
    for ex in executors():
        try:
            for p in ex.children(recursive=True):
                parent = p.parent()
                if "pyspark.daemon" in _cmd(p) and parent is not None and "pyspark.daemon" in _cmd(parent):
                    out.append(p)
        except psutil.Error:
            pass
    return out


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return False
