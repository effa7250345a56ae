"""`python -m bench.boundary`: what one epoch boundary costs sparkmirror, and Spark settings A/B on it.

The JVMs copy no records; they plan an epoch every `epochSeconds` and carry a few rows back. That planning is a
burst of driver CPU at each boundary (about 0.5 s of JVM CPU on a 2-core Xeon, the twenty-eighth session), taken
from the lanes and brokers on the same cores, and a long-running mirror pays it every epoch. This measures it
alone: the job runs a live but light mirror (a producer writes `--rate` records/s of 100 B over `--partitions`
partitions, so every lane has work at every epoch) with short epochs, and the CPU of each kind of process over a
window is divided by the epochs that ended in it. That figure holds the light copying too (the Python workers'
mostly); the JVM's share is the boundary's, since the JVMs copy nothing.

Each `--variant NAME=key=value[,key=value...]` is a set of Spark settings (`--conf`; a value cannot hold a comma)
run beside the job's defaults (`base`, always run); runs alternate base, variant, base, variant... (`--reps`), each a fresh job on
the same clusters, so drift on the machine falls on both. Prints a table and writes `--out` (JSON) if given.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.gitstate import commit
from bench.jobproc import start_job, stop_job
from bench.procmon import ProcessTreeMonitor
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import create_topic

EPOCH_LINE = re.compile(r"mirror \S+ epoch (\d+): ")


def flowgroup(source: str, target: str, topic: str, epoch_seconds: float, lanes: int, work: Path) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": "boundary", "resource": "bench/boundary",
        "clusters": [{"alias": "a", "bootstrapServers": source}, {"alias": "b", "bootstrapServers": target}],
        "mirrors": [{"name": "a-to-b", "source": "a", "target": "b", "topics": topic, "replicationFactor": 1}],
        "delivery": "exactly-once", "copy": "batches", "lanes": lanes, "epochSeconds": epoch_seconds,
        "checkpointDir": str(work / "checkpoint"),
    })


class Writer:
    """`rate` records/s of 100 B, round robin over the topic's partitions, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def _run(self) -> None:
        n, t0 = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while n < due:
                self.producer.produce(self.topic, value=b"x" * 100, partition=n % self.partitions)
                n += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)


def measure(cfg: FlowGroupConfig, work: Path, name: str, confs: dict[str, str], warm_epochs: int,
            window_epochs: int, timeout: float) -> dict[str, float]:
    """One job: wait out `warm_epochs` epochs, then CPU per kind of process over the next `window_epochs`."""
    log_path = work / f"{name}.log"
    log_path.unlink(missing_ok=True)
    proc = start_job(cfg, work, name, confs)
    mon = ProcessTreeMonitor([proc.pid], interval=0.2).start()
    seen = {"epochs": 0, "at": 0, "tail": ""}

    def ended() -> int:
        """Epoch lines so far, reading only what the log gained since the last call (the job has the cores)."""
        if log_path.exists():
            with open(log_path, "rb") as f:
                f.seek(seen["at"])
                raw = f.read()
            seen["at"] += len(raw)
            text = seen["tail"] + raw.decode(errors="replace")
            complete, _, seen["tail"] = text.rpartition("\n")
            seen["epochs"] += len(EPOCH_LINE.findall(complete))
        return seen["epochs"]

    def wait_for(n: int) -> float:
        deadline = time.monotonic() + timeout
        while ended() < n:
            if proc.poll() is not None:
                raise SystemExit(f"{name}: the job ended ({proc.returncode}); see {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: {n} epochs not ended in {timeout:.0f} s; see {log_path}")
            time.sleep(0.1)
        return time.time()

    try:
        t0 = wait_for(warm_epochs)
        t1 = wait_for(warm_epochs + window_epochs)
        time.sleep(2 * mon.interval)  # a sample past t1
    finally:
        mon.stop()
        stop_job(proc)
    # from the monitor's own samples: its thread is the only one that samples (no race on its tables)
    per = {k: round(v / window_epochs, 3) for k, v in mon.kinds_between(t0, t1).items()}
    per["seconds_per_epoch"] = round((t1 - t0) / window_epochs, 2)
    return per


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.boundary", description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=key=value[,key=value]")
    ap.add_argument("--epoch-seconds", type=float, default=5.0)
    ap.add_argument("--warm-epochs", type=int, default=4, help="epochs before the window (start-up, C1's compiles)")
    ap.add_argument("--window-epochs", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--lanes", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--work", type=Path, default=Path("bench/work/boundary"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    if min(args.reps, args.window_epochs, args.warm_epochs) < 1:
        ap.error("--reps, --warm-epochs and --window-epochs are at least 1")
    variants: dict[str, dict[str, str]] = {"base": {}}
    for v in args.variant:
        name, _, settings = v.partition("=")
        if not name or not settings:
            ap.error(f"--variant {v!r}: expected NAME=key=value[,key=value...]")
        if name in variants:
            ap.error(f"--variant {v!r}: {name!r} is taken (base is the job's defaults)")
        pairs = [s.partition("=") for s in settings.split(",")]
        if any(not k or not sep for k, sep, _ in pairs):
            ap.error(f"--variant {v!r}: each setting is key=value")
        variants[name] = {k: val for k, _, val in pairs}

    shutil.rmtree(args.work, ignore_errors=True)  # fresh clusters and checkpoints every time
    args.work.mkdir(parents=True)
    clusters: list[KafkaCluster] = []
    writer = None
    try:
        for n in ("a", "b"):
            clusters.append(KafkaCluster(f"boundary-{n}", args.work / n).start())
        source, target = (c.bootstrap for c in clusters)
        topic = create_topic(source, "boundary", args.partitions)
        writer = Writer(source, topic, args.partitions, args.rate)
        writer.thread.start()
        runs: dict[str, list[dict[str, float]]] = {n: [] for n in variants}
        for rep in range(args.reps):
            for name, confs in variants.items():
                work = args.work / f"{name}-{rep}"
                cfg = flowgroup(source, target, topic, args.epoch_seconds, args.lanes, work)
                got = measure(cfg, work, "job", confs, args.warm_epochs, args.window_epochs, args.timeout)
                runs[name].append(got)
                print(f"{name} rep {rep + 1}: " + ", ".join(f"{k} {v}" for k, v in sorted(got.items())), flush=True)
    finally:
        if writer is not None:
            writer.stop.set()
            writer.thread.join(60)
        for c in clusters:
            c.stop()

    kinds = sorted({k for rs in runs.values() for r in rs for k in r} - {"seconds_per_epoch"})
    print(f"\nCPU seconds per epoch (median of {args.reps}), epochSeconds {args.epoch_seconds}, "
          f"{args.rate} records/s over {args.partitions} partitions, {args.lanes} lanes")
    print("| variant | " + " | ".join(kinds) + " | seconds per epoch |")
    print("|---|" + "---:|" * (len(kinds) + 1))
    medians = {}
    for name, rs in runs.items():
        medians[name] = {k: round(statistics.median(r.get(k, 0.0) for r in rs), 3) for k in [*kinds, "seconds_per_epoch"]}
        print(f"| {name} | " + " | ".join(str(medians[name][k]) for k in [*kinds, "seconds_per_epoch"]) + " |")
    if args.out:
        args.out.write_text(json.dumps({"commit": commit(), "args": {k: str(v) for k, v in vars(args).items()},
                                        "variants": variants, "runs": runs, "medians": medians}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
