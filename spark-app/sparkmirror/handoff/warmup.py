"""A standby generation's warm-up: everything a first epoch would otherwise wait for, done before the handoff.

The standby generation's queries are already running: each planned one epoch whose lane tasks made their
clients and wait for the go mark (copying/standby.py), so executors and Python workers are up. What is left:
every cluster answers, the remote topics are in place, the mark writers are connected, and the lane tasks are
running; then the generation can report ready. Until its lane tasks run (which needs executors registered) it is
not ready, however long that takes: past `timeout` it says why in its log and keeps waiting, never reports ready
on time alone (the operator's `readyTimeoutSeconds` decides when to give up on it).
"""
from __future__ import annotations

import logging
import threading
import time

from ..resource.flowgroup import FlowGroupConfig

log = logging.getLogger(__name__)


def warm_up(spark, configs: list[FlowGroupConfig], timeout: float = 60.0,
            stop: threading.Event | None = None) -> float:
    """Raises when a cluster does not answer, so the generation never reports ready. Returns the seconds taken
    once the lane tasks run; `stop` (the driver stopping) ends the wait at once (the caller then reports nothing)."""
    from confluent_kafka.admin import AdminClient

    from ..topicsync import TopicSync
    from .takeover import prepare

    t0 = time.monotonic()
    for cfg in configs:
        for c in cfg.clusters:
            AdminClient(c.client_config()).list_topics(timeout=timeout)
        prepare(cfg)
        for m in cfg.mirrors:
            TopicSync(cfg, m).sync()
    lanes = sum(c.lanes_of(m) for c in configs for m in c.mirrors)
    stop = stop or threading.Event()
    wait = max(0.0, timeout - (time.monotonic() - t0))
    while True:
        running = wait_for_tasks(spark, lanes, wait, stop)
        why = not_ready_why(running, lane_target(spark, lanes))
        if why is None or stop.is_set():
            break
        log.warning("standby: not ready after %.0f s: %s; still waiting", time.monotonic() - t0, why)
        wait = max(timeout, 1.0)
    took = time.monotonic() - t0
    log.info("standby: warm in %.1f s (%d of %d lane tasks waiting)", took, running, lanes)
    short = slots_short_why(lanes, _slots_or_lanes(spark, lanes))
    if short is not None:
        log.warning("standby: %s", short)
    return took


def _slots_or_lanes(spark, lanes: int) -> int:
    try:
        return task_slots(spark) or lanes
    except Exception:  # noqa: BLE001 - the store's API moved: nothing to warn about
        return lanes


def slots_short_why(lanes: int, slots: int) -> str | None:
    """What a handoff costs when Spark has fewer task slots than lanes (None: it has enough). A standby lane
    task holds its slot for a whole epoch after the go mark, so the next lane's task starts -- and fences the
    predecessor's lane of that id, which copies on until then or stopped before -- only an epoch later (kind, 2
    lanes on one core: 23 s later, its partitions waiting 3-10.7 s)."""
    if slots >= lanes:
        return None
    return (f"{lanes} lane tasks but {slots} task slot(s) (executor instances x cores): lanes run one after "
            f"another, so a handoff moves the later lanes' partitions an epoch after the first; give each lane a "
            f"task slot (executor cores: Spark's slots, coreRequest: what the pod asks for)")


def lane_target(spark, lanes: int) -> int:
    """How many lane tasks can run at once: the lanes, or Spark's task slots when fewer (all the lanes while no
    executor has registered: nothing is ready then)."""
    try:
        slots = task_slots(spark)
    except Exception:  # noqa: BLE001 - the store's API moved: wait for all
        return lanes
    return min(lanes, slots) if slots > 0 else lanes


def task_slots(spark) -> int:
    """Tasks Spark can run at once: the cores of the registered executors (in local mode, the driver's) per
    task's cpus. Not `defaultParallelism`, which is at least 2 on a cluster: one executor of one core (the kind
    e2e) runs one lane task at a time, and waiting for two left its standby never ready."""
    sc = spark.sparkContext
    executors = sc._jsc.sc().statusStore().executorList(True)
    cores = sum(executors.apply(i).totalCores() for i in range(executors.size()))
    return cores // max(1, int(sc.getConf().get("spark.task.cpus", "1")))


def not_ready_why(running: int, wanted: int) -> str | None:
    """Why a standby is not ready (None: it is): its lane tasks, which run only once executors registered and
    each made its clients and read its metadata, are not all running."""
    if running >= wanted:
        return None
    if running == 0:
        return f"no lane task is running (of {wanted}): no executor registered, or the lanes are not planned yet"
    return f"{running} of {wanted} lane tasks running"


def wait_for_tasks(spark, wanted: int, timeout: float, stop: threading.Event | None = None) -> int:
    """Until `wanted` tasks run (the standby lanes, waiting), or as many as Spark has task slots for, at most
    `timeout` seconds. Returns how many run."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + timeout
    running = 0
    while time.monotonic() < deadline:
        running = running_tasks(spark)
        if running >= lane_target(spark, wanted) or stop.wait(0.5):
            break
    return running


def running_tasks(spark) -> int:
    """Tasks running now, from the driver's status store's active stages (what the console progress bar shows).
    Not from the public `StatusTracker`: on Spark 4.1.1 its stage info says 0 active tasks while they run, which
    left every standby waiting for ever. The tracker stays the fallback should the store's API move."""
    sc = spark.sparkContext
    try:
        stages = sc._jsc.sc().statusStore().activeStages()
        return sum(stages.apply(i).numActiveTasks() for i in range(stages.size()))
    except Exception:  # noqa: BLE001 - an internal API: count what the public one says instead
        tracker = sc.statusTracker()
        return sum(info.numActiveTasks for sid in tracker.getActiveStageIds()
                   if (info := tracker.getStageInfo(sid)) is not None)
