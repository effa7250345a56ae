"""`run_java` fixture: compile and run small Java probes against the real Kafka / MirrorMaker 2 jars.

Kept out of conftest.py (shared and rewritten by others); test modules import it:
`from .mm2java import run_java  # noqa: F401`.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest


@pytest.fixture(scope="session")
def run_java(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """run_java(class_name, source, *args, stdin=None) compiles `source` with javac against the real Kafka
    jars (connect-mirror-client, kafka-clients, ...) into a temp dir, runs its main and returns stdout.
    `class_name` is fully qualified when the source declares a package."""
    from sparkmirror_dev import install

    if shutil.which("javac") is None:
        pytest.skip("javac is not installed")
    libs = install.mirrormaker2()
    root = tmp_path_factory.mktemp("java")
    compiled: set[str] = set()

    def run(class_name: str, source: str, *args: str, stdin: str | None = None, timeout: float = 90) -> str:
        if class_name not in compiled:
            src = root / "src" / class_name.replace(".", "/")
            src = src.with_name(src.name + ".java")
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_text(source)
            subprocess.run(["javac", "-nowarn", "-cp", f"{libs}/*", "-d", str(root), str(src)], check=True,
                           capture_output=True, text=True, timeout=180)
            compiled.add(class_name)
        out = subprocess.run(["java", "-Xmx128m", "-cp", f"{root}:{libs}/*", class_name, *args], input=stdin,
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise AssertionError(f"java {class_name} failed ({out.returncode}):\n{out.stderr[-3000:]}")
        return out.stdout

    return run
