"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC on) and kube-controller-manager.

The controller manager runs only the garbage collector and the namespace controller: owner references and
namespace deletion then behave as on a real cluster. There is no kubelet and no scheduler: nothing here
runs pods (the tests name the stand-in they use for that).
"""
from __future__ import annotations

import secrets
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import install, paths
from .procs import DevEnvError, pick_ports, spawn, stop_pid, wait_until

ADMIN_USER = "sparkmirror-admin"


@dataclass
class KubeApiServer:
    home: Path
    port: int = 0
    etcd_port: int = 0
    etcd_peer_port: int = 0
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    pids: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    def log(self, part: str) -> Path:
        return self.home / f"{part}.log"

    # --- start / stop -------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> "KubeApiServer":
        bins = install.kubernetes()
        ports = pick_ports({"kube-apiserver": self.port, "etcd": self.etcd_port, "etcd peer": self.etcd_peer_port})
        self.port, self.etcd_port, self.etcd_peer_port = ports["kube-apiserver"], ports["etcd"], ports["etcd peer"]
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self._start_etcd(bins, timeout)
            self._start_apiserver(bins, timeout)
            self._write_kubeconfig()
            self._start_controller_manager(bins)
            self.install_crd(paths.spark_application_crd())
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self, bins: Path, timeout: float) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        cmd = [str(bins / "etcd"), "--name", "default", "--data-dir", str(self.home / "etcd"),
               "--listen-client-urls", client, "--advertise-client-urls", client,
               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"default={peer}", "--unsafe-no-fsync", "--log-level", "warn"]
        self._spawn("etcd", cmd)

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as r:
                return b'"true"' in r.read()

        wait_until(healthy, self.procs["etcd"], f"etcd ({client})", self.log("etcd"), timeout)

    def _start_apiserver(self, bins: Path, timeout: float) -> None:
        certs = self.home / "certs"
        certs.mkdir(exist_ok=True)
        sa_key = certs / "sa.key"
        if not sa_key.exists():
            _openssl("genrsa", "-out", str(sa_key), "2048")
            _openssl("rsa", "-in", str(sa_key), "-pubout", "-out", str(certs / "sa.pub"))
        tokens = self.home / "tokens.csv"
        tokens.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        cmd = [str(bins / "kube-apiserver"),
               f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
               "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
               f"--cert-dir={certs}", f"--token-auth-file={tokens}", "--authorization-mode=RBAC",
               "--service-account-issuer=https://kubernetes.default.svc",
               f"--service-account-key-file={certs / 'sa.pub'}",
               f"--service-account-signing-key-file={sa_key}",
               # a range is required by the flag parser; nothing ever routes to it (no kube-proxy here)
               "--service-cluster-ip-range=10.96.0.0/16",
               "--enable-priority-and-fairness=false", "--allow-privileged=true",
               "--endpoint-reconciler-type=none", "--v=1"]
        self._spawn("kube-apiserver", cmd)
        wait_until(self._readyz, self.procs["kube-apiserver"], f"kube-apiserver ({self.url})",
                   self.log("kube-apiserver"), timeout)

    def _start_controller_manager(self, bins: Path) -> None:
        cmd = [str(bins / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
               "--controllers=garbagecollector,namespace", "--leader-elect=false",
               "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"]
        self._spawn("kube-controller-manager", cmd)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        proc = spawn(cmd, self.log(name))
        self.procs[name] = proc
        self.pids[name] = proc.pid

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                stop_pid(pid)
                proc = self.procs.pop(name, None)
                if proc is not None:
                    proc.wait(timeout=5)

    # --- clients ------------------------------------------------------------------------------------
    def _readyz(self) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
            return r.status == 200 and r.read().strip() == b"ok"

    def _write_kubeconfig(self) -> None:
        ca = self.home / "certs" / "apiserver.crt"  # self-signed by kube-apiserver for 127.0.0.1/localhost
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "sparkmirror-dev",
            "clusters": [{"name": "sparkmirror-dev",
                          "cluster": {"server": self.url, "certificate-authority": str(ca)}}],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [{"name": "sparkmirror-dev",
                          "context": {"cluster": "sparkmirror-dev", "user": ADMIN_USER, "namespace": "default"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(paths.bin_dir() / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        res = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=120)
        if check and res.returncode != 0:
            raise DevEnvError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def wait_allowed(self, user: str, namespace: str, verb: str, resource: str, timeout: float = 30.0) -> None:
        """Wait until RBAC just applied is in force for user: the apiserver's authorizer reads Roles and bindings
        through an informer, so a request right after the apply may still be refused."""
        deadline = time.monotonic() + timeout
        while self.kubectl("auth", "can-i", verb, resource, f"--as={user}", f"--namespace={namespace}",
                           check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise DevEnvError(f"{user} still may not {verb} {resource} in {namespace} after {timeout:.0f}s")
            time.sleep(0.1)

    def install_crd(self, crd: Path) -> None:
        """Server-side apply: large CRDs (SparkApplication) overflow client-side apply's annotation limit."""
        self.kubectl("apply", "--server-side", "--field-manager=sparkmirror-dev", "-f", str(crd))
        name = yaml.safe_load(crd.read_text())["metadata"]["name"]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")

    def api_client(self):  # -> kubernetes.client.ApiClient, imported lazily (no kubernetes dep for dev up)
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


def _openssl(*args: str) -> None:
    res = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise DevEnvError(f"openssl {args[0]} failed: {res.stderr.strip()}")
