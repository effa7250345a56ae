"""The mirror job as a process of its own, the way a SparkApplication's driver runs it (`python -m
sparkmirror.job --config`), for benchmarks that restart it or watch it for a long time."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sparkmirror.resource.flowgroup import FlowGroupConfig


def start_job(cfg: FlowGroupConfig, work: Path, name: str, confs: dict[str, str] | None = None) -> subprocess.Popen:
    """Write `cfg` to `work/<name>.yaml` and start the job on local Spark (a thread per lane and then some), its
    output in `work/<name>.log`; a session of its own so that `stop_job` reaches its Python workers."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{name}.yaml"
    path.write_text(cfg.to_yaml())
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    conf_args = [a for k, v in {"spark.driver.memory": "512m", "spark.ui.enabled": "false", **(confs or {})}.items()
                 for a in ("--conf", f"{k}={v}")]
    with open(work / f"{name}.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "sparkmirror.job", "--config", str(path),
                                 "--checkpoint", str(work / "ckpt"), "--master", f"local[{2 * cfg.lanes + 2},4]",
                                 *conf_args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def stop_job(p: subprocess.Popen, timeout: float = 120.0) -> int | None:
    """SIGTERM (the driver drains: running epochs commit), then SIGKILL of what is left of its session. The
    job's exit status, None when it had to be killed."""
    p.terminate()
    try:
        code: int | None = p.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    try:
        os.killpg(p.pid, 9)  # Python workers left behind
    except (ProcessLookupError, PermissionError):
        pass
    return code
