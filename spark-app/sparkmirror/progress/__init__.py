"""The progress store: where mirroring stands, kept on the *target* cluster in a compacted topic. This package
is its one owner: the record format, the one reader, the one offset map and translation, and lag.

Each transaction of a lane writes, beside the mirrored records, one progress record per source partition it
copied: the next source offset to read, the source range copied and the target range it became. Because the
records and their progress commit atomically, a read_committed reader of this topic knows exactly what the
target holds; the Spark checkpoint is not needed for correctness. Until compaction removes older values, the
values of one key form the *dense offset map* used for exact consumer-offset translation.

- `record.py`: the format (`ProgressRecord`, key, version, the topic's config);
- `state.py`: what is read back (`ProgressState`: latest record, `OffsetMap`, totals; tombstone and reset
  rules; bounded history) and the one translation `OffsetMap.translate`;
- `reader.py`: `ensure_progress_topic`, the one reader `ProgressReader` and its two uses, `read_progress`
  (bounded) and `ProgressTail` (incremental);
- `lag.py`: `partition_lag` (pure) and `CommittedCounter` (counts what is left when the offset lag is small).
"""
from __future__ import annotations

from .lag import (EXACT_LAG_BELOW, CommittedCounter, lag_position, partition_lag, partition_lags,
                  should_count)
from .reader import ProgressReader, ProgressTail, ensure_progress_topic, progress_topic_problem, read_progress
from .record import (PROGRESS_FORMAT_VERSION, PROGRESS_TOPIC_CONFIG, ProgressRecord, SourcePartition, decode_key,
                     progress_key)
from .state import MAX_HISTORY, Between, Inside, OffsetMap, ProgressState, Range

__all__ = [
    "Between", "EXACT_LAG_BELOW", "MAX_HISTORY", "PROGRESS_FORMAT_VERSION", "PROGRESS_TOPIC_CONFIG", "CommittedCounter",
    "Inside", "OffsetMap", "ProgressReader", "ProgressRecord", "ProgressState", "ProgressTail", "Range",
    "SourcePartition", "decode_key", "ensure_progress_topic", "lag_position", "partition_lag", "partition_lags",
    "progress_key", "progress_topic_problem",
    "read_progress", "should_count",
]
