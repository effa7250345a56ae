"""A standby is ready only once its lane tasks run (needing executors), never on time alone: counted on a real
local Spark, with tasks that run and without any."""
from __future__ import annotations

import threading
import time

import pytest

from sparkmirror.handoff.warmup import lane_target, not_ready_why, slots_short_why, task_slots, wait_for_tasks

pytestmark = [pytest.mark.spark]


def test_not_ready_says_why_until_every_lane_task_runs():
    assert not_ready_why(0, 3) == \
        "no lane task is running (of 3): no executor registered, or the lanes are not planned yet"
    assert not_ready_why(2, 3) == "2 of 3 lane tasks running"
    assert not_ready_why(3, 3) is None and not_ready_why(0, 0) is None


def test_tasks_are_counted_on_a_real_spark_and_none_running_is_not_ready(spark):
    assert lane_target(spark, 5) == 2 and lane_target(spark, 1) == 1  # local[2]: two task slots
    t0 = time.monotonic()
    idle = wait_for_tasks(spark, 2, 1.5)
    assert idle == 0 and time.monotonic() - t0 >= 1.4  # waited its timeout: nothing runs
    assert not_ready_why(idle, lane_target(spark, 2)) is not None  # the timeout alone makes nobody ready

    def lanes() -> None:
        spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(4))

    job = threading.Thread(target=lanes, daemon=True)
    job.start()
    try:
        running = wait_for_tasks(spark, 2, 30.0, threading.Event())
        assert running == 2 and not_ready_why(running, lane_target(spark, 2)) is None
    finally:
        job.join(60)


def test_fewer_task_slots_than_lanes_is_said_with_its_cost(spark):
    """kind's 2 lanes on one executor core: the second lane's task ran an epoch after the first (issue 35)."""
    slots = task_slots(spark)
    assert slots == 2  # local[2]
    assert slots_short_why(2, slots) is None and slots_short_why(1, slots) is None
    why = slots_short_why(3, slots)
    assert why is not None and why.startswith("3 lane tasks but 2 task slot(s)") and "executor cores" in why
