"""`python -m bench.soak`: does the mirror's memory stay flat over a long run at a steady rate?

One source and one target cluster, a numbered producer at a steady rate, the job as its own process (what a
SparkApplication's driver runs) for `--minutes`. Every `--sample` seconds the resident memory of each kind of
process in the job's tree is read (driver JVM, Python driver, Python workers). The driver's offset history is
capped by `spark.offsetHistory` (`--offset-history`, low by default so that the cap is reached early in the run:
what is then left to grow would be growth by uptime). At the end every record is counted on the target by its
sequence number: missing, duplicated.

Flat means: over the part of the run after `--warmup`, the least-squares slope of each kind's RSS, and the
median of the last tenth against the median of the first tenth. The figures go into `bench/results/soak.json`
and `soak.md`, and into `latest.json` under `soak` (other keys kept).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_counts, unique_name

from .runenv import Env
from .jobproc import start_job, stop_job
from .procmon import ProcessTreeMonitor, Sample

HERE = Path(__file__).resolve().parent
PARTITIONS = 8
MB = 1024 * 1024


def rss_trend(samples: list[Sample], since: float) -> dict[str, dict[str, float]]:
    """Per kind of process, over the samples taken at or after `since`: first and last tenth's median RSS (MB),
    their difference, the peak, and the least-squares slope in MB per hour."""
    window = [s for s in samples if s.t >= since]
    out: dict[str, dict[str, float]] = {}
    kinds = sorted({k for s in window for k, v in s.rss_by_kind.items() if v} | {"total"})
    tenth = max(1, len(window) // 10)
    for kind in kinds:
        pts = [(s.t, (s.rss if kind == "total" else s.rss_by_kind.get(kind, 0)) / MB) for s in window]
        if len(pts) < 2:
            continue
        first, last = statistics.median(v for _, v in pts[:tenth]), statistics.median(v for _, v in pts[-tenth:])
        t0 = pts[0][0]
        slope = statistics.linear_regression([t - t0 for t, _ in pts], [v for _, v in pts]).slope
        procs = [s.procs_by_kind.get(kind, 0) for s in window] if kind != "total" else [0]
        out[kind] = {"first_mb": round(first, 1), "last_mb": round(last, 1), "growth_mb": round(last - first, 1),
                     "peak_mb": round(max(v for _, v in pts), 1), "slope_mb_per_hour": round(slope * 3600, 1),
                     "processes_min": min(procs), "processes_max": max(procs)}
    return out


def _config(src: str, tgt: str, topic: str, args: argparse.Namespace) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": "bench-soak", "resource": "bench/soak",
        "clusters": [{"alias": "src", "bootstrapServers": src}, {"alias": "tgt", "bootstrapServers": tgt}],
        "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": topic,
                     "emitCheckpoints": True, "emitHeartbeats": True}],
        "lanes": args.lanes, "epochSeconds": args.epoch, "offsetHistory": args.offset_history,
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
        job = start_job(cfg, args.work / "job", "soak", {"spark.driver.memory": args.driver_memory})
        mon = ProcessTreeMonitor([job.pid], interval=args.sample).start()
        t_start = time.time()
        try:
            _wait_for(lambda: job.poll() is not None or any(s.rss_by_kind.get("python-worker") for s in mon.samples),
                      300, "the first lane task")
            end = t_start + args.minutes * 60
            next_print = time.time() + 60
            while time.time() < end and job.poll() is None:
                time.sleep(1)
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
            code = stop_job(job)
        missing, duplicated = numbered_counts(tgt, f"src.{topic}", PARTITIONS, sent)
        return {"finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "config": {k: v for k, v in vars(args).items() if k not in ("work", "results")},
                "minutes": round((t_stop - t_start) / 60, 1), "records": sent * PARTITIONS,
                "records_per_second": round(sent * PARTITIONS / (t_stop - t_start)), "missing": missing,
                "duplicated": duplicated, "job_exit": code, "crashed": crashed,
                "rss": rss_trend(mon.samples, t_start + args.warmup * 60),
                "samples": [{"t": round(s.t - t_start, 1), "procs": s.procs_by_kind,
                             **{k: round(v / MB, 1) for k, v in s.rss_by_kind.items()}} for s in mon.samples]}
    finally:
        env.stop()


def write(result: dict, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    (results / "soak.json").write_text(json.dumps(result, indent=1))
    latest = results / "latest.json"
    doc = json.loads(latest.read_text()) if latest.exists() else {}
    doc["soak"] = {k: v for k, v in result.items() if k != "samples"}
    latest.write_text(json.dumps(doc, indent=2, default=str))
    c = result["config"]
    lines = ["# Soak: resident memory over a long run at a steady rate", "",
             f"Finished {result['finished']}: {result['minutes']} min at {result['records_per_second']:,} records/s "
             f"({PARTITIONS} partitions, {c['lanes']} lanes, {c['epoch']:.0f} s epochs, offsetHistory "
             f"{c['offset_history']:,}, driver memory {c['driver_memory']}); {result['records']:,} records, "
             f"{result['missing']} missing, {result['duplicated']} duplicated.", "",
             f"RSS after the first {c['warmup']} min (median of the first and of the last tenth of the samples):", "",
             "| process | first (MB) | last (MB) | growth (MB) | peak (MB) | slope (MB/h) | processes |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for kind, r in result["rss"].items():
        lines.append(f"| {kind} | {r['first_mb']:,} | {r['last_mb']:,} | {r['growth_mb']:,} | {r['peak_mb']:,} | "
                     f"{r['slope_mb_per_hour']:,} | {r['processes_min']}-{r['processes_max']} |")
    (results / "soak.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="length of the run; default %(default)s")
    p.add_argument("--warmup", type=float, default=5.0, help="minutes left out of the trend; default %(default)s")
    p.add_argument("--rate", type=int, default=250, help=f"sequences per second (x{PARTITIONS} partitions)")
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--epoch", type=float, default=30.0, help="epochSeconds of the mirror; default %(default)s")
    p.add_argument("--offset-history", type=int, default=2000,
                   help="spark.offsetHistory: ranges kept per partition; default %(default)s")
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--work", type=Path, default=HERE / "work" / "soak")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.minutes:g} min at {args.rate * PARTITIONS} records/s", flush=True)
    result = run(args)
    write(result, args.results)
    print(json.dumps({k: result[k] for k in ("minutes", "records", "missing", "duplicated", "rss")}), flush=True)
    return 0 if result["missing"] == 0 and result["duplicated"] == 0 and result["crashed"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
