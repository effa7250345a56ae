"""`sparkmirror dev up/down/status`: named Kafka clusters plus a Kubernetes API server, tracked in a state file.

The state file lets `down` and `status` find processes that an earlier `up` left running in the background.
"""
from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .kafka import KafkaCluster
from .kube import KubeApiServer
from .procs import DevEnvError, pid_alive, stop_pid

DEFAULT_CLUSTERS = ("source", "target")


def start_all(parts: list[KafkaCluster | KubeApiServer]) -> list[float]:
    """Start the parts concurrently (each waits on its own JVM or Go binary); all or nothing.

    Returns each part's start-up seconds. If any part fails, the ones that started are stopped and the first
    failure is raised.
    """
    def timed(part: KafkaCluster | KubeApiServer) -> float:
        t0 = time.monotonic()
        part.start()
        return round(time.monotonic() - t0, 1)

    with ThreadPoolExecutor(max_workers=max(1, len(parts))) as pool:
        futures = [pool.submit(timed, p) for p in parts]
        wait(futures)
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        for part, fut in zip(parts, futures):
            if fut.exception() is None:
                part.stop()
        raise errors[0]
    return [f.result() for f in futures]


@dataclass
class DevEnv:
    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def state(self) -> dict:
        if not self.state_file.exists():
            return {}
        return json.loads(self.state_file.read_text())

    def up(self, clusters: list[str], kube: bool = True, base_port: int | None = None) -> dict:
        """Start everything that is not already running; on any failure stop what this call started."""
        if self.running():
            raise DevEnvError(f"a local environment already runs (state {self.state_file}); "
                              "`sparkmirror dev down` first")
        self.root.mkdir(parents=True, exist_ok=True)
        parts: list[KafkaCluster | KubeApiServer] = []
        for i, name in enumerate(clusters):
            port = ctl = 0
            if base_port:
                port, ctl = base_port + 2 * i, base_port + 2 * i + 1
            parts.append(KafkaCluster(name, self.root / "kafka" / name, port=port, controller_port=ctl))
        if kube:
            parts.append(KubeApiServer(self.root / "kube"))
        timings = start_all(parts)
        state: dict = {"kafka": {}, "kube": None, "started": time.time()}
        for part, secs in zip(parts, timings):
            if isinstance(part, KafkaCluster):
                state["kafka"][part.name] = {"bootstrap": part.bootstrap, "pid": part.pid, "log": str(part.log),
                                             "startup_s": secs}
            else:
                state["kube"] = {"url": part.url, "kubeconfig": str(part.kubeconfig), "pids": part.pids,
                                 "logs": {n: str(part.log(n)) for n in part.pids}, "startup_s": secs}
        self.state_file.write_text(json.dumps(state, indent=2))
        return state

    def pids(self) -> dict[str, int]:
        st = self.state()
        out = {f"kafka/{n}": c["pid"] for n, c in st.get("kafka", {}).items()}
        if st.get("kube"):
            out.update({f"kube/{n}": p for n, p in st["kube"]["pids"].items()})
        return out

    def running(self) -> bool:
        return any(pid_alive(p) for p in self.pids().values())

    def down(self) -> list[str]:
        stopped = []
        # kube first (controller-manager, apiserver, etcd), Kafka last
        for name, pid in sorted(self.pids().items(), key=lambda kv: not kv[0].startswith("kube")):
            if pid_alive(pid):
                stop_pid(pid)
                stopped.append(name)
        if self.root.exists():
            shutil.rmtree(self.root)
        return stopped

    def status(self) -> dict[str, dict]:
        st = self.state()
        out: dict[str, dict] = {}
        for name, c in st.get("kafka", {}).items():
            out[f"kafka/{name}"] = {"running": pid_alive(c["pid"]), "address": c["bootstrap"], "log": c["log"]}
        if st.get("kube"):
            for name, pid in st["kube"]["pids"].items():
                out[f"kube/{name}"] = {"running": pid_alive(pid), "address": st["kube"]["url"],
                                       "log": st["kube"]["logs"][name]}
        return out


def default_env() -> DevEnv:
    return DevEnv(paths.dev_root())
