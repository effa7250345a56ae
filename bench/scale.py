"""`python -m bench.scale`: how the cost of mirroring grows with the number of topics and partitions, sparkmirror
and MirrorMaker 2 side by side on the same clusters.

For each point `<topics>x<partitions per topic>` (default 2x4, 1000x1, 1000x10: 8 to 10,000 partitions) a fresh
source cluster gets that many topics, each partition preloaded with `--records` records of 100 B (keys and `seq`
headers, as in the throughput benchmark). Then, for each contender, on a fresh target cluster:

1. the initial copy: contender start -> every record visible on the target (read-committed end offsets, polled
   every second), then a record-by-record check (distinct count and fingerprint per partition, placement, no
   duplicates for exactly-once); CPU seconds of the contender's process tree over the copy window, records per
   CPU second;
2. new topics: `--new-topics` times, a topic is created on the source while a producer writes into it every 50
   ms; the time from the create call to its first record visible on the target is "new topic -> copying";
3. idle cost: CPU of the contender's tree per second while the mirror only carries those probes and heartbeats;
4. memory: peak resident memory per kind of process (JVM, Python driver, Python workers, Spark's Python
   source runner), whole run;
5. planning (sparkmirror only; MM2 has no epochs): the driver-side time of each epoch, from the job's
   "planned in" log lines (latestOffset with topic sync, plus planning the lanes); and the epoch boundary, the
   time between one epoch's last task and the next one's first, with how long after the last lane's end the
   epoch's summary rows were in the driver, from the job's epoch lines. Past 15 s (the carry window) the lanes
   stop copying between epochs and start afresh.

Both contenders refresh topics every 5 s (as in the throughput benchmark; MM2's default is 10 minutes).
Writes bench/results/scale.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from . import data
from .contenders import BenchError, Contender, MirrorMaker2, MirrorSetup, SparkMirror, remote_name, rmtree
from .harness import wait_mirrored
from .runenv import Env, MachineSampler
from .procmon import ProcessTreeMonitor

HERE = Path(__file__).resolve().parent
PLANNED = re.compile(r"epoch \d+ planned in (\d+) ms \(latest offset and topic sync (\d+) ms, lanes (\d+) ms\): "
                     r"(\d+) lanes over (\d+) partitions")
BOUNDARY = re.compile(r"(\d+) ms between the epochs' tasks \((\d+) rows: in the driver (\d+) ms after")
CONTENDERS = {"sparkmirror-eos": lambda: SparkMirror(True), "sparkmirror-alo": lambda: SparkMirror(False),
              "mm2": lambda: MirrorMaker2(False), "mm2-eos": lambda: MirrorMaker2(True)}


@dataclass
class ScaleRun:
    point: str
    topics: int
    partitions: int
    contender: str
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    records: int = 0
    startup_s: float = 0.0              # contender start -> first record on the target
    copy_s: float = 0.0                 # first record -> every record
    cpu_s: float = 0.0                  # contender tree, copy window
    machine_load: float = 0.0           # cores busy on the whole machine during the copy window
    new_topic_s: list[float] = field(default_factory=list)
    idle_cores: float = 0.0             # contender tree CPU per second while only probes and heartbeats flow
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    planning_ms: list[int] = field(default_factory=list)
    topic_sync_ms: list[int] = field(default_factory=list)
    planned_partitions: int = 0
    boundary_ms: list[int] = field(default_factory=list)   # one epoch's last task -> the next one's first
    collect_ms: list[int] = field(default_factory=list)    # the last lane's epoch end -> its rows in the driver

    def to_json(self) -> dict:
        d = asdict(self)
        d["records_per_s"] = self.records / self.copy_s if self.copy_s else 0.0
        d["records_per_cpu_s"] = self.records / self.cpu_s if self.cpu_s else 0.0
        return d


def parse_points(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        t, _, p = part.strip().partition("x")
        if not (t.isdigit() and p.isdigit()) or int(t) < 1 or int(p) < 1:
            raise argparse.ArgumentTypeError(f"--points: {part!r} is not <topics>x<partitions per topic>")
        out.append((int(t), int(p)))
    return out


def planning_lines(log: Path, since: int = 0) -> list[tuple[int, int, int]]:
    """(planned ms, topic sync ms, partitions) of each epoch planned in the job's log after byte `since`."""
    try:
        text = log.read_bytes()[since:].decode(errors="replace")
    except OSError:
        return []
    return [(int(m[1]), int(m[2]), int(m[5])) for m in PLANNED.finditer(text)]


def boundary_lines(log: Path) -> list[tuple[int, int, int]]:
    """(ms between the epochs' tasks, summary rows, ms from the last lane's end to the rows in the driver) of each
    epoch in the job's log."""
    try:
        text = log.read_bytes().decode(errors="replace")
    except OSError:
        return []
    return [(int(m[1]), int(m[2]), int(m[3])) for m in BOUNDARY.finditer(text)]


class Prober(threading.Thread):
    """Writes a record into `topic` every 50 ms until stopped (the topic is created by the caller)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.topic = topic
        self.done = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.done.is_set():
            self.producer.produce(self.topic, value=b"probe", key=data.key_of(seq), headers=data.headers_of(seq))
            self.producer.poll(0)
            seq += 1
            self.done.wait(0.05)
        self.producer.flush(10)


def probe_new_topic(source: str, target: str, topic: str, timeout: float) -> float | None:
    """Seconds from creating `topic` on the source to its first record committed on the target."""
    admin = AdminClient({"bootstrap.servers": target, "log_level": 2})
    tp = TopicPartition(remote_name(topic), 0)
    t0 = time.monotonic()
    data.create_topics(source, [(topic, 1)])
    prober = Prober(source, topic)
    prober.start()
    try:
        while time.monotonic() - t0 < timeout:
            if data.end_offsets(admin, [tp], timeout=2.0).get((tp.topic, 0), 0) > 0:
                return time.monotonic() - t0
            time.sleep(0.1)
        return None
    finally:
        prober.done.set()
        prober.join(15)


def run_contender(env: Env, layout: data.Layout, source_scan: data.ScanResult, contender: Contender,
                  point: str, args: argparse.Namespace) -> ScaleRun:
    topics, parts = layout.topics_per_size, layout.partitions_per_topic
    run = ScaleRun(point, topics, topics * parts, contender.name, records=layout.total_records)
    target = env.new_target()
    rundir = env.work / "runs" / f"{contender.name}-{point}"
    rmtree(rundir)
    prefix = layout.prefix
    setup = MirrorSetup(env.source.bootstrap, target.bootstrap, re.escape(prefix) + ".*", args.parallelism, rundir)
    specs = {remote_name(t.name): t for t in layout.topics}
    rename = {t.name: remote_name(t.name) for t in layout.topics}
    expected = {(remote_name(t.name), p): (t.records + t.partitions - 1 - p) // t.partitions
                for t in layout.topics for p in range(t.partitions)}

    def scan():  # noqa: ANN202
        r = data.scan(target.bootstrap, specs, timeout=args.timeout)
        return r, data.compare(source_scan, r, rename, contender.exactly_once)

    mon = None
    try:
        with MachineSampler(interval=1.0) as ms:
            t_start = time.time()
            pid = contender.start(setup)
            mon = ProcessTreeMonitor([pid], interval=1.0).start()
            t_first, t_done, _res, problems = wait_mirrored(target.bootstrap, expected, contender, scan=scan,
                                                            timeout=args.timeout, settle=3.0, poll=1.0)
            run.problems += problems
            if t_first is not None and not problems:
                run.startup_s = round(t_first - t_start, 2)
                run.copy_s = round(max(t_done - t_first, 1e-3), 2)
                run.cpu_s = round(mon.cpu_at(t_done) - mon.cpu_at(t_first), 2)
                busy = [b for t, b in ms.busy if t_first <= t <= t_done]
                run.machine_load = round((busy[-1] - busy[0]) / run.copy_s, 2) if len(busy) > 1 else 0.0
                idle_t0, idle_cpu0 = time.time(), mon.sample().cpu
                for i in range(args.new_topics):
                    time.sleep(random.uniform(1.0, 6.0))  # at different phases of the 5-s topic refresh
                    took = probe_new_topic(env.source.bootstrap, target.bootstrap,
                                           f"{prefix}new-{contender.name}-{i}", args.new_topic_timeout)
                    if took is None:
                        run.problems.append(f"new topic {i}: not copying after {args.new_topic_timeout:.0f} s")
                    else:
                        run.new_topic_s.append(round(took, 2))
                run.idle_cores = round((mon.sample().cpu - idle_cpu0) / max(time.time() - idle_t0, 1e-3), 3)
            contender.check()
        mon.stop()
        peaks: dict[str, int] = {}
        for s in mon.samples:
            for kind, rss in s.rss_by_kind.items():
                peaks[kind] = max(peaks.get(kind, 0), rss)
        run.peak_rss_mb = {k: round(v / 2**20) for k, v in sorted(peaks.items())}
        if contender.family == "sparkmirror" and contender.log is not None:
            lines = planning_lines(contender.log)
            run.planning_ms = [p for p, _s, _n in lines]
            run.topic_sync_ms = [s for _p, s, _n in lines]
            run.planned_partitions = max((n for _p, _s, n in lines), default=0)
            bounds = boundary_lines(contender.log)
            run.boundary_ms = [b for b, _n, _c in bounds]
            run.collect_ms = [c for _b, _n, c in bounds]
        run.ok = not run.problems
    except BenchError as e:
        run.problems.append(str(e))
    finally:
        contender.stop()
        if mon is not None:
            mon.stop()
        env.drop_target(target, keep_logs=not run.ok)
    return run


def run_point(topics: int, parts: int, args: argparse.Namespace) -> list[ScaleRun]:
    point = f"{topics}x{parts}"
    env = Env(args.workdir / point, broker_heap=args.broker_heap)
    layout = data.Layout(records_per_size=topics * parts * args.records, partitions_per_topic=parts,
                         topics_per_size=topics, prefix=f"s{point}-", sizes=(("p", 100),))
    runs = []
    try:
        env.start_source()
        t0 = time.monotonic()
        data.preload(env.source.bootstrap, layout)
        print(f"[{point}] {topics} topics, {topics * parts} partitions, {layout.total_records} records preloaded in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        source_scan = data.scan(env.source.bootstrap, {t.name: t for t in layout.topics}, timeout=args.timeout)
        for name in args.contenders:
            run = run_contender(env, layout, source_scan, CONTENDERS[name](), point, args)
            print(f"[{point}] {name}: " + ("ok" if run.ok else f"FAILED {run.problems[:3]}") +
                  f"; copy {run.copy_s} s, new topic {run.new_topic_s} s, planning {run.planning_ms[-5:]} ms, "
                  f"memory {run.peak_rss_mb} MB", flush=True)
            runs.append(run)
    finally:
        env.stop()
    return runs


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.1f}" if xs else "—"


def render(runs: list[ScaleRun], meta: dict) -> str:
    out = ["# Scale: sparkmirror and MirrorMaker 2 from a few to 10,000 partitions", "",
           f"{meta['when']} · {meta['records']} records of 100 B a partition · {meta['parallelism']} lanes / tasks · "
           f"topic refresh every 5 s for both · machine: {meta['cpus']} CPUs", "",
           "| point | partitions | contender | ok | copy s | records/s | records / CPU s | machine load (cores) | "
           "new topic → copying s (median / max) | idle CPU (cores) | peak RSS MB | planning ms (median / max) | "
           "topic sync ms (median / max) | epoch boundary ms (median / max) | rows in the driver ms (median / max) |",
           "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in runs:
        j = r.to_json()
        rss = ", ".join(f"{k} {v:,.0f}" for k, v in r.peak_rss_mb.items())
        out.append(f"| {r.point} | {r.partitions:,} | {r.contender} | {'yes' if r.ok else 'NO'} | {r.copy_s:,.1f} | "
                   f"{j['records_per_s']:,.0f} | {j['records_per_cpu_s']:,.0f} | {r.machine_load:.2f} | "
                   f"{_med(r.new_topic_s)} / {max(r.new_topic_s, default=0):,.1f} | {r.idle_cores:.3f} | {rss} | "
                   f"{_med(r.planning_ms)} / {max(r.planning_ms, default=0):,} | "
                   f"{_med(r.topic_sync_ms)} / {max(r.topic_sync_ms, default=0):,} | "
                   f"{_med(r.boundary_ms)} / {max(r.boundary_ms, default=0):,} | "
                   f"{_med(r.collect_ms)} / {max(r.collect_ms, default=0):,} |")
    problems = [f"- {r.point} {r.contender}: {p}" for r in runs for p in r.problems]
    if problems:
        out += ["", "## Problems", *problems]
    return "\n".join(out) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=parse_points, default=parse_points("2x4,1000x1,1000x10"),
                   help="<topics>x<partitions per topic>, comma-separated; default 2x4,1000x1,1000x10")
    p.add_argument("--records", type=int, default=40, help="records preloaded per partition; default 40")
    p.add_argument("--contenders", type=lambda s: s.split(","), default=["sparkmirror-eos", "mm2"],
                   help=f"comma-separated, of {', '.join(CONTENDERS)}; default sparkmirror-eos,mm2")
    p.add_argument("--parallelism", type=int, default=2, help="sparkmirror lanes = MM2 tasks.max; default 2")
    p.add_argument("--new-topics", type=int, default=3, help="new topics probed per run; default 3")
    p.add_argument("--new-topic-timeout", type=float, default=120.0)
    p.add_argument("--timeout", type=float, default=900.0, help="per initial copy; default 900 s")
    p.add_argument("--broker-heap", default="2g")
    p.add_argument("--workdir", type=Path, default=HERE / "work" / "scale")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    unknown = [c for c in args.contenders if c not in CONTENDERS]
    if unknown:
        p.error(f"--contenders: unknown {unknown}; known: {', '.join(CONTENDERS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # a kill stops the contender and the clusters too (their `finally` blocks run), as for the throughput bench
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background
    rmtree(args.workdir)
    runs: list[ScaleRun] = []
    meta = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "records": args.records,
            "parallelism": args.parallelism, "cpus": os.cpu_count()}
    args.results.mkdir(parents=True, exist_ok=True)
    for topics, parts in args.points:
        try:
            runs += run_point(topics, parts, args)
        except Exception as e:  # noqa: BLE001 - the ground failed (not a contender): the other points still count
            print(f"[{topics}x{parts}] the point failed: {type(e).__name__}: {e}", flush=True)
            runs.append(ScaleRun(f"{topics}x{parts}", topics, topics * parts, "—",
                                 problems=[f"the point failed: {type(e).__name__}: {e}"]))
        # written after every point: a long run that fails late keeps what it measured
        (args.results / "scale.json").write_text(json.dumps({"meta": meta, "runs": [r.to_json() for r in runs]},
                                                            indent=1))
        (args.results / "scale.md").write_text(render(runs, meta))
    print(render(runs, meta))
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
