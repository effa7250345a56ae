"""The images' own files, checked without Docker: the job's exit code, the Spark launcher, numeric users.
(The kind tests build and run the images for real.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "spark-app" / "image"


def test_job_entry_passes_the_exit_code_on(tmp_path: Path) -> None:
    """A mirror that fails must end its driver non-zero, or the Spark operator reports COMPLETED."""
    res = subprocess.run([sys.executable, str(IMAGE / "job.py"), "--config", str(tmp_path / "missing.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "missing.yaml: no such file" in res.stderr and "Traceback" not in res.stderr


def _fake_bin(tmp_path: Path) -> Path:
    """tini, java and spark-submit that print how they were called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("tini", "java"):
        (bin_dir / name).write_text('#!/bin/bash\n[ "$1" = "-s" ] && shift && shift\n'
                                    'if [ "$(basename "$0")" = tini ]; then exec "$@"; fi\n'
                                    'printf "%s\\n" "$(basename "$0")" "$@"\n')
        (bin_dir / name).chmod(0o755)
    spark_bin = tmp_path / "spark" / "bin"
    spark_bin.mkdir(parents=True)
    (spark_bin / "spark-submit").write_text('#!/bin/bash\nprintf "%s\\n" spark-submit "$@"\n')
    (spark_bin / "spark-submit").chmod(0o755)
    return bin_dir


def _launch(tmp_path: Path, *args: str, **env: str) -> list[str]:
    bin_dir = _fake_bin(tmp_path)
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SPARK_HOME": str(tmp_path / "spark"), **env}
    res = subprocess.run(["bash", str(IMAGE / "entrypoint.sh"), *args], capture_output=True, text=True,
                         env=full, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_launcher_driver(tmp_path: Path) -> None:
    out = _launch(tmp_path, "driver", "--properties-file", "/opt/spark/conf/spark.properties",
                  "local:///opt/sparkmirror/job.py", SPARK_DRIVER_BIND_ADDRESS="10.0.0.7")
    assert out[0] == "spark-submit"
    assert "spark.driver.bindAddress=10.0.0.7" in out and out[out.index("--deploy-mode") + 1] == "client"
    assert out[-1] == "local:///opt/sparkmirror/job.py"


def _fake_jvm(tmp_path: Path, log: Path, driver_ready: bool) -> None:
    """spark-submit's JVM, played by Python: it starts the application's Python driver (which, once it handles
    SIGTERM, writes its pid where the launcher said, as `Driver.run` does) and leaves a short-lived child
    unreaped (Spark starts and reaps Python workers all the time: a zombie or a process being spawned must not
    be taken for the driver)."""
    driver = f"""
import os, signal, sys, time
def drain(*_):
    open({str(log)!r}, "a").write("driver-drained\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
if {driver_ready!r}:
    open(os.environ["SPARKMIRROR_DRIVER_PIDFILE"], "w").write(str(os.getpid()))
open({str(log)!r}, "a").write("driver-up\\n")
time.sleep(60)
"""
    (tmp_path / "spark" / "bin" / "spark-submit").write_text(f"""#!{sys.executable}
import signal, subprocess, sys, time
def term(*_):
    open({str(log)!r}, "a").write("jvm-got-term\\n")
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
zombie = subprocess.Popen(["true"])
time.sleep(0.2)
app = subprocess.Popen([sys.executable, "-c", {driver!r}])
sys.exit(app.wait())
""")


def _stop_launched(tmp_path: Path, driver_ready: bool) -> tuple[list[str], int]:
    import signal
    import time

    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "log"
    _fake_jvm(tmp_path, log, driver_ready)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SPARK_HOME": str(tmp_path / "spark"),
           "SPARK_DRIVER_BIND_ADDRESS": "10.0.0.7"}
    proc = subprocess.Popen(["bash", str(IMAGE / "entrypoint.sh"), "driver", "local:///opt/sparkmirror/job.py"],
                            env=env)
    deadline = time.monotonic() + 20
    while not (log.exists() and "driver-up" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(20)
    return log.read_text().split(), rc


def test_launcher_sends_the_pods_stop_signal_to_the_python_driver(tmp_path: Path) -> None:
    """SIGTERM (a pod being deleted or rolled) reaches the Python driver, which drains, and not spark-submit's
    JVM, whose shutdown hook would stop Spark under the running lanes; the driver's exit code is passed on."""
    lines, rc = _stop_launched(tmp_path, driver_ready=True)
    assert lines == ["driver-up", "driver-drained"]
    assert rc == 0


def test_launcher_stops_the_jvm_while_the_python_driver_handles_no_signal_yet(tmp_path: Path) -> None:
    """Before the Python driver handles SIGTERM nothing copies: the JVM gets the signal and the pod ends."""
    lines, rc = _stop_launched(tmp_path, driver_ready=False)
    assert lines == ["driver-up", "jvm-got-term"]
    assert rc == 143


def test_launcher_executor_keeps_spark_java_options_in_order(tmp_path: Path) -> None:
    """Spark hands the executor's JVM options (Java 17's --add-opens among them) as SPARK_JAVA_OPT_<n>."""
    env = {"SPARK_JAVA_OPT_10": "-Dten", "SPARK_JAVA_OPT_2": "-Dtwo", "SPARK_JAVA_OPT_0": "--add-opens=x",
           "SPARK_EXECUTOR_MEMORY": "512m", "SPARK_DRIVER_URL": "spark://d:7078", "SPARK_EXECUTOR_ID": "3",
           "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "app-1", "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
           "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "exec-3"}
    out = _launch(tmp_path, "executor", **env)
    assert out[0] == "java" and out[1:4] == ["--add-opens=x", "-Dtwo", "-Dten"]
    assert out[4:6] == ["-Xms512m", "-Xmx512m"]
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in out
    pairs = dict(zip(out[::1], out[1::1]))
    assert pairs["--executor-id"] == "3" and pairs["--hostname"] == "10.0.0.9" and pairs["--podName"] == "exec-3"


def test_images_run_as_numeric_non_root_users() -> None:
    """`runAsNonRoot` can only be verified by the kubelet for a numeric USER."""
    stages: dict[str, list[str]] = {}
    current = None
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if m := re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line):
            current = m.group(1)
            stages[current] = []
        elif current and (m := re.match(r"USER\s+(\S+)", line)):
            stages[current].append(m.group(1))
    for target in ("operator", "spark"):
        user = stages[target][-1]
        assert user.isdigit() and int(user) > 0, f"{target} runs as {user!r}"


def test_runc_shim_drops_only_what_the_machine_cannot_grant(tmp_path: Path) -> None:
    """The test ground's runc shim removes capabilities missing from this machine's bounding set (here none may
    be missing: then the spec is left exactly as it was)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("shim", REPO / "dev/sparkmirror_dev/runc-shim.py")
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)  # type: ignore[union-attr]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    (bundle / "config.json").write_text(json.dumps({"process": {"capabilities": {
        "bounding": caps, "effective": caps, "permitted": caps}}}))
    shim.rewrite(str(bundle / "config.json"), "process", {"CAP_SYS_RESOURCE"})
    kept = json.loads((bundle / "config.json").read_text())["process"]["capabilities"]
    assert all(v == ["CAP_CHOWN", "CAP_SYS_ADMIN"] for v in kept.values())
    missing = shim.unavailable()
    with open("/proc/self/status") as f:
        bnd = int(next(x.split()[1] for x in f if x.startswith("CapBnd:")), 16)
    assert all(not bnd >> shim.CAP_NAMES.index(c.removeprefix("CAP_")) & 1 for c in missing)
    assert os.access(REPO / "dev/sparkmirror_dev/runc-shim.py", os.X_OK)
