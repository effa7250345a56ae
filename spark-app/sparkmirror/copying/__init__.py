"""Copying one lane (executor side, all the I/O): source partitions -> the same partitions of remote topics.

- `loop.py`: the copy loop (`LaneCopier`, `copy_lane`): an epoch's start, consume, produce, delivery
  reports, refused records, the epoch's summaries and lag;
- `commit.py`: the commit protocol, how records and their progress become durable together and how a newer
  copy of a lane fences an older one (`ExactlyOnce`, `AtLeastOnce`);
- `start.py`: what a fresh lane starts from: client settings, target size limits, resume offsets and gaps;
- `sessions.py`: a lane's clients kept by its Python worker between epochs, copying on until the next task;
- `errors.py`: why a lane stops (`CopyError`, `SourceGapError`, `LaneFenced`) and Kafka error classification;
- `summary.py`: the per-partition row a lane task yields (`PartitionSummary`, `SUMMARY_SCHEMA`).

Named `copying`, not `copy`: `spark-submit sparkmirror/job.py` puts this directory's parent first on
sys.path, where a `copy` package would shadow the standard library's.
"""
from .errors import CopyError, LaneFenced, SourceGapError
from .loop import LaneCopier, copy_lane
from .summary import SUMMARY_SCHEMA, PartitionSummary

__all__ = ["SUMMARY_SCHEMA", "CopyError", "LaneCopier", "LaneFenced", "PartitionSummary", "SourceGapError",
           "copy_lane"]
