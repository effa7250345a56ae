"""Copying one lane (executor side, all the I/O): source partitions -> the same partitions of remote topics.

A lane is made of parts with one job each, so the record path and other copy paths share commit, fencing,
progress records and the offset map:
- `context.py`: who the lane is (flow group, mirror, number, transactional id, route, client settings);
- `reader.py`: where records are read (`SourceReader`: the consumer, source errors, the source away and back);
- `writer.py`: where records are written (`RecordWriter`: produce, refused records), over `targetwriter.py`
  (`TargetWriter`, both paths' writers: the open interval, delivery reports and refusals the committer raises);
- `shares.py`: a partition's share of the open commit interval, what the writer fills and the ledger records;
- `committer.py`: where an interval is committed (`IntervalCommitter`: exactly-once in the loop, at-least-once
  pipelined);
- `commit.py`: the commit protocols, how records and their progress become durable together and how a newer
  copy of a lane fences an older one (`ExactlyOnce`, `AtLeastOnce`);
- `ledger.py`: what the lane committed, its progress records (the offset map) and the epoch's summaries;
- `growth.py`: partitions taken in place (a grown plan, partitions the source gains mid-epoch);
- `loop.py`: the cadence of read, write and commit (`run_loop`);
- `lane.py`: the parts started in order, outages ridden out (`LaneCopy`);
- `epoch.py`: a task's epoch: kept clients, another worker running it, or a fresh start (`run_epoch`,
  `copy_lane`);
- `sessions.py`, `delegate.py`, `plans.py`: a lane's clients kept by its Python worker between epochs, copying
  on until the next task, and the epoch run there for a task in another worker;
- `start.py`: what a fresh lane starts from: client settings, target size limits, resume offsets and gaps;
- `errors.py`: why a lane stops (`CopyError`, `SourceGapError`, `LaneFenced`) and Kafka error classification;
- the batch path (`copy: batches`), the same lane with parts of its own (`batchlane.py`: `BatchLaneCopy`,
  `lane_copy` picks the path): where batches are read (`batchsource.py` over `batchreader.py`'s Fetch at
  read_committed), where they are written (`batchtarget.py` over `batchwriter.py`'s producer on the wire), where
  their transaction is committed (`batchcommit.py`), rebuilt when they cannot go as they are (`rebuild.py`), merged when small (`coalesce.py`), the
  loop (`batchloop.py`); the wire format (`batches.py`, `protocol.py`), the wire's errors in the lane's terms
  (`wiretalk.py`); connections are `sparkmirror.wire`'s, shared with the share-group admin;
- `summary.py`: the per-partition row a lane task yields (`PartitionSummary`, `SUMMARY_SCHEMA`).

Named `copying`, not `copy`: `spark-submit sparkmirror/job.py` puts this directory's parent first on
sys.path, where a `copy` package would shadow the standard library's.
"""
from .batchlane import BatchLaneCopy, lane_copy
from .epoch import copy_lane, run_epoch
from .errors import CopyError, LaneFenced, SourceGapError
from .lane import LaneCopy
from .summary import SUMMARY_SCHEMA, PartitionSummary

__all__ = ["SUMMARY_SCHEMA", "BatchLaneCopy", "CopyError", "LaneCopy", "LaneFenced", "PartitionSummary", "SourceGapError",
           "copy_lane", "lane_copy", "run_epoch"]
