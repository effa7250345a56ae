"""Spark settings every sparkmirror job starts with, on the local runner and on Kubernetes alike.

A job's JVMs (the driver, and executors beside their Python workers) copy no data: they plan an epoch every
`epochSeconds` and carry a few summary rows back. What they cost the mirror is a burst of CPU at each epoch
boundary, taken from the lanes and the brokers on the same cores, which showed as the worst seconds of the
exactly-once latency (bench/results/latency.md, notes of the sixth session). Two settings shrink that burst:
- C1 only (`-XX:TieredStopAtLevel=1`): C2 went on compiling Spark's planning code at every boundary of the first
  minutes (2 s of compile time at the first one). Code that runs once an epoch gains nothing from C2; the
  driver's CPU at a boundary halved and its start-up got faster.
- G1 regions of 4 MiB, broadcast blocks of 1 MiB: each epoch's task broadcast (a 4 MiB chunk) and result
  buffers (1 MiB chunks) were humongous objects for the 1 MiB regions of a 1 GiB heap, and each of them
  started a GC: 2-4 at every boundary, one a concurrent marking cycle; none now.
They are `spark.*.defaultJavaOptions`: options a user sets in `extraJavaOptions` come after them and win.

What the driver keeps of past epochs for the UI and `recentProgress` is held to 30 epochs (15 minutes at the
default `epochSeconds`). Spark keeps 1,000 jobs, stages and SQL executions (the UI's store exists with the UI off
too) and 100 progress updates: every epoch is a job, a stage and two SQL executions, so that store grows for 8
hours of epochs nobody reads (a soak's heap histograms: 82 SQL executions at 21 minutes without these settings,
50 at 13 minutes with them). A mirror's epochs are alike; its own metrics, not Spark's job list, say how it does.
The driver's live heap still grew ~10 MB/h in a 25-minute soak with them (bench/results/soak-25min.md): heap dumps
found each epoch's Dataset bound in py4j's gateway until Python's cycle collector ran (`queries.release`). A
user's sparkConf wins.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:G1HeapRegionSize=4m"

SPARK_DEFAULTS: dict[str, str] = {
    "spark.driver.defaultJavaOptions": JVM_OPTIONS,
    "spark.executor.defaultJavaOptions": JVM_OPTIONS,
    "spark.broadcast.blockSize": "1m",
    "spark.ui.retainedJobs": "30",
    "spark.ui.retainedStages": "30",
    "spark.sql.ui.retainedExecutions": "60",
    "spark.sql.streaming.numRecentProgressUpdates": "30",
    # a Python worker that crashes in C (librdkafka, the codecs) fails its task with the Python stack of every
    # thread, not only "Python worker exited unexpectedly"
    "spark.python.worker.faulthandler.enabled": "true",
}

DRIVER_ENV: dict[str, str] = {"MALLOC_ARENA_MAX": "2"}
"""The driver JVM's environment (the SparkApplication's driver pod; the local job sets it for the JVM it starts).
glibc gives each thread that allocates its own malloc arena, up to 8 per core, and hands little of them back: the
driver JVM's native memory outside what the JVM tracks grew 7.6-8.2 MB/h in soaks of 25 and 60 minutes
(bench/results/soak-25min.md; soak.md at bb1ccf0) and -0.3 MB/h with 2 arenas (soak-20min-arena2.md; 2.8 MB/h in
the hour of soak.md at fd30d4c). The driver JVM copies
no records (they never enter a JVM), so its allocation rate is an epoch's planning: two arenas cost it nothing
measurable. The processes that do copy, the Python workers of the lanes, keep glibc's default: on Kubernetes they
live in executor pods, which are not given it, and locally `local_worker_env` gives them the default back."""


def glibc_default_arenas() -> int:
    """glibc's own limit on malloc arenas on a 64-bit host: 8 per core."""
    return 8 * (os.cpu_count() or 1)


def driver_env_to_set(environ: Mapping[str, str]) -> dict[str, str]:
    """The `DRIVER_ENV` variables a driver puts in its environment for the JVM it starts: those the user has not
    set (a value the user set is theirs). Pure."""
    return {k: v for k, v in DRIVER_ENV.items() if k not in environ}


def local_worker_env(set_by_driver: Iterable[str]) -> dict[str, str]:
    """Spark settings that give a local-mode job's lane workers glibc's default arenas again, for the `DRIVER_ENV`
    variables this driver set itself: the driver JVM starts them, and they would inherit its environment. A value
    the user set is theirs, for the workers too. Pure."""
    return {f"spark.executorEnv.{k}": str(glibc_default_arenas()) for k in DRIVER_ENV if k in set_by_driver}
