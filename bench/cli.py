"""`python -m bench`: preload, then per repetition and record size alternate the contenders; check, report."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from . import data, report
from .ceiling import run_ceiling
from .contenders import Contender, all_contenders
from .harness import run_mirror_throughput
from .latency import run_mirror_latency
from .runenv import Env

HERE = Path(__file__).resolve().parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("-n", "--records", type=int, default=4_000_000,
                   help="records of 1 KiB (plain and lz4); default %(default)s: copy windows of 20-58 s at "
                        "1 KiB on a quiet 2-core machine; shorter ones measure noise")
    p.add_argument("--records-100b", type=int, default=20_000_000,
                   help="records of 100 B; default %(default)s: the batch path copies about 900,000 a second on a "
                        "quiet machine (16,000,000 took 17-18 s at 9636f00), so its copy window is over 20 s only "
                        "from about 18,000,000")
    p.add_argument("--reps", type=int, default=2, help="repetitions of each contender; default %(default)s")
    p.add_argument("--sizes", default="b1k,b100,b1k-lz4",
                   help="comma list of the record sizes mirrored, each in its own runs: b1k (1 KiB), b100 (100 B), "
                        "b1k-lz4 (1 KiB on topics whose batches the preload compressed with lz4); "
                        "all are preloaded either way; default %(default)s")
    p.add_argument("--sizes-of", action="append", default=[], metavar="CONTENDER=SIZES",
                   help="limit one contender's throughput runs to some of --sizes, e.g. ceiling=b1k or "
                        "mm2=b1k+b100 (repeatable); the others run every size")
    p.add_argument("--parallelism", type=int, default=min(4, os.cpu_count() or 2),
                   help="MM2 tasks.max and sparkmirror lanes; default min(4, cores) = %(default)s")
    p.add_argument("--partitions-per-topic", type=int, default=4)
    p.add_argument("--topics-per-size", type=int, default=2)
    p.add_argument("--contenders", default="all",
                   help="comma list of sparkmirror-eos-batches (exactly-once on the batch path), "
                        "sparkmirror-alo-batches, sparkmirror-eos, sparkmirror-alo, mm2, mm2-eos, ceiling, pipe (a "
                        "bare Python+librdkafka reference); 'all' = the first seven that are available")
    p.add_argument("--latency-seconds", type=float, default=95.0,
                   help="measured window; spans three of sparkmirror's 30-s epoch boundaries; 0 skips")
    p.add_argument("--latency-contenders", default="",
                   help="comma list of the mirror contenders whose latency is measured; default all of them")
    p.add_argument("--latency-rate", type=int, default=5000)
    p.add_argument("--latency-warmup", type=float, default=30.0,
                   help="seconds at the steady rate before the window; each latency run has a fresh target broker, "
                        "and its first 10-15 s at 5,000 records/s on 2 cores (its JIT, the mirror's first "
                        "transactions) put 0.2-1.7-s stalls into a window that began after 10 s; "
                        "default %(default)s")
    p.add_argument("--latency-partitions", type=int, default=8)
    p.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds the target's end offsets must stay put before the final check")
    p.add_argument("--broker-heap", default="1g")
    p.add_argument("--commit-interval-ms", type=int, default=None,
                   help="sparkmirror's commitIntervalMs (time between a lane's transactions); default: the "
                        "resource's default")
    p.add_argument("--linger-ms", type=int, default=None,
                   help="sparkmirror's lingerMs (how long a lane's producer gathers a batch); default: the "
                        "resource's default for the delivery mode")
    p.add_argument("--mm2-stock-clients", action="store_true",
                   help="run MM2's producer with Kafka's default batching (batch.size 16 KiB) instead of the "
                        "1 MB / linger 5 ms sparkmirror's lane producers use")
    p.add_argument("--work", type=Path, default=HERE / "work")
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--note", default="", help="free text written into the report")
    p.add_argument("--profile", action="store_true",
                   help="after the measured runs, one extra run of each sparkmirror contender under py-spy "
                        "(not in the medians); its summary goes into the report")
    return p.parse_args(argv)


def pick(spec: str) -> tuple[list[Contender], bool]:
    from .contenders import RdkafkaPipe

    available = {c.name: c for c in [*all_contenders(include_sparkmirror=True), RdkafkaPipe()]}
    if spec == "all":
        mirrors = all_contenders()
        return mirrors, True
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in available and n != "ceiling"]
    if unknown:
        raise SystemExit(f"unknown contender(s) {unknown}; known: {[*available, 'ceiling']}")
    return [available[n] for n in names if n != "ceiling"], "ceiling" in names


def pick_sizes(layout: data.Layout, spec: str) -> list[data.Layout]:
    """One layout per record size asked for: a throughput run mirrors one size, so its figures are that size's."""
    labels = [s.strip() for s in spec.split(",") if s.strip()]
    if not labels:
        raise SystemExit("--sizes: no record size given")
    try:
        return [layout.only(label) for label in dict.fromkeys(labels)]
    except ValueError as e:
        raise SystemExit(f"--sizes: {e}") from None


def sizes_by_contender(specs: list[str], names: list[str], sizes: list[data.Layout]) -> dict[str, set[str]]:
    """--sizes-of: contender name -> the size labels it runs (every size of --sizes for a contender not named)."""
    labels = [s.label for s in sizes]
    out = {n: set(labels) for n in names}
    for spec in specs:
        name, _, wanted = spec.partition("=")
        picked = {w.strip() for w in wanted.split("+") if w.strip()}
        if name not in out or not picked or not picked <= set(labels):
            raise SystemExit(f"--sizes-of {spec!r}: needs CONTENDER=SIZE[+SIZE] with a contender of "
                             f"--contenders {names} and sizes of --sizes {labels}")
        out[name] = picked
    return out


def _terminate(signum, _frame):  # noqa: ANN001
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    mirrors, with_ceiling = pick(args.contenders)
    from .contenders import MirrorMaker2, SparkMirror

    MirrorMaker2.stock_clients = args.mm2_stock_clients
    SparkMirror.commit_interval_ms = args.commit_interval_ms
    SparkMirror.linger_ms = args.linger_ms
    signal.signal(signal.SIGTERM, _terminate)
    layout = data.Layout(args.records, args.partitions_per_topic, args.topics_per_size,
                         records_by_label=(("b100", args.records_100b),))
    sizes = pick_sizes(layout, args.sizes)
    runs_sizes = sizes_by_contender(args.sizes_of, [c.name for c in mirrors] + (["ceiling"] if with_ceiling else []),
                                    sizes)
    args.work.mkdir(parents=True, exist_ok=True)
    work = args.work / time.strftime("run-%Y%m%d-%H%M%S", time.gmtime())
    env = Env(work, broker_heap=args.broker_heap)
    runs: list[dict] = []
    result: dict = {}
    load_start = [round(x, 2) for x in os.getloadavg()]
    say = lambda *a: print(time.strftime("%H:%M:%S"), *a, flush=True)  # noqa: E731
    say(f"contenders: {[c.name for c in mirrors] + (['ceiling'] if with_ceiling else [])}; "
        f"{layout.total_records:,} records preloaded; sizes mirrored {[s.size_name for s in sizes]}; "
        f"{args.reps} reps; work dir {work}")

    def record(r) -> None:  # noqa: ANN001
        d = r.to_json()
        runs.append(d)
        state = "ok" if r.ok else "FAILED: " + "; ".join(p.splitlines()[0] for p in r.problems[:3])
        if r.kind == "latency":
            say(f"  {r.contender} latency #{r.rep}: p50 {r.latency_ms.get('p50')} p99 {r.latency_ms.get('p99')} "
                f"max {r.latency_ms.get('max')} ms, start-up {r.startup_s:.1f}s, {state}")
        else:
            say(f"  {r.contender} {r.size} #{r.rep}: {d['records_per_s']:,.0f} rec/s, {d['mib_per_s']:.1f} MiB/s, "
                f"copy {r.copy_s:.1f}s, start-up {r.startup_s:.1f}s, CPU {r.cpu_s:.1f}s, "
                f"RSS {r.peak_rss / 2**20:.0f} MiB, other procs {r.foreign_cpu_s:.1f} CPU s, {state}")
        (work / "runs.json").write_text(json.dumps(runs, indent=2, default=str))

    source_batches: dict = {}
    try:
        env.start_source()
        say(f"source cluster {env.source.bootstrap}; preloading ...")
        secs = data.preload(env.source.bootstrap, layout)
        say(f"  preloaded in {secs:.1f}s; fingerprinting the source ...")
        source_scan = data.scan(env.source.bootstrap, {t.name: t for t in layout.topics})
        if source_scan.total != layout.total_records or source_scan.dups or source_scan.misplaced:
            raise SystemExit(f"preload check failed: {source_scan.total} distinct records of "
                             f"{layout.total_records}, {source_scan.dups} dups")
        say(f"  source holds {source_scan.total:,} records ({source_scan.seconds:.1f}s scan)")
        source_batches = {s.size_name: data.source_batch_sizes(env.source.bootstrap, s.topics[0].name)
                          for s in sizes}
        say(f"  source batches (one partition of each size): {source_batches}")
        order: list = [*mirrors, *(["ceiling"] if with_ceiling else [])]
        for rep in range(args.reps):
            k = rep % len(order) if order else 0
            for size in sizes:
                for c in order[k:] + order[:k]:
                    if size.label not in runs_sizes[c if c == "ceiling" else c.name]:
                        continue
                    if c == "ceiling":
                        say(f"ceiling {size.size_name} #{rep} ...")
                        record(run_ceiling(env, size, rep, args.timeout))
                    else:
                        say(f"{c.name} {size.size_name} #{rep} ...")
                        record(run_mirror_throughput(env, c, size, source_scan, rep, args.parallelism,
                                                     args.timeout, args.settle))
        if args.profile:
            profiled = next((s for s in sizes if s.label == "b1k"), sizes[0])  # the size the goal is judged on
            for c in mirrors:
                if c.family == "sparkmirror":
                    say(f"{c.name} {profiled.size_name} under py-spy ...")
                    record(run_mirror_throughput(env, c, profiled, source_scan, 0, args.parallelism,
                                                 args.timeout, args.settle, profile=True))
        if args.latency_contenders:
            wanted = {s.strip() for s in args.latency_contenders.split(",")}
            mirrors = [c for c in mirrors if c.name in wanted]
        if args.latency_seconds > 0:
            for rep in range(args.reps):
                k = rep % len(mirrors) if mirrors else 0
                for c in mirrors[k:] + mirrors[:k]:
                    say(f"{c.name} latency #{rep} ...")
                    record(run_mirror_latency(env, c, rep, args.parallelism, args.latency_rate,
                                              args.latency_seconds, args.latency_warmup, args.latency_partitions,
                                              args.timeout, args.settle))
    finally:
        env.stop()
        if runs:
            summary = report.summarize(runs)
            result = {
                "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": " ".join([Path(sys.executable).name, "-m", "bench", *(argv if argv is not None else sys.argv[1:])]),
                "config": {"records_per_size": args.records, "records_100b": args.records_100b, "total_records": layout.total_records,
                           "source_batches": source_batches, "preload_producer": "batch.size=16384, linger.ms=5",
                           "payload_mib": layout.payload_bytes / 2**20, "topics": len(layout.topics),
                           "sizes": {s.size_name: {"label": s.label, "records": s.total_records,
                                                   "payload_mib": s.payload_bytes / 2**20, "topics": len(s.topics)}
                                     for s in sizes},
                           "partitions_per_topic": args.partitions_per_topic, "parallelism": args.parallelism,
                           "reps": args.reps, "latency_rate": args.latency_rate,
                           "latency_seconds": args.latency_seconds, "latency_warmup": args.latency_warmup,
                           "latency_partitions": args.latency_partitions,
                           "mm2_producer": "Kafka defaults" if args.mm2_stock_clients else
                           "batch.size=1000000, linger.ms=5 (as sparkmirror's lane producers)",
                           "sparkmirror_commit_interval_ms": args.commit_interval_ms or "the resource's default",
                           "sparkmirror_linger_ms": "the resource's default" if args.linger_ms is None else
                           args.linger_ms},
                "machine": report.machine(),
                "load_start": load_start,
                "load_end": [round(x, 2) for x in os.getloadavg()],
                "note": args.note,
                "summary": summary,
                "ratios": {size: report.ratios(by_contender) for size, by_contender in summary.items()},
                "runs": runs,
            }
            md, js = report.write(result, args.results)
            print()
            print(report.markdown(result))
            print(f"written {md} and {js}", flush=True)
    failed = [r for r in runs if not r["ok"]]
    return 1 if failed else 0
