"""`sparkmirror verify`: compares what the target holds with the source, range by committed range, on Spark.

- `ranges.py` (driver, pure): the progress topic's offset map -> contiguous ranges of source and target offsets;
- `compare.py` (executor, I/O): one range read on both sides, counted, hashed and compared record by record;
- `run.py` (driver, I/O): reads the progress topic, plans, runs the ranges as Spark tasks, collects the report;
- `report.py` (pure): the report as data, the table and the exit status;
- `cli.py`: the `verify` subcommand.
"""
