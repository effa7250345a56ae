"""`sparkmirror dev up/down/status`: named Kafka clusters plus a Kubernetes API server, tracked in a state file.

The state file lets `down` and `status` find processes that an earlier `up` left running in the background.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .kafka import KafkaCluster
from .kube import KubeApiServer
from .procs import DevEnvError, pid_alive, stop_pid

DEFAULT_CLUSTERS = ("source", "target")


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
        started: list[KafkaCluster | KubeApiServer] = []
        state: dict = {"kafka": {}, "kube": None, "started": time.time()}
        try:
            for i, name in enumerate(clusters):
                port = ctl = 0
                if base_port:
                    port, ctl = base_port + 2 * i, base_port + 2 * i + 1
                c = KafkaCluster(name, self.root / "kafka" / name, port=port, controller_port=ctl)
                t0 = time.monotonic()
                c.start()
                started.append(c)
                state["kafka"][name] = {"bootstrap": c.bootstrap, "pid": c.pid, "log": str(c.log),
                                        "startup_s": round(time.monotonic() - t0, 1)}
            if kube:
                k = KubeApiServer(self.root / "kube")
                t0 = time.monotonic()
                k.start()
                started.append(k)
                state["kube"] = {"url": k.url, "kubeconfig": str(k.kubeconfig), "pids": k.pids,
                                 "logs": {n: str(k.log(n)) for n in k.pids},
                                 "startup_s": round(time.monotonic() - t0, 1)}
        except BaseException:
            for s in reversed(started):
                s.stop()
            raise
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
