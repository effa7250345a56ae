"""A Docker engine for the kind test ground: the one that answers, or one started here (like the Kafka brokers).

A machine of this project may have only the Docker client. Then Debian's `docker.io` is installed and `dockerd`
is started as root with its data under the cache (outside git), and stopped again by whoever started it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from . import paths
from .procs import DevEnvError, log_tail, spawn, stop_pid

SOCKET = Path("/var/run/docker.sock")


def _docker(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def engine_problem() -> str | None:
    """None when a Docker engine answers; otherwise why not, in one line."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        res = _docker("info", "--format", "{{.ServerVersion}}")
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer in 30 s"
    if res.returncode != 0:
        return (res.stderr.strip().splitlines() or ["no answer"])[-1]
    return None


def stale_engine() -> int | None:
    """The pid of an engine that answers but was started by this ground from a checkout that is gone (its runc shim
    path no longer exists, as when a git worktree was removed under a running engine): it would take every new
    container to a missing runtime. None for any other engine, ours or the machine's."""
    try:
        res = _docker("info", "--format", "{{json .Runtimes}}")
        runtimes = json.loads(res.stdout or "{}") if res.returncode == 0 else {}
    except (subprocess.TimeoutExpired, ValueError):
        return None
    shim = (runtimes.get("sparkmirror-runc") or {}).get("path")
    if not shim or Path(shim).exists():
        return None
    return next((p.pid for p in psutil.process_iter(["name", "cmdline"])
                 if p.info["name"] == "dockerd" and "sparkmirror-runc" in " ".join(p.info["cmdline"] or ())), None)


def apt_install(*packages: str) -> None:
    """Debian packages the ground needs (root only, as on the project's machines)."""
    if os.geteuid() != 0:
        raise DevEnvError(f"{', '.join(packages)} missing and not root: install them with apt-get")
    log = paths.cache_dir() / "logs" / "apt.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.call(["apt-get", "install", "-yq", *packages], stdout=out, stderr=out, env=env) != 0:
            subprocess.call(["apt-get", "update", "-q"], stdout=out, stderr=out, env=env)
            if subprocess.call(["apt-get", "install", "-yq", *packages], stdout=out, stderr=out, env=env) != 0:
                raise DevEnvError(f"apt-get install {' '.join(packages)} failed:\n{log_tail(log)}")


@dataclass
class DockerEngine:
    """The engine in use; `started_here` engines are stopped by `stop()`, others are left alone."""

    started_here: bool
    pid: int | None = None

    def stop(self) -> None:
        if self.started_here and self.pid:
            stop_pid(self.pid, timeout=30)


def ensure_engine(timeout: float = 60) -> DockerEngine:
    """Use the engine that answers, else install and start one. An engine of ours whose runtime shim is gone is
    stopped and started afresh."""
    if (stale := stale_engine()) is not None:
        stop_pid(stale, timeout=30)
    if engine_problem() is None:
        return DockerEngine(started_here=False)
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        apt_install("docker.io")
    if os.geteuid() != 0:
        raise DevEnvError(f"no Docker engine answers ({engine_problem()}) and starting dockerd needs root")
    root = paths.cache_dir() / "docker"
    (root / "data").mkdir(parents=True, exist_ok=True)
    log = root / "dockerd.log"
    # runc through the shim: kind's privileged node containers start even where this machine's capability
    # bounding set lacks some capabilities (see runc-shim.py)
    shim = Path(__file__).resolve().parent / "runc-shim.py"
    proc = spawn(["dockerd", "--data-root", str(root / "data"), "--exec-root", "/run/sparkmirror-docker",
                  "-H", f"unix://{SOCKET}", "--add-runtime", f"sparkmirror-runc={shim}",
                  "--default-runtime", "sparkmirror-runc"], log)
    deadline = time.monotonic() + timeout
    while (problem := engine_problem()) is not None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise DevEnvError(f"dockerd did not start ({problem}); see {log}:\n{log_tail(log)}")
        time.sleep(0.5)
    return DockerEngine(started_here=True, pid=proc.pid)
