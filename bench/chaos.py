"""`python -m bench.chaos`: a fault campaign. Under a steady numbered load on a source of three brokers, the mirror
runs on a Spark standalone cluster to a target of three brokers (replication factor 3, min.insync.replicas 2)
while a schedule SIGKILLs the driver (restarted, as a supervisor would), a Python worker, an executor JVM, a source
broker and a target broker (each restarted after a pause), and takes each whole cluster away for longer than every
client timeout. Afterwards every record is counted per partition: missing, duplicated. Writes
bench/results/chaos.json and chaos.md (the latest run).

Per fault: `stall` is the longest time without target progress from the fault until the target grows again after
the fault was repaired (a broker or cluster restarted and answering; for the Spark faults: the driver launching a
task again); `recovery` is the time from the fault until that growth."""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import psutil

from sparkmirror_dev.env import start_all
from sparkmirror_dev.kafka import ReplicatedKafkaCluster
from sparkmirror_dev.procs import DevEnvError
from sparkmirror_dev.standalone import StandaloneCluster
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_audit, numbered_counts, unique_name
from sparkmirror.resource.flowgroup import FlowGroupConfig

from . import report
from .chaosground import Mirror, Progress, executors, python_workers, wait_until
from .chaosmodel import (CLIENT_TIMEOUTS_S, KINDS, OUTAGES, PARTS, ROTATION, TX_TIMEOUT_MS, Campaign, Fault,
                         listener_kinds)
from .chaosreport import render, summary
from .chaossecurity import SecuredGround

HERE = Path(__file__).resolve().parent


class Chaos:
    def __init__(self, camp: Campaign, workdir: Path, log: Callable[[str], None] = print) -> None:
        self.camp, self.workdir, self.say = camp, workdir, log
        self.rng = random.Random(11)
        self.secured = SecuredGround(camp.security, workdir) if camp.security != "none" else None
        self.source = ReplicatedKafkaCluster("chaos-src", workdir / "src",
                                             security=self.secured.security("source") if self.secured else None)
        self.target = ReplicatedKafkaCluster("chaos-tgt", workdir / "tgt",
                                             security=self.secured.security("target") if self.secured else None)
        self.spark = StandaloneCluster(workdir / "spark", workers=1, cores=2, memory="900m")
        self.mirror: Mirror | None = None
        self.producer: NumberedProducer | None = None
        self.progress: Progress | None = None
        self.remote = ""

    # --- the faults -------------------------------------------------------------------------------------------
    def _kill_driver(self, f: Fault) -> None:
        self.mirror.kill()
        mark = self.mirror.log_size()
        self.mirror.start()  # the supervisor's restart
        self._tasks_again(f, mark)

    def _tasks_again(self, f: Fault, mark: int) -> None:
        """Repaired once the (new) driver launches a task again: the orphaned executor of a killed driver may
        still commit for a while, a lost task is retried, a lost executor replaced."""
        wait_until(lambda: self.mirror.task_started_since(mark), 300)
        f.repaired = time.monotonic()

    def _kill_one(self, f: Fault, find: Callable[[], list[psutil.Process]], what: str) -> None:
        if not wait_until(lambda: bool(find()), 120):
            f.detail = f"no {what} found"
            return
        victim = self.rng.choice(find())
        f.detail = f"pid {victim.pid}"
        mark = self.mirror.log_size()
        victim.kill()
        self._tasks_again(f, mark)

    def _broker(self, cluster: ReplicatedKafkaCluster, f: Fault) -> None:
        i = self.rng.randrange(len(cluster.nodes))
        f.detail = f"node {i}"
        cluster.kill(i)
        time.sleep(self.camp.pause_s)
        self._restart(f, lambda timeout: cluster.start_node(i, timeout))
        f.repaired = time.monotonic()

    def _outage(self, cluster: ReplicatedKafkaCluster, f: Fault) -> None:
        cluster.kill_all()
        time.sleep(self.camp.outage_s)
        self._restart(f, lambda timeout: cluster.start(timeout))
        f.repaired = time.monotonic()

    def _rotate(self, f: Fault) -> None:
        f.detail = self.secured.rotate(self._clusters())
        f.repaired = time.monotonic()

    def _restart(self, f: Fault, start: Callable[[float], None]) -> None:
        """Bring the brokers back, however long the controller quorum takes to settle on a loaded machine (a
        restarted node once needed over 120 s while leadership moved among the others, and the campaign ended
        there): the campaign measures the mirror, so a slow broker is waited for and noted. A node that gives up
        while starting is started again, as its supervisor would: a KRaft broker exits when the quorum has not
        registered it within initial.broker.registration.timeout.ms (60 s), and that once ended the campaign at
        fault 64 of 102."""
        t0 = time.monotonic()
        deadline = t0 + 600.0
        exits = 0
        while True:
            try:
                start(max(deadline - time.monotonic(), 1.0))
                break
            except DevEnvError as e:
                exits += 1
                first = str(e).splitlines()[0].split("; last lines of")[0]
                if time.monotonic() > deadline - 5:
                    raise
                self.say(f"  {first}: starting it again")
                time.sleep(2.0)
        took = time.monotonic() - t0
        if took > 60 or exits:
            again = f", started again {exits}x" if exits else ""
            f.detail = f"{f.detail} (brokers ready after {took:.0f} s{again})".strip()
            self.say(f"  brokers ready after {took:.0f} s{again}")

    def inject(self, kind: str) -> Fault:
        f = Fault(kind, time.monotonic())
        act = {"driver": self._kill_driver, "python-worker": lambda x: self._kill_one(x, python_workers, "Python worker"),
               "executor": lambda x: self._kill_one(x, executors, "executor"), "source-broker": lambda x: self._broker(self.source, x),
               "target-broker": lambda x: self._broker(self.target, x),
               "source-outage": lambda x: self._outage(self.source, x),
               "target-outage": lambda x: self._outage(self.target, x), ROTATION: self._rotate}[kind]
        act(f)
        if not f.repaired:
            f.repaired = f.at
        # recovered: the target grew after the repair (the supervisor restarts a mirror that ended)
        ok = wait_until(lambda: self.progress.first_growth_after(f.repaired) > 0 or not self.mirror.alive(), 300, 1.0)
        if not self.mirror.alive():
            self.camp.mirror_ended.append(f"after {kind}: rc {self.mirror.proc.poll()}: "
                                          + self.mirror.tail(600).replace("\n", " | "))
            self.mirror.start()
            wait_until(lambda: self.progress.first_growth_after(time.monotonic()) > 0, 300, 1.0)
        f.resumed = self.progress.first_growth_after(f.repaired) if ok else 0.0
        f.stall_s = self.progress.stall(f.at, f.resumed or time.monotonic())
        self.say(f"  {kind:14} {f.detail:12} recovery {f.recovery_s:6.1f} s, longest stall {f.stall_s:6.1f} s")
        return f

    # --- the campaign -----------------------------------------------------------------------------------------
    def schedule(self) -> list[str]:
        """Rounds of one fault of each kind (in a shuffled order); the outages and rotations in the first rounds."""
        out = []
        for r in range(max(self.camp.kills, self.camp.outages, self.camp.rotations)):
            if r < self.camp.kills:
                kinds = list(self.camp.kinds)
                self.rng.shuffle(kinds)
                out += kinds
            if r < self.camp.outages:
                out += list(OUTAGES)
            if r < self.camp.rotations:
                out.append(ROTATION)
        return out

    def run(self) -> Campaign:
        camp, t_start = self.camp, time.monotonic()
        self.say(f"starting two clusters of 3 brokers and a Spark standalone cluster under {self.workdir}")
        start_all([self.source, self.target])
        if self.secured:
            self.secured.start(self._clusters())
        self.spark.start()
        src = create_topic(self.source.bootstrap, unique_name("chaos"), PARTS, replication_factor=3)
        self.remote = f"src.{src}"
        cfg = FlowGroupConfig.model_validate({
            "name": unique_name("chaos"), "clusters": [self._entry("src", "source"), self._entry("tgt", "target")],
            "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": src,
                         "emitCheckpoints": False}],
            "lanes": 2, "epochSeconds": 10, "commitIntervalMs": 100, "transactionTimeoutMs": TX_TIMEOUT_MS,
            "progressTopic": unique_name("progress"), "copy": camp.copy})
        # the load outlasts any outage (its records wait in the producer, in order, and go when the source is back):
        # librdkafka's default message.timeout.ms (300 s) and queue (100,000 messages) gave up in a 10-minute one
        self.producer = NumberedProducer(self.source.bootstrap, src, rate=camp.rate, partitions=PARTS,
                                         config={"message.timeout.ms": 0, "queue.buffering.max.messages": 10_000_000})
        self.producer.start()
        self.progress = Progress(self.target.bootstrap, self.remote, PARTS)
        self.progress.start()
        self.mirror = Mirror(cfg, self.workdir, self.spark)
        self.mirror.start()
        if not wait_until(lambda: bool(self.progress.grew) or not self.mirror.alive(), 600):
            raise RuntimeError(f"the mirror copied nothing in 600 s: {self.mirror.tail()}")
        if not self.mirror.alive():
            raise RuntimeError(f"the mirror ended before copying: {self.mirror.tail()}")
        plan = self.schedule()
        self.say(f"copying; {len(plan)} faults follow")
        for n, kind in enumerate(plan, 1):
            time.sleep(self.rng.uniform(0.5, 1.5) * camp.pause_s)
            self.say(f"[{n}/{len(plan)}]")
            camp.faults.append(self.inject(kind))
        camp.sent = self.producer.stop()
        self.say(f"load stopped at {camp.sent} sequences a partition; catching up")
        t0 = time.monotonic()
        want = camp.sent * PARTS
        wait_until(lambda: numbered_counts(self.target.bootstrap, self.remote, PARTS, camp.sent)[0] == 0
              or not self.mirror.alive(), 600, 3.0)
        camp.catch_up_s = time.monotonic() - t0
        time.sleep(5)  # a duplicate would show up after the count was reached
        camp.missing, camp.duplicated, camp.reordered = numbered_audit(self.target.bootstrap, self.remote, PARTS,
                                                                       camp.sent)
        camp.records = want - camp.missing + camp.duplicated
        self.say(f"counted: missing {camp.missing}, duplicated {camp.duplicated}, reordered {camp.reordered}; "
                 f"again in {camp.recount_after_s:.0f} s")
        time.sleep(camp.recount_after_s)  # the mirror still runs: what it writes late shows here
        camp.recount = dict(zip(("missing", "duplicated", "reordered"),
                                numbered_audit(self.target.bootstrap, self.remote, PARTS, camp.sent)))
        rc = self.mirror.stop()
        if rc != 0:
            camp.mirror_ended.append(f"clean stop returned {rc}: " + self.mirror.tail(600).replace("\n", " | "))
        camp.wall_s = time.monotonic() - t_start
        return camp

    def _clusters(self) -> dict[str, ReplicatedKafkaCluster]:
        return {"source": self.source, "target": self.target}

    def _entry(self, alias: str, role: str) -> dict:
        cluster = self._clusters()[role]
        return self.secured.entry(alias, cluster, role) if self.secured else {"alias": alias,
                                                                              "bootstrapServers": cluster.bootstrap}

    def close(self) -> None:
        for part in (self.progress, self.mirror):
            if part is not None:
                part.stop() if isinstance(part, Progress) else part.kill()
        if self.producer is not None and self.producer.is_alive():
            self.producer._stop_evt.set()
        self.spark.stop()
        for c in (self.source, self.target):
            c.kill_all()


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs of each kind; default %(default)s")
    p.add_argument("--outages", type=int, default=1, help="full outages of each cluster; default %(default)s")
    p.add_argument("--outage-seconds", type=float, default=75.0,
                   help="length of each outage, above every client timeout (60 s); default %(default)s")
    p.add_argument("--pause", type=float, default=8.0,
                   help="seconds between faults, and a killed broker's downtime; default %(default)s")
    p.add_argument("--rate", type=float, default=100.0, help="sequences/s a partition; default %(default)s")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="comma-separated kinds of SIGKILL to inject; default %(default)s")
    p.add_argument("--copy", choices=("records", "batches"), default="records",
                   help="the lanes' copy path; results of `batches` go to chaos-batches.*; default %(default)s")
    p.add_argument("--security", default="none",
                   help="the listener the mirror uses on both clusters, or SOURCE:TARGET (authorizer on, the mirror's "
                        "principal granted what it needs): none = PLAINTEXT, sasl_ssl = SCRAM-SHA-512 over TLS, mtls = "
                        "client certificates, sasl_ssl:mtls = the source with SCRAM, the target with certificates "
                        "(both kinds in one campaign); results go to chaos[-batches]-<security>.* (':' as '-to-'); "
                        "default %(default)s")
    p.add_argument("--rotations", type=int, default=None,
                   help="rotations of the mirror's credentials while it runs (secured only); default 1 when secured")
    p.add_argument("--recount-after", type=float, default=60.0,
                   help="seconds after catch-up before the records are counted again; default %(default)s")
    p.add_argument("--workdir", type=Path, default=None, help="kept after the run (default: a temporary one)")
    p.add_argument("--results", type=Path, default=HERE / "results",
                   help="where chaos.json and chaos.md go; default %(default)s")
    return p.parse_args(argv)


def run_campaign(kills: int, outages: int, outage_s: float, pause_s: float, rate: float, workdir: Path,
                 log: Callable[[str], None] = print, kinds: tuple[str, ...] = KINDS,
                 copy: str = "records", security: str = "none", rotations: int = 0,
                 recount_after_s: float = 60.0) -> tuple[Campaign, list[dict]]:
    chaos = Chaos(Campaign(kills, outages, outage_s, pause_s, rate, kinds, copy, security, rotations, recount_after_s),
                  workdir, log)
    try:
        camp = chaos.run()
    finally:
        chaos.close()
    return camp, summary(camp)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the clusters on SIGTERM too
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparkmirror-chaos-"))
    kinds = tuple(k for k in args.kinds.split(",") if k)
    try:
        listener_kinds(args.security)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if unknown := [k for k in kinds if k not in KINDS]:
        print(f"--kinds: unknown {', '.join(unknown)} (known: {', '.join(KINDS)})", file=sys.stderr)
        return 2
    camp, rows = run_campaign(args.kills, args.outages, args.outage_seconds, args.pause, args.rate, workdir,
                              lambda s: print(s, flush=True), kinds, args.copy, args.security,
                              args.rotations if args.rotations is not None else int(args.security != "none"),
                              args.recount_after)
    machine: dict = {"cores": os.cpu_count()}
    try:
        machine.update(report.machine())
    except Exception:  # noqa: BLE001 - descriptive only
        pass
    machine["loadavg"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    text = render(camp, rows, machine)
    print("\n" + text)
    args.results.mkdir(parents=True, exist_ok=True)
    doc = {"campaign": {k: v for k, v in asdict(camp).items() if k != "faults"}, "summary": rows,
           "faults": [{**asdict(f), "recovery_s": f.recovery_s if f.resumed else None} for f in camp.faults], "machine": machine,
           "client_timeouts_s": CLIENT_TIMEOUTS_S}
    # one latest run per path and listener
    stem = "-".join(["chaos", *([args.copy] if args.copy != "records" else []),
                     *([args.security.replace(":", "-to-")] if args.security != "none" else [])])
    (args.results / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
    (args.results / f"{stem}.md").write_text(text)
    clean = (camp.missing == camp.duplicated == camp.reordered == 0 and not any(camp.recount.values())
             and not camp.mirror_ended)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
