"""A real cluster manager: Spark standalone (a master and two workers from pyspark's own classes on loopback),
the flow group submitted with pyspark's spark-submit; one worker is SIGKILLed mid-stream, the mirror goes on
exactly once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from sparkmirror_dev.procs import free_port

from .conftest import read_topic, wait_for
from .test_eos_crash import PARTS, NumberedProducer, _check, _target_count

SPARK_HOME = Path(pyspark.__file__).parent
JOB = Path(__file__).resolve().parents[2] / "spark-app" / "sparkmirror" / "job.py"


class Daemon:
    """A spark-class process in its own process group, log in the test's directory."""

    def __init__(self, name: str, args: list[str], workdir: Path, env: dict[str, str]) -> None:
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


@pytest.fixture
def standalone(tmp_path):
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons = [Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                 str(port), "--webui-port", str(ui)], tmp_path, env)]
    try:
        wait_for(lambda: _state(ui).get("status") == "ALIVE", 120, "standalone master")
        for i in (1, 2):
            daemons.append(Daemon(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                                 "--cores", "1", "--memory", "700m", "--webui-port",
                                                 str(free_port()), "--work-dir", str(tmp_path / f"work{i}"), url],
                                  tmp_path, env))
        wait_for(lambda: _state(ui).get("aliveworkers") == 2, 120, "two workers registered")
        yield {"url": url, "env": env, "workers": daemons[1:], "ui": ui}
    finally:
        for d in reversed(daemons):
            d.kill()


def _state(ui: int) -> dict:
    import json

    try:
        return json.loads(_get(f"http://127.0.0.1:{ui}/json/") or b"{}")
    except ValueError:
        return {}


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read()
    except OSError:
        return b""


def test_spark_submit_to_standalone_survives_a_worker_kill(kafka_a, kafka_b, topic, flowgroup, job, standalone):
    src = topic(kafka_a, PARTS)
    remote = f"a.{src}"
    cfg = flowgroup(src, epochSeconds=5)
    producer = NumberedProducer(kafka_a.bootstrap, src)
    producer.start()
    submit = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", standalone["url"], "--deploy-mode", "client",
              "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
              "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
              "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.enabled=false",
              str(JOB)]
    jp = job(cfg, cmd=submit, env=standalone["env"])
    wait_for(lambda: _target_count(kafka_b.bootstrap, remote) > 0 or jp.proc.poll() is not None, 360,
             "copying on the standalone cluster")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    time.sleep(3)
    victim = standalone["workers"][0]
    victim.kill()  # the worker and its executor (same process group)
    before = _target_count(kafka_b.bootstrap, remote)
    wait_for(lambda: _target_count(kafka_b.bootstrap, remote) > before + 300 or jp.proc.poll() is not None, 300,
             "copying on after a worker was killed")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    sent = producer.stop()
    wait_for(lambda: _target_count(kafka_b.bootstrap, remote) >= sent * PARTS or jp.proc.poll() is not None, 300,
             "catch-up")
    time.sleep(2)
    _check(kafka_b.bootstrap, remote, sent, True)
    wait_for(lambda: _state(standalone["ui"]).get("aliveworkers") == 1, 90, "the master seeing the worker gone")
    assert "Lost executor" in jp.log() or "ExecutorLost" in jp.log() or "lost" in jp.log().lower(), \
        "the driver never noticed the lost executor"
    # a clean stop goes to the Python driver (spark-submit's child): SIGTERM on the JVM would run its shutdown
    # hook and stop the SparkContext under the draining queries
    import psutil

    def cmdline(p: psutil.Process) -> str:
        try:
            return " ".join(p.cmdline())
        except (psutil.ZombieProcess, psutil.NoSuchProcess):  # e.g. a finished helper not yet reaped
            return ""

    driver = next(p for p in psutil.Process(jp.proc.pid).children(recursive=True) if str(JOB) in cmdline(p))
    driver.terminate()
    assert jp.proc.wait(120) == 0, jp.log()[-3000:]
