"""Local Spark runs a streaming query over a PySpark Python data source (the mechanism the mirror job uses)."""
from __future__ import annotations

import sys

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StructField, StructType


class _Counter(DataSourceStreamReader):
    """Each micro-batch yields the numbers of its offset range; offsets advance by 10 per trigger."""

    def __init__(self) -> None:
        self.end = 0

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        self.end = min(self.end + 10, 30)
        return {"n": self.end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition: InputPartition):
        lo, hi = partition.value
        for i in range(lo, hi):
            yield (i,)


class CounterSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparkmirror_test_counter"

    def schema(self) -> StructType:
        return StructType([StructField("n", LongType())])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Counter()


def test_streaming_query_over_python_data_source(spark, tmp_path) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not on the workers' path
    spark.dataSource.register(CounterSource)
    q = (spark.readStream.format("sparkmirror_test_counter").load().writeStream.format("memory")
         .queryName("counted").option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        q.processAllAvailable()
        q.processAllAvailable()
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(r.n for r in spark.table("counted").collect()) == list(range(30))
