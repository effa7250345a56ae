"""Where a lane's copy loop stood still: the longest pause between two of its turns, split by phase.

A record waits on the source for as long as the loop does not consume, so the loop's longest pause is the
floor of the lane's tail latency. The epoch's line names it with its phases (the consume call, copying the
batch, serving delivery reports and the at-least-once commit pipeline, an exactly-once commit) and the Python
garbage collection that ran in this process meanwhile; every pause of `LOUD_MS` or more is logged when it
ends, so it can be matched with the brokers' and the benchmark's timelines."""
from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

LOUD_MS = 500.0
"""A pause this long is logged when it ends (the loop turns about every 10 ms while records flow)."""

PHASES = ("consume", "copy", "pipeline", "commit")


class _GcClock:
    """Seconds this process spent in Python's garbage collector (gc.callbacks), read as a running total."""

    def __init__(self) -> None:
        self.total = 0.0
        self._began = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began:
            self.total += time.perf_counter() - self._began
            self._began = 0.0


_GC: _GcClock | None = None


def gc_seconds() -> float:
    """The garbage collector's running total in this process (its clock starts at the first call)."""
    global _GC
    if _GC is None:
        _GC = _GcClock()
    return _GC.total


class LoopPauses:
    """The longest turn of one lane's loop in an epoch. `turn()` begins a turn; `mark(phase)` ends a phase."""

    def __init__(self, lane: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.lane, self.clock = lane, clock
        self.longest_ms = 0.0
        self.parts: dict[str, float] = {}
        self.gc_ms = 0.0
        self._turn = self._last = 0.0
        self._gc = 0.0
        self._now: dict[str, float] = {}

    def restart(self) -> None:
        """The loop (re)starts: the time since its last turn is not one of its pauses."""
        self._turn = 0.0

    def turn(self) -> None:
        """A new turn begins: close the last one (it ran from its turn() to this one)."""
        now = self.clock()
        if self._turn:
            ms = (now - self._turn) * 1000
            if ms > self.longest_ms or ms >= LOUD_MS:
                gc_ms = (gc_seconds() - self._gc) * 1000
                if ms >= LOUD_MS:
                    log.info("lane %s: the copy loop stood still for %s", self.lane,
                             _describe(ms, self._now, gc_ms))
                if ms > self.longest_ms:
                    self.longest_ms, self.parts, self.gc_ms = ms, dict(self._now), gc_ms
        self._turn = self._last = now
        self._gc = gc_seconds()
        self._now = {}

    def mark(self, phase: str) -> None:
        now = self.clock()
        self._now[phase] = self._now.get(phase, 0.0) + (now - self._last) * 1000
        self._last = now

    def describe(self) -> str:
        """The longest turn: '812 ms (consume 3, copy 790, pipeline 19, commit 0; Python GC 0 ms)'."""
        return _describe(self.longest_ms, self.parts, self.gc_ms)


def _describe(ms: float, parts: dict[str, float], gc_ms: float) -> str:
    extra = [p for p in parts if p not in PHASES and parts[p] >= 0.5]  # rare ones (grow) only when they took time
    phases = ", ".join(f"{p} {parts.get(p, 0.0):.0f}" for p in (*PHASES, *extra))
    return f"{ms:.0f} ms ({phases}; Python GC {gc_ms:.0f} ms)"
