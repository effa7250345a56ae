"""A lane task's first rows cost no imports at the epoch boundary: the worker warmed Arrow's conversion first."""
from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from dataclasses import fields
from sparkmirror.copying import PartitionSummary
from sparkmirror.datasource import warm_result_conversion
import pyarrow

warm_result_conversion()
before = set(sys.modules)
row = PartitionSummary("m", 0, "t", 1, "a.t", records=5, latency_le=[1, 2]).row()
# what Spark's data source worker does with a task's rows (pyspark.sql.worker.plan_data_source_read)
pyarrow.RecordBatch.from_arrays([[v] for v in row], names=[f.name for f in fields(PartitionSummary)])
print(sorted(set(sys.modules) - before))
"""


def test_first_rows_of_a_worker_import_nothing():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:2000]
