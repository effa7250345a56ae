"""A lane's Python worker: what it sets up once, so the worker's per-task work does not hold a kept lane still."""
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path


def _run(code: str, env_path: str = "") -> subprocess.CompletedProcess:
    # in a process of its own: both settings are process-wide and last as long as it does
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), env_path], capture_output=True, text=True,
                          timeout=60)


def test_a_worker_freezes_its_long_lived_objects_once() -> None:
    out = _run("""
        import gc, logging; logging.basicConfig(level=logging.INFO)
        from sparkmirror.copying.workerproc import freeze_long_lived
        freeze_long_lived(); n = gc.get_freeze_count(); assert n > 1000, n
        junk = [[i] for i in range(1000)]
        freeze_long_lived(); assert gc.get_freeze_count() == n
        """)
    assert out.returncode == 0, out.stderr
    assert "long-lived objects left out of garbage collection" in out.stderr


def test_zip_importers_keep_their_directory_across_spark_s_cache_invalidation(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"  # as pyspark.zip: a package and a subpackage imported from one archive
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zpkg/__init__.py", "")
        z.writestr("zpkg/sub/__init__.py", "")
        z.writestr("zpkg/late.py", "VALUE = 7\n")
    out = _run("""
        import importlib, sys, zipimport
        sys.path.insert(0, sys.argv[1])
        import zpkg.sub
        reads = []
        real = zipimport._read_directory
        zipimport._read_directory = lambda path: reads.append(path) or real(path)
        importlib.invalidate_caches()  # what Spark's worker does before each task
        before = len(reads)
        from sparkmirror.copying.workerproc import keep_zip_directories
        assert keep_zip_directories() == before, (keep_zip_directories(), before)
        reads.clear()
        importlib.invalidate_caches()
        assert reads == [], reads
        import zpkg.late  # the kept directory still serves imports
        assert zpkg.late.VALUE == 7
        print(before)
        """, str(archive))
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 2  # one importer per package read the archive again before
