"""What every benchmark run shares: its result record, the clusters it runs on, the machine's CPU samples."""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from sparkmirror_dev.kafka import KafkaCluster

from .contenders import rmtree


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


class MachineSampler:
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

    def __enter__(self) -> "MachineSampler":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self._sample()
