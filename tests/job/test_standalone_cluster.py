"""A real cluster manager: Spark standalone (a master and two workers from pyspark's own classes on loopback),
the flow group submitted with pyspark's spark-submit; one worker is SIGKILLed mid-stream, the mirror goes on
exactly once."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sparkmirror_dev.standalone import SPARK_HOME, StandaloneCluster, master_state

from .conftest import wait_for
from .test_eos_crash import PARTS, NumberedProducer, _check, _target_count

pytestmark = pytest.mark.minutes(1.2)

JOB = Path(__file__).resolve().parents[2] / "spark-app" / "sparkmirror" / "job.py"


@pytest.fixture
def standalone(tmp_path):
    cluster = StandaloneCluster(tmp_path).start()
    try:
        yield {"url": cluster.url, "env": cluster.env, "workers": cluster.workers, "ui": cluster.ui}
    finally:
        cluster.stop()


def _state(ui: int) -> dict:
    return master_state(ui)


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
