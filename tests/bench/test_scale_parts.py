"""The scale benchmark's pure parts: its points, the job's planning lines it reads, its table."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from bench.scale import ScaleRun, boundary_lines, parse_points, planning_lines, render


def test_points_name_topics_and_partitions_per_topic() -> None:
    assert parse_points("2x4, 1000x10") == [(2, 4), (1000, 10)]
    for bad in ("1000", "0x4", "ax4", "2x"):
        with pytest.raises(argparse.ArgumentTypeError, match="--points"):
            parse_points(bad)


def test_planning_lines_are_read_from_the_job_log_after_an_offset(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    line = ("2026-11-25 11:07:20,591 INFO sparkmirror.datasource: mirror m epoch 17 planned in {} ms (latest offset "
            "and topic sync {} ms, lanes {} ms): 2 lanes over {} partitions of 9 topics\n")
    first = line.format(3546, 3244, 302, 1000)
    log.write_text(first + "unrelated\n" + line.format(408, 364, 44, 1001))
    assert planning_lines(log) == [(3546, 3244, 1000), (408, 364, 1001)]
    assert planning_lines(log, since=len(first)) == [(408, 364, 1001)]
    assert planning_lines(tmp_path / "missing.log") == []


def test_epoch_boundaries_are_read_from_the_driver_lines(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "2026-11-26 06:03:28,284 INFO sparkmirror.driver: mirror m epoch 0: 9 records, lag 0 (2 rows: in the driver "
        "- ms after the last lane's epoch ended, counted in 1 ms)\n"
        "2026-11-26 06:03:58,284 INFO sparkmirror.driver: mirror m epoch 1: 9 records, lag 3, 2129 ms between the "
        "epochs' tasks (10000 rows: in the driver 812 ms after the last lane's epoch ended, counted in 40 ms)\n")
    assert boundary_lines(log) == [(2129, 10000, 812)]
    assert boundary_lines(tmp_path / "missing.log") == []


def test_the_table_has_a_row_per_run_and_lists_problems() -> None:
    ok = ScaleRun("1000x1", 1000, 1000, "sparkmirror-eos", ok=True, records=40000, copy_s=20.0, cpu_s=10.0,
                  new_topic_s=[4.0, 6.0, 5.0], peak_rss_mb={"jvm": 400}, planning_ms=[300, 500], topic_sync_ms=[250],
                  boundary_ms=[2000, 9000, 3000], collect_ms=[100, 700])
    bad = ScaleRun("1000x1", 1000, 1000, "mm2", problems=["new topic 0: not copying after 120 s"])
    text = render([ok, bad], {"when": "now", "records": 40, "parallelism": 2, "cpus": 2})
    assert "| 1000x1 | 1,000 | sparkmirror-eos | yes | 20.0 | 2,000 | 4,000 |" in text
    assert "| 5.0 / 6.0 |" in text and "| 400.0 / 500 |" in text
    assert "| 3,000.0 / 9,000 | 400.0 / 700 |" in text
    assert "- 1000x1 mm2: new topic 0: not copying after 120 s" in text
