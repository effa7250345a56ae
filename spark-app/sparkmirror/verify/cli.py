"""`sparkmirror verify -f FILE`: does every target hold exactly what its source held, range by committed range?

Reads each mirror's progress topic (what is committed now: a mirror running meanwhile is never a difference),
cuts the committed offsets into ranges of about --range-records records and compares each range on both clusters
in a Spark task (same Spark as `sparkmirror run`: local threads, or --master): record counts and an
order-sensitive SHA-256 of key, value, headers and timestamp, and the first record that differs.

Exit status: 0 every range is equal (ranges whose start retention already deleted are listed, not counted as
different); 3 a range differs; 1 a range or cluster could not be read; 2 a file or option is invalid.
"""
from __future__ import annotations

import argparse
import logging
import sys
from contextlib import nullcontext

from ..output import add_output_flag, dump
from ..runner.cli import add_spark_flags, load_reported
from ..runner.resources import secrets_reported
from .ranges import DEFAULT_RANGE_RECORDS


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("verify", help="compare mirrored topics with their sources, range by range",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spark_flags(p, "Spark master (default local threads, as `sparkmirror run`)",
                    "Spark and Kafka client logs on the console")
    p.add_argument("--range-records", type=int, default=DEFAULT_RANGE_RECORDS, metavar="N",
                   help=f"committed records per compared range (default {DEFAULT_RANGE_RECORDS})")
    p.add_argument("--all", action="store_true", help="list every range in the table, not only those that differ")
    add_output_flag(p, "the report")
    p.set_defaults(func=run)
    return p


def _err(msg: str) -> None:
    print(f"sparkmirror verify: {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..inputs import USAGE_EXIT, InputError, key_values
    from ..runner.console import QuietConsole, default_log_path
    from ..runner.local import Unreachable, preflight

    loaded = load_reported(args, _err)
    if loaded is None:
        return USAGE_EXIT
    try:
        extra = key_values(args.conf, "--conf")
    except InputError as e:
        _err(str(e))
        return USAGE_EXIT
    if args.range_records < 1:
        _err(f"--range-records: must be at least 1, got {args.range_records}")
        return USAGE_EXIT
    if secrets_reported(loaded, _err):
        return USAGE_EXIT
    try:
        preflight(loaded.configs, loaded.fields)
    except Unreachable as e:
        for problem in str(e).splitlines():
            _err(problem)
        return 1

    log_path = None if args.verbose else (args.log_file or default_log_path())
    with QuietConsole(log_path) if log_path else nullcontext() as console:
        if console is not None:
            _err(f"logs (Spark, Kafka clients): {console.log_path}; -v shows them here")
        try:
            rows = _verify(loaded.configs, args, extra)
        except (RuntimeError, TimeoutError) as e:  # the progress topic is missing or could not be read
            _err(str(e))
            return 1
    from .report import document, exit_status, table

    sys.stdout.write(dump(document(rows), args.output) if args.output else table(rows, args.all))
    sys.stdout.flush()
    return exit_status(rows)


def _verify(configs, args: argparse.Namespace, extra: dict[str, str]) -> list[dict]:
    import os
    import time

    from ..queries import spark_session
    from ..runner.local import default_master
    from .run import committed_ranges, verify

    log = logging.getLogger("sparkmirror.verify")
    t0 = time.monotonic()
    ranges = committed_ranges(configs, args.range_records)
    log.info("progress read: %d ranges in %.1f s", len(ranges), time.monotonic() - t0)
    if not ranges:
        return []
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # local workers: this interpreter, as `run`
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    t0 = time.monotonic()
    spark = spark_session(configs[0], args.master or default_master(configs),
                          {"spark.app.name": "sparkmirror-verify", "spark.driver.memory": "512m",
                           "spark.ui.enabled": "false", **extra})
    log.info("Spark session up in %.1f s", time.monotonic() - t0)
    try:
        t0 = time.monotonic()
        rows = verify(spark, configs, ranges)
        log.info("%d ranges compared in %.1f s (slowest task %.1f s)", len(rows), time.monotonic() - t0,
                 max(r.get("seconds", 0) for r in rows))
        return rows
    finally:
        spark.stop()
