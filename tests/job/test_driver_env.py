"""The driver JVM runs with two malloc arenas (sparkdefaults.DRIVER_ENV: its native memory grew 8 MB/h with glibc's
default in a 60-minute soak), the lanes' Python workers it starts with glibc's default. Read from the running
job's processes (/proc/<pid>/environ); a value the user set stays theirs (tests/unit/test_spark_defaults.py)."""
from __future__ import annotations

import psutil

from sparkmirror.sparkdefaults import glibc_default_arenas

from .committed import wait_committed
from .conftest import produce_numbered, wait_for


def _arenas(jp) -> tuple[set[str], set[str]]:
    """(MALLOC_ARENA_MAX of the job's JVMs, of the Python workers its lanes run in); '-' where it is not set."""
    jvms, workers = set(), set()
    for p in psutil.Process(jp.proc.pid).children(recursive=True):
        try:
            cmd, value = " ".join(p.cmdline()), p.environ().get("MALLOC_ARENA_MAX", "-")
        except psutil.Error:  # gone or a zombie meanwhile (a shell of spark-class)
            continue
        if p.name() == "java":
            jvms.add(value)
        elif cmd.endswith("-m pyspark.daemon pyspark.worker"):  # the lanes' (not the driver's lookup of sources)
            workers.add(value)
    return jvms, workers


def test_the_driver_jvm_has_two_arenas_and_the_lanes_the_default(kafka_a, kafka_b, topic, flowgroup, job) -> None:
    src = topic(kafka_a, 2)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 50)
    cfg = flowgroup(src)
    jp = job(cfg, env={"MALLOC_ARENA_MAX": None})  # unset (an in-process session of this pytest worker set it)
    alive = lambda: jp.proc.poll() is None  # noqa: E731
    wait_committed(kafka_b.bootstrap, f"a.{src}", 50, alive, 240, "copying", partitions=2)
    wait_for(lambda: _arenas(jp)[1], 30, "the lanes' Python workers")
    assert _arenas(jp) == ({"2"}, {str(glibc_default_arenas())}), _arenas(jp)
    assert jp.stop() == 0, jp.log()[-3000:]
