"""The C merge, scan, rewrite and Produce request (copying/_merge.c, _batchscan.c, _produce.c) under AddressSanitizer: `test_coalesce.py` and
`test_batchscan.py` run again in a child interpreter against a copy of the package whose extension is built with
`-fsanitize=address`, every Python object its own malloc
(`PYTHONMALLOC=malloc`, so a read one byte past a batch lands in a red zone rather than in pymalloc's arena). A
read or write out of bounds ends the child with ASan's report; the fuzz tests' 3,000 bent batches each are the
input."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.minutes(0.6)


def _libasan() -> str:
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True)
    return os.path.realpath(out.stdout.strip())


def test_the_c_merge_stays_inside_its_buffers_under_address_sanitizer(tmp_path: Path) -> None:
    package = tmp_path / "sparkmirror"
    shutil.copytree(REPO / "spark-app" / "sparkmirror", package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer",
                    f"-I{sysconfig.get_paths()['include']}", *map(str, sorted((package / "copying").glob("_*.c"))),
                    "-o", str(package / "copying" / f"_merge{suffix}")], check=True)
    env = {**os.environ, "PYTHONMALLOC": "malloc", "LD_PRELOAD": _libasan(), "ASAN_OPTIONS": "detect_leaks=0",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "operator"), str(REPO / "dev"), str(REPO)])}
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                            "--basetemp", str(tmp_path / "bt"), str(REPO / "tests" / "unit" / "test_coalesce.py"),
                            str(REPO / "tests" / "unit" / "test_batchscan.py")],
                           env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[:4000]  # "-s": ASan reports on stderr
    assert "AddressSanitizer" not in child.stderr
    assert " passed" in child.stdout and " skipped" not in child.stdout and str(tmp_path) in _imported_from(env)


def _imported_from(env: dict[str, str]) -> str:
    """Where the child's merge came from (the sanitized copy, not the package built in place)."""
    return subprocess.run([sys.executable, "-c", "import sparkmirror.copying._merge as m; print(m.__file__)"],
                          env=env, capture_output=True, text=True, check=True).stdout
