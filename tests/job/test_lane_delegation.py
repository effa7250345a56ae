"""A lane's task that lands in another Python worker than the one keeping the lane's clients has that worker run
the epoch (delegate.py), instead of starting afresh and fencing it; a keeping worker that dies mid-epoch costs
nothing but time: the task starts afresh, fences what is left, and every record is still copied once."""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time

import pytest

from sparkmirror.copying import LaneCopy, delegate, run_epoch
from sparkmirror.lanes import LanePartition, plan_lanes
from sparkmirror.progress import ensure_progress_topic
from sparkmirror.resource.flowgroup import Delivery
from sparkmirror.resource.names import transactional_id
from sparkmirror.routewatch import RouteWatch
from sparkmirror_dev.workers import run_lane

from .conftest import close_kept_lanes, numbered_sequences, produce_numbered, unique_name, wait_for

pytestmark = pytest.mark.minutes(1.5)

EPOCH_S = 2.0


@pytest.fixture
def keeping_worker(kafka_a, kafka_b, topic, flowgroup):
    ctx = multiprocessing.get_context("spawn")
    procs = []

    def start(delivery: Delivery, prefix: str | None = None):
        """`prefix`: the mirror takes every topic named `<prefix>-...` (task.new_topic makes them), looking for
        new ones every second."""
        src = topic(kafka_a, 2, name=None if prefix is None else f"{prefix}-one")
        dst = topic(kafka_b, 2, name=f"a.{src}")
        cfg = (flowgroup(src, lanes=1, delivery=delivery) if prefix is None else
               flowgroup(f"{prefix}-.*", lanes=1, delivery=delivery, mirror={"refreshTopicsIntervalSeconds": 1}))
        ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
        parts = list(plan_lanes(cfg.mirrors[0].name, 1, [(src, dst, 2)])[0].partitions)
        started, done = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=run_lane, args=(cfg.model_dump_json(), parts, 10, 0, EPOCH_S, 600.0, started, done),
                           daemon=True)
        produce_numbered(kafka_a.bootstrap, src, 2, 0, 300)
        proc.start()
        procs.append((proc, done))
        wait_for(lambda: started.is_set() or not proc.is_alive(), 120, "the keeping worker's first epoch")
        assert started.is_set(), f"the keeping worker ended with {proc.exitcode}"

        def task(epoch: int, prev: int, seconds: float = EPOCH_S, attempt: int = 0,
                 should_stop=None, more: tuple[LanePartition, ...] = (), watch: bool = False) -> LaneCopy:
            """`watch`: with the RouteWatch a Spark task has (routewatch.py), over the plan's one topic."""
            routes = RouteWatch(cfg, cfg.mirrors[0], ((src, dst, 2),), 0) if watch else None
            c = LaneCopy(cfg, cfg.mirrors[0], 0, parts + list(more), seconds, should_stop, epoch=epoch,
                     prev_epoch=prev, attempt=attempt, watch=routes)
            run_epoch(c)
            return c

        def task_elsewhere(epoch: int, prev: int, seconds: float):
            """The task in a third process (that a test may kill)."""
            p = ctx.Process(target=run_lane, args=(cfg.model_dump_json(), parts, epoch, prev, seconds), daemon=True)
            p.start()
            procs.append((p, ctx.Event()))
            return p

        task.elsewhere = task_elsewhere
        task.tid = transactional_id(cfg.resource, cfg.name, cfg.mirrors[0].name, 0)

        def new_topic() -> tuple[str, str, tuple[LanePartition, ...]]:
            new_src = topic(kafka_a, 2, name=None if prefix is None else f"{prefix}-{unique_name('new')}")
            new_dst = topic(kafka_b, 2, name=f"a.{new_src}")
            return new_src, new_dst, tuple(LanePartition(new_src, p, new_dst) for p in range(2))

        task.new_topic = new_topic
        return src, dst, proc, task

    yield start
    for proc, done in procs:
        if proc.is_alive():
            done.set()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    close_kept_lanes()


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_the_worker_keeping_the_clients_runs_the_epoch(kafka_a, kafka_b, keeping_worker, delivery):
    src, dst, proc, task = keeping_worker(delivery)
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 200)  # copied by the keeping worker between the epochs
    wait_for(lambda: sum(map(len, numbered_sequences(kafka_b.bootstrap, dst).values())) == 1000, 60, "copying between epochs")
    produce_numbered(kafka_a.bootstrap, src, 2, 500, 100)
    second = task(20, 10)
    produce_numbered(kafka_a.bootstrap, src, 2, 600, 100)
    third = task(30, 20)  # the keeping worker went on keeping them after serving epoch 20

    assert (second.reused, third.reused) == (False, False)  # this process never held the clients
    assert second.reader.consumer is None and third.reader.consumer is None
    # epoch 20 counts what was copied between the epochs (200 a partition) and in it (100)
    assert sorted(s.records for s in second.result) == [300, 300]
    assert sorted(s.records for s in third.result) == [100, 100]
    assert not any(s.fenced for s in [*second.result, *third.result])
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(700)) for p in range(2)}
    assert proc.is_alive()


def test_the_keeping_worker_runs_an_epoch_whose_plan_gained_a_topic(kafka_a, kafka_b, keeping_worker):
    """The request carries the task's partitions; the keeping worker adds the new ones to its clients."""
    src, dst, proc, task = keeping_worker(Delivery.EXACTLY_ONCE)
    new_src, new_dst, more = task.new_topic()
    produce_numbered(kafka_a.bootstrap, new_src, 2, 0, 120)
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 100)
    grown = task(20, 10, more=more)
    produce_numbered(kafka_a.bootstrap, new_src, 2, 120, 30)
    nxt = task(30, 20, more=more)

    assert (grown.reused, nxt.reused) == (False, False) and grown.reader.consumer is None  # run by the keeping worker
    assert sorted(s.records for s in grown.result if s.source_topic == new_src) == [120, 120]
    assert sorted(s.records for s in nxt.result if s.source_topic == new_src) == [30, 30]
    assert not any(s.fenced for s in [*grown.result, *nxt.result])
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(400)) for p in range(2)}
    assert numbered_sequences(kafka_b.bootstrap, new_dst) == {p: list(range(150)) for p in range(2)}
    assert proc.is_alive()


def test_a_served_epoch_takes_a_topic_the_source_gains_in_place(kafka_a, kafka_b, keeping_worker, caplog):
    """The request carries the task's routes: the keeping worker watches the source for the epoch it runs and
    adds its share of a topic created meanwhile, once the target has it; the task's own watch stands aside, so
    nothing ends the epoch early."""
    src, dst, proc, task = keeping_worker(Delivery.EXACTLY_ONCE, prefix=unique_name("dg"))
    caplog.set_level(logging.INFO, logger="sparkmirror")
    made: list[tuple[str, str]] = []

    def create() -> None:  # mid-epoch, as the driver's topic sync would: source topic, then its remote topic
        time.sleep(1.0)
        new_src, new_dst, _ = task.new_topic()
        produce_numbered(kafka_a.bootstrap, new_src, 2, 0, 50)
        made.append((new_src, new_dst))

    t = threading.Thread(target=create, daemon=True)
    t.start()
    t0 = time.monotonic()
    grown = task(20, 10, 6.0, watch=True)
    t.join(30)
    (new_src, new_dst), = made
    assert grown.reader.consumer is None and not grown.reused  # run by the keeping worker
    assert time.monotonic() - t0 >= 5.5, "the epoch ended early"
    assert sorted(s.records for s in grown.result if s.source_topic == new_src) == [50, 50]
    assert numbered_sequences(kafka_b.bootstrap, new_dst) == {p: list(range(50)) for p in range(2)}
    assert not any("ending the epoch early" in r.getMessage() for r in caplog.records)
    assert proc.is_alive()


def test_a_keeping_worker_killed_mid_epoch_costs_no_record(kafka_a, kafka_b, keeping_worker, caplog):
    src, dst, proc, task = keeping_worker(Delivery.EXACTLY_ONCE)
    caplog.set_level(logging.INFO, logger="sparkmirror")

    def load() -> None:  # records keep coming while the keeping worker runs the epoch and dies
        for i in range(40):
            produce_numbered(kafka_a.bootstrap, src, 2, 300 + 10 * i, 10)
            time.sleep(0.05)

    def kill() -> None:
        time.sleep(1.5)  # the request is taken within a commit interval; the epoch runs 4 s
        os.kill(proc.pid, signal.SIGKILL)

    threads = [threading.Thread(target=load, daemon=True), threading.Thread(target=kill, daemon=True)]
    for t in threads:
        t.start()
    task(20, 10, 4.0)  # asks the keeping worker, which dies while running it: the task starts afresh
    for t in threads:
        t.join(30)
    assert not proc.is_alive()
    assert "runs in worker" in caplog.text and "went away; starting afresh" in caplog.text
    produce_numbered(kafka_a.bootstrap, src, 2, 700, 100)
    task(30, 20)
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(800)) for p in range(2)}


def test_a_stop_reaches_the_worker_running_the_epoch(kafka_a, kafka_b, keeping_worker, caplog):
    src, dst, proc, task = keeping_worker(Delivery.EXACTLY_ONCE)
    caplog.set_level(logging.INFO, logger="sparkmirror")
    asked_at = time.monotonic()
    served = task(20, 10, 60.0, should_stop=lambda: time.monotonic() - asked_at > 1.0)  # its route watch fired
    assert time.monotonic() - asked_at < 30, "the served epoch should have stopped long before its 60 s"
    assert f"epoch 20 runs in worker {proc.pid}" in caplog.text and "starting afresh" not in caplog.text
    assert not served.reused and served.reader.consumer is None  # the keeping worker ran it, with its clients
    assert not any(s.fenced for s in served.result)
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 100)
    task(30, 20)
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(400)) for p in range(2)}


def test_an_epoch_served_for_a_task_that_died_stops_and_yields_to_its_retry(kafka_a, kafka_b, keeping_worker,
                                                                              caplog):
    src, dst, proc, task = keeping_worker(Delivery.EXACTLY_ONCE)
    caplog.set_level(logging.INFO, logger="sparkmirror")
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 200)
    doomed = task.elsewhere(20, 10, 60.0)  # served by the keeping worker
    files = delegate.LaneFiles(task.tid)
    wait_for(lambda: not files.req.exists() and not files.holder.exists(), 60, "the keeping worker taking epoch 20")
    time.sleep(1.0)
    os.kill(doomed.pid, signal.SIGKILL)  # Spark killed the task: its retry follows, in this process
    doomed.join(10)
    killed_at = time.monotonic()
    # the served epoch notices its task is gone and reports to nobody, long before its 60 s
    wait_for(lambda: (files.read(files.result) or {}).get("epoch") == 20, 30, "the served epoch stopping")
    assert time.monotonic() - killed_at < 30
    produce_numbered(kafka_a.bootstrap, src, 2, 500, 100)
    retry = task(20, 10, attempt=1)  # a retry never asks: it starts afresh and fences the keeping worker
    assert not retry.reused and not any(s.fenced for s in retry.result)
    produce_numbered(kafka_a.bootstrap, src, 2, 600, 100)
    task(30, 20)  # this process kept the lane's clients after the retry
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(700)) for p in range(2)}
    assert proc.is_alive()
