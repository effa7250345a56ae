"""A standby generation's warm-up: everything a first epoch would otherwise wait for, done before the handoff.

The standby generation's queries are already running: each planned one epoch whose lane tasks made their
clients and wait for the go mark (copying/standby.py), so executors and Python workers are up. What is left:
every cluster answers, the remote topics are in place, the mark writers are connected, and the lane tasks are
running; then the generation can report ready.
"""
from __future__ import annotations

import logging
import threading
import time

from ..resource.flowgroup import FlowGroupConfig

log = logging.getLogger(__name__)


def warm_up(spark, configs: list[FlowGroupConfig], timeout: float = 60.0,
            stop: threading.Event | None = None) -> float:
    """Raises when a cluster does not answer, so the generation never reports ready. Returns the seconds taken;
    `stop` (the driver stopping) ends the wait for the lane tasks at once."""
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
    running = wait_for_tasks(spark, lanes, max(0.0, timeout - (time.monotonic() - t0)), stop)
    took = time.monotonic() - t0
    log.info("standby: warm in %.1f s (%d of %d lane tasks waiting)", took, running, lanes)
    return took


def wait_for_tasks(spark, wanted: int, timeout: float, stop: threading.Event | None = None) -> int:
    """Until `wanted` tasks run (the standby lanes, waiting), or as many as Spark has task slots for, at most
    `timeout` seconds: best effort, a lane that starts after the go mark sees it at once."""
    try:
        wanted = min(wanted, max(1, spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - no executors registered yet: wait for all
        pass
    stop = stop or threading.Event()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    running = 0
    while time.monotonic() < deadline:
        running = sum(info.numActiveTasks for sid in tracker.getActiveStageIds()
                      if (info := tracker.getStageInfo(sid)) is not None)
        if running >= wanted or stop.wait(0.5):
            break
    return running
