"""The fault campaign's broker restart: a node that gives up while starting is started again, as its
supervisor would (a KRaft broker exits when the quorum has not registered it in time; that once ended a
campaign at fault 64 of 102), and the fault notes it."""
from __future__ import annotations

import types

import pytest


from bench.chaos import Chaos, Fault
from sparkmirror_dev.procs import DevEnvError


def _chaos(said: list[str]) -> Chaos:
    return types.SimpleNamespace(say=said.append)  # type: ignore[return-value]


def test_a_node_that_exits_while_starting_is_started_again() -> None:
    said: list[str] = []
    calls: list[float] = []

    def start(timeout: float) -> None:
        calls.append(timeout)
        if len(calls) < 3:
            raise DevEnvError("Kafka cluster 'src-2' exited with code 1 while starting; last lines of x:\n...")

    f = Fault("source-broker", 0.0, detail="node 2")
    Chaos._restart(_chaos(said), f, start)  # type: ignore[arg-type]
    assert len(calls) == 3 and all(0 < t <= 600 for t in calls)
    assert "started again 2x" in f.detail and f.detail.startswith("node 2")
    assert sum("starting it again" in s for s in said) == 2


def test_a_node_that_starts_at_once_leaves_the_fault_as_it_was() -> None:
    said: list[str] = []
    f = Fault("target-broker", 0.0, detail="node 1")
    Chaos._restart(_chaos(said), f, lambda timeout: None)  # type: ignore[arg-type]
    assert f.detail == "node 1" and said == []


def test_the_budget_still_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 100))
    monkeypatch.setattr("bench.chaos.time.monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("bench.chaos.time.sleep", lambda s: None)

    def start(timeout: float) -> None:
        raise DevEnvError("exited with code 1 while starting")

    with pytest.raises(DevEnvError):
        Chaos._restart(_chaos([]), Fault("source-outage", 0.0), start)  # type: ignore[arg-type]
