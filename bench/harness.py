"""One benchmark run of one contender: fresh target cluster, start, wait until mirrored, measure, check, clean."""
from __future__ import annotations

import os
from array import array
import statistics
import subprocess
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror_dev import install
from sparkmirror_dev.kafka import KafkaCluster, java_cmd
from sparkmirror_dev.procs import log_tail, spawn, stop_pid

from sparkmirror.copying.reader import next_batch

from . import data
from .contenders import BenchError, Contender, MirrorSetup, remote_name, rmtree
from .procmon import ProcessTreeMonitor


@dataclass
class RunResult:
    contender: str
    kind: str                       # throughput | latency | ceiling
    rep: int
    size: str = ""                  # record size mirrored: "1 KiB" or "100 B" (each size has its own runs)
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    records: int = 0
    bytes: int = 0
    startup_s: float = 0.0          # contender start -> first record visible on the target
    copy_s: float = 0.0             # first record visible -> all records visible
    wall_s: float = 0.0             # contender start -> all records visible
    cpu_s: float = 0.0              # CPU seconds of the contender's process tree during the copy window
    cpu_total_s: float = 0.0        # ... from its start to the end of the copy
    peak_rss: int = 0               # bytes, whole process tree, whole run
    broker_cpu_s: float = 0.0       # both brokers, during the copy window
    foreign_cpu_s: float = 0.0      # everything else on the machine during the copy window (other users)
    machine_cpu_s: float = 0.0      # all CPUs, busy seconds, during the copy window
    dups: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    detail: dict = field(default_factory=dict)
    log: str = ""

    @property
    def rate(self) -> float:
        return self.records / self.copy_s if self.copy_s > 0 else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d["records_per_s"] = self.rate
        d["mib_per_s"] = self.bytes / self.copy_s / 2**20 if self.copy_s > 0 else 0.0
        d["cpu_s_per_m"] = self.cpu_s / self.records * 1e6 if self.records else 0.0
        return d


def machine_busy_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


@dataclass
class Env:
    """The source cluster (preloaded once) and a fresh target cluster per run, all under `work`."""

    work: Path
    broker_heap: str = "1g"
    source: KafkaCluster | None = None
    targets: list[KafkaCluster] = field(default_factory=list)
    _n: int = 0

    def _start(self, name: str, home: Path) -> KafkaCluster:
        """Start a cluster; retry on fresh ports when another process took ours between choice and bind."""
        from sparkmirror_dev.procs import DevEnvError

        for attempt in range(4):
            rmtree(home)
            try:
                return KafkaCluster(name, home, heap=self.broker_heap).start()
            except DevEnvError:
                try:
                    bind_failed = "Address already in use" in (home / "kafka.log").read_text(errors="replace")
                except OSError:
                    bind_failed = False
                if attempt == 3 or not bind_failed:
                    raise
        raise AssertionError("unreachable")

    def start_source(self) -> KafkaCluster:
        self.source = self._start("bench-source", self.work / "source")
        return self.source

    def new_target(self) -> KafkaCluster:
        self._n += 1
        t = self._start(f"bench-target-{self._n}", self.work / f"target-{self._n}")
        self.targets.append(t)
        return t

    def drop_target(self, t: KafkaCluster, keep_logs: bool = False) -> None:
        t.stop()
        if t in self.targets:
            self.targets.remove(t)
        if not keep_logs:
            rmtree(t.home / "data")

    def stop(self) -> None:
        for t in list(self.targets):
            try:
                self.drop_target(t)
            except Exception:  # noqa: BLE001
                pass
        if self.source is not None:
            self.source.stop()
            rmtree(self.source.home / "data")  # the preloaded data; logs stay
            self.source = None


def _windowed(run: RunResult, mon: ProcessTreeMonitor, bmon: ProcessTreeMonitor, t_start: float,
              t_first: float, t_done: float, busy: list[tuple[float, float]], self_cpu: list[tuple[float, float]]) -> None:
    run.startup_s = t_first - t_start
    run.copy_s = max(t_done - t_first, 1e-3)
    run.wall_s = t_done - t_start
    run.cpu_s = mon.cpu_at(t_done) - mon.cpu_at(t_first)
    run.cpu_total_s = mon.cpu_at(t_done)
    run.peak_rss = mon.peak_rss
    run.broker_cpu_s = bmon.cpu_at(t_done) - bmon.cpu_at(t_first)

    def at(series: list[tuple[float, float]], t: float) -> float:
        v = series[0][1] if series else 0.0
        for ts, val in series:
            if ts <= t:
                v = val
        return v

    run.machine_cpu_s = at(busy, t_done) - at(busy, t_first)
    mine = at(self_cpu, t_done) - at(self_cpu, t_first)
    run.foreign_cpu_s = max(0.0, run.machine_cpu_s - run.cpu_s - run.broker_cpu_s - mine)


class _MachineSampler:
    """Busy CPU seconds of the whole machine and of this (the bench) process, sampled alongside the monitors."""

    def __init__(self, interval: float = 0.2) -> None:
        self.busy: list[tuple[float, float]] = []
        self.mine: list[tuple[float, float]] = []
        self._me = psutil.Process()
        self._stop = threading.Event()
        self._interval = interval
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        now = time.time()
        self.busy.append((now, machine_busy_seconds()))
        ct = self._me.cpu_times()
        self.mine.append((now, ct.user + ct.system))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)

    def __enter__(self) -> "_MachineSampler":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self._sample()


def wait_mirrored(target: str, expected: dict[tuple[str, int], int], contender: Contender, *,
                  scan, timeout: float, settle: float = 2.0, poll: float = 0.1, on_first=None):  # noqa: ANN001
    """Until the target holds every record: returns (t_first, t_done, scan result, problems).

    Watches the read-committed end offsets of the target partitions; once every one reaches the source's
    count and none has moved for `settle` seconds, scans the target. t_done is when the offsets last moved.
    A poll that misses some partitions (at 10,000 partitions on a loaded machine some answers time out) keeps
    their last offsets: only an offset that moved counts as a change, or the run would never settle.
    """
    admin, admin_at = AdminClient({"bootstrap.servers": target, "log_level": 2}), time.time()
    tps = [TopicPartition(t, p) for t, p in expected]
    t_first = None
    t_change = time.time()
    known: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout
    settle_now = settle
    problems: list[str] = []
    res = None
    while time.monotonic() < deadline:
        contender.check()
        try:
            offs = data.end_offsets(admin, tps)
        except Exception:  # noqa: BLE001
            offs = {}
        now = time.time()
        if len(offs) < len(tps) and now - admin_at >= 5.0:
            # a client that asked before the mirror created the topics kept failing for some of them (the
            # scale run at 10,000 partitions waited out its time-out with every record on the target)
            admin, admin_at = AdminClient({"bootstrap.servers": target, "log_level": 2}), now
        moved = {k: v for k, v in offs.items() if known.get(k) != v}
        if moved:
            known.update(moved)
            t_change = now
        if t_first is None and any(v > 0 for v in known.values()):
            t_first = now
            if on_first is not None:
                on_first()
        if t_first is not None and now - t_change >= settle_now and \
                all(known.get(k, 0) >= v for k, v in expected.items()):
            res, problems = scan()
            if not problems:
                return t_first, t_change, res, []
            settle_now = min(settle_now * 2, 30.0)
            problems = [f"after settling: {p}" for p in problems]
        time.sleep(poll)
    if not problems:
        short = [k for k, v in expected.items() if known.get(k, 0) < v]
        problems = (["timed out before any record reached the target"] if t_first is None else
                    [f"timed out with {len(short)} of {len(expected)} target partitions short of the source's "
                     f"count (first: {short[0][0]}/{short[0][1]} at {known.get(short[0], 0)} of "
                     f"{expected[short[0]]})"] if short else
                    ["timed out: the target's end offsets never stayed put for the settle window"])
    return t_first, t_change, res, problems


def run_mirror_throughput(env: Env, contender: Contender, layout: data.Layout, source_scan: data.ScanResult,
                          rep: int, parallelism: int, timeout: float, settle: float,
                          profile: bool = False) -> RunResult:
    """One measured copy of `layout`'s topics (one record size, so a run's figures are for that size) out of
    the preloaded source; with `profile`, an extra run under py-spy (kind "profile", left out of the medians
    because sampling slows the mirror down)."""
    run = RunResult(contender.name, "profile" if profile else "throughput", rep, size=layout.size_name,
                    records=layout.total_records, bytes=layout.payload_bytes)
    source_scan = source_scan.only({t.name for t in layout.topics})
    target = env.new_target()
    rundir = env.work / "runs" / f"{contender.name}-tp-{rep}-{layout.label}"
    rmtree(rundir)
    setup = MirrorSetup(env.source.bootstrap, target.bootstrap, layout.pattern, parallelism, rundir)
    rename = {t.name: remote_name(t.name) for t in layout.topics}
    specs = {remote_name(t.name): t for t in layout.topics}
    expected = {(remote_name(t.name), p): (t.records + t.partitions - 1 - p) // t.partitions
                for t in layout.topics for p in range(t.partitions)}

    def scan():  # noqa: ANN202
        r = data.scan(target.bootstrap, specs)
        return r, data.compare(source_scan, r, rename, contender.exactly_once)

    bmon = ProcessTreeMonitor([env.source.pid, target.pid]).start()
    mon = None
    try:
        with _MachineSampler() as ms:
            t_start = time.time()
            pid = contender.start(setup)
            mon = ProcessTreeMonitor([pid]).start()
            spies = []

            def start_spy() -> None:  # from the first copied record on: the copy, not the start-up
                if profile:
                    from .profile import PySpy

                    spies.append(PySpy(pid, rundir / "py-spy.txt"))
            try:
                t_first, t_done, res, problems = wait_mirrored(target.bootstrap, expected, contender, scan=scan,
                                                               timeout=timeout, settle=settle, on_first=start_spy)
            finally:
                for spy in spies:
                    spy.stop()
            spy = spies[0] if spies else None
            mon.stop()
            bmon.stop()
            run.detail["cpu_by_kind"] = mon.cpu_by_kind()
            if t_first is not None:
                run.detail["copy_cpu_by_kind"] = mon.kinds_between(t_first, t_done)
            if spy is not None:
                from .profile import summarize

                run.detail["profile"] = summarize(rundir / "py-spy.txt")
                run.detail["profile_file"] = str(rundir / "py-spy.txt")
        run.log = str(contender.log)
        if t_first is not None:
            _windowed(run, mon, bmon, t_start, t_first, t_done, ms.busy, ms.mine)
        run.problems = problems
        run.ok = not problems
        if res is not None:
            run.dups = res.dups
            run.detail["verify_scan_s"] = round(res.seconds, 2)
    except BenchError as e:
        run.problems = [str(e)]
    finally:
        contender.stop()
        if mon is not None:
            mon.stop()
        bmon.stop()
        env.drop_target(target, keep_logs=not run.ok)
    return run


class VisibleWatcher(threading.Thread):
    """Reads the target topic read_committed as a consumer there would, noting when each record became visible.

    The target's LogAppendTime is when a record was appended, which for a transactional copy is before it can
    be read: exactly-once records wait for their transaction's commit on top. Visible latency = the moment
    this consumer received the record - the source record's timestamp (its `ts` header), so it includes the
    commit and this consumer's own fetch wait (at most 5 ms). It reads with the lanes' `next_batch`: a batch
    consume() with a 50-ms timeout held every record 0-50 ms more (about 25 ms on every contender's p50)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True, name="visible-watcher")
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"visible-{uuid.uuid4().hex[:8]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 5, "log_level": 2})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.src_ts: array = array("q")
        self.lat: array = array("q")
        self.stop_event = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                msgs = next_batch(self.consumer, 5000, 0.05)
                now = int(time.time() * 1000)
                for m in msgs:
                    if m.error() is not None:
                        continue
                    for hk, hv in m.headers() or ():
                        if hk == "ts":
                            ts = int(hv)
                            self.src_ts.append(ts)
                            self.lat.append(now - ts)
                            break
        except Exception as e:  # noqa: BLE001 - reported with the run
            self.error = f"visible-latency consumer: {e}"
        finally:
            self.consumer.close()

    def window(self, from_ms: int, to_ms: int) -> list[int]:
        return [v for t, v in zip(self.src_ts, self.lat) if from_ms <= t <= to_ms]


class SteadyProducer(threading.Thread):
    """Produces 1 KiB records with keys, headers and a `ts` header at a steady rate until stopped."""

    def __init__(self, bootstrap: str, spec: data.TopicSpec, rate: int) -> None:
        super().__init__(daemon=True, name="steady-producer")
        self.spec, self.rate = spec, rate
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                           "enable.idempotence": True, "compression.type": "none"})
        self.stop_event = threading.Event()
        self.sent = 0
        self.errors: list[str] = []

    def set_rate(self, rate: int) -> None:
        """Change the rate from now on (a trickle while the mirror starts, then the measured rate)."""
        self._base = (time.monotonic(), self.sent)
        self.rate = rate

    def run(self) -> None:
        if not hasattr(self, "_base"):
            self._base = (time.monotonic(), 0)
        while not self.stop_event.is_set():
            t0, n0 = self._base
            due = n0 + int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                seq = self.sent
                ts = int(time.time() * 1000)
                try:
                    self.p.produce(self.spec.name, value=self.spec.value(seq), key=data.key_of(seq),
                                   partition=seq % self.spec.partitions, headers=data.headers_of(seq, ts),
                                   timestamp=ts, on_delivery=self._cb)
                except BufferError:
                    self.p.poll(0.01)
                    continue
                self.sent += 1
            self.p.poll(0)
            time.sleep(0.002)
        self.p.flush(60)

    def _cb(self, err, _m) -> None:  # noqa: ANN001
        if err is not None:
            self.errors.append(str(err))


def _per_second_max(src_ts: list[int], lat: list[int], t_start: float) -> dict[int, int]:
    """Worst latency of the records produced in each second since the contender started."""
    out: dict[int, int] = {}
    for ts, v in zip(src_ts, lat):
        k = int(ts / 1000.0 - t_start)
        if v > out.get(k, -1):
            out[k] = v
    return dict(sorted(out.items()))


def _watch(contender: Contender, seconds: float) -> None:
    """Wait `seconds`, ending the run as soon as the contender fails."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        contender.check()
        time.sleep(min(left, 1.0))


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return float(xs[i])


def run_mirror_latency(env: Env, contender: Contender, rep: int, parallelism: int, rate: int, seconds: float,
                       warmup: float, partitions: int, timeout: float, settle: float) -> RunResult:
    """Steady `rate` records/s into a fresh source topic; latency = target LogAppendTime - source timestamp."""
    run = RunResult(contender.name, "latency", rep, size=data.size_name(1024))
    name = f"lat-{rep}-{contender.name}-{uuid.uuid4().hex[:6]}"
    data.create_topics(env.source.bootstrap, [(name, partitions)])
    target = env.new_target()
    data.create_topics(target.bootstrap, [(remote_name(name), partitions)],
                       config={"message.timestamp.type": "LogAppendTime"})
    rundir = env.work / "runs" / f"{contender.name}-lat-{rep}"
    rmtree(rundir)
    setup = MirrorSetup(env.source.bootstrap, target.bootstrap, name.replace(".", r"\."), parallelism, rundir)
    producer = None
    mon = bmon = None
    watcher = VisibleWatcher(target.bootstrap, remote_name(name), partitions)
    watcher.start()
    try:
        pid = contender.start(setup)
        mon = ProcessTreeMonitor([pid]).start()
        bmon = ProcessTreeMonitor([env.source.pid, target.pid]).start()
        t_start = time.time()
        spec = data.TopicSpec(name, partitions, 1024, 10**9)  # 1 KiB, as `run.size` says
        producer = SteadyProducer(env.source.bootstrap, spec, 20)  # a trickle until the mirror is up
        producer.start()
        admin = AdminClient({"bootstrap.servers": target.bootstrap, "log_level": 2})
        tps = [TopicPartition(remote_name(name), p) for p in range(partitions)]
        deadline = time.monotonic() + timeout
        while True:
            contender.check()
            if any(v > 0 for v in data.end_offsets(admin, tps).values()):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{contender.name}: nothing reached the target within {timeout:.0f}s")
            time.sleep(0.1)
        run.startup_s = time.time() - t_start
        producer.set_rate(rate)
        _watch(contender, warmup)
        win_from = int(time.time() * 1000)
        cpu0, load0 = mon.sample().cpu, _load(bmon)
        _watch(contender, seconds)
        win_to = int(time.time() * 1000)
        cpu1, load1 = mon.sample().cpu, _load(bmon)
        producer.stop_event.set()
        producer.join(timeout=120)
        if producer.errors:
            raise BenchError(f"steady producer failed: {producer.errors[:3]}")
        n = producer.sent
        expected = {(remote_name(name), p): (n + partitions - 1 - p) // partitions for p in range(partitions)}
        lspec = data.TopicSpec(remote_name(name), partitions, 1024, n)

        def scan():  # noqa: ANN202
            r = data.scan(target.bootstrap, {remote_name(name): lspec}, with_timestamp=False,
                          latency_window=(win_from, win_to))
            probs = []
            for k, ps in r.partitions.items():
                want = expected[(remote_name(name), int(k.rsplit("/", 1)[1]))]
                if ps.count != want:
                    probs.append(f"{k}: {ps.count} distinct records, source has {want}")
                if ps.misplaced:
                    probs.append(f"{k}: {ps.misplaced} records in the wrong partition")
                if contender.exactly_once and ps.dups:
                    probs.append(f"{k}: {ps.dups} duplicates (exactly-once)")
            return r, probs

        _, _, res, problems = wait_mirrored(target.bootstrap, expected, contender, scan=scan,
                                            timeout=timeout, settle=settle)
        mon.stop()
        run.detail["cpu_by_kind"] = mon.cpu_by_kind()
        run.records = n
        run.problems = problems
        run.ok = not problems
        run.peak_rss = mon.peak_rss
        run.cpu_s = cpu1 - cpu0
        run.copy_s = (win_to - win_from) / 1000
        run.detail["window_records"] = len(res.latencies_ms) if res else 0
        run.detail["cpu_s_per_s_at_rate"] = round((cpu1 - cpu0) / max(run.copy_s, 1e-3), 3)
        # the rest of the machine in the window: both brokers (the requests the mirror's clients make cost them
        # CPU too), this harness (steady producer, visible-latency reader) and everything else
        run.broker_cpu_s, run.machine_cpu_s, harness = (b - a for a, b in zip(load0, load1))
        run.detail["harness_cpu_s"] = round(harness, 2)
        run.foreign_cpu_s = max(0.0, run.machine_cpu_s - run.broker_cpu_s - harness - run.cpu_s)
        if res is not None:
            run.dups = res.dups
            lat = res.latencies_ms
            if lat:
                # when the worst records were produced, seconds after the contender started: stalls that
                # recur every epoch (sparkmirror) or rebalance (MM2) show up here
                worst = sorted(range(len(lat)), key=lat.__getitem__)[-max(1, len(lat) // 100):]
                secs = sorted({round((res.latency_src_ts[i] / 1000.0) - t_start) for i in worst})
                run.detail["p99_tail_produced_at_s"] = secs[:20]
                run.detail["per_second_max_ms"] = _per_second_max(res.latency_src_ts, lat, t_start)
            run.latency_ms = {"p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99),
                              "max": float(max(lat)) if lat else float("nan"),
                              "mean": statistics.fmean(lat) if lat else float("nan")}
            if not lat:
                run.ok = False
                run.problems.append("no records inside the latency window")
            until = time.monotonic() + 30  # every record is committed by now: let the watcher read the last
            while len(watcher.window(win_from, win_to)) < len(lat) and time.monotonic() < until \
                    and watcher.is_alive():
                time.sleep(0.2)
            vis = watcher.window(win_from, win_to)
            run.detail["visible_window_records"] = len(vis)
            if watcher.error or len(vis) < len(lat):
                run.ok = False
                run.problems.append(watcher.error or f"the visible-latency consumer read {len(vis)} of the "
                                                     f"window's {len(lat)} records")
            elif vis:
                run.latency_ms.update({"visible_p50": percentile(vis, 0.50), "visible_p99": percentile(vis, 0.99),
                                       "visible_max": float(max(vis))})
        run.log = str(contender.log)
    except BenchError as e:
        run.problems = [str(e)]
    finally:
        watcher.stop_event.set()
        watcher.join(timeout=30)
        if producer is not None and producer.is_alive():
            producer.stop_event.set()
            producer.join(timeout=60)
        contender.stop()
        for m in (mon, bmon):
            if m is not None:
                m.stop()
        env.drop_target(target, keep_logs=not run.ok)
    return run


def _load(brokers: ProcessTreeMonitor) -> tuple[float, float, float]:
    """CPU seconds so far of the brokers, the whole machine and this harness process."""
    me = psutil.Process().cpu_times()
    return brokers.sample().cpu, machine_busy_seconds(), me.user + me.system


# ---- the machine's ceiling: Kafka's own perf tools -------------------------------------------------------

def _java(main: str, *args: str, log: Path) -> subprocess.Popen:
    return spawn(java_cmd(install.kafka(), main, *args, heap="1g"), log)


def run_ceiling(env: Env, layout: data.Layout, rep: int, timeout: float) -> RunResult:
    """The machine's ceiling for `layout`'s topics with Kafka's own Java perf tools: a read phase (one
    ConsumerPerformance per source topic, all at once) then a write phase (one ProducerPerformance per topic, same count and size,
    into a topic with as many partitions on the target, all at once). Each phase's time is its slowest tool's
    own elapsed time (JVM start-up excluded); ceiling = records / the slower phase. An upper bound: a mirror
    reads and writes at the same time on the same cores."""
    run = RunResult("ceiling", "ceiling", rep, size=layout.size_name, records=layout.total_records,
                    bytes=layout.payload_bytes)
    target = env.new_target()
    rundir = env.work / "runs" / f"ceiling-{rep}-{layout.label}"
    rmtree(rundir)
    rundir.mkdir(parents=True)
    data.create_topics(target.bootstrap, [(f"ceil.{t.name}", t.partitions) for t in layout.topics])
    cpu = 0.0
    peak = 0
    phases: dict[str, float] = {}
    try:
        for phase in ("read", "write"):
            procs: list[tuple[subprocess.Popen, Path]] = []
            for t in layout.topics:
                if phase == "read":
                    log = rundir / f"consumer-{t.name}.log"
                    procs.append((_java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                                        env.source.bootstrap, "--topic", t.name, "--messages", str(t.records),
                                        "--group", f"bench-ceiling-{uuid.uuid4().hex[:8]}", "--timeout", "60000",
                                        "--hide-header", log=log), log))
                else:
                    log = rundir / f"producer-{t.name}.log"
                    procs.append((_java("org.apache.kafka.tools.ProducerPerformance", "--topic", f"ceil.{t.name}",
                                        "--num-records", str(t.records), "--record-size", str(t.value_size),
                                        "--throughput", "-1", "--producer-props",
                                        f"bootstrap.servers={target.bootstrap}", "acks=all", "linger.ms=10",
                                        "batch.size=524288", f"compression.type={t.compression}", log=log), log))
            mon = ProcessTreeMonitor([p.pid for p, _ in procs]).start()
            try:
                for p, _ in procs:
                    p.wait(timeout=timeout)
            finally:
                mon.stop()
                for p, _ in procs:
                    if p.poll() is None:
                        stop_pid(p.pid)
            bad = [(p.returncode, log) for p, log in procs if p.returncode]
            if bad:
                raise BenchError(f"perf tools failed ({phase}): " + "; ".join(
                    f"exit {rc}: {log_tail(log, 10)}" for rc, log in bad))
            parse = _consumer_seconds if phase == "read" else _producer_seconds
            phases[phase] = max(parse(log.read_text()) for _, log in procs)
            cpu += mon.cpu_total
            peak = max(peak, mon.peak_rss)
        run.copy_s = max(phases.values())
        run.wall_s = run.copy_s
        run.cpu_s = cpu
        run.cpu_total_s = cpu
        run.peak_rss = peak
        run.detail = {"read_s": round(phases["read"], 3), "write_s": round(phases["write"], 3),
                      "read_records_per_s": layout.total_records / phases["read"],
                      "write_records_per_s": layout.total_records / phases["write"],
                      "note": "CPU includes the JVMs' start-up; ProducerPerformance writes random values "
                              "without keys or headers"}
        run.ok = True
    except BenchError as e:
        run.problems = [str(e)]
    finally:
        env.drop_target(target, keep_logs=not run.ok)
    return run


def _consumer_seconds(text: str) -> float:
    """ConsumerPerformance CSV: start.time, end.time, MB, MB.sec, nMsg, nMsg.sec, rebalance.ms, fetch.ms, ..."""
    for line in reversed(text.splitlines()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 8:
            try:
                return float(parts[7]) / 1000.0
            except ValueError:
                continue
    raise BenchError(f"cannot parse ConsumerPerformance output:\n{text[-1500:]}")


def _producer_seconds(text: str) -> float:
    """ProducerPerformance's last line: 'N records sent, X records/sec (Y MB/sec), ...'."""
    import re

    for line in reversed(text.splitlines()):
        m = re.match(r"\s*(\d+) records sent, ([\d.]+) records/sec", line)
        if m and float(m.group(2)) > 0:
            return int(m.group(1)) / float(m.group(2))
    raise BenchError(f"cannot parse ProducerPerformance output:\n{text[-1500:]}")


def pid_of_self() -> int:
    return os.getpid()
