"""Bytes one committed range of an `OffsetMap` costs on this interpreter, measured (not assumed) at start.

The columns are `array('q')`s, so the figure is 7 x 8 bytes plus the arrays' over-allocation; what matters
for the history's budget (`historybudget.py`) is the peak of a map held at its cap, trimming as it does in
the driver, per range it holds at that peak.

The measurement runs in a child interpreter with one thread, never in the driver: starting and stopping
`tracemalloc` swaps CPython's allocators under threads that may be allocating without the GIL (py4j's, the
Kafka clients' callbacks), a race that crashes 3.11 with SIGSEGV (CPython gh-128679, fixed in 3.12.9/3.13.2
only). One CI run lost a driver to it, 6 s after start.
"""
from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import tracemalloc

from .state import OffsetMap, Range

log = logging.getLogger("sparkmirror.history")
PROBE_RANGES = 20_000  # ~1 MiB, ~50 ms: large enough that the arrays' fixed costs do not count
# if the child cannot run (it always can where the driver can): above every figure measured (56-72 on 3.11),
# so a cap sized from it fits
UNMEASURED_BYTES_PER_RANGE = 100.0


@functools.lru_cache(maxsize=None)
def bytes_per_range(cap: int = PROBE_RANGES) -> float:
    """`measure_here(cap)` run in a fresh interpreter (0.9 s measured here, once per process)."""
    code = ("import sys; from sparkmirror.progress.footprint import measure_here; "
            "print(measure_here(int(sys.argv[1])))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the driver's modules, as found
    try:
        out = subprocess.run([sys.executable, "-c", code, str(cap)], capture_output=True, text=True, timeout=120,
                             env=env, stdin=subprocess.DEVNULL, check=True)
        return float(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        why = getattr(e, "stderr", None) or e
        log.warning("offset history: the bytes a range costs could not be measured (%s): %.0f assumed",
                    str(why).strip()[-300:], UNMEASURED_BYTES_PER_RANGE)
        return UNMEASURED_BYTES_PER_RANGE


def measure_here(cap: int = PROBE_RANGES) -> float:
    """Peak traced bytes of an OffsetMap filled to twice `cap` while kept at `cap`, per range held at that peak.
    Only safe in a process whose other threads never allocate (the child `bytes_per_range` starts)."""
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
