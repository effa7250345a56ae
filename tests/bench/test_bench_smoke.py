"""The benchmark end to end on tiny data: real brokers, MM2, the perf-tool ceiling and (once its job exists)
sparkmirror; asserts every run's correctness check passed, that each record size was mirrored in runs of its
own, and that the report files were written. Speed is measured by `make bench`, never asserted here.

MM2 mirrors both sizes (each in runs of its own); sparkmirror and the ceiling run one size each (`--sizes-of`):
a run's code is the same for every size, and each run costs a broker and a JVM's start-up (sparkmirror's
about 40 s). The report's per-size tables are proven without brokers (test_bench_report.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from bench import main
from bench.contenders import SparkMirror

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.minutes(4)]


def test_bench_runs_end_to_end_and_writes_its_report(tmp_path: Path) -> None:
    contenders = ["mm2", "ceiling"]
    sizes_of = {"mm2": ("1 KiB", "100 B"), "ceiling": ("100 B",)}
    latency = "mm2"
    if SparkMirror.available():
        contenders.insert(0, "sparkmirror-eos-batches")  # the default copy path
        sizes_of["sparkmirror-eos-batches"] = ("1 KiB",)
        latency = "sparkmirror-eos-batches"
    label = {"1 KiB": "b1k", "100 B": "b100"}
    results = tmp_path / "results"
    rc = main(["-n", "1000", "--records-100b", "1000", "--reps", "1", "--contenders", ",".join(contenders),
               "--sizes", "b1k,b100",
               *(a for c, ss in sizes_of.items() for a in ("--sizes-of", f"{c}={'+'.join(label[s] for s in ss)}")),
               "--latency-contenders", latency, "--latency-seconds", "2", "--latency-warmup", "1",
               "--latency-rate", "500", "--partitions-per-topic", "4", "--settle", "1",
               "--work", str(tmp_path / "work"), "--results", str(results), "--timeout", "180"])

    report = json.loads((results / "latest.json").read_text())
    failed = {f"{r['contender']} {r['size']} {r['kind']}": r["problems"] for r in report["runs"] if not r["ok"]}
    assert not failed, failed
    assert rc == 0
    tp = [r for r in report["runs"] if r["kind"] != "latency"]
    assert sorted((r["contender"], r["size"]) for r in tp) == sorted(
        (c, size) for c in contenders for size in sizes_of[c])
    assert all(r["records"] == 1000 for r in tp)  # one size's topics per run, not both
    assert list(report["summary"]) == ["1 KiB", "100 B"] and set(report["ratios"]) == {"1 KiB", "100 B"}
    lat = [r for r in report["runs"] if r["kind"] == "latency"]
    assert len(lat) == 1 and lat[0]["contender"] == latency and lat[0]["size"] == "1 KiB"
    ms = lat[0]["latency_ms"]  # a copy takes time: a latency of 0 or below is a clock or a counting error
    assert 0 < ms["p50"] <= ms["p99"] <= ms["max"], ms
    # visible to a read_committed reader of the target: never before it was appended there
    assert lat[0]["latency_ms"]["visible_p99"] >= lat[0]["latency_ms"]["p99"] - 1 and \
        lat[0]["detail"]["visible_window_records"] > 0
    # the window's load: the brokers answered the mirror, and the machine carried at least the mirror and them
    assert lat[0]["broker_cpu_s"] > 0 and lat[0]["machine_cpu_s"] >= lat[0]["broker_cpu_s"]
    md = (results / "latest.md").read_text()
    assert "| contender | CPU s / M records | records/s |" in md and "## Machine" in md
    assert "## Load during the latency windows" in md
    assert md.index("## 1 KiB records") < md.index("## 100 B records") < md.index("## Machine")
    assert len(list(results.glob("*.md"))) == 2 and len(list(results.glob("*.json"))) == 2  # latest + dated
