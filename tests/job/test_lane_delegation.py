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

from sparkmirror.copying import LaneCopier, sessions
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic
from sparkmirror.resource.flowgroup import Delivery
from sparkmirror_dev.workers import keep_lane

from .conftest import produce_numbered, read_topic, wait_for

EPOCH_S = 2.0


@pytest.fixture
def keeping_worker(kafka_a, kafka_b, topic, flowgroup):
    ctx = multiprocessing.get_context("spawn")
    procs = []

    def start(delivery: Delivery):
        src = topic(kafka_a, 2)
        dst = topic(kafka_b, 2, name=f"a.{src}")
        cfg = flowgroup(src, lanes=1, delivery=delivery)
        ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
        parts = list(plan_lanes(cfg.mirrors[0].name, 1, [(src, dst, 2)])[0].partitions)
        started, done = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=keep_lane, args=(cfg.model_dump_json(), parts, EPOCH_S, started, done), daemon=True)
        produce_numbered(kafka_a.bootstrap, src, 2, 0, 300)
        proc.start()
        procs.append((proc, done))
        wait_for(lambda: started.is_set() or not proc.is_alive(), 120, "the keeping worker's first epoch")
        assert started.is_set(), f"the keeping worker ended with {proc.exitcode}"

        def task(epoch: int, prev: int, seconds: float = EPOCH_S) -> LaneCopier:
            c = LaneCopier(cfg, cfg.mirrors[0], 0, parts, seconds, epoch=epoch, prev_epoch=prev)
            c.run()
            return c

        return src, dst, proc, task

    yield start
    for proc, done in procs:
        done.set()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    for s in list(sessions._SESSIONS.values()):
        kept = s.release()
        if kept is not None:
            kept._close_clients()
    sessions._SESSIONS.clear()


def _seqs(bootstrap: str, topic: str) -> dict[int, list[int]]:
    return {p: sorted(int(r.value.split(b":")[1]) for r in rs) for p, rs in read_topic(bootstrap, topic).items()}


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_the_worker_keeping_the_clients_runs_the_epoch(kafka_a, kafka_b, keeping_worker, delivery):
    src, dst, proc, task = keeping_worker(delivery)
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 200)  # copied by the keeping worker between the epochs
    wait_for(lambda: sum(map(len, _seqs(kafka_b.bootstrap, dst).values())) == 1000, 60, "copying between epochs")
    produce_numbered(kafka_a.bootstrap, src, 2, 500, 100)
    second = task(20, 10)
    produce_numbered(kafka_a.bootstrap, src, 2, 600, 100)
    third = task(30, 20)  # the keeping worker went on keeping them after serving epoch 20

    assert (second.reused, third.reused) == (False, False)  # this process never held the clients
    assert second.consumer is None and third.consumer is None
    # epoch 20 counts what was copied between the epochs (200 a partition) and in it (100)
    assert sorted(s.records for s in second.result) == [300, 300]
    assert sorted(s.records for s in third.result) == [100, 100]
    assert not any(s.fenced for s in [*second.result, *third.result])
    assert _seqs(kafka_b.bootstrap, dst) == {p: list(range(700)) for p in range(2)}
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
    assert _seqs(kafka_b.bootstrap, dst) == {p: list(range(800)) for p in range(2)}
