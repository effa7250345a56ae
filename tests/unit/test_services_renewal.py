"""Credentials renewed while a checkpoint round runs: the services' thread (`DriverServices._renew`) closes the
clients a round uses only after the round ended, never under it (the checkpoints have a thread of their own).

The Kafka clients are stand-ins that record when they were used and closed: what is checked is the two threads'
order, which real clients cannot show on demand; the real rotation runs in tests/job/test_credentials_rotation.py.
"""
from __future__ import annotations

import threading
import time

import pytest

from sparkmirror import metrics
from sparkmirror.metrics import DriverServices
from sparkmirror.resource.flowgroup import FlowGroupConfig

CONFIG = {"name": "g", "clusters": [{"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                    {"alias": "b", "bootstrapServers": "127.0.0.1:2"}],
          "mirrors": [{"name": "a-to-b", "source": "a", "target": "b", "emitCheckpointsIntervalSeconds": 1}]}


class _Tail:
    lock = threading.Lock()


class _Monitor:
    def __init__(self, *args) -> None:
        self.tail, self.closed_at = _Tail(), None

    def close(self) -> None:
        self.closed_at = time.monotonic()

    def carry_on_from(self, old) -> None:
        pass


class _BlockingEmitter:
    """A checkpoint round that runs until released."""

    nothing_mirrored = False

    def __init__(self) -> None:
        self.running, self.release = threading.Event(), threading.Event()
        self.ended_at = self.closed_at = None

    def run_once(self) -> list:
        self.running.set()
        assert self.release.wait(10)
        self.ended_at = time.monotonic()
        return []

    def close(self) -> None:
        self.closed_at = time.monotonic()


class _Changed:
    def names(self) -> str:
        return "a, b"


def test_renewal_waits_for_the_running_checkpoint_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MirrorMonitor", _Monitor)
    services = DriverServices(FlowGroupConfig.model_validate(CONFIG), heartbeats=False)
    m = services.mirrors["a-to-b"]
    old_monitor, emitter = _Monitor(), _BlockingEmitter()
    m.monitor, m.checkpoints, m.credentials = old_monitor, emitter, _Changed()

    round_thread = threading.Thread(target=services._checkpoints_due, args=(m, time.monotonic()))
    round_thread.start()
    assert emitter.running.wait(10), "the round did not start"
    renew_thread = threading.Thread(target=services._renew, args=(m,))
    renew_thread.start()
    renew_thread.join(0.5)
    assert renew_thread.is_alive(), "the renewal did not wait for the round"
    assert emitter.closed_at is None and old_monitor.closed_at is None, "a client was closed under the round"

    emitter.release.set()
    round_thread.join(10)
    renew_thread.join(10)
    assert not renew_thread.is_alive()
    assert emitter.closed_at >= emitter.ended_at and old_monitor.closed_at >= emitter.ended_at
    assert m.checkpoints is None and isinstance(m.monitor, _Monitor) and m.monitor is not old_monitor
    assert m.next_checkpoint == 0.0, "the next round runs at once, with clients made from the new credentials"
