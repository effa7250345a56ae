"""Container images for the kind test ground, all built on this machine, each cached by what it is made of.

No registry answers here, so nothing is pulled: the Debian base comes from Debian packages (debootstrap), the
project's images from its own Dockerfile on that base, Kafka's from the Maven jars the local brokers use, and
the Kubernetes ones from Go modules. An image whose inputs have not changed is found by its tag and reused.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import install, paths
from .docker import apt_install
from .procs import DevEnvError, log_tail

REPO = Path(__file__).resolve().parents[2]
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("SPARKMIRROR_DEBIAN_MIRROR", "http://deb.debian.org/debian")
EXTRA_CAS = Path("/usr/local/share/ca-certificates")


def log_path(name: str) -> Path:
    log = paths.cache_dir() / "logs" / f"image-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return log


def run_logged(cmd: list[str | Path], what: str, log: Path, *, input: bytes | None = None,
               env: dict[str, str] | None = None, timeout: float = 3600) -> None:
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        out.flush()
        res = subprocess.run([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, input=input,
                             env={**os.environ, **(env or {})}, timeout=timeout)
    if res.returncode != 0:
        raise DevEnvError(f"{what} failed (exit {res.returncode}); see {log}:\n{log_tail(log)}")


def exists(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def digest(*parts: str | bytes | Path) -> str:
    """A short key of an image's inputs: strings, bytes, and files or folders (their paths and contents)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            files = sorted(p for p in part.rglob("*") if p.is_file()) if part.is_dir() else [part]
            for f in files:
                h.update(str(f.relative_to(part) if part.is_dir() else f.name).encode())
                h.update(f.read_bytes() if f.stat().st_size < 1 << 20 else str(f.stat().st_size).encode())
        else:
            h.update(part if isinstance(part, bytes) else part.encode())
    return h.hexdigest()[:12]


def prune_older(image: str) -> None:
    """Remove the other tags of `image`'s repository (earlier builds), so the cache does not grow per change."""
    repo, tag = image.rsplit(":", 1)
    out = subprocess.run(["docker", "image", "ls", repo, "--format", "{{.Tag}}"], capture_output=True, text=True)
    old = [f"{repo}:{t}" for t in out.stdout.split() if t not in (tag, "<none>", "dev")]
    if old:
        subprocess.run(["docker", "image", "rm", *old], capture_output=True)


def _announce(image: str, t0: float) -> None:
    print(f"image {image} built in {time.monotonic() - t0:.0f}s", flush=True)


def base_image() -> str:
    """Debian bookworm (minbase) from Debian packages, trusting the machine's own extra CAs (a proxy's, if any)
    so that apt and pip inside builds work wherever the host's do. bookworm's Python is 3.11, as the job needs."""
    cas = sorted(EXTRA_CAS.glob("*.crt")) if EXTRA_CAS.is_dir() else []
    tag = f"sparkmirror-base/debian:{DEBIAN_SUITE}-{digest(DEBIAN_SUITE, *cas)}"
    if exists(tag):
        return tag
    t0 = time.monotonic()
    if shutil.which("debootstrap") is None:
        apt_install("debootstrap")
    log = log_path("base")
    print(f"building {tag} with debootstrap (about a minute) ...", flush=True)
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as tmp:
        root = Path(tmp) / "rootfs"
        run_logged(["debootstrap", "--variant=minbase", "--include=ca-certificates", DEBIAN_SUITE, root,
                    DEBIAN_MIRROR], "debootstrap of the Debian base", log)
        for ca in cas:
            shutil.copy(ca, root / "usr/local/share/ca-certificates" / ca.name)
        if cas:
            run_logged(["chroot", root, "update-ca-certificates"], "trusting the machine's CAs", log)
        # pip bundles its own CA list; point it at the system's (which now has the machine's CAs)
        (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        with open(log, "ab") as out:
            rc = subprocess.call(["docker", "import", "-", tag], stdin=tar.stdout, stdout=out, stderr=out)
        tar.wait()
        if rc != 0 or tar.returncode != 0:
            raise DevEnvError(f"docker import of the Debian base failed; see {log}:\n{log_tail(log)}")
    _announce(tag, t0)
    return tag


def docker_build(context: Path, tag: str, name: str, *, dockerfile: Path | None = None, target: str | None = None,
                 args: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> str:
    """`docker build` on the host network (builds fetch Debian and PyPI packages) with the classic builder,
    which needs no BuildKit front-end image from a registry."""
    cmd: list[str | Path] = ["docker", "build", "--network", "host", "-t", tag]
    if dockerfile is not None:
        cmd += ["-f", dockerfile]
    if target:
        cmd += ["--target", target]
    for k, v in (args or {}).items():
        cmd += ["--build-arg", f"{k}={v}"]
    for k, v in (labels or {}).items():
        cmd += ["--label", f"{k}={v}"]
    t0 = time.monotonic()
    run_logged([*cmd, context], f"building image {tag}", log_path(name), env={"DOCKER_BUILDKIT": "0"})
    _announce(tag, t0)
    return tag


def product_images(tag: str = "dev") -> dict[str, str]:
    """The operator and Spark images from the project's Dockerfile, on the local Debian base. Each is also
    tagged by its content (`<tag>-<image id>`), so a changed image rolls the pods that run it."""
    base = base_image()
    out = {}
    for target in ("operator", "spark"):
        image = docker_build(REPO, f"sparkmirror-{target}:{tag}", target, target=target, args={"BASE_IMAGE": base})
        image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                                  text=True, check=True).stdout.strip().removeprefix("sha256:")[:12]
        out[target] = f"sparkmirror-{target}:{tag}-{image_id}"
        run_logged(["docker", "tag", image, out[target]], f"tagging {image}", log_path(target))
        prune_older(out[target])
    return out


KAFKA_DIR = Path(__file__).resolve().parent / "kafka-image"


def kafka_image() -> str:
    """Apache Kafka (KRaft) from the Maven Central jars the local brokers use, on the Debian base with Java 17."""
    libs = install.kafka()
    base = base_image()
    tag = f"sparkmirror-kafka:{paths.KAFKA_VERSION}-{digest(base, KAFKA_DIR)}"
    if exists(tag):
        return tag
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as tmp:
        ctx = Path(tmp)
        shutil.copytree(KAFKA_DIR, ctx, dirs_exist_ok=True)
        shutil.copytree(libs, ctx / "libs", ignore=shutil.ignore_patterns(".*"))
        docker_build(ctx, tag, "kafka", args={"BASE_IMAGE": base})
    return tag


SPARK_OPERATOR_DOCKERFILE = """\
ARG SPARK_IMAGE
FROM ${SPARK_IMAGE}
USER root
RUN mkdir -p /etc/k8s-webhook-server/serving-certs && chown -R 185:0 /etc/k8s-webhook-server
COPY spark-operator /usr/bin/spark-operator
USER 185
ENTRYPOINT ["tini", "-s", "--", "/usr/bin/spark-operator"]
"""


def spark_operator_image(spark_image: str) -> str:
    """The Kubeflow Spark operator built from its Go module, on the project's Spark image: the controller runs
    spark-submit, so it needs the same Spark (and Java) as the applications it launches."""
    binary = install.spark_operator_binary()
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", spark_image],
                              capture_output=True, text=True, check=True).stdout
    tag = (f"sparkmirror/spark-operator:{paths.SPARK_OPERATOR_VERSION}-"
           f"{digest(image_id, SPARK_OPERATOR_DOCKERFILE, binary)}")
    if exists(tag):
        return tag
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as tmp:
        ctx = Path(tmp)
        shutil.copy2(binary, ctx / "spark-operator")
        (ctx / "Dockerfile").write_text(SPARK_OPERATOR_DOCKERFILE)
        docker_build(ctx, tag, "spark-operator", args={"SPARK_IMAGE": spark_image})
    prune_older(tag)
    return tag
