"""Crash and restart: SIGKILL the whole job (or one Python worker) while a producer writes numbered records.

Afterwards a read_committed consumer on the target must find every sequence number exactly once per partition,
in order (exactly-once), or every one at least once, in order of first appearance (at-least-once).
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import time

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from sparkmirror_dev.testing import NumberedProducer, check_numbered, open_transactions

from tests.support.campaign import ONLY_IN_CAMPAIGN

from .conftest import read_topic, wait_for

pytestmark = pytest.mark.minutes(6.0)

PARTS = 3


def _target_count(bootstrap: str, topic: str) -> int:
    """Distinct records on the target: under at-least-once a duplicate must not stand in for a missing one."""
    try:
        return sum(len({r.value for r in v}) for v in read_topic(bootstrap, topic, timeout=20).values())
    except Exception:  # noqa: BLE001 - remote topic not there yet
        return 0


def _check(bootstrap: str, topic: str, sent: int, exactly_once: bool) -> None:
    check_numbered(bootstrap, topic, PARTS, sent, exactly_once)


def _catch_up(job, cfg, bootstrap: str, remote: str, sent: int) -> None:
    jp = job(cfg)
    wait_for(lambda: _target_count(bootstrap, remote) >= sent * PARTS or jp.proc.poll() is not None, 420,
             "catch-up")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    time.sleep(2)  # a duplicate would show up as extra records after the count was reached
    assert jp.stop() == 0, jp.log()[-3000:]


@pytest.mark.parametrize("delivery,copy", [pytest.param("exactly-once", "records", marks=ONLY_IN_CAMPAIGN),
                                           pytest.param("at-least-once", "records", marks=ONLY_IN_CAMPAIGN),
                                           ("exactly-once", "batches"), ("at-least-once", "batches")])
def test_sigkill_job_several_times(kafka_a, kafka_b, topic, flowgroup, job, delivery, copy):
    src = topic(kafka_a, PARTS)
    remote = f"a.{src}"
    cfg = flowgroup(src, delivery=delivery, epochSeconds=5, copy=copy)
    producer = NumberedProducer(kafka_a.bootstrap, src)
    producer.start()
    rng = random.Random(7)
    kills = 3 if delivery == "exactly-once" else 2
    jp = None
    for i in range(kills):
        jp = job(cfg)
        before = _target_count(kafka_b.bootstrap, remote)
        # kill only once it is copying: new records reached the target since this start
        wait_for(lambda: _target_count(kafka_b.bootstrap, remote) > before or jp.proc.poll() is not None, 360,
                 f"copying after start {i + 1}")
        assert jp.proc.poll() is None, jp.log()[-3000:]
        time.sleep(rng.uniform(0.5, 4.0))
        jp.kill(signal.SIGKILL)
    sent = producer.stop()
    assert sent > 0
    if delivery == "exactly-once":  # the Spark checkpoint is only an optimisation: lose it
        shutil.rmtree(jp.checkpoint)
    _catch_up(job, cfg, kafka_b.bootstrap, remote, sent)
    _check(kafka_b.bootstrap, remote, sent, delivery == "exactly-once")
    assert f"copying {copy})" in jp.log(), "the lanes did not take the path asked for"


def _python_workers(root_pid: int) -> list[psutil.Process]:
    """Python worker processes forked by pyspark.daemon under the job (the ones running lane tasks)."""
    out = []
    for p in psutil.Process(root_pid).children(recursive=True):
        try:
            if "pyspark.daemon" in " ".join(p.cmdline()) and p.parent() is not None and \
                    "pyspark.daemon" in " ".join(p.parent().cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _each(procs: list[psutil.Process], act) -> None:
    """act on every process still there (a worker may have ended since it was listed)."""
    for p in procs:
        try:
            act(p)
        except psutil.NoSuchProcess:
            pass


def _copying(kafka_a, kafka_b, topic, flowgroup, job, epoch_seconds: float, **kw):
    """A job copying a topic of its own while a producer writes to it: (remote topic, config, producer, job)."""
    src = topic(kafka_a, PARTS)
    remote = f"a.{src}"
    cfg = flowgroup(src, epochSeconds=epoch_seconds, **kw)
    producer = NumberedProducer(kafka_a.bootstrap, src)
    producer.start()
    jp = job(cfg)
    wait_for(lambda: _target_count(kafka_b.bootstrap, remote) > 0 or jp.proc.poll() is not None, 360, "copying")
    return remote, cfg, producer, jp


def test_kill_one_python_worker(kafka_a, kafka_b, topic, flowgroup, job):
    remote, cfg, producer, jp = _copying(kafka_a, kafka_b, topic, flowgroup, job, 10)
    killed = 0
    for _ in range(2):
        # a worker that just started a lane task (workers between tasks keep idle clients, or copy between
        # epochs: killing one of those loses no task and tests less)
        started = len(re.findall(r"starts in worker \d+", jp.log()))
        wait_for(lambda: len(re.findall(r"starts in worker \d+", jp.log())) > started, 120, "a lane task starting")
        busy = int(re.findall(r"starts in worker (\d+)", jp.log())[-1])
        assert busy in {p.pid for p in _python_workers(jp.proc.pid)}, "the lane task runs outside pyspark.daemon"
        time.sleep(1.0)
        os.kill(busy, signal.SIGKILL)
        killed += 1
    sent = producer.stop()
    wait_for(lambda: _target_count(kafka_b.bootstrap, remote) >= sent * PARTS or jp.proc.poll() is not None, 360,
             "catch-up after worker kills")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    assert "Lost task" in jp.log(), "no task was lost: the worker kill did not hit a lane task"
    time.sleep(2)
    _check(kafka_b.bootstrap, remote, sent, True)
    assert jp.stop() == 0, jp.log()[-3000:]


def test_stop_with_a_lane_stuck_leaves_no_transaction_open(kafka_a, kafka_b, topic, flowgroup, job, figure):
    """A lane frozen mid-transaction (as on an executor that was lost): the driver's drain runs out of time, so
    it fences its own lanes on the way out. No transaction stays open on the target to hold read_committed
    consumers back, and a restart copies every record exactly once."""
    remote, cfg, producer, jp = _copying(kafka_a, kafka_b, topic, flowgroup, job, 2)
    # A transaction is open on the target only from a lane's first write of an interval to its commit (~15 ms of
    # each 100 ms: the rest is reading), so watch for one and then freeze every Python worker at once: a lane's
    # epoch may run in the worker keeping its clients rather than in its task's (delegate.py), and a worker
    # copies on between epochs (sessions.py). Frozen with one still open, the lanes are stuck mid-transaction.
    admin = AdminClient({"bootstrap.servers": kafka_b.bootstrap})
    frozen, tries, deadline = False, 0, time.monotonic() + 120
    workers, listed = [], 0.0
    while not frozen and time.monotonic() < deadline:
        if time.monotonic() - listed > 1:  # listing takes tens of ms: not between seeing a transaction and freezing
            workers, listed = _python_workers(jp.proc.pid), time.monotonic()
        if not open_transactions(kafka_b.bootstrap, remote, PARTS, admin):
            continue
        _each(workers, psutil.Process.suspend)
        tries += 1
        time.sleep(0.5)  # whatever was on the wire has landed
        frozen = open_transactions(kafka_b.bootstrap, remote, PARTS, admin) != {}
        if not frozen:
            _each(workers, psutil.Process.resume)
            listed = 0.0
    assert frozen, f"no lane could be frozen with a transaction open ({tries} tries)"
    t0 = time.monotonic()
    assert jp.stop(150) == 0, jp.log()[-3000:]
    figure("stop_with_frozen_lane", f"stopped in {time.monotonic() - t0:.0f}s with a frozen lane")
    # the frozen lane is an epoch past the drain, or a lane carrying on between epochs (no query shows it)
    assert re.search(r"(an epoch outlived the drain|lanes may carry on between epochs); fenced its \d+ lane "
                     r"transactional ids", jp.log()), \
        jp.log()[-3000:]
    assert open_transactions(kafka_b.bootstrap, remote, PARTS) == {}
    sent = producer.stop()
    _catch_up(job, cfg, kafka_b.bootstrap, remote, sent)
    _check(kafka_b.bootstrap, remote, sent, True)
