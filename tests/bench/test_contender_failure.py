"""A contender that gives up while its process lives on ends its run at once instead of at the run's timeout."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


from bench.contenders import BenchError, MirrorMaker2
from bench.latency import _watch

KILLED = (b"[2026-11-26 19:29:53,787] ERROR ExactlyOnceWorkerSourceTask{id=MirrorSourceConnector-0} Task threw an "
          b"uncaught and unrecoverable exception. Task is being killed and will not recover until manually "
          b"restarted (org.apache.kafka.connect.runtime.WorkerTask)\n")


@pytest.fixture
def running() -> Iterator[subprocess.Popen]:
    """A process that lives on, as a Connect worker does after it killed a task."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


def _mm2(log: Path, proc: subprocess.Popen) -> MirrorMaker2:
    m = MirrorMaker2(exactly_once=True)
    m.log, m.proc = log, proc
    return m


def test_a_task_killed_by_connect_is_read_from_the_growing_log(tmp_path: Path, running: subprocess.Popen) -> None:
    log = tmp_path / "mm2.log"
    log.write_bytes(b"INFO refreshing topics took 6 ms\nERROR ... Task is being kil")  # a line still being written
    m = _mm2(log, running)
    assert m.failure() is None
    m.check()
    with open(log, "ab") as f:
        f.write(KILLED[KILLED.index(b"Task is being kil") + len(b"Task is being kil"):])
    assert "Task is being killed and will not recover" in (m.failure() or "")
    with pytest.raises(BenchError, match="Connect killed a task"):
        m.check()


def test_a_run_waiting_on_a_failed_contender_ends_within_a_second(tmp_path: Path, running: subprocess.Popen) -> None:
    log = tmp_path / "mm2.log"
    log.write_bytes(KILLED)
    t0 = time.monotonic()
    with pytest.raises(BenchError):
        _watch(_mm2(log, running), 60)
    assert time.monotonic() - t0 < 1.0

