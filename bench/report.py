"""Medians and ratios per record size, the machine's description, as Markdown tables and JSON under
bench/results/. Each record size is mirrored in its own runs, so no figure mixes 1 KiB and 100 B records."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from sparkmirror_dev import paths

from .gitstate import git, uncommitted

LABELS = {
    "sparkmirror-eos-batches": "sparkmirror exactly-once on batches",
    "sparkmirror-alo-batches": "sparkmirror at-least-once on batches",
    "sparkmirror-eos": "sparkmirror exactly-once",
    "sparkmirror-alo": "sparkmirror at-least-once",
    "mm2": "MM2 at-least-once",
    "mm2-eos": "MM2 exactly-once",
    "ceiling": "ceiling (Kafka perf tools)",
    "pipe": "reference: bare Python+librdkafka pipe",
}
ORDER = list(LABELS)


def _cmd(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (out.stdout + out.stderr).strip()
    except Exception as e:  # noqa: BLE001
        return f"({e})"


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import confluent_kafka

    try:
        import pyspark

        pyspark_version = pyspark.__version__
    except ImportError:
        pyspark_version = "not installed"
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "os": platform.platform(),
        "java": _cmd(["java", "-version"]).splitlines()[0] if _cmd(["java", "-version"]) else "",
        "kafka": paths.KAFKA_VERSION, "mirrormaker2": paths.MM2_VERSION,
        "python": sys.version.split()[0],
        "pyspark": pyspark_version,
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "spark_app_uncommitted": uncommitted("spark-app"),
        "loadavg": list(os.getloadavg()),
    }


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else None


def sizes_of(runs: list[dict]) -> list[str]:
    """The record sizes of `runs` in the order they first ran ("" for runs written before runs had a size)."""
    return list(dict.fromkeys(r.get("size", "") for r in runs))


def summarize(runs: list[dict]) -> dict[str, dict[str, dict]]:
    """Medians per record size, then per contender: {"1 KiB": {"mm2": {...}, ...}, "100 B": {...}}.

    Latency runs (a steady 1 KiB producer) land in the 1 KiB entries, next to that size's throughput."""
    out: dict[str, dict[str, dict]] = {}
    for size in sizes_of(runs):
        by_contender = _summarize_size(size, [r for r in runs if r.get("size", "") == size])
        if by_contender:
            out[size] = by_contender
    return out


def _summarize_size(size: str, runs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in ORDER + sorted({r["contender"] for r in runs} - set(ORDER)):
        tp = [r for r in runs if r["contender"] == name and r["kind"] in ("throughput", "ceiling")]
        lat = [r for r in runs if r["contender"] == name and r["kind"] == "latency"]
        if not tp and not lat:
            continue
        ok = [r for r in tp if r["ok"]]
        lok = [r for r in lat if r["ok"]]
        s = {
            "label": LABELS.get(name, name),
            "size": size,
            "runs": len(tp), "runs_ok": len(ok),
            "latency_runs": len(lat), "latency_runs_ok": len(lok),
            "records_per_s": _median([r["records_per_s"] for r in ok]),
            "mib_per_s": _median([r["mib_per_s"] for r in ok]),
            "best_records_per_s": max([r["records_per_s"] for r in ok], default=None),
            "cpu_s_per_m": _median([r["cpu_s_per_m"] for r in ok]),
            "peak_rss_mib": _median([r["peak_rss"] / 2**20 for r in ok]),
            "broker_cpu_s_per_m": _median([r["broker_cpu_s"] / r["records"] * 1e6 for r in ok if r["records"]])
            if name != "ceiling" else None,
            "startup_s": _median([r["startup_s"] for r in ok]) if name != "ceiling" else None,
            "wall_s": _median([r["wall_s"] for r in ok]),
            "copy_s": _median([r["copy_s"] for r in ok]),
            "dups": sum(r["dups"] for r in tp),
            "foreign_cores": _median([r["foreign_cpu_s"] / r["copy_s"] for r in ok if r["copy_s"]]),
            "latency_p50_ms": _median([r["latency_ms"].get("p50") for r in lok]),
            "latency_p99_ms": _median([r["latency_ms"].get("p99") for r in lok]),
            "latency_max_ms": _median([r["latency_ms"].get("max") for r in lok]),
            "visible_p50_ms": _median([r["latency_ms"].get("visible_p50") for r in lok]),
            "visible_p99_ms": _median([r["latency_ms"].get("visible_p99") for r in lok]),
            "visible_max_ms": _median([r["latency_ms"].get("visible_max") for r in lok]),
            "latency_cpu_cores": _median([r["detail"].get("cpu_s_per_s_at_rate") for r in lok]),
            "latency_peak_rss_mib": _median([r["peak_rss"] / 2**20 for r in lok]),
            "problems": sorted({p[:300] for r in tp + lat for p in r["problems"]})[:10],
        }
        out[name] = s
    return out


def ratios(summary: dict[str, dict]) -> list[dict]:
    """Ratios between contenders of one record size (`summary` = one size's entry of `summarize`)."""
    pairs = [("sparkmirror-eos-batches", "mm2"), ("sparkmirror-eos-batches", "mm2-eos"),
             ("sparkmirror-eos-batches", "sparkmirror-eos"), ("sparkmirror-eos-batches", "pipe"),
             ("sparkmirror-alo-batches", "mm2"),
             ("sparkmirror-eos", "mm2"), ("sparkmirror-eos", "mm2-eos"), ("sparkmirror-alo", "mm2"),
             ("sparkmirror-eos", "ceiling"), ("sparkmirror-alo", "ceiling"), ("mm2", "ceiling"),
             ("sparkmirror-alo", "pipe"), ("sparkmirror-eos", "pipe")]
    out = []
    for a, b in pairs:
        if a not in summary or b not in summary:
            continue
        sa, sb = summary[a], summary[b]

        def r(key: str) -> float | None:
            x, y = sa.get(key), sb.get(key)
            return x / y if x is not None and y else None

        out.append({"of": a, "to": b, "size": sa.get("size", ""), "label": f"{LABELS.get(a, a)} / {LABELS.get(b, b)}",
                    "records_per_s": r("records_per_s"), "cpu_s_per_m": r("cpu_s_per_m"),
                    "peak_rss": r("peak_rss_mib"), "latency_p99": r("latency_p99_ms"),
                    "visible_p99": r("visible_p99_ms")})
    return out


def _f(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if x is None else fmt.format(x)


def _data_text(cfg: dict) -> str:
    """What was preloaded, and that each record size is mirrored in runs of its own."""
    per_size = " and ".join(f"{c['records']:,} records of {size} over {c['topics']} topics"
                            for size, c in (cfg.get("sizes") or {}).items())
    latency = (f" Latency (in the 1 KiB table): steady {cfg['latency_rate']:,} records/s of 1 KiB for "
               f"{cfg['latency_seconds']:g} s after {cfg['latency_warmup']:g} s warm-up; target LogAppendTime − "
               f"source record timestamp (when the record was appended, inside its transaction for exactly-once); "
               f"*visible*: when a read_committed consumer of the target received it − source record timestamp "
               f"(what a reader on the target sees: includes the commit)." if cfg.get("latency_seconds") else "")
    return (
        f"Data: the source is preloaded once with {cfg['records_per_size']:,} records of 1 KiB (and of 1 KiB lz4) "
        f"and {cfg.get('records_100b', cfg['records_per_size']):,} of 100 B ({cfg['total_records']:,} records, {cfg['payload_mib']:,.0f} MiB incl. keys and headers, "
        f"{cfg['topics']} topics × {cfg['partitions_per_topic']} partitions). **Each record size is mirrored in "
        f"its own runs** ({per_size}): a run is given only that size's topics and is checked against them, so "
        f"each table below is one size. Parallelism {cfg['parallelism']} (MM2 `tasks.max` = sparkmirror lanes); "
        f"MM2 producer: {cfg.get('mm2_producer', 'Kafka defaults')}; sparkmirror commitIntervalMs: "
        f"{cfg.get('sparkmirror_commit_interval_ms', 'default')}, lingerMs: "
        f"{cfg.get('sparkmirror_linger_ms', 'default')}; {cfg['reps']} repetition"
        f"{'' if cfg['reps'] == 1 else 's'}, medians; "
        f"contenders alternate." + latency)


def _size_tables(size: str, summ: dict[str, dict], ratio_rows: list[dict]) -> list[str]:
    """One size's throughput table and its ratios; latency columns only where latency was measured (1 KiB)."""
    lat = any(s["latency_runs"] for s in summ.values())
    lines = [f"## {size or 'all sizes'} records", "",
             "| contender | CPU s / M records | records/s | best run records/s | MiB/s | copy window s | "
             "brokers' CPU s / M | peak RSS MiB | start-up s | start to done s |"
             + (" p50 ms | p99 ms | max ms | visible p50 ms | visible p99 ms | visible max ms |" if lat else "")
             + " runs ok |",
             "| --- |" + " ---: |" * (9 + (6 if lat else 0)) + " ---: |"]
    for s in summ.values():
        lines.append(
            f"| {s['label']} | {_f(s['cpu_s_per_m'], '{:,.1f}')} | {_f(s['records_per_s'])} | "
            f"{_f(s.get('best_records_per_s'))} | {_f(s['mib_per_s'], '{:,.1f}')} | {_f(s.get('copy_s'), '{:.1f}')} | "
            f"{_f(s.get('broker_cpu_s_per_m'), '{:,.1f}')} | {_f(s['peak_rss_mib'])} | "
            f"{_f(s['startup_s'], '{:.1f}')} | {_f(s['wall_s'], '{:.1f}')} | "
            + (f"{_f(s['latency_p50_ms'])} | {_f(s['latency_p99_ms'])} | {_f(s['latency_max_ms'])} | "
               f"{_f(s.get('visible_p50_ms'))} | {_f(s.get('visible_p99_ms'))} | {_f(s.get('visible_max_ms'))} | "
               if lat else "")
            + f"{s['runs_ok']}/{s['runs']}"
            + (f" + lat {s['latency_runs_ok']}/{s['latency_runs']}" if s["latency_runs"] else "") + " |")
    if ratio_rows:
        lines += ["", "| ratio | CPU s / M | records/s | peak RSS |" + (" p99 latency | visible p99 |" if lat else ""),
                  "| --- | ---: | ---: | ---: |" + (" ---: | ---: |" if lat else "")]
        for r in ratio_rows:
            lines.append(f"| {r['label']} | {_f(r['cpu_s_per_m'], '{:.2f}')} | {_f(r['records_per_s'], '{:.2f}')} | "
                         f"{_f(r['peak_rss'], '{:.2f}')} |" + (f" {_f(r['latency_p99'], '{:.2f}')} | "
                                                               f"{_f(r.get('visible_p99'), '{:.2f}')} |" if lat else ""))
    return lines + [""]


def primary_size(runs: list[dict]) -> str:
    """The size "Where the time goes" describes: 1 KiB (what the goal is judged on) when it was measured."""
    sizes = sizes_of([r for r in runs if r["kind"] in ("throughput", "profile")])
    return "1 KiB" if "1 KiB" in sizes else (sizes[0] if sizes else "")


def _latency_load(runs: list[dict]) -> list[str]:
    """What each latency run's window cost the machine, in cores: a tail grows when the 2 cores are near full."""
    if not any(r.get("machine_cpu_s") for r in runs):
        return []  # results from before these were measured
    lines = ["", "## Load during the latency windows", "",
             "Cores in use over each measured window: the mirror's process tree, both brokers, this harness (the "
             "steady producer and the visible-latency reader) and everything else on the machine.", "",
             "| contender | rep | mirror | brokers | harness | other | machine | p99 ms | visible p99 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in runs:
        w = r["copy_s"] or 1e-3
        lat = r["latency_ms"]
        lines.append(f"| {LABELS.get(r['contender'], r['contender'])} | {r['rep']} | {r['cpu_s'] / w:.2f} | "
                     f"{r['broker_cpu_s'] / w:.2f} | {r['detail'].get('harness_cpu_s', 0.0) / w:.2f} | "
                     f"{r['foreign_cpu_s'] / w:.2f} | {r['machine_cpu_s'] / w:.2f} | {_f(lat.get('p99'))} | "
                     f"{_f(lat.get('visible_p99'))} |")
    return lines


def _where_time_goes(runs: list[dict]) -> list[str]:
    size = primary_size(runs)
    runs = [r for r in runs if r.get("size", "") == size]
    kinds = {}
    for r in runs:
        if r["ok"] and r["kind"] in ("throughput", "profile") and r["detail"].get("cpu_by_kind") and \
                (r["kind"] == "throughput" or not any(x["kind"] == "throughput" for x in runs)):
            kinds.setdefault(r["contender"], (r["detail"].get("copy_cpu_by_kind", {}), r["detail"]["cpu_by_kind"]))
    profiles = [r for r in runs if r["kind"] == "profile" and r["detail"].get("profile")]
    if not kinds and not profiles:
        return []
    lines = ["", "## Where the time goes", ""]
    if kinds:
        lines.append(f"CPU seconds by kind of process, first measured run of {size} records: copy window | whole "
                     "run (start-up included). jvm = Spark's driver JVM for sparkmirror, the Connect worker for MM2; "
                     "python-worker = Spark's Python workers running the lane tasks (the copy itself).")
        lines.append("")
    for name, (copy, whole) in kinds.items():
        fmt = lambda k: ", ".join(f"{kind} {cpu:.1f}" for kind, cpu in sorted(k.items(), key=lambda kv: -kv[1])
                                  if cpu >= 0.05) or "–"  # noqa: E731
        lines.append(f"- {LABELS.get(name, name)}: {fmt(copy)} | {fmt(whole)}")
    for r in profiles:
        p = r["detail"]["profile"]
        lines += ["", f"### py-spy: {LABELS.get(r['contender'], r['contender'])}, {size} records "
                      f"({p['samples']:,} samples of Python frames over the copy window; "
                      f"{r['records_per_s']:,.0f} records/s while sampled)", ""]
        lines.append("by process: " + "; ".join(f"{k} {v}%" for k, v in p["by_process"][:6]))
        lines += ["", "| self (top of stack) | % | inclusive | % |", "| --- | ---: | --- | ---: |"]
        for (a, pa), (b, pb) in zip(p["self"], p["inclusive"] + [("", "")] * len(p["self"])):
            lines.append(f"| `{a}` | {pa} | {'`' + b + '`' if b else ''} | {pb} |")
        if p.get("sparkmirror_lines"):
            lines += ["", "innermost sparkmirror line on the stack (time in C calls such as produce() counts "
                          "to the line that made them): " + "; ".join(f"`{k}` {v}%" for k, v in p["sparkmirror_lines"][:10])]
    return lines


def markdown(result: dict) -> str:
    m, cfg, summ = result["machine"], result["config"], result["summary"]
    lines = [f"# sparkmirror vs MirrorMaker 2 — {result['finished']}", "", _data_text(cfg), ""]
    for size, by_contender in summ.items():
        lines += _size_tables(size, by_contender, result["ratios"].get(size, []))
    lines += [
        "records/s and MiB/s: over the copy window (first record visible on the target to last record visible, "
        "read-committed end offsets polled every 100 ms); start-up (process start to first record) is separate. "
        "CPU: user+system seconds of the mirror's whole process tree (JVM, Python workers) in the copy window; "
        "peak RSS: the tree's summed RSS, whole run. Ceiling: an upper bound from Kafka's Java perf tools — a read "
        "phase (one ConsumerPerformance per source topic of the size, all at once) and a write phase (one "
        "ProducerPerformance per topic, same counts and sizes, no keys or headers, all at once), records / the "
        "slower phase, each phase timed by the tools themselves (JVM start-up excluded from time, included in "
        "CPU). Every run is checked: the target holds exactly the source's records of its size (distinct count "
        "and fingerprint of key, value, headers, timestamp per partition; no duplicates for exactly-once).",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu_model']}, {m['cores']} cores; memory {m['memory_gib']} GiB; kernel {m['kernel']}",
        f"- Kafka {m['kafka']} (brokers, MM2, perf tools), {m['java']}; Python {m['python']}, pyspark "
        f"{m['pyspark']}, confluent-kafka {m['confluent_kafka']} (librdkafka {m['librdkafka']}); sparkmirror "
        f"commit {m['git_commit']}" + (f" plus uncommitted changes to {', '.join(m['spark_app_uncommitted'][:6])}"
                                        if m.get("spark_app_uncommitted") else ""),
        f"- load average at start {result['load_start']}, at end {result['load_end']}",
    ]
    fc = [s["foreign_cores"] for by in summ.values() for s in by.values() if s.get("foreign_cores") is not None]
    if fc:
        busy = max(fc)
        lines.append(f"- other processes on the machine (not the mirror, brokers or this harness) used up to "
                     f"{busy:.2f} cores on median during copy windows"
                     + (" — **contended machine: numbers are noisy and lower than on an idle one**"
                        if busy > 0.2 else ""))
    if result.get("note"):
        lines += ["", f"Note: {result['note']}"]
    lines += _where_time_goes(result["runs"])
    tp_runs = [r for r in result["runs"] if r["kind"] in ("throughput", "ceiling")]
    if tp_runs:
        lines += ["", "## Every run", "",
                  "In the order they ran. \"other cores\": CPU that processes other than this mirror, the two "
                  "brokers and the harness used during the copy window, in cores (other people's work on a "
                  "shared machine) — a run with a high figure was slowed down by them.", "",
                  "| # | contender | size | rep | records/s | copy s | CPU s | other cores | ok |",
                  "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for i, r in enumerate(tp_runs):
            other = r["foreign_cpu_s"] / r["copy_s"] if r["copy_s"] and r["kind"] != "ceiling" else None
            lines.append(f"| {i + 1} | {LABELS.get(r['contender'], r['contender'])} | {r.get('size', '')} | "
                         f"{r['rep']} | {_f(r['records_per_s'])} | {r['copy_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{_f(other, '{:.2f}')} | {'yes' if r['ok'] else 'NO'} |")
    lat_runs = [r for r in result["runs"] if r["kind"] == "latency" and r["ok"] and r["detail"].get("per_second_max_ms")]
    if lat_runs:
        lines += _latency_load(lat_runs)
        lines += ["", "## Latency over time", "",
                  "Worst latency (ms) of the records produced in each second of the measured window, seconds "
                  "counted from the contender's start (a recurring stall, e.g. at an epoch boundary, shows as a "
                  "spike):", ""]
        for r in lat_runs:
            series = " ".join(f"{k}s:{v}" for k, v in r["detail"]["per_second_max_ms"].items())
            lines.append(f"- {LABELS.get(r['contender'], r['contender'])} #{r['rep']}: {series}")
    probs = [(n, size, p) for size, by in summ.items() for n, s in by.items() for p in s["problems"]]
    if probs:
        lines += ["", "## Problems", ""]
        for n, size, p in probs:
            lines.append(f"- {n} ({size}): {p.splitlines()[0] if p else p}")
    return "\n".join(lines) + "\n"


# latest.json sections that other benches write (bench.handoff, bench.soak): a throughput run keeps them
KEPT_SECTIONS = ("handoff", "soak")


def with_kept_sections(result: dict, previous: dict) -> dict:
    """`result` plus the sections of the previous latest.json that another bench owns (the result's own win)."""
    return {**{k: previous[k] for k in KEPT_SECTIONS if k in previous}, **result}


def write(result: dict, results_dir: Path) -> tuple[Path, Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    md = markdown(result)
    latest = results_dir / "latest.json"
    try:
        previous = json.loads(latest.read_text()) if latest.exists() else {}
    except ValueError:
        previous = {}
    js = json.dumps(with_kept_sections(result, previous), indent=2, default=str)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    for name in ("latest", stamp):
        (results_dir / f"{name}.md").write_text(md)
        (results_dir / f"{name}.json").write_text(js)
    return results_dir / "latest.md", results_dir / "latest.json"
