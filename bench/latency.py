"""The latency run: a steady load into a fresh source topic, the time each record took to reach the target
(LogAppendTime) and to become visible to a read_committed consumer there."""
from __future__ import annotations

import statistics
import threading
import time
import uuid
from array import array

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror.copying.reader import next_batch

from . import data
from .contenders import BenchError, Contender, MirrorSetup, remote_name, rmtree
from .harness import wait_mirrored
from .procmon import ProcessTreeMonitor
from .runenv import Env, RunResult, machine_busy_seconds


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
