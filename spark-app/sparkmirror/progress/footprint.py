"""Bytes one committed range of an `OffsetMap` costs on this interpreter, measured (not assumed) at start.

The columns are `array('q')`s, so the figure is 7 x 8 bytes plus the arrays' over-allocation; what matters
for the history's budget (`historybudget.py`) is the peak of a map held at its cap, trimming as it does in
the driver, per range it holds at that peak.
"""
from __future__ import annotations

import tracemalloc

from .state import OffsetMap, Range

PROBE_RANGES = 20_000  # ~1 MiB, ~50 ms: large enough that the arrays' fixed costs do not count


def bytes_per_range(cap: int = PROBE_RANGES) -> float:
    """Peak traced bytes of an OffsetMap filled to twice `cap` while kept at `cap`, per range held at that peak."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        template = Range(0, 0, 0, 0, 1, 0, 100, "t", "s", 0, "m", "c")
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        m = OffsetMap()
        held = 0
        for i in range(2 * cap):
            m.append(template._replace(source_first=i, source_last=i, target_first=i, target_last=i,
                                       commit_ms=1_700_000_000_000 + i))
            m.keep_last(cap)
            held = max(held, len(m._cols[0]))
        peak = tracemalloc.get_traced_memory()[1] - base
        del m
        return peak / held
    finally:
        if not was_tracing:
            tracemalloc.stop()
