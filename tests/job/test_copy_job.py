"""The whole job as a process: TopicSync creates the remote topic, lanes copy, a new topic is picked up."""
from __future__ import annotations

import re

import psutil

from sparkmirror.sparkdefaults import JVM_OPTIONS, glibc_default_arenas
from sparkmirror_dev.testing import unique_name

from .conftest import end_offsets, produce_numbered, read_topic, wait_for


def _mirrored(bootstrap: str, topic: str, per_partition: int, partitions: int) -> bool:
    """One read: every partition of the remote topic holds `per_partition` records.

    (Reading twice once made this pass wrongly: the first read saw no topic yet, `all()` of nothing is true,
    and the second saw it just created with its partitions still empty.)
    """
    try:
        got = read_topic(bootstrap, topic, timeout=20)
    except Exception:  # noqa: BLE001 - topic not created yet
        return False
    return len(got) == partitions and all(len(v) == per_partition for v in got.values())


def _assert_workers_warmed_first(log: str) -> None:
    """Every Python worker that ran a lane warmed Arrow's row conversion before its first epoch started
    (datasource.warm_result_conversion), so no worker pays pyarrow's pandas import at an epoch boundary."""
    warmed: set[str] = set()
    started: set[str] = set()
    for line in log.splitlines():
        if m := re.search(r"Python worker (\d+): Arrow's row conversion warmed", line):
            warmed.add(m[1])
        elif m := re.search(r"lane \S+: epoch \d+ starts in worker (\d+)", line):
            assert m[1] in warmed, f"worker {m[1]} started a lane before warming the row conversion: {line}"
            started.add(m[1])
    assert started, log[-3000:]


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


def test_job_mirrors_and_picks_up_new_topic(kafka_a, kafka_b, topic, flowgroup, job):
    prefix = unique_name("jobt")
    first = topic(kafka_a, 3, name=f"{prefix}-one")
    produce_numbered(kafka_a.bootstrap, first, 3, 0, 2000)
    cfg = flowgroup(f"{prefix}-.*", epochSeconds=4, mirror={"refreshTopicsIntervalSeconds": 2})
    jp = job(cfg, env={"MALLOC_ARENA_MAX": None})  # unset (an in-process session of this pytest worker set it)
    wait_for(lambda: _mirrored(kafka_b.bootstrap, f"a.{first}", 2000, 3) or jp.proc.poll() is not None, 300,
             "first topic mirrored")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    # the job's own JVM started with the options that keep epoch boundaries cheap (sparkdefaults.py): a JVM of
    # the test process could not show it, pytest's Spark fixture may have started that one first
    assert set(JVM_OPTIONS.split()) <= set(jp.jvm_command_line()), jp.jvm_command_line()
    # the driver JVM runs with two malloc arenas (sparkdefaults.DRIVER_ENV: its native memory grew 8 MB/h with
    # glibc's default in a 60-minute soak), the lanes' Python workers with glibc's default; a value the user set
    # stays theirs (tests/unit/test_spark_defaults.py)
    wait_for(lambda: _arenas(jp)[1], 30, "the lanes' Python workers")
    assert _arenas(jp) == ({"2"}, {str(glibc_default_arenas())}), _arenas(jp)
    _assert_workers_warmed_first(jp.log())
    second = topic(kafka_a, 2, name=f"{prefix}-two")
    produce_numbered(kafka_a.bootstrap, second, 2, 0, 300)
    wait_for(lambda: _mirrored(kafka_b.bootstrap, f"a.{second}", 300, 2), 180, "new topic mirrored")
    # taken in place by the lanes copying (routewatch.py), not by ending their epoch to re-plan
    log = jp.log()
    assert re.search(rf"source gained {second} \(2 partitions\): lane \d takes \d of their partitions in place",
                     log), log[-3000:]
    assert "ending the epoch early" not in log
    for name, parts, n in ((first, 3, 2000), (second, 2, 300)):
        got = read_topic(kafka_b.bootstrap, f"a.{name}")
        for p in range(parts):
            assert [r.value for r in got[p]] == [f"{p}:{i}".encode() for i in range(n)], (
                name, p, end_offsets(kafka_b.bootstrap, f"a.{name}"), {k: len(v) for k, v in got.items()})
    assert jp.stop() == 0, jp.log()[-3000:]
