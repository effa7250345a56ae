"""`python -m bench.soak`: does the mirror's memory stay flat over a long run at a steady rate?

One source and one target cluster, a numbered producer at a steady rate, the job as its own process (what a
SparkApplication's driver runs) for `--minutes`. Every `--sample` seconds the resident memory of each kind of
process in the job's tree is read (driver JVM, Python driver, Python workers). The driver's offset history is
sized by the job from its memory (`historybudget.py`) unless `--offset-history` sets it; with the defaults its cap
is hours of commits away, so it grows by design during the run: the soak follows the progress topic with the
driver's own reader and rule (a `ProgressTail` at the same cap) and counts the ranges the driver holds, times the
bytes a range costs (`progress.footprint`), as `offset-history`; the Python driver is judged net of it
(`python-driver-net`), its raw slope reported beside. At the end every record is counted on the target by its
sequence number: missing, duplicated.

The driver JVM is judged by its parts (bench/jvmmon.py), because its RSS grows by design toward bounds far above
what a run of an hour reaches: its heap's pages become resident as G1 first touches them (bounded by -Xmx, the
heap it may use by contract), and C1 compiles code that runs once an epoch only after hundreds of epochs (the code
cache: bounded by ReservedCodeCacheSize, 48 MB with C1 alone). A 20-minute run judged on raw RSS failed at +41 MB/h
while the live heap grew 0.9 MB in 6 minutes. So the soak samples the JVM every `--jvm-sample` s: its RSS split at
the heap's address range (`jvm-heap`, `jvm-nonheap`), the code cache's committed size from Native Memory
Tracking (`jvm-code`; NMT on unless `--no-nmt`), and every `--live-every` minutes a class histogram, which forces
a full GC and measures what the driver keeps (`jvm-live-heap`). Judged are `jvm-live-heap` and `jvm-native`
(non-heap RSS minus the code cache): a leak of Java objects shows in the first, of native memory in the second.
Pinning -Xms would not flatten RSS (committed pages become resident only when touched), only raise its floor.

Flat means: over the part of the run after `--warmup`, the least-squares slope of each kind's RSS, and the
median of the last tenth against the median of the first tenth; a slope above `--max-slope` MB/h (default 5)
fails the run (exit 1, a line naming the kind). The figures go into `bench/results/soak.json` and `soak.md`
(named `soak-<minutes>min.*` when the run is shorter than the default 60 minutes), with the commit they ran on,
and into `latest.json` under `soak` (other keys kept) for a full-length run only.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import psutil
from sparkmirror.historybudget import size_history
from sparkmirror.progress import ProgressTail
from sparkmirror.progress.footprint import bytes_per_range
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_counts, unique_name

from .gitstate import git, uncommitted
from .runenv import Env
from .jobproc import start_job, stop_job
from .jvmmon import JvmMonitor, grown_classes
from .procmon import ProcessTreeMonitor, Sample

HERE = Path(__file__).resolve().parent
PARTITIONS = 8
MB = 1024 * 1024
DEFAULT_MINUTES = 60.0
# Not judged: the sums, and what grows toward a bound by design. The Python driver is judged net of its offset
# history (capped); the driver JVM by its parts (jvmmon.py): not its heap's RSS (bounded by -Xmx) nor its code
# cache (bounded by ReservedCodeCacheSize), but what it keeps on the heap (jvm-live-heap) and the rest of its RSS
# (jvm-native; jvm-nonheap when the JVM runs without NMT, which says the code cache's size).
NOT_JUDGED = frozenset({"total", "python-driver", "offset-history", "jvm", "jvm-heap", "jvm-code"})


def rss_trend(samples: list[Sample], since: float, history: list[tuple[float, int]] | None = None,
              series: dict[str, list[tuple[float, int]]] | None = None) -> dict[str, dict[str, float]]:
    """Per kind of process, over the samples taken at or after `since`: first and last tenth's median RSS (MB),
    their difference, the peak, and the least-squares slope in MB per hour. With `history` ((time, bytes) of the
    driver's offset history), also `offset-history` and `python-driver-net` (the Python driver's RSS minus it).
    `series` adds kinds sampled on their own clock ((time, bytes) each: the JVM's parts, one process)."""
    window = [s for s in samples if s.t >= since]
    out: dict[str, dict[str, float]] = {}
    kinds = sorted({k for s in window for k, v in s.rss_by_kind.items() if v} | {"total"})
    if history:
        kinds += ["offset-history", "python-driver-net"]
    for kind in kinds:
        pts = [(s.t, _value(s, kind, history or []) / MB) for s in window]
        procs = ([s.procs_by_kind.get(kind.removesuffix("-net"), 0) for s in window]
                 if kind not in ("total", "offset-history") else [0])
        if trend := _trend(pts, procs):
            out[kind] = trend
    for kind, points in (series or {}).items():
        if trend := _trend([(t, b / MB) for t, b in points if t >= since], [1]):
            out[kind] = trend
    return out


def _trend(pts: list[tuple[float, float]], procs: list[int]) -> dict[str, float] | None:
    if len(pts) < 2:
        return None
    tenth = max(1, len(pts) // 10)
    first, last = statistics.median(v for _, v in pts[:tenth]), statistics.median(v for _, v in pts[-tenth:])
    t0 = pts[0][0]
    slope = statistics.linear_regression([t - t0 for t, _ in pts], [v for _, v in pts]).slope
    return {"first_mb": round(first, 1), "last_mb": round(last, 1), "growth_mb": round(last - first, 1),
            "peak_mb": round(max(v for _, v in pts), 1), "slope_mb_per_hour": round(slope * 3600, 1),
            "processes_min": min(procs), "processes_max": max(procs), "points": len(pts)}


def _value(s: Sample, kind: str, history: list[tuple[float, int]]) -> int:
    """Bytes of `kind` at sample `s`; the offset history's figure is the last one taken at or before it."""
    if kind == "total":
        return s.rss
    if kind in ("offset-history", "python-driver-net"):
        held = next((b for t, b in reversed(history) if t <= s.t), 0)
        return held if kind == "offset-history" else s.rss_by_kind.get("python-driver", 0) - held
    return s.rss_by_kind.get(kind, 0)


def verdict(rss: dict[str, dict[str, float]], max_slope: float) -> list[str]:
    """One line per judged kind whose slope is above `max_slope` MB/h (empty: flat)."""
    skip = NOT_JUDGED | ({"jvm-nonheap"} if "jvm-native" in rss else set())
    return [f"soak: FAIL {kind} grows {r['slope_mb_per_hour']} MB/h after the warm-up (limit {max_slope:g} MB/h)"
            for kind, r in rss.items() if kind not in skip and r["slope_mb_per_hour"] > max_slope]


def commit_of() -> str:
    """The commit the run measures (`+dirty` when the work tree differs from it)."""
    return git("rev-parse", "HEAD") + ("+dirty" if uncommitted("spark-app", "bench") else "")


def _budget_line(log: Path) -> str | None:
    """The job's offset-history budget as it logged it (historycap), or None."""
    lines = [line.split("offset history budget: ", 1)[1] for line in log.read_text(errors="replace").splitlines()
             if "offset history budget: " in line]
    return lines[-1] if lines else None


def _figures(budget: str) -> tuple[float, int]:
    """(bytes per range, cap) of a budget line."""
    per_range = float(re.search(r"at ([\d.]+) bytes/range", budget).group(1))  # type: ignore[union-attr]
    cap = int(re.search(r"cap ([\d,]+) ranges/partition", budget).group(1).replace(",", ""))  # type: ignore[union-attr]
    return per_range, cap


def _config(src: str, tgt: str, topic: str, args: argparse.Namespace) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": "bench-soak", "resource": "bench/soak",
        "clusters": [{"alias": "src", "bootstrapServers": src}, {"alias": "tgt", "bootstrapServers": tgt}],
        "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": topic,
                     "emitCheckpoints": True, "emitHeartbeats": True}],
        "lanes": args.lanes, "epochSeconds": args.epoch,
        **({"offsetHistory": args.offset_history} if args.offset_history else {}),
        "progressTopic": unique_name("progress")})


def _wait_for(pred, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"soak: {what} did not happen within {timeout:.0f} s")
        time.sleep(1)


def run(args: argparse.Namespace) -> dict:
    env = Env(args.work)
    try:
        src = env.start_source().bootstrap
        tgt = env.new_target().bootstrap
        topic = create_topic(src, unique_name("soak"), PARTITIONS)
        cfg = _config(src, tgt, topic, args)
        producer = NumberedProducer(src, topic, rate=args.rate, partitions=PARTITIONS)
        producer.start()
        confs = {"spark.driver.memory": args.driver_memory,
                 **({"spark.driver.extraJavaOptions": "-XX:NativeMemoryTracking=summary"} if args.nmt else {})}
        job = start_job(cfg, args.work / "job", "soak", confs)
        mon = ProcessTreeMonitor([job.pid], interval=args.sample).start()
        jvm: JvmMonitor | None = None
        t_start = time.time()
        commit = commit_of()  # now: the job runs the code of this moment
        history: list[tuple[float, int]] = []
        next_tail = 0.0
        tail = None
        try:
            _wait_for(lambda: job.poll() is not None or any(s.rss_by_kind.get("python-worker") for s in mon.samples),
                      300, "the first lane task")
            jvm = JvmMonitor(_java_of(job.pid), interval=args.jvm_sample, live_every=args.live_every * 60).start()
            # what the driver holds: its reader at its cap (from its budget line) over the same progress topic
            budget = _budget_line(args.work / "job" / "soak.log")
            per_range, cap = _figures(budget) if budget else (bytes_per_range(), 0)
            cap = cap or cfg.offsetHistory or size_history(args.driver_memory, PARTITIONS, per_range, None).cap
            tail = ProgressTail({"bootstrap.servers": tgt}, cfg.progressTopic, "src", resource=cfg.resource,
                                max_history=cap)
            end = t_start + args.minutes * 60
            next_print = time.time() + 60
            while time.time() < end and job.poll() is None:
                time.sleep(1)
                if time.time() >= next_tail and tail is not None:
                    next_tail = time.time() + args.sample
                    tail.poll(10.0)
                    history.append((time.time(), int(per_range * sum(len(m._cols[0]) for m in tail.maps().values()))))
                if time.time() >= next_print and mon.samples:
                    s = mon.samples[-1]
                    print(f"  {int((s.t - t_start) / 60):3d} min  rss " + "  ".join(
                        f"{k} {v / MB:.0f} MB" for k, v in sorted(s.rss_by_kind.items())), flush=True)
                    next_print += 60
            crashed = job.poll()
            sent = producer.stop()
            t_stop = time.time()
            if crashed is None:  # let the mirror catch up on the last records before it drains
                _wait_for(lambda: numbered_counts(tgt, f"src.{topic}", PARTITIONS, sent)[0] == 0, 180,
                          "catching up")
        finally:
            mon.stop()
            if jvm is not None:
                jvm.stop()
            code = stop_job(job)
            if tail is not None:
                tail.close()
        missing, duplicated = numbered_counts(tgt, f"src.{topic}", PARTITIONS, sent)
        return {"finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
                "history_budget": budget, "history_cap": cap,
                "bytes_per_range": round(per_range, 1),
                "config": {k: v for k, v in vars(args).items() if k not in ("work", "results")},
                "minutes": round((t_stop - t_start) / 60, 1), "records": sent * PARTITIONS,
                "records_per_second": round(sent * PARTITIONS / (t_stop - t_start)), "missing": missing,
                "duplicated": duplicated, "job_exit": code, "crashed": crashed,
                "rss": rss_trend(mon.samples, t_start + args.warmup * 60, history, _jvm_series(jvm)),
                "jvm": _jvm_report(jvm, t_start, t_start + args.warmup * 60),
                "samples": [{"t": round(s.t - t_start, 1), "procs": s.procs_by_kind,
                             **{k: round(v / MB, 1) for k, v in s.rss_by_kind.items()},
                             "offset-history": round(_value(s, "offset-history", history) / MB, 1)}
                            for s in mon.samples]}
    finally:
        env.stop()


def _java_of(pid: int) -> int:
    """The driver JVM: the job's child that runs java (spark-submit `exec`s it in the launcher's pid)."""
    for child in psutil.Process(pid).children(recursive=True):
        if "java" in child.name():
            return child.pid
    raise SystemExit("soak: the job runs no JVM")


def _jvm_series(jvm: JvmMonitor | None) -> dict[str, list[tuple[float, int]]]:
    if jvm is None:
        return {}
    series = {"jvm-heap": [(s.t, s.heap_rss) for s in jvm.samples],
              "jvm-nonheap": [(s.t, s.nonheap_rss) for s in jvm.samples],
              "jvm-live-heap": [(h.t, h.bytes) for h in jvm.live]}
    with_nmt = [s for s in jvm.samples if "Code" in s.nmt_kb]
    if with_nmt:
        series["jvm-code"] = [(s.t, s.nmt_kb["Code"] * 1024) for s in with_nmt]
        series["jvm-native"] = [(s.t, s.nonheap_rss - s.nmt_kb["Code"] * 1024) for s in with_nmt]
    return series


def _jvm_report(jvm: JvmMonitor | None, t_start: float, since: float) -> dict:
    """The JVM's parts over the run: NMT committed per category (first and last sample after the warm-up), the
    classes whose live bytes grew most between the first and last histogram after it, each sample."""
    if jvm is None:
        return {}
    after = [s for s in jvm.samples if s.t >= since]
    live = [h for h in jvm.live if h.t >= since]
    nmt = {}
    if after and after[0].nmt_kb:
        first, last = after[0].nmt_kb, after[-1].nmt_kb
        nmt = {k: {"first_mb": round(first.get(k, 0) / 1024, 1), "last_mb": round(last.get(k, 0) / 1024, 1),
                   "growth_mb": round((last.get(k, 0) - first.get(k, 0)) / 1024, 1)} for k in last}
    return {"pid": jvm.pid, "errors": jvm.errors, "nmt_committed": nmt,
            "live_heap_grown": grown_classes(live[0], live[-1]) if len(live) >= 2 else [],
            "live_heap": [{"t": round(h.t - t_start, 1), "mb": round(h.bytes / MB, 1)} for h in jvm.live],
            "samples": [{"t": round(s.t - t_start, 1), "rss": round(s.rss / MB, 1),
                         "heap_rss": round(s.heap_rss / MB, 1), "heap_committed": round(s.heap_committed / MB, 1),
                         "heap_used": round(s.heap_used / MB, 1),
                         "metaspace_committed": round(s.metaspace_committed / MB, 1),
                         "nmt_total": round(s.nmt_kb.get("Total", 0) / 1024, 1)} for s in jvm.samples]}


def write(result: dict, results: Path) -> None:
    """soak.json/.md for a full-length run (and latest.json's `soak`); soak-<minutes>min.* for a shorter one."""
    results.mkdir(parents=True, exist_ok=True)
    c = result["config"]
    full = c["minutes"] >= DEFAULT_MINUTES
    stem = "soak" if full else f"soak-{c['minutes']:g}min"
    (results / f"{stem}.json").write_text(json.dumps(result, indent=1))
    if full:
        latest = results / "latest.json"
        doc = json.loads(latest.read_text()) if latest.exists() else {}
        doc["soak"] = {k: v for k, v in result.items() if k != "samples"}
        latest.write_text(json.dumps(doc, indent=2, default=str))
    title = ("# Soak: resident memory over a long run at a steady rate" if full else
             f"# Soak, SHORT RUN of {c['minutes']:g} minutes (not the {DEFAULT_MINUTES:g}-minute run): resident memory")
    lines = [title, "", f"Commit {result['commit']}; offset history: {result['history_budget']}.", "",
             f"Finished {result['finished']}: {result['minutes']} min at {result['records_per_second']:,} records/s "
             f"({PARTITIONS} partitions, {c['lanes']} lanes, {c['epoch']:.0f} s epochs, offsetHistory "
             f"{c['offset_history'] or 'derived'}, driver memory {c['driver_memory']}); {result['records']:,} records, "
             f"{result['missing']} missing, {result['duplicated']} duplicated.", "",
             f"RSS after the first {c['warmup']} min (median of the first and of the last tenth of the samples):", "",
             "| process | first (MB) | last (MB) | growth (MB) | peak (MB) | slope (MB/h) | processes |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for kind, r in result["rss"].items():
        lines.append(f"| {kind} | {r['first_mb']:,} | {r['last_mb']:,} | {r['growth_mb']:,} | {r['peak_mb']:,} | "
                     f"{r['slope_mb_per_hour']:,} | {r['processes_min']}-{r['processes_max']} |")
    lines += ["", f"Judged (limit {c['max_slope']:g} MB/h): every kind but total, offset-history, python-driver "
              "(judged as python-driver-net, its RSS minus the offset history it holds by design) and the driver "
              "JVM's raw RSS, which is judged by its parts: not jvm-heap (the RSS of the Java heap's mapping, bounded "
              "by -Xmx) nor jvm-code (its code cache, bounded by ReservedCodeCacheSize), but jvm-live-heap (the heap "
              f"used after a full GC, a class histogram every {c.get('live_every', 0):g} min) and jvm-native (the rest "
              "of its RSS; jvm-nonheap, code cache included, when it runs without NMT).", "",
              *(result["verdict"] or ["Verdict: flat."])]
    jvm = result.get("jvm") or {}
    if jvm.get("nmt_committed"):
        lines += ["", "Driver JVM, Native Memory Tracking, committed MB after the warm-up (first and last sample):", "",
                  "| category | first | last | growth |", "| --- | --- | --- | --- |"]
        lines += [f"| {k} | {v['first_mb']:,} | {v['last_mb']:,} | {v['growth_mb']:,} |"
                  for k, v in jvm["nmt_committed"].items()]
    if jvm.get("live_heap_grown"):
        lines += ["", "Driver JVM, live heap: the classes that grew most between the first and last histogram after "
                  "the warm-up:", "", "| class | instances | bytes | bytes at the end |", "| --- | --- | --- | --- |"]
        lines += [f"| `{r['class']}` | {r['instances']:+,} | {r['bytes']:+,} | {r['last_bytes']:,} |"
                  for r in jvm["live_heap_grown"]]
    (results / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=DEFAULT_MINUTES, help="length of the run; default %(default)s")
    p.add_argument("--warmup", type=float, default=10.0, help="minutes left out of the trend; default %(default)s")
    p.add_argument("--rate", type=int, default=250, help=f"sequences per second (x{PARTITIONS} partitions)")
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--epoch", type=float, default=30.0, help="epochSeconds of the mirror; default %(default)s")
    p.add_argument("--offset-history", type=int, default=None,
                   help="spark.offsetHistory: ranges kept per partition; default: sized by the job")
    p.add_argument("--max-slope", type=float, default=5.0, help="MB/h a kind may grow after the warm-up")
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--jvm-sample", type=float, default=30.0,
                   help="seconds between samples of the driver JVM's heap, RSS split and NMT; default %(default)s")
    p.add_argument("--live-every", type=float, default=3.0,
                   help="minutes between live-heap histograms of the driver JVM (each a full GC); default %(default)s")
    p.add_argument("--no-nmt", dest="nmt", action="store_false",
                   help="run the driver JVM without Native Memory Tracking (-XX:NativeMemoryTracking=summary)")
    p.add_argument("--work", type=Path, default=HERE / "work" / "soak")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.minutes:g} min at {args.rate * PARTITIONS} records/s", flush=True)
    result = run(args)
    result["verdict"] = verdict(result["rss"], args.max_slope)
    write(result, args.results)
    print(json.dumps({k: result[k] for k in ("commit", "minutes", "records", "missing", "duplicated", "rss")}),
          flush=True)
    for line in result["verdict"]:
        print(line, flush=True)
    if result["missing"] or result["duplicated"] or result["crashed"] is not None:
        print(f"soak: FAIL {result['missing']} missing, {result['duplicated']} duplicated, job ended early with "
              f"{result['crashed']}", flush=True)
        return 1
    return 1 if result["verdict"] else 0


if __name__ == "__main__":
    sys.exit(main())
