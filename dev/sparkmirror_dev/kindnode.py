"""A kind node image made on this machine, for Kubernetes built from its Go modules.

kind's published images come from a registry and its own `build node-image` pulls CNI and storage images, so
the node image is put together here the way kind's builder does it, from parts this machine can make:
- the *base*: the Debian base plus Debian's systemd, containerd, runc and CNI plugins, and kind's own node
  files (entrypoint, systemd units, containerd config) taken at build time from kind's Go module;
- the Kubernetes binaries (kubelet, kubeadm, kubectl) built from k8s.io/kubernetes;
- the images kubeadm runs (control plane, kube-proxy, etcd, CoreDNS, pause) built on the Debian base from the
  same binaries and imported into the node's containerd content store (not unpacked, as kind does it);
- a static bridge CNI configuration (one node needs no CNI daemon) in place of kind's default kindnet.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import images, install, paths
from .procs import DevEnvError

NODE_BINARIES = ("kubelet", "kubeadm", "kubectl")
REGISTRY = "registry.k8s.io"
POD_SUBNET = "10.244.0.0/16"

# Debian packages of the node: what kind's base installs, with containerd, runc and CNI plugins from Debian
NODE_PACKAGES = ("systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz "
                 "bash ca-certificates curl jq procps containerd runc containernetworking-plugins")

BASE_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -q \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -yq --no-install-recommends %(packages)s \\
    && rm -rf /var/lib/apt/lists/*
# kind's node files over the packages' defaults (its containerd config and units)
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
# containerd may not lower a container's oom_score_adj below its own: raising priority needs CAP_SYS_RESOURCE,
# which machines of this project do not grant (as in rootless kind)
RUN sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml \\
    && chmod 0755 /usr/local/bin/* /kind/bin/* \\
    && ln -sf /usr/bin/containerd /usr/local/bin/containerd \\
    && mkdir -p /opt/cni && ln -sfn /usr/lib/cni /opt/cni/bin \\
    && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
    && ln -sf /usr/lib/systemd/systemd /sbin/init \\
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
    && systemctl mask systemd-binfmt.service \\
    && mkdir -p /etc/kubernetes/manifests /etc/cni/net.d \\
    && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + \\
         {"path": "/kind/bin/mount-product-files.sh"}' | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
COPY 10-bridge.conflist /etc/cni/net.d/
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
"""

# one node: a bridge with host-local addresses from the pod subnet, masquerading to the outside
BRIDGE_CNI = {
    "cniVersion": "0.4.0", "name": "kind-bridge",
    "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}

# kind applies these after kubeadm. The network is the static bridge above; there is no storage provisioner
# (nothing here uses volumes that need one). Each says so where an operator of the cluster would look.
CNI_MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: sparkmirror-node-network, namespace: kube-system}
data: {cni: "static bridge in /etc/cni/net.d/10-bridge.conflist (single-node cluster)"}
"""
STORAGE_MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: sparkmirror-node-storage, namespace: kube-system}
data: {storage: "no dynamic provisioner: emptyDir and hostPath volumes only"}
"""

COMPONENT_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
%(install)s
COPY bin/ /usr/local/bin/
ENTRYPOINT %(entrypoint)s
"""


def _kind_module() -> Path:
    out = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kind@{paths.KIND_VERSION}"],
                         capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    if out.returncode != 0:
        raise DevEnvError(f"go mod download sigs.k8s.io/kind@{paths.KIND_VERSION} failed: {out.stderr[-2000:]}")
    return Path(json.loads(out.stdout)["Dir"])


def kind_base_image() -> str:
    base = images.base_image()
    files = _kind_module() / "images" / "base" / "files"
    dockerfile = BASE_DOCKERFILE % {"packages": NODE_PACKAGES}
    cni = json.dumps(BRIDGE_CNI, indent=2)
    tag = f"sparkmirror/kind-base:{paths.KIND_VERSION}-{images.digest(base, dockerfile, cni, files)}"
    if images.exists(tag):
        return tag
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as tmp:
        ctx = Path(tmp)
        shutil.copytree(files, ctx / "files")
        (ctx / "Dockerfile").write_text(dockerfile)
        (ctx / "10-bridge.conflist").write_text(cni)
        images.docker_build(ctx, tag, "kind-base", args={"BASE_IMAGE": base})
    return tag


def _components() -> dict[str, tuple[str, list[str], str]]:
    """image name -> (binary, entrypoint, extra Debian packages)."""
    return {
        "kube-apiserver": ("kube-apiserver", ["/usr/local/bin/kube-apiserver"], ""),
        "kube-controller-manager": ("kube-controller-manager", ["/usr/local/bin/kube-controller-manager"], ""),
        "kube-scheduler": ("kube-scheduler", ["/usr/local/bin/kube-scheduler"], ""),
        # kube-proxy programs the node's packet filter with the iptables tools
        "kube-proxy": ("kube-proxy", ["/usr/local/bin/kube-proxy"], "iptables conntrack ipset kmod"),
        "etcd": ("etcd", ["/usr/local/bin/etcd"], ""),
        "coredns/coredns": ("coredns", ["/usr/local/bin/coredns"], ""),
        # the sandbox holder: Debian's catatonit in pause mode
        "pause": ("", ["/usr/bin/catatonit", "-P"], "catatonit"),
    }


def component_images() -> list[str]:
    """The images `kubeadm config images list` names, built from this machine's binaries."""
    install.kubernetes()
    install.node_binaries()
    base = images.base_image()
    wanted = subprocess.run([str(paths.bin_dir() / "kubeadm"), "config", "images", "list", "--kubernetes-version",
                             paths.K8S_VERSION], capture_output=True, text=True, check=True).stdout.split()
    built = []
    for ref in wanted:
        name = ref.removeprefix(REGISTRY + "/").rsplit(":", 1)[0]
        binary, entrypoint, packages = _components()[name]
        if binary == "coredns":
            install.coredns()
        install_line = (f"RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -yq "
                        f"--no-install-recommends {packages} && rm -rf /var/lib/apt/lists/*") if packages else ""
        dockerfile = COMPONENT_DOCKERFILE % {"install": install_line, "entrypoint": json.dumps(entrypoint)}
        with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as tmp:
            ctx = Path(tmp)
            (ctx / "bin").mkdir()
            if binary:
                shutil.copy2(paths.bin_dir() / binary, ctx / "bin" / binary)
            (ctx / "Dockerfile").write_text(dockerfile)
            # tagged as kubeadm expects; the label keys the inputs so an unchanged image is reused
            key = images.digest(base, dockerfile, ctx / "bin")
            if not (images.exists(ref) and _label(ref) == key):
                images.docker_build(ctx, ref, f"component-{binary or 'pause'}", args={"BASE_IMAGE": base},
                                    labels={"sparkmirror.io/inputs": key})
        built.append(ref)
    return built


def _label(image: str) -> str | None:
    out = subprocess.run(["docker", "image", "inspect", "--format",
                          '{{index .Config.Labels "sparkmirror.io/inputs"}}', image], capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


def node_image() -> str:
    """kind's node image for paths.K8S_VERSION: the base plus binaries, /kind/version, manifests and images."""
    base = kind_base_image()
    refs = component_images()
    ids = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", *refs], capture_output=True,
                         text=True, check=True).stdout
    binaries = [paths.bin_dir() / b for b in NODE_BINARIES]
    # this module is the recipe: a change to it makes a new image
    tag = f"sparkmirror/kind-node:{paths.K8S_VERSION}-{images.digest(base, ids, Path(__file__), *binaries)}"
    if images.exists(tag):
        return tag
    t0 = time.monotonic()
    log = images.log_path("kind-node")
    name = f"sparkmirror-node-build-{int(time.time())}"
    run = lambda *cmd, **kw: images.run_logged(list(cmd), f"node image step {cmd[:3]}", log, **kw)  # noqa: E731
    run("docker", "run", "-d", "--name", name, "--entrypoint=sleep", "--security-opt", "seccomp=unconfined",
        base, "infinity")
    try:
        for b in binaries:
            run("docker", "cp", b, f"{name}:/usr/bin/{b.name}")
        run("docker", "exec", "-i", name, "bash", "-c",
            f"mkdir -p /kind/manifests && echo -n {paths.K8S_VERSION} > /kind/version && "
            "csplit -s -z -f /kind/manifests/part - '/^---$/' && "
            "mv /kind/manifests/part00 /kind/manifests/default-cni.yaml && "
            "sed 1d /kind/manifests/part01 > /kind/manifests/default-storage.yaml && rm /kind/manifests/part01",
            input=f"{CNI_MANIFEST}---\n{STORAGE_MANIFEST}".encode())
        run("docker", "exec", name, "bash", "-c",
            "nohup containerd >/tmp/containerd.log 2>&1 & for i in $(seq 1 60); do "
            "[ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done; "
            "cat /tmp/containerd.log; exit 1")
        save = subprocess.Popen(["docker", "save", *refs], stdout=subprocess.PIPE)
        with open(log, "ab") as out:
            rc = subprocess.call(["docker", "exec", "-i", name, "ctr", "--namespace=k8s.io", "images", "import",
                                  "--label=io.cri-containerd.pinned=pinned", "--all-platforms", "--no-unpack",
                                  "--digests", "-"], stdin=save.stdout, stdout=out, stderr=out)
        save.wait()
        if rc != 0 or save.returncode != 0:
            raise DevEnvError(f"importing the Kubernetes images into the node image failed; see {log}")
        # containerd's sandbox image (kind's config names one) is the pause image kubeadm wants
        pause = next(r for r in refs if "/pause:" in r)
        run("docker", "exec", name, "bash", "-c",
            "sandbox=$(sed -n 's/^ *sandbox_image *= *\"\\(.*\\)\"/\\1/p' /etc/containerd/config.toml); "
            f"[ -z \"$sandbox\" ] || [ \"$sandbox\" = {pause} ] || "
            f"ctr --namespace=k8s.io images tag --force {pause} \"$sandbox\"")
        run("docker", "exec", name, "bash", "-c", "pkill containerd; sleep 1; rm -f /tmp/containerd.log")
        run("docker", "commit", "--change", 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]',
            "--change", "CMD []", name, tag)
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True)
    images.prune_older(tag)
    images.prune_older(base)
    print(f"image {tag} built in {time.monotonic() - t0:.0f}s", flush=True)
    return tag
