"""The benchmark end to end on tiny data: real brokers, MM2, the perf-tool ceiling and (once its job exists)
sparkmirror; asserts every run's correctness check passed and the report files were written. Speed is
measured by `make bench`, never asserted here."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import main  # noqa: E402
from bench.contenders import SparkMirror  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]


def test_bench_runs_end_to_end_and_writes_its_report(tmp_path: Path) -> None:
    contenders = ["mm2", "ceiling"]
    latency = "mm2"
    if SparkMirror.available():
        contenders.insert(0, "sparkmirror-eos")
        latency = "sparkmirror-eos"
    results = tmp_path / "results"
    rc = main(["-n", "1000", "--reps", "1", "--contenders", ",".join(contenders),
               "--latency-contenders", latency, "--latency-seconds", "2", "--latency-warmup", "1",
               "--latency-rate", "500", "--partitions-per-topic", "4", "--settle", "1",
               "--work", str(tmp_path / "work"), "--results", str(results), "--timeout", "180"])

    report = json.loads((results / "latest.json").read_text())
    failed = {r["contender"]: r["problems"] for r in report["runs"] if not r["ok"]}
    assert not failed, failed
    assert rc == 0
    assert {r["contender"] for r in report["runs"] if r["kind"] != "latency"} == set(contenders)
    assert all(r["records"] == 2000 for r in report["runs"] if r["kind"] != "latency")
    lat = [r for r in report["runs"] if r["kind"] == "latency"]
    assert len(lat) == 1 and lat[0]["contender"] == latency and lat[0]["latency_ms"]["p99"] >= 0
    md = (results / "latest.md").read_text()
    assert "| contender | records/s |" in md and "## Machine" in md
    assert len(list(results.glob("*.md"))) == 2 and len(list(results.glob("*.json"))) == 2  # latest + dated
