"""The bench's per-record-size bookkeeping without brokers: layouts restricted to one size, per-size medians,
ratios and the Markdown report (one table per size, latency only with 1 KiB)."""
from __future__ import annotations

import re

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from bench import data, report
from bench.cli import pick_sizes, sizes_by_contender
from bench.runenv import RunResult

KIB, B100 = "1 KiB", "100 B"


def test_layout_only_keeps_the_preloaded_topic_names_of_one_size() -> None:
    full = data.Layout(1001, partitions_per_topic=4, topics_per_size=2)
    one_k, small, lz4 = full.only("b1k"), full.only("b100"), full.only("b1k-lz4")

    assert [t.name for t in one_k.topics] + [t.name for t in small.topics] + [t.name for t in lz4.topics] == \
        [t.name for t in full.topics]
    assert {t.value_size for t in one_k.topics} == {1024} and {t.value_size for t in small.topics} == {100}
    assert {(t.value_size, t.compression) for t in lz4.topics} == {(1024, "lz4")}
    assert {t.compression for t in one_k.topics + small.topics} == {"none"}
    assert one_k.total_records == small.total_records == lz4.total_records == 1001
    assert one_k.payload_bytes + small.payload_bytes + lz4.payload_bytes == full.payload_bytes
    assert one_k.pattern == "b1k-0|b1k-1"
    assert (one_k.size_name, small.size_name, lz4.size_name, full.size_name) == \
        (KIB, B100, "1 KiB lz4", "1 KiB + 100 B + 1 KiB lz4")
    assert (one_k.label, full.label) == ("b1k", "b1k+b100+b1k-lz4")
    with pytest.raises(ValueError):
        full.only("b10k")


def test_source_scan_restricted_to_one_size() -> None:
    scan = data.ScanResult({"b1k-0/0": data.PartitionScan(count=3), "b1k-0/1": data.PartitionScan(count=2),
                            "b100-0/0": data.PartitionScan(count=7)})
    only = scan.only({"b1k-0"})
    assert sorted(only.partitions) == ["b1k-0/0", "b1k-0/1"] and only.total == 5
    assert data.compare(only, only, {"b1k-0": "b1k-0"}, exactly_once=True) == []


def test_sizes_option_picks_layouts_in_the_order_given() -> None:
    full = data.Layout(10)
    assert [s.label for s in pick_sizes(full, "b1k,b100")] == ["b1k", "b100"]
    assert [s.label for s in pick_sizes(full, " b100 ")] == ["b100"]
    with pytest.raises(SystemExit):
        pick_sizes(full, "b1k,huge")
    with pytest.raises(SystemExit):
        pick_sizes(full, ",")


def test_sizes_of_limits_only_the_contenders_it_names() -> None:
    sizes = pick_sizes(data.Layout(10), "b1k,b100")
    names = ["sparkmirror-eos-batches", "mm2", "ceiling"]
    assert sizes_by_contender(["ceiling=b100", "mm2=b1k+b100"], names, sizes) == {
        "sparkmirror-eos-batches": {"b1k", "b100"}, "mm2": {"b1k", "b100"}, "ceiling": {"b100"}}
    for bad in ("pipe=b1k", "ceiling=b1k-lz4", "ceiling=", "ceiling"):  # not running, not a size asked for, none
        with pytest.raises(SystemExit):
            sizes_by_contender([bad], names, sizes)


def _run(contender: str, size: str, rep: int, rate: float, *, kind: str = "throughput", ok: bool = True,
         p99: float | None = None) -> dict:
    """A run as the harness writes it: `rate` records/s, 1 M records, CPU and RSS that scale with `rate`."""
    r = RunResult(contender, kind, rep, size=size, ok=ok, records=1_000_000, bytes=10**9 if size == KIB else 10**8,
                  copy_s=1e6 / rate, startup_s=5.0, wall_s=5.0 + 1e6 / rate, cpu_s=rate / 10_000,
                  peak_rss=int(rate) * 2**10, broker_cpu_s=2.0)
    if kind == "latency":
        r.latency_ms = {"p50": p99 / 10, "p99": p99, "max": p99 * 2, "mean": p99 / 5,
                        "visible_p50": p99 / 5, "visible_p99": p99 * 1.5, "visible_max": p99 * 3}
        r.detail = {"cpu_s_per_s_at_rate": 0.5, "per_second_max_ms": {10: int(p99)}, "harness_cpu_s": 0.1 * r.copy_s}
        r.machine_cpu_s, r.foreign_cpu_s = 1.5 * r.copy_s, 0.05 * r.copy_s
    else:
        r.detail = {"cpu_by_kind": {"jvm": rate / 1000}, "copy_cpu_by_kind": {"python-worker": rate / 2000}}
    if not ok:
        r.problems = [f"{contender} {size} went wrong"]
    return r.to_json()


def _runs() -> list[dict]:
    """Two repetitions, each: 1 KiB then 100 B, contenders alternating; then latency (1 KiB)."""
    runs = []
    for rep in range(2):
        order = ["sparkmirror-eos", "mm2", "ceiling"]
        order = order[rep:] + order[:rep]
        for size, base in ((KIB, 1.0), (B100, 3.0)):
            for c in order:
                rate = base * {"sparkmirror-eos": 60_000, "mm2": 20_000, "ceiling": 80_000}[c] * (1 + rep / 10)
                runs.append(_run(c, size, rep, rate, kind="ceiling" if c == "ceiling" else "throughput"))
    runs.append(_run("mm2", B100, 2, 1.0, ok=False))  # a failed run counts, but not in the medians
    runs += [_run("sparkmirror-eos", KIB, 0, 1.0, kind="latency", p99=400.0),
             _run("mm2", KIB, 0, 1.0, kind="latency", p99=100.0)]
    return runs


def _result(runs: list[dict]) -> dict:
    summary = report.summarize(runs)
    return {
        "finished": "2026-01-01 00:00 UTC", "command": "python -m bench",
        "config": {"records_per_size": 1_000_000, "total_records": 2_000_000, "payload_mib": 1049.0, "topics": 4,
                   "sizes": {KIB: {"label": "b1k", "records": 1_000_000, "payload_mib": 954.0, "topics": 2},
                             B100: {"label": "b100", "records": 1_000_000, "payload_mib": 95.0, "topics": 2}},
                   "partitions_per_topic": 4, "parallelism": 2, "reps": 2, "latency_rate": 5000,
                   "latency_seconds": 40.0, "latency_warmup": 10.0, "latency_partitions": 8,
                   "mm2_producer": "Kafka defaults"},
        "machine": {"cpu_model": "test cpu", "cores": 2, "memory_gib": 8, "kernel": "6", "os": "linux",
                    "java": "java 17", "kafka": "4.1.2", "python": "3.11", "pyspark": "4", "confluent_kafka": "2",
                    "librdkafka": "2", "git_commit": "abc", "spark_app_uncommitted": [], "loadavg": [0, 0, 0]},
        "load_start": [0.1], "load_end": [0.2], "note": "",
        "summary": summary,
        "ratios": {size: report.ratios(by) for size, by in summary.items()},
        "runs": runs,
    }


def test_summary_is_per_size_and_never_mixes_them() -> None:
    summ = report.summarize(_runs())

    assert list(summ) == [KIB, B100]
    assert list(summ[KIB]) == list(summ[B100]) == ["sparkmirror-eos", "mm2", "ceiling"]
    assert summ[KIB]["mm2"]["records_per_s"] == pytest.approx(21_000)   # median of 20,000 and 22,000
    assert summ[B100]["mm2"]["records_per_s"] == pytest.approx(63_000)  # median of 60,000 and 66,000
    assert summ[B100]["mm2"]["runs"] == 3 and summ[B100]["mm2"]["runs_ok"] == 2
    assert summ[B100]["mm2"]["problems"] == ["mm2 100 B went wrong"] and not summ[KIB]["mm2"]["problems"]
    assert summ[KIB]["mm2"]["mib_per_s"] == pytest.approx(21_000 * 1000 / 2**20)
    assert all(s["size"] == size for size, by in summ.items() for s in by.values())
    # latency runs are 1 KiB records: they sit with the 1 KiB throughput, not with 100 B
    assert summ[KIB]["sparkmirror-eos"]["latency_p99_ms"] == 400.0 and summ[KIB]["mm2"]["latency_runs"] == 1
    assert all(s["latency_runs"] == 0 and s["latency_p99_ms"] is None for s in summ[B100].values())


def test_ratios_per_size() -> None:
    result = _result(_runs())
    by = {size: {(r["of"], r["to"]): r for r in rows} for size, rows in result["ratios"].items()}

    assert set(by) == {KIB, B100}
    assert by[KIB][("sparkmirror-eos", "mm2")]["records_per_s"] == pytest.approx(3.0)
    assert by[B100][("sparkmirror-eos", "mm2")]["records_per_s"] == pytest.approx(63_000 * 3 / 63_000)
    assert by[KIB][("sparkmirror-eos", "ceiling")]["records_per_s"] == pytest.approx(0.75)
    assert by[KIB][("sparkmirror-eos", "mm2")]["latency_p99"] == pytest.approx(4.0)
    assert by[KIB][("sparkmirror-eos", "mm2")]["visible_p99"] == pytest.approx(4.0)
    assert by[B100][("sparkmirror-eos", "mm2")]["latency_p99"] is None
    assert all(r["size"] == size for size, rows in result["ratios"].items() for r in rows)


def _section(md: str, heading: str) -> str:
    """The text of one `## ` section of the report."""
    return md.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_markdown_has_one_throughput_table_and_ratio_table_per_size() -> None:
    md = report.markdown(_result(_runs()))

    assert "Each record size is mirrored in its own runs" in md
    assert "1,000,000 records of 1 KiB over 2 topics and 1,000,000 records of 100 B over 2 topics" in md
    assert md.index("## 1 KiB records") < md.index("## 100 B records") < md.index("## Machine")
    kib, small = _section(md, "1 KiB records"), _section(md, "100 B records")
    header = ("| contender | CPU s / M records | records/s | best run records/s | MiB/s | copy window s | "
              "brokers' CPU s / M | "
              "peak RSS MiB | start-up s | start to done s |")
    lat_cols = " p50 ms | p99 ms | max ms | visible p50 ms | visible p99 ms | visible max ms | runs ok |"
    assert header + lat_cols in kib  # latency only where it was measured
    assert header + " runs ok |" in small and "p99" not in small
    assert re.search(r"\| MM2 at-least-once \| [\d.,]+ \| 21,000 \|", kib)  # CPU per record, then records/s
    assert re.search(r"\| MM2 at-least-once \| [\d.,]+ \| 63,000 \|", small)
    assert "| 2/2 + lat 1/1 |" in kib and "| 2/3 |" in small
    assert re.search(r"\| sparkmirror exactly-once / MM2 at-least-once \| [\d.]+ \| 3.00 \|", kib)
    assert re.search(r"\| sparkmirror exactly-once / ceiling \(Kafka perf tools\) \| [\d.]+ \| 0.75 \|", kib)
    assert "| ratio | CPU s / M | records/s | peak RSS | p99 latency | visible p99 |" in kib  # CPU per record first
    assert re.search(r"\| sparkmirror exactly-once \| .* \| 40 \| 400 \| 800 \| 80 \| 600 \| 1,200 \|", kib)
    assert "| ratio | CPU s / M | records/s | peak RSS |\n" in small
    for table in (kib, small):  # every row of each table has as many cells as its header
        for block in table.strip().split("\n\n"):
            rows = [ln for ln in block.splitlines() if ln.startswith("|")]
            assert all(ln.count("|") == rows[0].count("|") for ln in rows), block
    assert "- mm2 (100 B): mm2 100 B went wrong" in _section(md, "Problems")
    every = _section(md, "Every run")
    assert "| # | contender | size | rep |" in every and "| 1 | sparkmirror exactly-once | 1 KiB | 0 |" in every


def test_where_the_time_goes_uses_the_first_1kib_run() -> None:
    runs = _runs()
    md = report.markdown(_result(runs))
    where = _section(md, "Where the time goes")

    assert "first measured run of 1 KiB records" in where
    assert "- MM2 at-least-once: python-worker 10.0 | jvm 20.0" in where  # rep 0 at 1 KiB: 20,000 records/s
    assert report.primary_size([r for r in runs if r["size"] == B100]) == B100


def test_markdown_without_latency_runs_has_no_latency_columns() -> None:
    result = _result([r for r in _runs() if r["kind"] != "latency"])
    result["config"]["latency_seconds"] = 0
    md = report.markdown(result)

    assert "p99" not in md and "Latency (in the 1 KiB table)" not in md
    assert "## 1 KiB records" in md and "## 100 B records" in md


def test_latency_windows_show_what_loaded_the_machine() -> None:
    runs = _runs()
    for r in runs:
        if r["kind"] == "latency":  # a 100-s window: 0.4 cores of mirror, 0.9 of brokers, 1.5 in all
            r.update(copy_s=100.0, cpu_s=40.0, broker_cpu_s=90.0, machine_cpu_s=150.0, foreign_cpu_s=5.0)
            r["detail"]["harness_cpu_s"] = 15.0
    load = _section(report.markdown(_result(runs)), "Load during the latency windows")

    assert "| contender | rep | mirror | brokers | harness | other | machine | p99 ms | visible p99 ms |" in load
    assert "| sparkmirror exactly-once | 0 | 0.40 | 0.90 | 0.15 | 0.05 | 1.50 | 400 | 600 |" in load
    assert "| MM2 at-least-once | 0 | 0.40 | 0.90 | 0.15 | 0.05 | 1.50 | 100 | 150 |" in load
    # results written before the window's load was measured have no such section
    for r in runs:
        r["machine_cpu_s"] = 0.0
    assert "Load during the latency windows" not in report.markdown(_result(runs))
