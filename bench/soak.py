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
import subprocess
import sys
import time
from pathlib import Path

from sparkmirror.historybudget import size_history
from sparkmirror.progress import ProgressTail
from sparkmirror.progress.footprint import bytes_per_range
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_counts, unique_name

from .runenv import Env
from .jobproc import start_job, stop_job
from .procmon import ProcessTreeMonitor, Sample

HERE = Path(__file__).resolve().parent
PARTITIONS = 8
MB = 1024 * 1024
DEFAULT_MINUTES = 60.0
NOT_JUDGED = frozenset({"total", "python-driver", "offset-history"})  # python-driver is judged net of its history


def rss_trend(samples: list[Sample], since: float,
              history: list[tuple[float, int]] | None = None) -> dict[str, dict[str, float]]:
    """Per kind of process, over the samples taken at or after `since`: first and last tenth's median RSS (MB),
    their difference, the peak, and the least-squares slope in MB per hour. With `history` ((time, bytes) of the
    driver's offset history), also `offset-history` and `python-driver-net` (the Python driver's RSS minus it)."""
    window = [s for s in samples if s.t >= since]
    out: dict[str, dict[str, float]] = {}
    kinds = sorted({k for s in window for k, v in s.rss_by_kind.items() if v} | {"total"})
    if history:
        kinds += ["offset-history", "python-driver-net"]
    tenth = max(1, len(window) // 10)
    for kind in kinds:
        pts = [(s.t, _value(s, kind, history or []) / MB) for s in window]
        if len(pts) < 2:
            continue
        first, last = statistics.median(v for _, v in pts[:tenth]), statistics.median(v for _, v in pts[-tenth:])
        t0 = pts[0][0]
        slope = statistics.linear_regression([t - t0 for t, _ in pts], [v for _, v in pts]).slope
        procs = ([s.procs_by_kind.get(kind.removesuffix("-net"), 0) for s in window]
                 if kind not in ("total", "offset-history") else [0])
        out[kind] = {"first_mb": round(first, 1), "last_mb": round(last, 1), "growth_mb": round(last - first, 1),
                     "peak_mb": round(max(v for _, v in pts), 1), "slope_mb_per_hour": round(slope * 3600, 1),
                     "processes_min": min(procs), "processes_max": max(procs)}
    return out


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
    return [f"soak: FAIL {kind} grows {r['slope_mb_per_hour']} MB/h after the warm-up (limit {max_slope:g} MB/h)"
            for kind, r in rss.items() if kind not in NOT_JUDGED and r["slope_mb_per_hour"] > max_slope]


def commit_of() -> str:
    """The commit the run measures (`+dirty` when the work tree differs from it)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=HERE, capture_output=True, text=True).stdout.strip()
    return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain", "--", "spark-app", "bench") else "")


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
        job = start_job(cfg, args.work / "job", "soak", {"spark.driver.memory": args.driver_memory})
        mon = ProcessTreeMonitor([job.pid], interval=args.sample).start()
        t_start = time.time()
        commit = commit_of()  # now: the job runs the code of this moment
        history: list[tuple[float, int]] = []
        next_tail = 0.0
        tail = None
        try:
            _wait_for(lambda: job.poll() is not None or any(s.rss_by_kind.get("python-worker") for s in mon.samples),
                      300, "the first lane task")
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
                "rss": rss_trend(mon.samples, t_start + args.warmup * 60, history),
                "samples": [{"t": round(s.t - t_start, 1), "procs": s.procs_by_kind,
                             **{k: round(v / MB, 1) for k, v in s.rss_by_kind.items()},
                             "offset-history": round(_value(s, "offset-history", history) / MB, 1)}
                            for s in mon.samples]}
    finally:
        env.stop()


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
    lines += ["", f"Judged (limit {c['max_slope']:g} MB/h): every kind but total, offset-history and python-driver "
              "(judged as python-driver-net, its RSS minus the offset history it holds by design).", "",
              *(result["verdict"] or ["Verdict: flat."])]
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
