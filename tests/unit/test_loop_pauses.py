"""The longest pause of a lane's copy loop, split by phase, with the Python GC that ran during it."""
import gc
import logging

import pytest

from sparkmirror.copying import pauses
from sparkmirror.copying.pauses import LoopPauses


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


def _turn(p: LoopPauses, clock: _Clock, **phases: float) -> None:
    p.turn()
    for phase, seconds in phases.items():
        clock.now += seconds
        p.mark(phase)


def test_the_longest_turn_is_kept_with_its_phases(clock: _Clock) -> None:
    p = LoopPauses("lane-0", clock)
    _turn(p, clock, consume=0.010, copy=0.002, pipeline=0.001)
    _turn(p, clock, consume=0.003, copy=0.300, pipeline=0.020)
    _turn(p, clock, consume=0.010, copy=0.001, pipeline=0.001)
    p.turn()  # closes the third
    assert p.longest_ms == pytest.approx(323)
    assert p.describe().startswith("323 ms (consume 3, copy 300, pipeline 20, commit 0; Python GC ")


def test_the_time_before_a_restart_is_not_a_pause(clock: _Clock) -> None:
    p = LoopPauses("lane-0", clock)
    _turn(p, clock, consume=0.010)
    clock.now += 30.0  # an outage's wait between two runs of the loop
    p.restart()
    _turn(p, clock, consume=0.020)
    p.turn()
    assert p.longest_ms == pytest.approx(20)


def test_a_long_pause_is_logged_when_it_ends(clock: _Clock, caplog: pytest.LogCaptureFixture) -> None:
    p = LoopPauses("lane-7", clock)
    with caplog.at_level(logging.INFO, logger=pauses.__name__):
        _turn(p, clock, commit=0.800)
        _turn(p, clock, copy=0.600)  # shorter than the longest, still logged
        p.turn()
    assert "lane lane-7: the copy loop stood still for 800 ms" in caplog.text
    assert "commit 800" in caplog.text
    assert "lane lane-7: the copy loop stood still for 600 ms (consume 0, copy 600" in caplog.text
    assert p.longest_ms == pytest.approx(800)


def test_garbage_collection_during_the_turn_is_counted() -> None:
    p = LoopPauses("lane-0")
    p.turn()
    garbage = [[i] for i in range(200_000)]
    gc.collect()
    del garbage
    p.mark("copy")
    p.turn()
    assert p.gc_ms > 0
    assert pauses.gc_seconds() * 1000 >= p.gc_ms
