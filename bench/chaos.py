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
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
from confluent_kafka import Consumer, TopicPartition

from sparkmirror_dev.env import start_all
from sparkmirror_dev.kafka import ReplicatedKafkaCluster
from sparkmirror_dev.procs import DevEnvError
from sparkmirror_dev.standalone import SPARK_HOME, StandaloneCluster
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_counts, unique_name
from sparkmirror.resource.flowgroup import FlowGroupConfig

from . import report

HERE = Path(__file__).resolve().parent
JOB = HERE.parent / "spark-app" / "sparkmirror" / "job.py"
PARTS = 3
KINDS = ("driver", "python-worker", "executor", "source-broker", "target-broker")
OUTAGES = ("source-outage", "target-outage")
TX_TIMEOUT_MS = 15000  # lanes' transaction.timeout.ms; message.timeout.ms follows it (copying/start.py)
# every client timeout of the mirror an outage must outlast: lanes' transaction and message timeouts, the 30 s
# offset reads, the 60 s init_transactions and librdkafka's 60 s socket.timeout.ms, 45 s session.timeout.ms
CLIENT_TIMEOUTS_S = {"transaction.timeout.ms": TX_TIMEOUT_MS / 1000, "message.timeout.ms": TX_TIMEOUT_MS / 1000,
                     "offset reads": 30, "init_transactions": 60, "socket.timeout.ms": 60, "session.timeout.ms": 45}


@dataclass
class Fault:
    kind: str
    at: float                # monotonic time of the kill
    repaired: float = 0.0    # when the killed part was back (restarted broker/cluster/driver; = at otherwise)
    resumed: float = 0.0     # first target growth after `repaired`; 0 = never within the wait
    stall_s: float = 0.0
    detail: str = ""

    @property
    def recovery_s(self) -> float:
        return self.resumed - self.at if self.resumed else float("nan")


@dataclass
class Campaign:
    kills: int
    outages: int
    outage_s: float
    pause_s: float
    rate: float
    kinds: tuple[str, ...] = KINDS  # which kills each round makes
    copy: str = "records"    # the lanes' copy path (records | batches)
    faults: list[Fault] = field(default_factory=list)
    sent: int = 0
    records: int = 0
    missing: int = -1
    duplicated: int = -1
    mirror_ended: list[str] = field(default_factory=list)   # unexpected ends of the job (restarted)
    catch_up_s: float = 0.0
    wall_s: float = 0.0


class Progress(threading.Thread):
    """Samples the remote topic's end offsets (sum over partitions) every `interval` s: when the target grew."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.interval = bootstrap, topic, interval
        self.grew: list[tuple[float, int]] = []   # (monotonic time, total) whenever the total grew
        self._stop_evt = threading.Event()

    def run(self) -> None:
        """Each partition on its own: one partition whose leader just died must not hide the others' growth; a
        failed read drops the consumer, so the next one starts from fresh metadata (the new leaders)."""
        last: dict[int, int] = {}
        c = None
        while not self._stop_evt.wait(self.interval):
            grew = False
            for p in range(PARTS):
                try:
                    if c is None:
                        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-progress",
                                      "socket.timeout.ms": 5000})
                    hi = c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=3)[1]
                except Exception:  # noqa: BLE001 - leader or cluster away, topic not there yet: no progress here
                    if c is not None:
                        c.close()
                    c = None
                    continue
                if p in last and hi > last[p]:
                    grew = True
                last[p] = max(hi, last.get(p, -1))
            if grew:
                self.grew.append((time.monotonic(), sum(last.values())))
        if c is not None:
            c.close()

    def first_growth_after(self, t: float) -> float:
        return next((g for g, _ in self.grew if g > t), 0.0)

    def stall(self, t0: float, t1: float) -> float:
        """Longest time without growth in [t0, t1]."""
        marks = [t0, *(g for g, _ in self.grew if t0 < g < t1), t1]
        return max(b - a for a, b in zip(marks, marks[1:]))

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(10)


class Mirror:
    """The job submitted to the standalone cluster with spark-submit (client mode), in its own process group."""

    def __init__(self, config: FlowGroupConfig, workdir: Path, spark: StandaloneCluster) -> None:
        self.config_path = workdir / "flowgroup.yaml"
        self.config_path.write_text(config.to_yaml())
        self.log_path = workdir / "job.log"
        self.cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", spark.url, "--deploy-mode", "client",
                    "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
                    "--conf", f"spark.executor.cores={spark.cores}", "--conf", f"spark.cores.max={spark.cores}",
                    "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
                    "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.enabled=false",
                    str(JOB), "--config", str(self.config_path), "--checkpoint", str(workdir / "checkpoint")]
        self.env = spark.env
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver: spark-submit's JVM and the Python driver (one process group)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(60)

    def stop(self, timeout: float = 120) -> int | None:
        """SIGTERM to the Python driver (a clean stop), then SIGKILL whatever is left."""
        if not self.alive():
            return self.proc.poll() if self.proc else None
        driver = [p for p in psutil.Process(self.proc.pid).children(recursive=True) if _cmd(p).find(str(JOB)) >= 0]
        for p in driver:
            p.terminate()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.kill()
        return rc

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def task_started_since(self, offset: int) -> bool:
        """Whether the driver logged a task launch after byte `offset` of its log."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return b"Starting task" in f.read()

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def executors() -> list[psutil.Process]:
    return [p for p in psutil.process_iter() if "CoarseGrainedExecutorBackend" in _cmd(p)]


def python_workers() -> list[psutil.Process]:
    """Python workers forked by pyspark.daemon under the executors (the ones that run lane tasks)."""
    out = []
    for ex in executors():
        try:
            for p in ex.children(recursive=True):
                parent = p.parent()
                if "pyspark.daemon" in _cmd(p) and parent is not None and "pyspark.daemon" in _cmd(parent):
                    out.append(p)
        except psutil.Error:
            pass
    return out


def _wait(pred: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return False


class Chaos:
    def __init__(self, camp: Campaign, workdir: Path, log: Callable[[str], None] = print) -> None:
        self.camp, self.workdir, self.say = camp, workdir, log
        self.rng = random.Random(11)
        self.source = ReplicatedKafkaCluster("chaos-src", workdir / "src")
        self.target = ReplicatedKafkaCluster("chaos-tgt", workdir / "tgt")
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
        _wait(lambda: self.mirror.task_started_since(mark), 300)
        f.repaired = time.monotonic()

    def _kill_one(self, f: Fault, find: Callable[[], list[psutil.Process]], what: str) -> None:
        if not _wait(lambda: bool(find()), 120):
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
               "target-outage": lambda x: self._outage(self.target, x)}[kind]
        act(f)
        if not f.repaired:
            f.repaired = f.at
        # recovered: the target grew after the repair (the supervisor restarts a mirror that ended)
        ok = _wait(lambda: self.progress.first_growth_after(f.repaired) > 0 or not self.mirror.alive(), 300, 1.0)
        if not self.mirror.alive():
            self.camp.mirror_ended.append(f"after {kind}: rc {self.mirror.proc.poll()}: "
                                          + self.mirror.tail(600).replace("\n", " | "))
            self.mirror.start()
            _wait(lambda: self.progress.first_growth_after(time.monotonic()) > 0, 300, 1.0)
        f.resumed = self.progress.first_growth_after(f.repaired) if ok else 0.0
        f.stall_s = self.progress.stall(f.at, f.resumed or time.monotonic())
        self.say(f"  {kind:14} {f.detail:12} recovery {f.recovery_s:6.1f} s, longest stall {f.stall_s:6.1f} s")
        return f

    # --- the campaign -----------------------------------------------------------------------------------------
    def schedule(self) -> list[str]:
        """Rounds of one fault of each kind (in a shuffled order); the outages in the first rounds."""
        out = []
        for r in range(self.camp.kills):
            kinds = list(self.camp.kinds)
            self.rng.shuffle(kinds)
            out += kinds
            if r < self.camp.outages:
                out += list(OUTAGES)
        for r in range(self.camp.kills, self.camp.outages):
            out += list(OUTAGES)
        return out

    def run(self) -> Campaign:
        camp, t_start = self.camp, time.monotonic()
        self.say(f"starting two clusters of 3 brokers and a Spark standalone cluster under {self.workdir}")
        start_all([self.source, self.target])
        self.spark.start()
        src = create_topic(self.source.bootstrap, unique_name("chaos"), PARTS, replication_factor=3)
        self.remote = f"src.{src}"
        cfg = FlowGroupConfig.model_validate({
            "name": unique_name("chaos"), "clusters": [{"alias": "src", "bootstrapServers": self.source.bootstrap},
                                                       {"alias": "tgt", "bootstrapServers": self.target.bootstrap}],
            "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": src,
                         "emitCheckpoints": False}],
            "lanes": 2, "epochSeconds": 10, "commitIntervalMs": 100, "transactionTimeoutMs": TX_TIMEOUT_MS,
            "progressTopic": unique_name("progress"), "copy": camp.copy})
        self.producer = NumberedProducer(self.source.bootstrap, src, rate=camp.rate, partitions=PARTS)
        self.producer.start()
        self.progress = Progress(self.target.bootstrap, self.remote)
        self.progress.start()
        self.mirror = Mirror(cfg, self.workdir, self.spark)
        self.mirror.start()
        if not _wait(lambda: bool(self.progress.grew) or not self.mirror.alive(), 600):
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
        _wait(lambda: numbered_counts(self.target.bootstrap, self.remote, PARTS, camp.sent)[0] == 0
              or not self.mirror.alive(), 600, 3.0)
        camp.catch_up_s = time.monotonic() - t0
        time.sleep(5)  # a duplicate would show up after the count was reached
        camp.missing, camp.duplicated = numbered_counts(self.target.bootstrap, self.remote, PARTS, camp.sent)
        camp.records = want - camp.missing + camp.duplicated
        rc = self.mirror.stop()
        if rc != 0:
            camp.mirror_ended.append(f"clean stop returned {rc}: " + self.mirror.tail(600).replace("\n", " | "))
        camp.wall_s = time.monotonic() - t_start
        return camp

    def close(self) -> None:
        for part in (self.progress, self.mirror):
            if part is not None:
                part.stop() if isinstance(part, Progress) else part.kill()
        if self.producer is not None and self.producer.is_alive():
            self.producer._stop_evt.set()
        self.spark.stop()
        for c in (self.source, self.target):
            c.kill_all()


def summary(camp: Campaign) -> list[dict]:
    rows = []
    for kind in (*KINDS, *OUTAGES):
        fs = [f for f in camp.faults if f.kind == kind]
        if not fs:
            continue
        rec = [f.recovery_s for f in fs if f.resumed]
        rows.append({"fault": kind, "count": len(fs), "recovered": len(rec),
                     "longest_stall_s": round(max(f.stall_s for f in fs), 1),
                     "recovery_median_s": round(sorted(rec)[len(rec) // 2], 1) if rec else None,
                     "recovery_max_s": round(max(rec), 1) if rec else None})
    return rows


def render(camp: Campaign, rows: list[dict], machine: dict) -> str:
    commit = machine.get("git_commit", "?") + (" with uncommitted spark-app changes"
                                               if machine.get("spark_app_uncommitted") else "")
    lines = ["# sparkmirror fault campaign (`make chaos`)", "",
             f"Source and target: 3 KRaft brokers each (combined broker+controller), replication factor 3, "
             f"min.insync.replicas 2. Mirror: spark-submit to a Spark standalone cluster (1 worker, 2 cores, one "
             f"executor JVM), 2 lanes, exactly-once copying {camp.copy}, transaction.timeout.ms {TX_TIMEOUT_MS}. Load: {camp.rate:.0f} "
             f"sequences/s on each of {PARTS} partitions. Pause between faults ~{camp.pause_s:.0f} s; broker kills "
             f"restart after {camp.pause_s:.0f} s; outages {camp.outage_s:.0f} s (longest client timeout "
             f"{max(CLIENT_TIMEOUTS_S.values()):.0f} s).", "",
             "| fault | count | recovered | longest stall s | recovery median s | recovery max s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['fault']} | {r['count']} | {r['recovered']} | {r['longest_stall_s']} | "
                     f"{r['recovery_median_s']} | {r['recovery_max_s']} |")
    lines += ["", f"**Records**: {camp.sent * PARTS:,} produced, {camp.records:,} on the target (read_committed); "
              f"**missing {camp.missing}, duplicated {camp.duplicated}**. Catch-up after the load stopped: "
              f"{camp.catch_up_s:.0f} s. Mirror ended unexpectedly: {len(camp.mirror_ended)}. "
              f"Campaign wall time: {camp.wall_s / 60:.1f} min.", "",
              "Stall: longest time without target growth from the fault until copying resumed after the repair. "
              "Recovery: fault -> first target growth after the repair (broker or cluster restarted and answering; Spark "
              "faults: the driver launching a task again).", "",
              f"Machine: {machine.get('cores', '?')} cores, load average at the end {machine.get('loadavg', '?')} "
              f"(shared with other work: figures include contention). Commit: {commit}."]
    for e in camp.mirror_ended:
        lines += ["", f"- mirror ended: {e[:500]}"]
    return "\n".join(lines) + "\n"


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
    p.add_argument("--workdir", type=Path, default=None, help="kept after the run (default: a temporary one)")
    p.add_argument("--results", type=Path, default=HERE / "results",
                   help="where chaos.json and chaos.md go; default %(default)s")
    return p.parse_args(argv)


def run_campaign(kills: int, outages: int, outage_s: float, pause_s: float, rate: float, workdir: Path,
                 log: Callable[[str], None] = print, kinds: tuple[str, ...] = KINDS,
                 copy: str = "records") -> tuple[Campaign, list[dict]]:
    chaos = Chaos(Campaign(kills, outages, outage_s, pause_s, rate, kinds, copy), workdir, log)
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
    if unknown := [k for k in kinds if k not in KINDS]:
        print(f"--kinds: unknown {', '.join(unknown)} (known: {', '.join(KINDS)})", file=sys.stderr)
        return 2
    camp, rows = run_campaign(args.kills, args.outages, args.outage_seconds, args.pause, args.rate, workdir,
                              lambda s: print(s, flush=True), kinds, args.copy)
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
    stem = "chaos" if args.copy == "records" else f"chaos-{args.copy}"  # one latest run per path
    (args.results / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
    (args.results / f"{stem}.md").write_text(text)
    return 0 if camp.missing == 0 and camp.duplicated == 0 and not camp.mirror_ended else 1


if __name__ == "__main__":
    sys.exit(main())
