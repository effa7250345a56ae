"""A per-record cost for the autoscale bench's lanes: a Python transform (`bench.lanecost:pace`) that sleeps
SPARKMIRROR_BENCH_RECORD_COST_US microseconds a record, in slices of at least 10 ms. It sets what one lane can copy
(about 1e6 / cost records/s) without burning CPU, so lanes scale as they would on cores of their own: on this
2-core machine the brokers, the producer and every Spark process share the CPU, and without it a burst small
enough to produce here never outruns one lane. The record passes unchanged."""
from __future__ import annotations

import os
import time

_COST_S = float(os.environ.get("SPARKMIRROR_BENCH_RECORD_COST_US", "0")) / 1e6
_owed = 0.0


def pace(record):  # -> the same record; a sparkmirror.transforms.Record (untyped: no Spark-side import here)
    global _owed
    if _COST_S > 0:
        _owed += _COST_S
        if _owed >= 0.01:
            start = time.monotonic()
            time.sleep(_owed)
            _owed -= time.monotonic() - start  # an oversleep is paid back by the next records
    return record
