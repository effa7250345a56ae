"""A real single-node Kubernetes cluster made by kind from the node image built here.

The cluster is a Docker container running systemd, containerd, the kubelet and a kubeadm control plane; pods
in it are real containers of real images, so what runs there is what a user's cluster would run.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import install, kindnode, paths
from .docker import ensure_engine
from .images import run_logged, log_path
from .procs import DevEnvError

# kubelet 1.35+ refuses cgroup v1 hosts unless told otherwise; machines of this project run cgroup v1
CLUSTER_CONFIG = f"""\
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  podSubnet: {kindnode.POD_SUBNET}
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
  imageGCHighThresholdPercent: 100
  evictionHard: {{nodefs.available: "0%", imagefs.available: "0%"}}
"""


@dataclass
class KindCluster:
    name: str
    kubeconfig: Path

    @property
    def kubectl(self) -> list[str]:
        return [str(paths.bin_dir() / "kubectl"), f"--kubeconfig={self.kubeconfig}"]

    @property
    def helm(self) -> list[str]:
        return [str(install.helm()), f"--kubeconfig={self.kubeconfig}"]

    def load(self, *images: str) -> None:
        """Put locally built images on the node (kind skips those it already has)."""
        t0 = time.monotonic()
        run_logged([install.kind(), "load", "docker-image", "--name", self.name, *images],
                   f"kind load of {', '.join(images)}", log_path(f"kind-{self.name}"))
        print(f"loaded {len(images)} image(s) into kind in {time.monotonic() - t0:.0f}s", flush=True)

    def delete(self) -> None:
        subprocess.run([str(install.kind()), "delete", "cluster", "--name", self.name], capture_output=True)


def create(name: str, kubeconfig: Path, wait: str = "300s") -> KindCluster:
    """Create (or reuse, when one of that name answers) a kind cluster on the locally built node image."""
    ensure_engine()
    image = kindnode.node_image()
    kind = install.kind()
    install.kubernetes()
    existing = subprocess.run([str(kind), "get", "clusters"], capture_output=True, text=True).stdout.split()
    log = log_path(f"kind-{name}")
    if name in existing:
        run_logged([kind, "export", "kubeconfig", "--name", name, "--kubeconfig", kubeconfig], "kind export", log)
        return KindCluster(name, kubeconfig)
    t0 = time.monotonic()
    print(f"creating kind cluster {name} on {image} ...", flush=True)
    try:
        run_logged([kind, "create", "cluster", "--name", name, "--image", image, "--kubeconfig", kubeconfig,
                    "--wait", wait, "--config", "-"], f"kind create cluster {name}", log,
                   input=CLUSTER_CONFIG.encode(), timeout=900)
    except DevEnvError:
        subprocess.run([str(kind), "delete", "cluster", "--name", name], capture_output=True)
        raise
    print(f"kind cluster {name} ready in {time.monotonic() - t0:.0f}s", flush=True)
    return KindCluster(name, kubeconfig)
