"""CPU seconds and resident memory of a process tree, sampled in a background thread with psutil."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil


@dataclass
class Sample:
    t: float          # time.time()
    cpu: float        # user+system seconds of the whole tree so far (exited children included)
    rss: int          # bytes, sum over the live tree
    by_kind: dict[str, float] = field(default_factory=dict)  # cpu split by kind of process (see kind_of)
    rss_by_kind: dict[str, int] = field(default_factory=dict)  # bytes per kind of process, live tree
    procs_by_kind: dict[str, int] = field(default_factory=dict)  # live processes per kind


@dataclass
class ProcessTreeMonitor:
    """Watches `pids` and all their descendants; CPU of processes that exit is kept (last value seen)."""

    pids: list[int]
    interval: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    _cpu_by_pid: dict[tuple[int, float], float] = field(default_factory=dict)
    _procs: dict[int, psutil.Process] = field(default_factory=dict)
    _kind_by_pid: dict[tuple[int, float], str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "ProcessTreeMonitor":
        self._thread = threading.Thread(target=self._loop, name="procmon", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def _tree(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for pid in self.pids:
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                self._procs[pid] = root
                found[pid] = root
                for child in root.children(recursive=True):
                    found[child.pid] = self._procs.get(child.pid) or child
            except psutil.NoSuchProcess:
                continue
        self._procs.update(found)
        return list(found.values())

    def sample(self) -> Sample:
        rss_by_kind: dict[str, int] = {}
        procs: dict[str, int] = {}
        for p in self._tree():
            try:
                with p.oneshot():
                    ct = p.cpu_times()
                    rss = p.memory_info().rss
                    key = (p.pid, p.create_time())
                self._cpu_by_pid[key] = ct.user + ct.system
                kind = self._kind_by_pid[key] = kind_of(p)  # every time: spark-class `exec`s java in the same pid
                rss_by_kind[kind] = rss_by_kind.get(kind, 0) + rss
                procs[kind] = procs.get(kind, 0) + 1
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        s = Sample(time.time(), sum(self._cpu_by_pid.values()), sum(rss_by_kind.values()), self.cpu_by_kind(),
                   rss_by_kind, procs)
        self.samples.append(s)
        return s

    def cpu_at(self, t: float) -> float:
        """CPU seconds of the tree at the last sample taken at or before `t` (0 before the first)."""
        best = 0.0
        for s in self.samples:
            if s.t <= t:
                best = s.cpu
            else:
                break
        return best

    def kinds_between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per kind of process between two times (sample resolution)."""
        a = b = None
        for s in self.samples:
            if s.t <= t0:
                a = s
            if s.t <= t1:
                b = s
        if b is None:
            return {}
        base = a.by_kind if a is not None else {}
        return {k: round(v - base.get(k, 0.0), 2) for k, v in b.by_kind.items() if v - base.get(k, 0.0) > 0.005}

    @property
    def peak_rss(self) -> int:
        return max((s.rss for s in self.samples), default=0)

    @property
    def cpu_total(self) -> float:
        return self.samples[-1].cpu if self.samples else 0.0

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds per kind of process (JVM, Python driver, Python workers, ...), whole run."""
        out: dict[str, float] = {}
        for key, cpu in self._cpu_by_pid.items():
            k = self._kind_by_pid.get(key, "other")
            out[k] = round(out.get(k, 0.0) + cpu, 2)
        return out


def kind_of(p: psutil.Process) -> str:
    try:
        name = p.name()
        cmd = " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "other"
    if "java" in name:
        return "jvm"
    if "python" in name:
        if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            return "python-worker"
        if "python_streaming_source_runner" in cmd or "pyspark.sql" in cmd:
            return "python-spark-runner"
        return "python-driver"
    return name
